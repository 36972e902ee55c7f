package gpubind_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
)

// Issue 23: Slurm unsets SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES for a step without GPUs
// (gres_g_step_set_env). Where Slurm manages the node's GPUs (a gres.conf Name=gpu line for
// it, or slurm.conf Gres=gpu) such a step has no GPUs; "all GPUs of the node" stays only
// for nodes where Slurm manages none.
func TestStepWithoutSlurmGPUs(t *testing.T) {
	topo := snapshot(t, "dgxh100")
	for _, c := range []struct {
		name      string
		gres      *gpubind.GresConf
		slurmGres bool
		want      int
	}{
		{"gres.conf File= lines", &gpubind.GresConf{Files: []string{"/dev/nvidia0"}, NodeLines: 1}, false, 0},
		{"gres.conf AutoDetect line for the node", &gpubind.GresConf{AutoDetect: "nvml", NodeLines: 1}, false, 0},
		{"slurm.conf Gres=gpu", &gpubind.GresConf{AutoDetect: "nvml"}, true, 0},
		{"no GPU GRES", &gpubind.GresConf{AutoDetect: "nvml"}, false, 8},
		{"no gres.conf", nil, false, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.gres != nil && len(c.gres.Files) > 0 {
				c.gres.Files = nil // the fixture has no device nodes: PCI order, still managed
			}
			tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 2, Option: "closest",
				Mode: gpubind.ModeOptional, Gres: c.gres, GresFrom: "test", SlurmGres: c.slurmGres})
			if err != nil {
				t.Fatal(err)
			}
			if len(tab.GPUs) != c.want {
				t.Fatalf("%d GPUs, want %d: %v", len(tab.GPUs), c.want, tab.Messages)
			}
			if c.want == 0 && !strings.Contains(strings.Join(tab.Messages, "\n"), "gave this step none") {
				t.Errorf("no message says why: %v", tab.Messages)
			}
		})
	}
}

func TestNodeHasGPUGres(t *testing.T) {
	conf := func(s string) []gpubind.ConfLine {
		var out []gpubind.ConfLine
		for i, l := range strings.Split(s, "\n") {
			out = append(out, gpubind.ConfLine{Line: i + 1, Fields: strings.Fields(l)})
		}
		return out
	}
	for _, c := range []struct {
		text, node string
		want       bool
	}{
		{"NodeName=gpu[01-04] CPUs=64 Gres=gpu:h100:8", "gpu02", true},
		{"NodeName=gpu[01-04] CPUs=64 Gres=gpu:8,nic:2", "cpu01", false},
		{"NodeName=cpu[01-04] CPUs=64", "cpu01", false},
		{"NodeName=DEFAULT Gres=gpu:4\nNodeName=n1 CPUs=8", "n1", true},
		{"NodeName=n1 Gres=mps:100,gpu:2", "n1", true},
		{"NodeName=n1 Gres=gpu:2 Gres=mps:100", "n1", false}, // the last Gres= counts
	} {
		if got := gpubind.NodeHasGPUGres(conf(c.text), c.node); got != c.want {
			t.Errorf("%q node %s: %v, want %v", c.text, c.node, got, c.want)
		}
	}
}

// Issue 23: the NIC port state was frozen for the whole boot in the discovery cache. A
// cached topology has its NICs' active ports read again.
func TestRefreshNICPorts(t *testing.T) {
	root := t.TempDir()
	state := func(port, s string) {
		dir := filepath.Join(root, "sys/class/infiniband/mlx5_0/ports", port)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "state"), []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	state("1", "1: DOWN")
	state("2", "4: ACTIVE")
	topo := &gpubind.Topology{NICs: []gpubind.NIC{{Name: "mlx5_0", Port: 1}, {Name: "mlx5_9", Port: 1}}}
	gpubind.RefreshNICPorts(topo, root)
	if topo.NICs[0].Port != 2 || topo.NICs[1].Port != 1 {
		t.Errorf("ports %d %d, want 2 (the ACTIVE one now) and 1 (unreadable: kept)", topo.NICs[0].Port, topo.NICs[1].Port)
	}
}
