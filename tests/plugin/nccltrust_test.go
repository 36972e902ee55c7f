package plugin

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// Issue 24 under real Slurm, as sites run it (task/cgroup+task/affinity, ConstrainDevices):
// the 8-GPU tree with one NIC per PCIe switch (dgx4nic-2cpu: GPUs 2s, 2s+1 share mlx5_s;
// mlx5_4 is a storage NIC near no GPU). Each task prints what it got.
func TestNCCLTrustSlurm(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgx4nic-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity",
		Proctrack: "proctrack/cgroup", ConstrainDevices: true, GPUs: 8, PlugStack: []string{line}})
	script := `a=; for f in ` + c.DevDir + `/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}${f##*nvidia}"; done; ` +
		`echo "V $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES:--} ${GPUBIND_CUDA_DEVICES:--} ${GPUBIND_PCI_BUS_IDS:--} ${a:--} ` +
		`${NCCL_IB_HCA:--} ${UCX_NET_DEVICES:--} ${GPUBIND_NIC:--}"`
	re := regexp.MustCompile(`(?m)^V (\d+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$`)
	type view struct {
		local                    int
		visible, cuda, bus, open []string
		hca, ucx, nic            string
	}
	run := func(t *testing.T, tasks int, args ...string) []view {
		t.Helper()
		args = append(append([]string{}, args...), "sh", "-c", script)
		out, errOut, err := c.Srun(ctx(t), args...)
		if err != nil {
			t.Fatalf("srun %v: %v\n%s\n%s", args, err, out, errOut)
		}
		var vs []view
		for _, m := range re.FindAllStringSubmatch(out, -1) {
			local, _ := strconv.Atoi(m[1])
			vs = append(vs, view{local, splitList(m[2]), splitList(m[3]), splitList(m[4]), splitList(m[5]), m[6], m[7], m[8]})
		}
		if len(vs) != tasks {
			t.Fatalf("%d task lines, want %d (Slurm %s):\n%s\n%s", len(vs), tasks, slurmVersion(c), out, errOut)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i].local < vs[j].local })
		return vs
	}
	// nicOf is the fixture's NIC of the GPU with this bus id: mlx5_(minor/2).
	nicOf := func(bus string) string { return "mlx5_" + strconv.Itoa(slices.Index(dgxBus, bus)/2) + ":1" }
	// checkVisible: the task sees exactly the GPUs it may open, numbered as CUDA numbers
	// them (PCI order among those; dgx: minor order is PCI order), and its own GPU is the
	// entry GPUBIND_CUDA_DEVICES names.
	checkVisible := func(t *testing.T, v view, all bool) {
		t.Helper()
		open := v.open
		if all && len(v.visible) != len(open) {
			t.Errorf("task %d sees %v but may open minors %v: want all of them (Slurm %s)", v.local, v.visible, open, slurmVersion(c))
		}
		seen := map[string]bool{}
		for _, e := range v.visible {
			n, err := strconv.Atoi(e)
			if err != nil || n < 0 || n >= len(open) || seen[e] {
				t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%v is not a set of numbers below %d", v.local, v.visible, len(open))
			}
			seen[e] = true
		}
		if len(v.cuda) != len(v.bus) || len(v.bus) == 0 {
			t.Fatalf("task %d: GPUBIND_CUDA_DEVICES=%v for GPUs %v", v.local, v.cuda, v.bus)
		}
		for i, b := range v.bus {
			k, _ := strconv.Atoi(v.cuda[i])
			pos := slices.Index(open, strconv.Itoa(slices.Index(dgxBus, b)))
			if k >= len(v.visible) || v.visible[k] != strconv.Itoa(pos) {
				t.Errorf("task %d: its GPU %s (CUDA device %d) is entry %v of %v, CUDA numbers it %d", v.local, b, k, v.cuda, v.visible, pos)
			}
		}
	}

	// Before: task 0 NCCL_IB_HCA==mlx5_0:1, task 1 =mlx5_2:1, ... (one NIC per task).
	t.Run("nic: one NCCL_IB_HCA per node", func(t *testing.T) {
		for _, tc := range []struct {
			gpus, want string
			tasks      int
		}{
			{"--gpus=8", "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1", 4},
			{"--gpus=4", "=mlx5_0:1,mlx5_1:1", 4},
		} {
			for _, v := range run(t, tc.tasks, "-n"+strconv.Itoa(tc.tasks), tc.gpus, "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest,nic") {
				if v.hca != tc.want {
					t.Errorf("%s task %d: NCCL_IB_HCA=%s, want %s on every task (Slurm %s)", tc.gpus, v.local, v.hca, tc.want, slurmVersion(c))
				}
				if want := nicOf(v.bus[0]); v.ucx != want || v.nic != want {
					t.Errorf("%s task %d (GPU %s): UCX_NET_DEVICES=%s GPUBIND_NIC=%s, want its own %s", tc.gpus, v.local, v.bus[0], v.ucx, v.nic, want)
				}
			}
		}
	})
	t.Run("visible=first", func(t *testing.T) {
		vs := run(t, 2, "-n2", "--gpus=4", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,visible=first")
		for _, v := range vs {
			checkVisible(t, v, true)
			if len(v.visible) != 4 || !slices.Equal(v.cuda, []string{"0"}) {
				t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%v GPUBIND_CUDA_DEVICES=%v, want 4 GPUs, its own first", v.local, v.visible, v.cuda)
			}
		}
		if vs[0].bus[0] == vs[1].bus[0] {
			t.Errorf("both tasks own GPU %s", vs[0].bus[0])
		}
	})
	t.Run("visible=localid", func(t *testing.T) {
		for _, v := range run(t, 4, "-n4", "--gpus=4", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest,visible=localid") {
			checkVisible(t, v, true)
			if !slices.Equal(v.cuda, []string{strconv.Itoa(v.local)}) {
				t.Errorf("task %d: GPUBIND_CUDA_DEVICES=%v, want entry SLURM_LOCALID", v.local, v.cuda)
			}
		}
	})
	// Slurm narrows each task's device cgroup itself here (--gpus-per-task with
	// ConstrainDevices on 23.02+): first shows what the task can open, never more.
	t.Run("visible=first with gpus-per-task", func(t *testing.T) {
		for _, v := range run(t, 2, "-n2", "--gpus-per-task=2", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,visible=first") {
			checkVisible(t, v, true)
		}
	})
	// whereami in every task reports what the task really got; it must match the plugin's
	// own mapping line (verbose) and find nothing to warn about (--strict exits 0).
	t.Run("whereami on every task", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "gpubind")
		if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(repoRoot(), "cmd/gpubind")).CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
			t.Fatal(err)
		}
		w := bin + ` whereami --json --strict --root ` + fixture("dgx4nic-2cpu") + ` --dev ` + c.DevDir +
			` > ` + c.Dir + `/where.$SLURM_PROCID.json; echo "W $SLURM_PROCID $?"`
		type whereRep struct {
			GPUs []struct {
				Bus string `json:"pci_bus_id"`
			} `json:"gpus"`
			Local    bool     `json:"cpus_local_to_gpus"`
			NIC      string   `json:"nic"`
			Warnings []string `json:"warnings"`
			Env      map[string]string
		}
		// where runs whereami in every task of an srun and returns each rank's report, exit
		// status and own GPU from the mapping line.
		where := func(t *testing.T, gpus string) (map[string]whereRep, map[string]string, map[string]string) {
			out, errOut, err := c.Srun(ctx(t), "-n2", gpus, "--cpu-bind=map_cpu:0,1",
				"--gpu-bind-topo=closest,nic,visible=first,verbose", "sh", "-c", w)
			if err != nil {
				t.Fatalf("srun: %v\n%s\n%s", err, out, errOut)
			}
			mapping := regexp.MustCompile(`gpubind: task \d+ \(rank (\d+)\): CUDA_VISIBLE_DEVICES=\S+ \(visible=first, own entry 0\) -> GPU \d+ (\S+) `)
			own := map[string]string{}
			for _, m := range mapping.FindAllStringSubmatch(out+errOut, -1) {
				own[m[1]] = m[2]
			}
			reps, rcs := map[string]whereRep{}, map[string]string{}
			for _, m := range regexp.MustCompile(`(?m)^W (\d+) (\d+)$`).FindAllStringSubmatch(out, -1) {
				b, _ := os.ReadFile(filepath.Join(c.Dir, "where."+m[1]+".json"))
				var rep whereRep
				if err := json.Unmarshal(b, &rep); err != nil {
					t.Fatalf("task %s: whereami --json: %v\n%s", m[1], err, b)
				}
				reps[m[1]], rcs[m[1]] = rep, m[2]
			}
			if len(own) != 2 || len(reps) != 2 {
				t.Fatalf("mapping lines for %d tasks, whereami for %d, want 2:\n%s%s", len(own), len(reps), out, errOut)
			}
			return reps, rcs, own
		}
		// All 8 GPUs: each task's CPU (0: NUMA 0, 1: NUMA 1) has GPUs on its node.
		reps, rcs, own := where(t, "--gpus=8")
		for r, rep := range reps {
			if rcs[r] != "0" || len(rep.Warnings) > 0 {
				t.Errorf("task %s: whereami --strict exit %s, warnings %q (Slurm %s)", r, rcs[r], rep.Warnings, slurmVersion(c))
			}
			if len(rep.GPUs) != 8 || rep.GPUs[0].Bus != own[r] {
				t.Errorf("task %s: whereami sees %+v, the mapping line says its GPU is %q", r, rep.GPUs, own[r])
			}
			if !rep.Local || rep.NIC != rep.Env["UCX_NET_DEVICES"] {
				t.Errorf("task %s: cpus local %v, nic %s, UCX_NET_DEVICES %s", r, rep.Local, rep.NIC, rep.Env["UCX_NET_DEVICES"])
			}
		}
		// --gpus=4 gives GPUs 0-3, all on NUMA 0: task 1, bound to CPU 1 (NUMA 1), has no
		// near GPU, and whereami says so (--strict: exit 1).
		reps, rcs, _ = where(t, "--gpus=4")
		if w := strings.Join(reps["1"].Warnings, "; "); rcs["1"] != "1" || !strings.Contains(w, "are not all local to CUDA device 0") {
			t.Errorf("task 1 on NUMA 1 with GPUs of NUMA 0: whereami exit %s, warnings %q", rcs["1"], w)
		}
		if rcs["0"] != "0" {
			t.Errorf("task 0: whereami exit %s, warnings %q", rcs["0"], reps["0"].Warnings)
		}
	})
	t.Run("visible=own unchanged", func(t *testing.T) {
		for _, v := range run(t, 2, "-n2", "--gpus=4", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest") {
			checkVisible(t, v, false)
			if len(v.visible) != 1 {
				t.Errorf("task %d sees %v", v.local, v.visible)
			}
		}
	})
}
