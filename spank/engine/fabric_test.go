package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// TestFabricCacheExpires: a discovery with fabric info is reused for FabricTTL (60 s),
// for FabricPendingTTL (5 s) while the fabric is not completed, then NVML runs again; a
// node without NVLink domain keeps its entry until reboot. The table of a fabric node
// carries "depends ?", so the front end's plan cache never serves it.
func TestFabricCacheExpires(t *testing.T) {
	for _, c := range []struct {
		state string
		ttl   time.Duration
	}{{"completed", gpubind.FabricTTL}, {"in_progress", gpubind.FabricPendingTTL}, {"not_supported", 0}} {
		t.Run(c.state, func(t *testing.T) {
			_, cache := setup(t, "vm1")
			snap, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgxh100"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range snap.GPUs {
				snap.GPUs[i].Fabric = &gpubind.Fabric{ClusterUUID: "2f6b2b6e-6d8a-4c1e-9a55-0b7b1c2d3e4f", CliqueID: 2, State: c.state, Health: "healthy"}
			}
			lib := nvmlmock.New(snap)
			inits := 0
			lib.InitFunc = func() nvml.Return { inits++; return nvml.SUCCESS }
			nvmlLib = lib
			defer func() { nvmlLib = nil }()
			req := "source=nvml\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\nlocal_tasks=1\nenv.SLURM_STEP_GPUS=0\noption=closest\n"
			tab, err := run(t, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(tab.String(), "depends ?\n"); got != (c.ttl > 0) {
				t.Errorf("depends ? in the table: %v, want %v", got, c.ttl > 0)
			}
			if _, err := run(t, req); err != nil || inits != 1 {
				t.Fatalf("second run at once: %v, %d NVML inits", err, inits)
			}
			files, _ := filepath.Glob(filepath.Join(cache, "topo-*.json"))
			old := time.Now().Add(-c.ttl - time.Second)
			if c.ttl == 0 {
				old = time.Now().Add(-24 * time.Hour)
			}
			if len(files) != 1 || os.Chtimes(files[0], old, old) != nil {
				t.Fatalf("cache files %v", files)
			}
			tab, err = run(t, req)
			if err != nil {
				t.Fatal(err)
			}
			want := 2
			if c.ttl == 0 {
				want = 1
			}
			if inits != want {
				t.Errorf("after the entry aged: %d NVML inits, want %d", inits, want)
			}
			for _, m := range tab.Messages {
				if strings.Contains(m, "cache") {
					t.Errorf("expiry made a message: %q", m)
				}
			}
		})
	}
}
