package gpubind_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/fixtures"
)

func TestCompressHostlist(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"gb03", "gb01", "gb02", "gb04", "gb07"}, "gb[01-04,07]"},
		{[]string{"node1", "node2", "node10", "node9"}, "node[1-2,9-10]"},
		{[]string{"node1"}, "node1"},
		{[]string{"a-9", "login", "a-10", "login", "rack2-n001", "rack2-n002"}, "a-[9-10],rack2-n[001-002],login"},
		{[]string{"n08", "n8"}, "n8,n08"},
		{nil, ""},
	} {
		got := gpubind.CompressHostlist(c.in)
		if got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
			continue
		}
		if got == "" {
			continue
		}
		// Slurm's expansion (gres.conf NodeName=) gives the names back.
		back, err := gpubind.ExpandHostlist(got)
		want := slices.Compact(slices.Sorted(slices.Values(c.in)))
		slices.Sort(back)
		if err != nil || !slices.Equal(back, want) {
			t.Errorf("%q expands to %q (%v), want %q", got, back, err, want)
		}
	}
}

// TestTopologyConf: two NVL72 racks (18 trays each, one clique per rack) and nodes left
// out for each reason.
func TestTopologyConf(t *testing.T) {
	var nodes []*gpubind.Topology
	for i := 1; i <= 36; i++ {
		clique := uint32(1 + (i-1)/18)
		nodes = append(nodes, fixtures.GB200Tray(hostName("gb", i), clique, gpubind.FabricCompleted))
	}
	nodes = append(nodes, fixtures.GB200Tray("gb37", 3, gpubind.FabricInProgress))
	sick := fixtures.GB200Tray("gb38", 3, gpubind.FabricCompleted)
	sick.GPUs[2].Fabric.Health = gpubind.HealthUnhealthy
	nodes = append(nodes, sick)
	split := fixtures.GB200Tray("gb39", 3, gpubind.FabricCompleted)
	split.GPUs[3].Fabric.CliqueID = 4
	nodes = append(nodes, split)
	h200, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgxh100"))
	if err != nil {
		t.Fatal(err)
	}
	h200.Host = "hgx1"
	nodes = append(nodes, h200)
	got, err := gpubind.TopologyConf(nodes)
	if err != nil {
		t.Fatal(err)
	}
	u := fixtures.GB200Cluster
	for _, want := range []string{
		"# clique " + u + ".1: 18 nodes\nBlockName=nvl6b0f3c1e_1 Nodes=gb[01-18]\n",
		"# clique " + u + ".2: 18 nodes\nBlockName=nvl6b0f3c1e_2 Nodes=gb[19-36]\n",
		"\nBlockSizes=18,36\n",
		"#   gb37: fabric in_progress\n",
		"#   gb38: fabric completed but unhealthy\n",
		"#   gb39: GPUs in several cliques (" + u + ".3, " + u + ".4)\n",
		"#   hgx1: no fabric info (snapshot without NVML)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("topology.conf lacks %q:\n%s", want, got)
		}
	}
	// Every non-comment line is a BlockName or the BlockSizes line.
	for _, l := range strings.Split(strings.TrimSpace(got), "\n") {
		if !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "BlockName=") && !strings.HasPrefix(l, "BlockSizes=") {
			t.Errorf("unexpected line %q", l)
		}
	}

	// Three blocks, the smallest of 2 nodes: base 2, then 4 and 8 (power-of-two multiples
	// up to the number of blocks, as Slurm requires).
	var small []*gpubind.Topology
	for i, c := range []uint32{1, 1, 1, 2, 2, 3, 3, 3} {
		small = append(small, fixtures.GB200Tray(hostName("n", i+1), c, gpubind.FabricCompleted))
	}
	blocks, _, err := gpubind.NVLBlocks(small)
	if err != nil || len(blocks) != 3 || !slices.Equal(gpubind.BlockSizes(blocks), []int{2, 4, 8}) {
		t.Errorf("blocks %v sizes %v err %v", blocks, gpubind.BlockSizes(blocks), err)
	}
	// Errors name the problem.
	dup := []*gpubind.Topology{fixtures.GB200Tray("x1", 1, "completed"), fixtures.GB200Tray("x1", 1, "completed")}
	if _, err := gpubind.TopologyConf(dup); err == nil || !strings.Contains(err.Error(), "host x1: two snapshots") {
		t.Errorf("duplicate host: %v", err)
	}
	nohost := fixtures.GB200Tray("", 1, "completed")
	if _, err := gpubind.TopologyConf([]*gpubind.Topology{nohost}); err == nil || !strings.Contains(err.Error(), "host name") {
		t.Errorf("no host: %v", err)
	}
	none, err := gpubind.TopologyConf([]*gpubind.Topology{h200})
	if err != nil || strings.Contains(none, "BlockName=") || !strings.Contains(none, "No node has a completed NVLink fabric") {
		t.Errorf("no fabric anywhere: %v\n%s", err, none)
	}
}

func hostName(prefix string, i int) string { return fmt.Sprintf("%s%02d", prefix, i) }
