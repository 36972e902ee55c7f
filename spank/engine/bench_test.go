package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// BenchmarkRun measures one engine call with a warm cache (the step path: boot id,
// driver version, cache file, gres.conf) and a cold one (discovery each time), with
// the sysfs fixture and with the NVML mock (plus the host's sysfs, as on a real node).
func BenchmarkRun(b *testing.B) {
	dir := b.TempDir()
	boot := filepath.Join(dir, "boot_id")
	os.WriteFile(boot, []byte("bench\n"), 0o644)
	gres := filepath.Join(dir, "gres.conf")
	os.WriteFile(gres, []byte("AutoDetect=nvml\n"), 0o644)
	old := bootIDPath
	bootIDPath = boot
	defer func() { bootIDPath = old; nvmlLib = nil }()
	snap, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgxh100"))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, src, root string
	}{
		{"sysfs", "sysfs", fixtures.Root("dgxh100")},
		{"nvml-mock", "nvml", ""},
	} {
		for _, warm := range []bool{true, false} {
			name := c.name + "/cold"
			if warm {
				name = c.name + "/warm"
			}
			b.Run(name, func(b *testing.B) {
				nvmlLib = nvmlmock.New(snap)
				cache := filepath.Join(dir, "cache-"+c.name)
				req := "option=closest,nic\nsource=" + c.src + "\nroot=" + c.root + "\ncache_dir=" + cache +
					"\ngres_conf=" + gres + "\nlocal_tasks=8\nenv.SLURM_STEP_GPUS=0,1,2,3,4,5,6,7\n"
				if err := handle(req, io.Discard); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if !warm {
						b.StopTimer()
						os.RemoveAll(cache)
						b.StartTimer()
					}
					if err := handle(req, io.Discard); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
