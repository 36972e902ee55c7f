package gpubind_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/fixtures"
	"github.com/gpubind/gpubind/tests/tabletext"
)

// TestPlanProperties plans thousands of random steps on every fixture and checks:
// GPUs come only from the step; no GPU is used twice unless the policy shares (more
// tasks than GPUs, or single:N); load is balanced within one; bound tasks under
// closest get a GPU of their own NUMA node when the step has one there; the table
// survives an encode/parse round trip unchanged.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	topos := map[string]*gpubind.Topology{}
	for _, n := range fixtures.Names() {
		topos[n] = snapshot(t, n)
	}
	names := fixtures.Names()
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	for it := 0; it < iterations; it++ {
		name := names[rng.IntN(len(names))]
		topo := topos[name]
		nG := len(topo.GPUs)
		// A random non-empty subset of GRES indices, in random order.
		perm := rng.Perm(nG)[:1+rng.IntN(nG)]
		var gres []string
		inStep := map[string]bool{}
		for _, p := range perm {
			gres = append(gres, strconv.Itoa(p))
			inStep[topo.GPUs[p].BusID] = true
		}
		G := len(perm)
		T := 1 + rng.IntN(20)
		n := 1 + rng.IntN(3)
		policy := []string{"closest", "pack", "spread", "per-task:" + strconv.Itoa(n), "single:" + strconv.Itoa(n), "map:" + gres[rng.IntN(G)] + "," + gres[0]}[rng.IntN(6)]
		var cpus string
		if rng.IntN(2) == 0 {
			all := topo.AllCPUs().CPUs()
			var parts []string
			for L := 0; L < T; L++ {
				parts = append(parts, strconv.Itoa(all[rng.IntN(len(all))]))
			}
			cpus = strings.Join(parts, ";")
		}
		c := planCase{fixture: name, policy: policy, tasks: T, gpus: strings.Join(gres, ","), taskCPUs: cpus}
		desc := fmt.Sprintf("%+v", c)
		tab, bs, err := runCase(t, c, topo, nil)
		switch {
		case strings.HasPrefix(policy, "per-task") && (T*n > G):
			if err == nil {
				t.Fatalf("%s: no error though %d tasks x %d > %d GPUs", desc, T, n, G)
			}
			continue
		case strings.HasPrefix(policy, "single") && (T+n-1)/n > G:
			if err == nil {
				t.Fatalf("%s: no error though single:%d needs more than %d GPUs", desc, n, G)
			}
			continue
		case err != nil:
			t.Fatalf("%s: %v", desc, err)
		}
		back, err := tabletext.Parse(strings.NewReader(tab.String()))
		if err != nil || back.String() != tab.String() {
			t.Fatalf("%s: table round trip: %v", desc, err)
		}
		nodeOf := func(L int) int { // the NUMA node of task L's CPU, -1 without binding
			if cpus == "" {
				return -1
			}
			cpu, _ := strconv.Atoi(strings.Split(cpus, ";")[L])
			for _, nd := range topo.NUMA {
				if nd.CPUs.Has(cpu) {
					return nd.ID
				}
			}
			return -1
		}
		// Locality: when no node has more bound tasks than step GPUs, no task needs to
		// take a GPU elsewhere, so every task gets one on its own node.
		tasksOn, gpusOn := map[int]int{}, map[int]int{}
		for L := range bs {
			tasksOn[nodeOf(L)]++
		}
		for _, g := range tab.GPUs {
			gpusOn[g.NUMA]++
		}
		roomy := tab.PerTask == 1
		for node, k := range tasksOn {
			roomy = roomy && (node < 0 || k <= gpusOn[node])
		}
		use := map[int]int{}
		for L, b := range bs {
			if len(b.GPUs) == 0 || len(b.GPUs) > tab.PerTask {
				t.Fatalf("%s: task %d got %v", desc, L, b.GPUs)
			}
			seen := map[int]bool{}
			for _, id := range b.GPUs {
				if !inStep[tab.GPUs[id].BusID] {
					t.Fatalf("%s: task %d got %s, not in the step", desc, L, tab.GPUs[id].BusID)
				}
				if seen[id] {
					t.Fatalf("%s: task %d got GPU %d twice", desc, L, id)
				}
				seen[id] = true
				use[id]++
			}
			if node := nodeOf(L); roomy && node >= 0 && strings.HasPrefix(policy, "closest") && tab.GPUs[b.GPUs[0]].NUMA != node {
				t.Fatalf("%s: task %d on NUMA %d got a GPU on NUMA %d", desc, L, node, tab.GPUs[b.GPUs[0]].NUMA)
			}
		}
		// Exclusive while there are enough: with T*N <= G no GPU serves two tasks
		// (closest, per-task:N), whatever the binding.
		if (strings.HasPrefix(policy, "closest") || strings.HasPrefix(policy, "per-task")) && T*tab.PerTask <= G {
			for id, k := range use {
				if k > 1 {
					t.Fatalf("%s: GPU %d serves %d tasks though %d tasks x %d fit on %d GPUs", desc, id, k, T, tab.PerTask, G)
				}
			}
		}
		if cpus != "" || strings.HasPrefix(policy, "map") {
			continue
		}
		lo, hi := T, 0
		for id := range tab.GPUs {
			lo, hi = min(lo, use[id]), max(hi, use[id])
		}
		switch {
		case strings.HasPrefix(policy, "single"):
			if hi > n {
				t.Fatalf("%s: a GPU has %d tasks, more than %d", desc, hi, n)
			}
		case strings.HasPrefix(policy, "per-task"):
			if hi > 1 {
				t.Fatalf("%s: per-task GPUs overlap: %v", desc, use)
			}
		case T <= G:
			if hi > 1 {
				t.Fatalf("%s: a GPU used twice with %d tasks on %d GPUs: %v", desc, T, G, use)
			}
		default:
			if hi-lo > 1 {
				t.Fatalf("%s: unbalanced: %v", desc, use)
			}
		}
	}
}
