package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
)

// TestRunAMD plans on the frontier fixture (AMD, KFD topology) through the engine: the
// table says vendor amd, and with gres.conf Flags=amd_gpu_env (Slurm sets
// ROCR_VISIBLE_DEVICES and no CUDA_VISIBLE_DEVICES) the step's numbering comes from
// ROCR_VISIBLE_DEVICES: 0,1 beside SLURM_STEP_GPUS=4,5 is relative (ConstrainDevices).
func TestRunAMD(t *testing.T) {
	root, cache := setup(t, "frontier")
	base := "option=closest\nsource=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\nlocal_tasks=2\nenv.SLURM_STEP_GPUS=4,5\n"
	for _, c := range []struct {
		name, env, vis string
	}{
		{"rocr-relative", "env.ROCR_VISIBLE_DEVICES=0,1\n", "0,1"},
		{"rocr-global", "env.ROCR_VISIBLE_DEVICES=4,5\n", "4,5"},
		// CUDA_VISIBLE_DEVICES (Slurm without amd_gpu_env sets both) wins.
		{"both", "env.CUDA_VISIBLE_DEVICES=0,1\nenv.ROCR_VISIBLE_DEVICES=4,5\n", "0,1"},
	} {
		tab, err := run(t, base+c.env)
		if err != nil || tab.Status == gpubind.StatusError {
			t.Fatalf("%s: %v %+v", c.name, err, tab)
		}
		var vis []string
		for _, g := range tab.GPUs {
			vis = append(vis, g.Visible)
		}
		if tab.Vendor != gpubind.VendorAMD || len(tab.GPUs) != 2 || tab.GPUs[0].BusID != "0000:d1:00.0" || strings.Join(vis, ",") != c.vis {
			t.Errorf("%s: vendor %q GPUs %+v, want visible %s", c.name, tab.Vendor, tab.GPUs, c.vis)
		}
	}
	// The cache key holds the KFD generation: a new one (KFD nodes changed) discovers again.
	req := &request{Root: root, Source: "sysfs"}
	k1, err := cacheKey(req)
	if err != nil || !strings.Contains(k1, "\nkfd=1 amdgpu=6.8.5 amdtopo=3\n") {
		t.Fatalf("key %q %v", k1, err)
	}
	gen := filepath.Join(root, "sys/devices/virtual/kfd/kfd/topology/generation_id")
	if err := os.WriteFile(gen, []byte("2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if k2, _ := cacheKey(req); k2 == k1 {
		t.Errorf("KFD generation not in the key: %q", k2)
	}
}
