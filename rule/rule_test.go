package rule_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// handTable: NUMA 0 = CPUs 0-1 with GPUs 0,1; NUMA 1 = CPUs 2-3 with GPU 2; NUMA 2 = CPU 4
// with none. Task lines: 1, 2, 0, 1.
func handTable(share, perTask int, fallback []int) *gpubind.Table {
	return &gpubind.Table{
		Status: gpubind.StatusOK, Rule: gpubind.RuleNUMA,
		Share: share, PerTask: perTask, NTasks: 4,
		NUMA: []gpubind.TableNUMA{{ID: 0, CPUs: gpubind.NewCPUSet(0, 1)}, {ID: 1, CPUs: gpubind.NewCPUSet(2, 3)},
			{ID: 2, CPUs: gpubind.NewCPUSet(4)}},
		GPUs: []gpubind.TableGPU{{ID: 0, Visible: "0", NUMA: 0, Minor: -1}, {ID: 1, Visible: "1", NUMA: 0, Minor: -1},
			{ID: 2, Visible: "2", NUMA: 1, Minor: -1}},
		NUMAGPUs: map[int][]int{0: {0, 1}, 1: {2}, 2: nil},
		Fallback: fallback,
		Tasks: []gpubind.TableTask{{Local: 0, GPUs: []int{1}}, {Local: 1, GPUs: []int{2}}, {Local: 2, GPUs: []int{0}},
			{Local: 3, GPUs: []int{1}}},
	}
}

func parse(t *testing.T, tab *gpubind.Table) *rule.Table {
	t.Helper()
	rt, err := rule.Parse(tab.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, tab)
	}
	t.Cleanup(rt.Close)
	return rt
}

func gpus(t *testing.T, rt *rule.Table, k rule.Task) []int {
	t.Helper()
	r, err := rt.Apply(k)
	if err != nil {
		t.Fatalf("task %d: %v", k.Local, err)
	}
	return r.GPUs
}

// hexList is SLURM_CPU_BIND_LIST for tasks bound to the given CPU lists.
// cpus is a CPU list of the test as a set (a bad list is the test's fault).
func cpus(list string) gpubind.CPUSet {
	s, err := gpubind.ParseCPUList(list)
	if err != nil {
		panic(err)
	}
	return s
}

func hexList(t *testing.T, lists ...string) string {
	var hex []string
	for _, l := range lists {
		s, err := gpubind.ParseCPUList(l)
		if err != nil {
			t.Fatal(err)
		}
		hex = append(hex, s.Hex())
	}
	return strings.Join(hex, ",")
}

// The masks gpubind plan writes (CPUSet.Hex) are what the C rule reads, beyond 64 CPUs too.
func TestHexMasksReadByTheRule(t *testing.T) {
	lo, hi := gpubind.CPUSet{}, gpubind.CPUSet{}
	for c := 0; c < 128; c++ {
		lo.Add(c)
		hi.Add(c + 128)
	}
	tab := handTable(1, 1, []int{0, 1, 2})
	tab.NUMA = []gpubind.TableNUMA{{ID: 0, CPUs: lo}, {ID: 1, CPUs: hi}}
	tab.NUMAGPUs = map[int][]int{0: {0, 1}, 1: {2}}
	rt := parse(t, tab)
	for _, c := range []struct {
		cpu  int
		want int
	}{{5, 0}, {70, 0}, {200, 2}, {255, 2}} {
		list := gpubind.NewCPUSet(c.cpu).Hex()
		if got := gpus(t, rt, rule.Task{Local: 0, BindType: "mask_cpu:", BindList: list}); !reflect.DeepEqual(got, []int{c.want}) {
			t.Errorf("CPU %d (mask %s): got %v, want GPU %d", c.cpu, list, got, c.want)
		}
	}
}

