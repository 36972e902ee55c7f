package gpubind_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// frontierL3 is each GCD's L3 region on a Frontier node (OLCF user guide, node
// diagram: GCD 4 is attached to the L3 of cores 0-7, GCD 5 to 8-15, ...), with the SMT
// siblings (CPU c+64).
var frontierL3 = []string{"48-55,112-119", "56-63,120-127", "16-23,80-87", "24-31,88-95",
	"0-7,64-71", "8-15,72-79", "32-39,96-103", "40-47,104-111"}

// TestAMDCPUsL3: with the cpus flag and no CPU binding from Slurm, each task of a
// Frontier node is bound to its GCD's L3 region (8 cores and their SMT siblings), not to
// the whole NUMA node (16 cores, two GCDs): issue 38 item 5. Discovery reads it from
// sysfs (cpu/cpuN/cache/index3, topology/core_cpus_list) and the snapshot keeps it.
func TestAMDCPUsL3(t *testing.T) {
	tab, res := frontierPlan(t, "closest,cpus", 8, "", "", "", gpubind.NumberingGlobal)
	seen := map[int]bool{}
	for L, r := range res {
		if len(r.GPUs) != 1 {
			t.Fatalf("task %d: GPUs %v", L, r.GPUs)
		}
		gcd := tab.GPUs[r.GPUs[0]].NVMLIndex
		seen[gcd] = true
		if r.CPUs.String() != frontierL3[gcd] || r.Affinity.String() != frontierL3[gcd] {
			t.Errorf("task %d (GCD %d): cpus %s, affinity %s, want its L3 region %s", L, gcd, r.CPUs, r.Affinity, frontierL3[gcd])
		}
		if want := fmt.Sprintf("\ntask %d %d %s\n", L, r.GPUs[0], frontierL3[gcd]); !strings.Contains(tab.String(), want) {
			t.Errorf("table has no line %q:\n%s", strings.TrimSpace(want), tab)
		}
	}
	if len(seen) != 8 {
		t.Errorf("GCDs used: %v, want all 8", seen)
	}
	// The snapshot carries the cores and L3 shares: the same answer from frontier.json.
	snap, err := gpubind.LoadSnapshot(filepath.Join(fixtures.Dir(), "frontier.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Cores) != 64 || snap.Cores[5].String() != "5,69" {
		t.Errorf("snapshot cores: %d, core 5 = %s; want 64 cores, core 5 = 5,69", len(snap.Cores), snap.Cores[5])
	}
	for i, g := range snap.GPUs {
		if g.L3.String() != frontierL3[i] {
			t.Errorf("snapshot GCD %d l3_cpus %s, want %s", i, g.L3, frontierL3[i])
		}
	}
	// A node whose sysfs has no cache/topology files (mi300x-spx fixture): the NUMA node.
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("mi300x-spx"))
	if err != nil {
		t.Fatal(err)
	}
	tab2, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 8, Option: "closest,cpus", Numbering: gpubind.NumberingGlobal,
		Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for L, r := range applyRule(t, tab2, 8, "") {
		g := tab2.GPUs[r.GPUs[0]]
		if want := topo.NUMACPUs(g.NUMA).String(); r.CPUs.String() != want || topo.Cores != nil {
			t.Errorf("mi300x-spx task %d (NUMA %d): cpus %s, want the NUMA node's %s (cores %v)", L, g.NUMA, r.CPUs, want, topo.Cores)
		}
	}
}

// TestAMDCPUsGresCores: gres.conf Cores= is the admin's word and wins over the L3 split
// (Slurm's logical core numbers, each core with all its threads); a line's Cores= covers
// every file of the line; CPUs= is its old name. Bad values are errors naming the line.
func TestAMDCPUsGresCores(t *testing.T) {
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("frontier"))
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := frontierRenderNodes(t, []int{0, 1, 2, 3, 4, 5, 6, 7})
	dev := func(gcd int) string { return filepath.Join(dir, fmt.Sprintf("renderD%d", 128+gcd)) }
	plan := func(gres string) (*gpubind.Table, error) {
		gc, err := gpubind.ParseGresConf(gres, "")
		if err != nil {
			return nil, err
		}
		all := "0,1,2,3,4,5,6,7"
		return gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 8, Option: "closest,cpus", Gres: gc, GresFrom: "test",
			Env: gpubind.StepEnv{StepGPUs: &all}, Numbering: gpubind.NumberingGlobal})
	}
	// GRES 0 = GCD 4 with Cores=8-11 (the admin's choice, not its L3), GRES 1-2 = GCDs
	// 0,1 on one line with Cores=[48-63] (both get that NUMA node), GRES 3 = GCD 2 with
	// CPUs=16 (old name), the rest without Cores= (L3 split).
	gres := strings.Join([]string{
		"Name=gpu File=" + dev(4) + " Cores=8-11",
		"Name=gpu File=" + filepath.Join(dir, "renderD[128-129]") + " Cores=[48-63]",
		"Name=gpu File=" + dev(2) + " CPUs=16",
		"Name=gpu File=" + dev(3),
		"Name=gpu File=" + dev(5),
		"Name=gpu File=" + dev(6),
		"Name=gpu File=" + dev(7),
	}, "\n")
	tab, err := plan(gres)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{4: "8-11,72-75", 0: "48-63,112-127", 1: "48-63,112-127", 2: "16,80",
		3: frontierL3[3], 5: frontierL3[5], 6: frontierL3[6], 7: frontierL3[7]}
	for L, r := range applyRule(t, tab, 8, "") {
		gcd := tab.GPUs[r.GPUs[0]].NVMLIndex
		if r.CPUs.String() != want[gcd] {
			t.Errorf("task %d (GCD %d): cpus %s, want %s", L, gcd, r.CPUs, want[gcd])
		}
	}
	for _, tc := range []struct{ cores, want string }{
		{"64", "core 64, but the node has 64 cores (0-63"},
		{"0-7x", "Cores=0-7x is not a list of core indices"},
		{"", ""},
	} {
		gc, err := gpubind.ParseGresConf("Name=gpu File="+dev(4)+" Cores="+tc.cores, "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = gpubind.BuildGresMap(topo, gc, "test")
		if tc.want == "" {
			if err != nil {
				t.Errorf("Cores= empty: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dev(4)) {
			t.Errorf("Cores=%s: %v, want an error naming %s and %q", tc.cores, err, dev(4), tc.want)
		}
	}
	// A snapshot without the node's cores (made before gpubind read them): Cores= cannot
	// be turned into CPUs, and the error says why.
	noCores := *topo
	noCores.Cores = nil
	gc, _ := gpubind.ParseGresConf("Name=gpu File="+dev(4)+" Cores=0-7", "")
	if _, err := gpubind.BuildGresMap(&noCores, gc, "test"); err == nil || !strings.Contains(err.Error(), "core list is unknown") {
		t.Errorf("Cores= without a core list: %v", err)
	}
}
