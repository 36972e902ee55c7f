package gpubind_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// TestGraceNUMA: on GH200 and GB200 NVML names the GPU's memory node (CPU-less) as its
// NUMA node. Merged with sysfs, each GPU's NUMA node is the Grace CPU node nearest it
// and the memory node is kept apart; closest,cpus binds every task to its Grace's CPUs,
// never to a memory-only node (which would be no CPU at all).
func TestGraceNUMA(t *testing.T) {
	for _, c := range []struct {
		name     string
		wantNUMA []int    // per GPU
		wantCPUs []string // per task of a 1-task-per-GPU step
	}{
		{"gh200", []int{0, 1, 2, 3}, []string{"0-71", "72-143", "144-215", "216-287"}},
		{"gb200", []int{0, 0, 1, 1}, []string{"0-71", "0-71", "72-143", "72-143"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			snap := snapshot(t, c.name)
			nv, err := gpubind.DiscoverNVML(nvmlmock.New(snap))
			if err != nil {
				t.Fatal(err)
			}
			sys, err := gpubind.DiscoverSysfs(fixtures.Root(c.name))
			if err != nil {
				t.Fatal(err)
			}
			var memOnly []int
			for _, n := range sys.NUMA {
				if n.CPUs.IsEmpty() {
					memOnly = append(memOnly, n.ID)
				}
			}
			if len(memOnly) != 4 {
				t.Fatalf("memory-only NUMA nodes in the tree: %v", memOnly)
			}
			m := gpubind.Merge(nv, sys)
			for i, g := range m.GPUs {
				if nv.GPUs[i].NUMA != snap.GPUs[i].MemoryNUMA[0] {
					t.Fatalf("mock: NVML says NUMA %d, want the memory node %d", nv.GPUs[i].NUMA, snap.GPUs[i].MemoryNUMA[0])
				}
				if g.NUMA != c.wantNUMA[i] || !slices.Equal(g.MemoryNUMA, snap.GPUs[i].MemoryNUMA) || g.Source["numa"] != "sysfs" {
					t.Errorf("GPU %d: NUMA %d memory %v (source %q), want %d and %v", i, g.NUMA, g.MemoryNUMA, g.Source["numa"], c.wantNUMA[i], snap.GPUs[i].MemoryNUMA)
				}
			}
			// The merged topology survives a snapshot.
			var b strings.Builder
			if err := gpubind.WriteSnapshot(&b, m); err != nil {
				t.Fatal(err)
			}
			back, err := gpubind.ParseSnapshot([]byte(b.String()))
			if err != nil || !slices.Equal(back.GPUs[0].MemoryNUMA, m.GPUs[0].MemoryNUMA) {
				t.Fatalf("snapshot: %v %+v", err, back)
			}
			// Tasks bound by Slurm to a Grace take that Grace's GPU (rule numa).
			bound := map[string]string{"gh200": "72;0;216;144", "gb200": "72;0;143;1"}[c.name]
			wantIdx := map[string]string{"gh200": "1 0 3 2", "gb200": "2 0 3 1"}[c.name]
			if tab, rs, err := runCase(t, planCase{policy: "closest", tasks: 4, taskCPUs: bound}, m, nil); err != nil {
				t.Fatal(err)
			} else if idx, _ := describe(tab, rs); idx != wantIdx || envMap(rs[0])["GPUBIND_NUMA"] != "1" {
				t.Errorf("bound tasks %s: GPUs %q (want %q), GPUBIND_NUMA %q", bound, idx, wantIdx, envMap(rs[0])["GPUBIND_NUMA"])
			}
			for _, topo := range []*gpubind.Topology{m, sys, snap} {
				_, rs, err := runCase(t, planCase{policy: "closest,cpus", tasks: 4}, topo, nil)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, r := range rs {
					got = append(got, r.CPUs.String())
				}
				if !slices.Equal(got, c.wantCPUs) {
					t.Errorf("%s: task CPUs %q, want %q", topo.Backends, got, c.wantCPUs)
				}
			}
		})
	}
}

// TestGB200Fabric: the gb200 fixture plans with its clique in every task.
func TestGB200Fabric(t *testing.T) {
	tab, rs, err := runCase(t, planCase{policy: "closest", tasks: 4}, snapshot(t, "gb200"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := fixtures.GB200Cluster + ".1"
	for L, r := range rs {
		// This machine has no IMEX channel (/dev/nvidia-caps-imex-channels): the task says so.
		if envMap(r)["GPUBIND_NVL_CLIQUE"] != want || !strings.Contains(r.Warning, "no IMEX channel device (/dev/nvidia-caps-imex-channels/channelN)") {
			t.Errorf("task %d: %v %q", L, r.Env, r.Warning)
		}
	}
	if len(tab.Fabric) != 4 || !strings.Contains(rs[3].LogLine, fmt.Sprintf("fabric completed,healthy clique %s", want)) {
		t.Errorf("fabric lines %v, log %q", tab.Fabric, rs[3].LogLine)
	}
}