// TestUnits checks rule section 3 item 2 on a hand-made table: NUMA by majority (ties to
// the lowest node), free units on the task's node first, then free units from the end of
// fallback, then the least used; replayed from the bind list.
func TestUnits(t *testing.T) {
	rt := parse(t, handTable(1, 1, []int{0, 1, 2}))
	list := hexList(t, "0", "2", "1", "1-3")
	for _, c := range []struct {
		k    rule.Task
		want []int
	}{
		{rule.Task{Local: 0, BindType: "mask_cpu:", BindList: list}, []int{0}}, // NUMA 0: its first GPU
		{rule.Task{Local: 1, BindType: "mask_cpu:", BindList: list}, []int{2}}, // NUMA 1
		{rule.Task{Local: 2, BindType: "mask_cpu:", BindList: list}, []int{1}}, // NUMA 0: GPU 0 taken
		// NUMA 1 (2 of 3 CPUs): GPU 2 taken and no free GPU left: the least used on its node.
		{rule.Task{Local: 3, BindType: "mask_cpu:", BindList: list}, []int{2}},
		{rule.Task{Local: 0, Own: cpus("0-4")}, []int{1}},                                          // every CPU: not bound, task line
		{rule.Task{Local: 0, Own: cpus("0-3"), Step: cpus("0-3")}, []int{1}},                       // the whole cpuset of a step over two nodes: not bound
		{rule.Task{Local: 0, Own: cpus("0-1"), Step: cpus("0-1")}, []int{0}},                       // the whole cpuset of a step on NUMA 0: its node
		{rule.Task{Local: 0, Own: cpus("0"), Step: cpus("0-1")}, []int{0}},                         // fewer CPUs than the step: bound
		{rule.Task{Local: 2, Own: cpus("4")}, []int{0}},                                            // NUMA 2 has none; tasks 0, 1 count as on it and took 2, 1 from the end
		{rule.Task{Local: 1, Own: cpus("1-2")}, []int{1}},                                          // tie: node 0; task 0 counts as on it
		{rule.Task{Local: 3}, []int{1}},                                                            // nothing known: task line
		{rule.Task{Local: 1, BindType: "mask_cpu:", BindList: "0x1,zz", Own: cpus("3")}, []int{2}}, // bad entry: own mask
		{rule.Task{Local: 1, BindType: "map_cpu:", BindList: "2,0"}, []int{0}},                     // map_cpu: CPU ids
		// A shorter list is reused from its start, as Slurm does: tasks 0-2 all on CPU 0.
		{rule.Task{Local: 2, BindType: "mask_cpu:", BindList: "0x1"}, []int{2}},
		{rule.Task{Local: 1, BindType: "cores", BindList: "0x1,0x1"}, []int{2}}, // no list for this type: task line
	} {
		if got := gpus(t, rt, c.k); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: got %v, want %v", c.k, got, c.want)
		}
	}

	// share 2: two tasks per GPU, the node's first GPU first.
	rt = parse(t, handTable(2, 1, []int{0, 1, 2}))
	l4 := hexList(t, "0", "0", "1", "1")
	for L, want := range []int{0, 0, 1, 1} {
		if got := gpus(t, rt, rule.Task{Local: L, BindType: "mask_cpu:", BindList: l4}); !reflect.DeepEqual(got, []int{want}) {
			t.Errorf("share 2: task %d got %v, want %d", L, got, want)
		}
	}
	// per_task 2 over fallback 0,1,2: one unit {0,1} (GPU 2 is left over); both tasks share it.
	rt = parse(t, handTable(1, 2, []int{0, 1, 2}))
	for L := 0; L < 2; L++ {
		if got := gpus(t, rt, rule.Task{Local: L, BindType: "mask_cpu:", BindList: l4}); !reflect.DeepEqual(got, []int{0, 1}) {
			t.Errorf("per_task 2: task %d got %v", L, got)
		}
	}
	// per_task 3 with 3 GPUs in another order: the unit is the fallback run.
	rt = parse(t, handTable(1, 3, []int{1, 0, 2}))
	if got := gpus(t, rt, rule.Task{Local: 0, Own: cpus("0")}); !reflect.DeepEqual(got, []int{1, 0, 2}) {
		t.Errorf("per_task 3: %v", got)
	}
	tab := handTable(1, 1, []int{0, 1, 2})
	tab.Rule = gpubind.RuleTable
	if got := gpus(t, parse(t, tab), rule.Task{Local: 0, BindType: "mask_cpu:", BindList: l4}); !reflect.DeepEqual(got, []int{1}) {
		t.Errorf("rule table: %v", got)
	}
}

