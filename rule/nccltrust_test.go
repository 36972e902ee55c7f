package rule_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// applyAll runs the rule for every task of tab, task L bound to CPU bind[L%len(bind)].
func applyAll(t *testing.T, tab *gpubind.Table, tasks int, bind []string, denied func(L int) []string) []rule.Result {
	t.Helper()
	rt := parse(t, tab)
	list := hexList(t, bind...)
	var out []rule.Result
	for L := 0; L < tasks; L++ {
		k := rule.Task{Local: L, Rank: L, BindType: "mask_cpu:", BindList: list, Own: cpus(bind[L%len(bind)])}
		if denied != nil {
			k.Denied = denied(L)
		}
		r, err := rt.Apply(k)
		if err != nil {
			t.Fatalf("task %d: %v", L, err)
		}
		out = append(out, r)
	}
	return out
}

func env(r rule.Result) map[string]string {
	m := map[string]string{}
	for _, kv := range r.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// Issue 24: nic gave each task its own NCCL_IB_HCA (task 0 =mlx5_0:1, task 1 =mlx5_1:1 ...).
// NCCL wants one exact list on every rank of a node (NVIDIA/nccl 1478, 1591, 2428) and picks
// each GPU's rail itself. On the 8-GPU tree with one NIC per PCIe switch and a storage NIC
// near no GPU: every task gets the rails of the step's GPUs, in GPU order, once each, without
// mlx5_4; UCX_NET_DEVICES and GPUBIND_NIC stay the task's own closest NIC.
func TestNICRailsSameOnEveryTask(t *testing.T) {
	for _, c := range []struct {
		step, rails string
		tasks       int
	}{
		{"", "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1", 8},
		{"0,1,4,5", "=mlx5_0:1,mlx5_2:1", 4},
		{"5,7", "=mlx5_2:1,mlx5_3:1", 2},
	} {
		tab := planFixture(t, "dgx4nic-2cpu", "closest,nic", c.tasks, c.step)
		res := applyAll(t, tab, c.tasks, []string{"0", "1"}, nil)
		for L, r := range res {
			e := env(r)
			if e["NCCL_IB_HCA"] != c.rails {
				t.Errorf("step %q task %d: NCCL_IB_HCA=%s, want %s (the same on every task)", c.step, L, e["NCCL_IB_HCA"], c.rails)
			}
			own := tab.GPUs[r.Own[0]].NIC
			if e["UCX_NET_DEVICES"] != own || e["GPUBIND_NIC"] != own {
				t.Errorf("step %q task %d: UCX_NET_DEVICES=%s GPUBIND_NIC=%s, want the task's NIC %s", c.step, L, e["UCX_NET_DEVICES"], e["GPUBIND_NIC"], own)
			}
			if want := fmt.Sprintf("mlx5_%d:1", tab.GPUs[r.Own[0]].NVMLIndex/2); own != want {
				t.Errorf("step %q task %d: GPU %d's NIC %s, want %s (its switch's)", c.step, L, tab.GPUs[r.Own[0]].NVMLIndex, own, want)
			}
		}
	}
	// Without nic: none of the three.
	for _, r := range applyAll(t, planFixture(t, "dgx4nic-2cpu", "closest", 2, ""), 2, []string{"0"}, nil) {
		for _, k := range []string{"NCCL_IB_HCA", "UCX_NET_DEVICES", "GPUBIND_NIC"} {
			if v, ok := env(r)[k]; ok {
				t.Errorf("no nic flag, but %s=%s", k, v)
			}
		}
	}
}

// The admin's rails (plugstack nics=) are the list, in the admin's order, even a NIC near no
// GPU; each GPU's own NIC is the closest of them; a listed NIC the node lacks is named.
func TestNICRailsFromAdmin(t *testing.T) {
	topo, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgx4nic-2cpu"))
	if err != nil {
		t.Fatal(err)
	}
	step := "0,1,2,3"
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 4, Option: "closest,nic",
		Gres: &gpubind.GresConf{AutoDetect: "nvml"}, Env: gpubind.StepEnv{StepGPUs: &step},
		Rails: []string{"mlx5_3", "mlx5_4", "mlx5_9"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(tab.Messages, "\n"), "no RDMA device mlx5_9") {
		t.Errorf("messages %q do not name the missing mlx5_9", tab.Messages)
	}
	for L, r := range applyAll(t, tab, 4, []string{"0"}, nil) {
		if e := env(r); e["NCCL_IB_HCA"] != "=mlx5_3:1,mlx5_4:1" {
			t.Errorf("task %d: NCCL_IB_HCA=%s, want the admin's =mlx5_3:1,mlx5_4:1", L, e["NCCL_IB_HCA"])
		}
	}
	if _, err := gpubind.ParseRails("mlx5_0,,mlx5_1"); err == nil {
		t.Errorf("nics=mlx5_0,,mlx5_1 accepted")
	}
}

// A table without a "nics" line (an older engine): the gpu lines' NICs, once each.
func TestNICRailsDerived(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest,nic", 4, "0,1,2,3")
	tab.NICs = nil
	for L, r := range applyAll(t, tab, 4, []string{"0"}, nil) {
		if e := env(r); e["NCCL_IB_HCA"] != "=mlx5_0:1,mlx5_1:1" {
			t.Errorf("task %d: NCCL_IB_HCA=%s", L, e["NCCL_IB_HCA"])
		}
	}
}

// visible=first: every task sees all of the step's GPUs; its own is entry 0, then the GPU
// behind the same switch, then the same NUMA node, then the others. GPUBIND_* describe its
// own GPU, GPUBIND_CUDA_DEVICES says which CUDA device that is.
func TestVisibleFirst(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest,visible=first", 4, "0,1,2,4")
	res := applyAll(t, tab, 4, []string{"0", "0", "0", "1"}, nil)
	wantOrder := [][]int{{0, 1, 2, 3}, {1, 0, 2, 3}, {2, 0, 1, 3}, {3, 0, 1, 2}}
	for L, r := range res {
		e := env(r)
		if !reflect.DeepEqual(r.Own, []int{r.GPUs[0]}) {
			t.Errorf("task %d: own %v, visible %v: own is not entry 0", L, r.Own, r.GPUs)
		}
		if !reflect.DeepEqual(r.GPUs, wantOrder[r.Own[0]]) {
			t.Errorf("task %d: order %v, want %v (own, same switch, same NUMA, others)", L, r.GPUs, wantOrder[r.Own[0]])
		}
		if e["GPUBIND_CUDA_DEVICES"] != "0" || e["GPUBIND_PCI_BUS_IDS"] != tab.GPUs[r.Own[0]].BusID {
			t.Errorf("task %d: %v", L, r.Env)
		}
		if !strings.Contains(r.LogLine, "(visible=first, own entry 0)") || !strings.Contains(r.LogLine, "; peer GPU") {
			t.Errorf("task %d: log line %q does not show the own entry", L, r.LogLine)
		}
	}
	// Every task its own GPU, all different.
	seen := map[int]bool{}
	for _, r := range res {
		if seen[r.Own[0]] {
			t.Errorf("GPU %d owned twice", r.Own[0])
		}
		seen[r.Own[0]] = true
	}
}

// visible=localid: entry SLURM_LOCALID is the task's own GPU (cudaSetDevice(local_rank)).
func TestVisibleLocalID(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest,visible=localid", 4, "0,1,2,4")
	for L, r := range applyAll(t, tab, 4, []string{"0", "0", "1", "1"}, nil) {
		if len(r.GPUs) != 4 || r.GPUs[L] != r.Own[0] {
			t.Errorf("task %d: visible %v, own %v: entry %d is not its own", L, r.GPUs, r.Own, L)
		}
		if e := env(r); e["GPUBIND_CUDA_DEVICES"] != fmt.Sprint(L) || len(strings.Split(e["CUDA_VISIBLE_DEVICES"], ",")) != 4 {
			t.Errorf("task %d: %v", L, r.Env)
		}
	}
	// per-task:2: the own group starts at entry L.
	tab = planFixture(t, "dgx4nic-2cpu", "per-task:2,visible=localid", 2, "0,1,2,3")
	for L, r := range applyAll(t, tab, 2, []string{"0"}, nil) {
		if len(r.Own) != 2 || !reflect.DeepEqual(r.GPUs[L:L+2], r.Own) {
			t.Errorf("per-task:2 task %d: visible %v, own %v", L, r.GPUs, r.Own)
		}
		if e := env(r); e["GPUBIND_CUDA_DEVICES"] != fmt.Sprintf("%d,%d", L, L+1) {
			t.Errorf("per-task:2 task %d: GPUBIND_CUDA_DEVICES=%s", L, e["GPUBIND_CUDA_DEVICES"])
		}
	}
}

// With a device cgroup that narrows what a task may open (ConstrainDevices per task, or a
// GPU it may not open), first shows only the GPUs it can open, numbered as CUDA numbers them
// (relative, in PCI order among the allowed).
func TestVisibleFirstRespectsDeviceCgroup(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest,visible=first", 2, "0,1,2,3")
	dev := fakeDevs(t, tab)
	res := applyAll(t, tab, 2, []string{"0"}, func(L int) []string { return []string{dev + "/nvidia1"} })
	checkWithoutGPU1(t, res, "its cgroup denies it")
}

// visible=own (the default) changes nothing: one GPU, device 0.
func TestVisibleOwnUnchanged(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest", 2, "0,1,2,3")
	for L, r := range applyAll(t, tab, 2, []string{"0"}, nil) {
		if len(r.GPUs) != 1 || env(r)["GPUBIND_CUDA_DEVICES"] != "0" || strings.Contains(r.LogLine, "visible=") {
			t.Errorf("task %d: %v %v %q", L, r.GPUs, r.Env, r.LogLine)
		}
	}
	if _, err := gpubind.ParseOption("closest,visible=all"); err == nil || !strings.Contains(err.Error(), "visible=own, visible=first or visible=localid") {
		t.Errorf("visible=all: %v", err)
	}
}

// checkWithoutGPU1: every task got the step's GPUs 0, 2 and 3 but not GPU 1 (why says why
// it may not open it), numbered as CUDA will inside the task: GPU 0 -> 0, 2 -> 1, 3 -> 2.
func checkWithoutGPU1(t *testing.T, res []rule.Result, why string) {
	t.Helper()
	for L, r := range res {
		if slices.Contains(r.GPUs, 1) || len(r.GPUs) != 3 {
			t.Errorf("task %d: %v, want the 3 GPUs other than GPU 1 (%s)", L, r.GPUs, why)
		}
		var want []string
		for _, g := range r.GPUs {
			want = append(want, map[int]string{0: "0", 2: "1", 3: "2"}[g])
		}
		if e := env(r); e["CUDA_VISIBLE_DEVICES"] != strings.Join(want, ",") {
			t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s, want %s", L, e["CUDA_VISIBLE_DEVICES"], strings.Join(want, ","))
		}
	}
}
