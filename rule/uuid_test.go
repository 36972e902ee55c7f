package rule_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// uuidPair plans the same step with and without the uuid flag and applies the rule to every
// task of both; denied (nil: no device limit) is the device nodes each task may not open.
func uuidPair(t *testing.T, option string, tasks int, step string, bind []string, denied func(*gpubind.Table, int) []string) (plain, uuid []rule.Result, tab *gpubind.Table) {
	t.Helper()
	for _, opt := range []string{option, option + ",uuid"} {
		tb := planFixture(t, "dgx4nic-2cpu", opt, tasks, step)
		var d func(L int) []string
		if denied != nil {
			fakeDevs(t, tb)
			d = func(L int) []string { return denied(tb, L) }
		}
		res := applyAll(t, tb, tasks, bind, d)
		if opt == option {
			plain = res
			continue
		}
		if !tb.Flags.UUID {
			t.Fatalf("%s: the table lost the uuid flag: %v", opt, tb.Messages)
		}
		uuid, tab = res, tb
	}
	return plain, uuid, tab
}

// checkUUIDs: with uuid every task has the same GPUs in the same order as without it, and
// CUDA_VISIBLE_DEVICES names them by UUID; GPUBIND_* are the same as without uuid; the mapping
// line shows the UUID list.
func checkUUIDs(t *testing.T, plain, uuid []rule.Result, tab *gpubind.Table) {
	t.Helper()
	for L := range uuid {
		p, u := plain[L], uuid[L]
		if fmt.Sprint(p.GPUs) != fmt.Sprint(u.GPUs) {
			t.Errorf("task %d: GPUs %v without uuid, %v with it", L, p.GPUs, u.GPUs)
			continue
		}
		var want []string
		for _, id := range u.GPUs {
			want = append(want, tab.GPUs[id].UUID)
		}
		pe, ue := env(p), env(u)
		if got := ue["CUDA_VISIBLE_DEVICES"]; got != strings.Join(want, ",") {
			t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s, want the UUIDs %s", L, got, strings.Join(want, ","))
		}
		for _, k := range []string{"GPUBIND_GPUS", "GPUBIND_PCI_BUS_IDS", "GPUBIND_UUIDS", "GPUBIND_NUMA", "GPUBIND_CUDA_DEVICES", "CUDA_DEVICE_ORDER"} {
			if pe[k] != ue[k] {
				t.Errorf("task %d: %s=%s with uuid, %s without", L, k, ue[k], pe[k])
			}
		}
		// GPUBIND_CUDA_DEVICES' first entry is the CUDA device of the task's first own GPU:
		// its entry in the UUID list.
		cd := strings.Split(ue["GPUBIND_CUDA_DEVICES"], ",")[0]
		first := strings.Split(ue["GPUBIND_UUIDS"], ",")[0]
		if n := indexOf(strings.Split(ue["CUDA_VISIBLE_DEVICES"], ","), first); cd == "" || n < 0 || cd != strconv.Itoa(n) {
			t.Errorf("task %d: GPUBIND_CUDA_DEVICES=%s, but its GPU %s is entry %d of CUDA_VISIBLE_DEVICES=%s", L, ue["GPUBIND_CUDA_DEVICES"], first, n, ue["CUDA_VISIBLE_DEVICES"])
		}
		if !strings.Contains(u.LogLine, "CUDA_VISIBLE_DEVICES="+strings.Join(want, ",")) {
			t.Errorf("task %d: mapping line %q lacks the UUID list", L, u.LogLine)
		}
		if strings.Replace(u.LogLine, "CUDA_VISIBLE_DEVICES="+strings.Join(want, ","), "", 1) ==
			strings.Replace(p.LogLine, "CUDA_VISIBLE_DEVICES="+pe["CUDA_VISIBLE_DEVICES"], "", 1) {
			continue
		}
		t.Errorf("task %d: mapping lines differ beyond CUDA_VISIBLE_DEVICES:\n%s\n%s", L, p.LogLine, u.LogLine)
	}
}

func indexOf(l []string, s string) int {
	for i, x := range l {
		if x == s {
			return i
		}
	}
	return -1
}