func planFixture(t *testing.T, name, policy string, tasks int, stepGPUs string) *gpubind.Table {
	t.Helper()
	topo, err := gpubind.LoadSnapshot(fixtures.Snapshot(name))
	if err != nil {
		t.Fatal(err)
	}
	req := gpubind.PlanRequest{Topo: topo, Tasks: tasks, Option: policy, Gres: &gpubind.GresConf{AutoDetect: "nvml"}}
	if stepGPUs != "" {
		req.Env.StepGPUs = &stepGPUs
	}
	tab, err := gpubind.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// Review finding: a step-wide CPU mask was taken as a per-task binding. A partial-node step
// whose cpuset is NUMA 0's CPU (dgxh100-2cpu: CPU 0 = NUMA 0, CPU 1 = NUMA 1) and no
// per-task binding: every task's mask is the step's cpuset. They must take the GPU-first
// plan (four different GPUs), not all pick NUMA 0's GPUs and double up.
func TestStepCPUSetIsNoBinding(t *testing.T) {
	rt := parse(t, planFixture(t, "dgxh100-2cpu", "closest", 4, "0,1,4,5"))
	seen := map[int]bool{}
	for L := 0; L < 4; L++ {
		g := gpus(t, rt, rule.Task{Local: L, Own: cpus("0"), Step: cpus("0")})
		if len(g) != 1 || seen[g[0]] {
			t.Fatalf("task %d got %v (earlier tasks %v): the step's cpuset was taken as a per-task binding", L, g, seen)
		}
		seen[g[0]] = true
	}
}

// Review finding: per-task:N gave overlapping or short groups ({2,3} and {1,2} here). With
// tasks*N <= GPUs every task gets N GPUs of its own, whatever the binding.
func TestPerTaskGroupsAreExclusive(t *testing.T) {
	for _, c := range []struct {
		step   string
		tasks  int
		layout []string
	}{
		{"1,2,3,4,5,6", 2, []string{"0", "0"}},
		{"1,2,3,4,5,6", 3, []string{"0", "0", "0"}},
		{"1,2,3,4,5,6", 3, []string{"1", "0", "1"}},
		{"0,1,2,3,4,5,6,7", 4, []string{"1", "1", "1", "1"}},
		{"0,1,2,4,5", 2, []string{"0", "0"}},
	} {
		tab := planFixture(t, "dgxh100-2cpu", "per-task:2", c.tasks, c.step)
		rt := parse(t, tab)
		list := hexList(t, c.layout...)
		owner := map[int]int{}
		for L := 0; L < c.tasks; L++ {
			g := gpus(t, rt, rule.Task{Local: L, BindType: "mask_cpu:", BindList: list, Own: cpus(c.layout[L])})
			if len(g) != 2 {
				t.Errorf("step %s layout %v: task %d got %v, want 2 GPUs", c.step, c.layout, L, g)
			}
			for _, id := range g {
				if o, ok := owner[id]; ok {
					t.Errorf("step %s layout %v: GPU %d given to tasks %d and %d", c.step, c.layout, id, o, L)
				}
				owner[id] = L
			}
		}
	}
}

// The engine's largest table parses, one task more does not (the limits themselves are
// compared in limits_test.go).
func TestLargestTableParses(t *testing.T) {
	tab := planFixture(t, "dgxh100", "closest", gpubind.MaxTableTasks, "")
	text := tab.String()
	parse(t, tab)
	more := strings.Replace(text, fmt.Sprintf("ntasks %d\n", gpubind.MaxTableTasks), fmt.Sprintf("ntasks %d\n", gpubind.MaxTableTasks+1), 1)
	if rt, err := rule.Parse(more); err == nil {
		rt.Close()
		t.Errorf("a table of %d tasks parsed", gpubind.MaxTableTasks+1)
	}
}

// FuzzParse feeds arbitrary text to the front end's table parser and applies the rule to
// every task of whatever parses, with a fuzzed bind list: no crash, and only GPUs of the
// table come out.
func FuzzParse(f *testing.F) {
	f.Add("gpubind-plan 1\nstatus ok\nmode enforce\nflags nic\nrule numa\nshare 1\nper_task 2\nntasks 2\nnuma 0 0-1\nnuma 1 2-3\ngpu 0 0 0 0 0000:18:00.0 GPU-a 0 mlx5_0\ngpu 1 1 4 4 0000:9a:00.0 - 1 -\nnumagpus 0 0\nnumagpus 1 1\nfallback 0,1\ntask 0 0 -\ntask 1 1 2-3\nend 17\n", "0x1,0x4", "0-3")
	f.Add("gpubind-plan 1\nstatus error\nmessage boom\nmode optional\nend 4\n", "", "")
	f.Fuzz(func(t *testing.T, text, binds, step string) {
		rt, err := rule.Parse(text)
		if err != nil {
			return
		}
		defer rt.Close()
		stepCPUs, err := gpubind.ParseCPUList(step)
		if err != nil || len(step) > 64 {
			stepCPUs = gpubind.NewCPUSet()
		}
		for L := 0; L <= rt.NTasks() && L < 64; L++ {
			r, err := rt.Apply(rule.Task{Local: L, BindType: "mask_cpu:", BindList: binds, Own: gpubind.NewCPUSet(L % 8), Step: stepCPUs})
			if err != nil {
				continue
			}
			for _, id := range r.GPUs {
				if id < 0 || id >= rt.NGPUs() {
					t.Fatalf("task %d got GPU %d of %d", L, id, rt.NGPUs())
				}
			}
		}
	})
}

// Affinity is gb_result_affinity, what the front end sets the task's affinity to (cpus
// flag): the rule's CPUs within the task's own, never outside them.
func TestAffinity(t *testing.T) {
	// dgxh100: NUMA 0 is 0-55,112-167, NUMA 1 56-111,168-223. The rule takes its CPUs from
	// the table's task line, which a task bound to a NUMA node does not use: these tasks
	// have every CPU of the step (unbound) or an unknown affinity.
	bound := parse(t, planFixture(t, "dgxh100", "closest,cpus", 2, ""))
	defer bound.Close()
	plain := parse(t, planFixture(t, "dgxh100", "closest", 2, ""))
	defer plain.Close()
	for _, c := range []struct {
		rt   *rule.Table
		own  string
		want string
	}{
		{bound, "0-3,60-63", "0-3"},                 // the rule's CPUs within own
		{bound, "", "0-55,112-167"},                 // own unknown: the rule's CPUs
		{bound, "0-223", "0-55,112-167"},            // own covers them
		{bound, "56-111,168-223", "56-111,168-223"}, // none of them in own: own stays
		{plain, "0-3,60-63", "0-3,60-63"},           // no cpus flag: own
		{plain, "", ""},                             // no cpus flag, own unknown: nothing
	} {
		k := rule.Task{Local: 0}
		if c.own != "" {
			k.Own, k.Step = cpus(c.own), cpus(c.own) // the step's every CPU: unbound
		}
		r, err := c.rt.Apply(k)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Affinity.String(); got != c.want {
			t.Errorf("own %q: affinity %q, want %q (rule's CPUs %q)", c.own, got, c.want, r.CPUs)
		}
	}
}

// An older launcher's "mode" line (written before the table lost it) still parses, and is
// checked; the table the engine writes now has none.
func TestOldModeLineAccepted(t *testing.T) {
	text := handTable(1, 1, []int{0}).String()
	if strings.Contains(text, "\nmode ") {
		t.Fatalf("the engine's table has a mode line:\n%s", text)
	}
	withMode := func(m string) string {
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		n := len(lines) // the "end N" line counts the lines before it
		out := append([]string{lines[0], lines[1], "mode " + m}, lines[2:n-1]...)
		return strings.Join(append(out, fmt.Sprintf("end %d", n)), "\n") + "\n"
	}
	for _, m := range []string{"enforce", "optional"} {
		rt, err := rule.Parse(withMode(m))
		if err != nil {
			t.Fatalf("mode %s: %v\n%s", m, err, withMode(m))
		}
		rt.Close()
	}
	if _, err := rule.Parse(withMode("maybe")); err == nil {
		t.Error("mode maybe: accepted")
	}
}

// The launcher writes the table as the job's user, so slurmstepd's parser must bound what the
// rule later indexes. A fallback line that names a GPU twice made the numa rule count more GPU
// units than the table has GPUs, and clear that many ints of an array sized by the GPUs: a
// heap overflow in slurmstepd that the fuzz target found (ASan). Such a table is malformed.
func TestFallbackNamesEachGPUOnce(t *testing.T) {
	table := func(fallback string) string {
		lines := []string{"gpubind-plan 1", "status ok", "flags -", "rule numa", "share 1", "per_task 1",
			"ntasks 2", "numa 0 0", "gpu 0 0 0 0 0000:1b:00.0 GPU-aaaa 0 -", "numagpus 0 0",
			"fallback " + fallback, "task 0 0 -", "task 1 0 -"}
		return strings.Join(lines, "\n") + fmt.Sprintf("\nend %d\n", len(lines))
	}
	rt, err := rule.Parse(table("0"))
	if err != nil {
		t.Fatalf("fallback 0: %v", err)
	}
	rt.Close()
	for _, fb := range []string{"0,0", "0,0,0,0,0,0,0,0"} {
		rt, err := rule.Parse(table(fb))
		if err == nil {
			rt.Close()
			t.Errorf("fallback %s: accepted", fb)
		} else if !strings.Contains(err.Error(), "fallback names GPU 0 twice") {
			t.Errorf("fallback %s: %v, want the error to name the GPU named twice", fb, err)
		}
	}
}