// The uuid flag (issue 36 item 3): CUDA_VISIBLE_DEVICES lists UUIDs in the order the task's
// GPUs would be listed otherwise, for every visible= mode; everything else is unchanged.
func TestUUIDFlag(t *testing.T) {
	for _, c := range []struct {
		option, step string
		tasks        int
		bind         []string
	}{
		{"closest", "0,1,2,3", 4, []string{"0", "1"}},
		{"closest", "1,5", 2, []string{"0"}},
		{"per-task:2", "0,1,2,3", 2, []string{"0"}},
		{"closest,visible=first", "0,1,2,4", 4, []string{"0", "0", "0", "1"}},
		{"closest,visible=localid", "0,1,2,4", 4, []string{"0", "0", "0", "1"}},
		{"map:3,0", "0,1,2,3", 2, []string{"0"}},
	} {
		t.Run(c.option+"/"+c.step, func(t *testing.T) {
			plain, uuid, tab := uuidPair(t, c.option, c.tasks, c.step, c.bind, nil)
			checkUUIDs(t, plain, uuid, tab)
		})
	}
}

// A task that may open only some of the step's GPUs (Slurm's per-task ConstrainDevices,
// isolate): without uuid its numbers count the GPUs it can open (renumbered); with uuid the
// UUIDs name the same GPUs, which CUDA finds among the devices the task can open.
func TestUUIDFlagRestricted(t *testing.T) {
	// Each task may open only the GPU its own task line gives it: task L gets step GPU L.
	denied := func(tab *gpubind.Table, L int) []string {
		var d []string
		for i, g := range tab.GPUs {
			if i != L {
				d = append(d, g.Dev)
			}
		}
		return d
	}
	plain, uuid, tab := uuidPair(t, "closest", 4, "0,1,2,3", []string{"0", "1"}, denied)
	for L := range plain {
		if v := env(plain[L])["CUDA_VISIBLE_DEVICES"]; v != "0" {
			t.Errorf("task %d without uuid: CUDA_VISIBLE_DEVICES=%s, want 0 (the one GPU it can open)", L, v)
		}
		if g := uuid[L].GPUs; len(g) != 1 || g[0] != L {
			t.Errorf("task %d: GPUs %v, want [%d]", L, g, L)
		}
	}
	checkUUIDs(t, plain, uuid, tab)
}

// A step GPU without a known UUID (sysfs source without /proc/driver/nvidia): the engine warns
// and drops the flag, so CUDA_VISIBLE_DEVICES never mixes numbers and UUIDs; a table that still
// carries the flag lists such a GPU by number (the C rule never prints an empty entry).
func TestUUIDFlagWithoutUUIDs(t *testing.T) {
	topo, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgx4nic-2cpu"))
	if err != nil {
		t.Fatal(err)
	}
	topo.GPUs[2].UUID = ""
	step := "0,1,2,3"
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 4, Option: "closest,uuid",
		Gres: &gpubind.GresConf{AutoDetect: "nvml"}, Env: gpubind.StepEnv{StepGPUs: &step}})
	if err != nil {
		t.Fatal(err)
	}
	if tab.Flags.UUID || tab.Status != gpubind.StatusWarn || !strings.Contains(strings.Join(tab.Messages, "\n"), "uuid: the UUID of GPU 2") {
		t.Errorf("flag %v, status %v, messages %q: want the flag dropped with a warning naming GPU 2", tab.Flags.UUID, tab.Status, tab.Messages)
	}
	for L, r := range applyAll(t, tab, 4, []string{"0", "1"}, nil) {
		if v := env(r)["CUDA_VISIBLE_DEVICES"]; strings.HasPrefix(v, "GPU-") {
			t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s after the flag was dropped", L, v)
		}
	}
	tab.Flags.UUID = true
	for L, r := range applyAll(t, tab, 4, []string{"0", "1"}, nil) {
		v := env(r)["CUDA_VISIBLE_DEVICES"]
		if id := r.GPUs[0]; id == 2 && v != tab.GPUs[2].Visible || id != 2 && v != tab.GPUs[id].UUID {
			t.Errorf("task %d (GPU %d): CUDA_VISIBLE_DEVICES=%q", L, id, v)
		}
	}
}
