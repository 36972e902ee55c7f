package gpusel

import (
	"os"
	"path/filepath"
	"testing"
)

// fixture builds a sysfs/procfs tree: NVIDIA GPUs at the given bus ids (listed out of order on
// purpose), plus a non-GPU NVIDIA function and a non-NVIDIA device.
func fixture(t *testing.T, buses map[string]string) string {
	t.Helper()
	root := t.TempDir()
	dev := func(name, vendor, class string) {
		d := filepath.Join(root, "sys/bus/pci/devices", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		must(t, os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "class"), []byte(class+"\n"), 0o644))
	}
	for bus, uuid := range buses {
		dev(bus, "0x10de", "0x030200")
		if uuid != "" {
			p := filepath.Join(root, "proc/driver/nvidia/gpus", bus)
			must(t, os.MkdirAll(p, 0o755))
			must(t, os.WriteFile(filepath.Join(p, "information"), []byte("Model: \t\t NVIDIA H100\nGPU UUID: \t "+uuid+"\n"), 0o644))
		}
	}
	dev("0000:1b:00.1", "0x10de", "0x040300") // audio function of a GPU
	dev("0000:00:1f.0", "0x8086", "0x060100")
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0", "0000:3b:00.0": "0000:3b:00.0", "3b:00.0": "0000:3b:00.0", "0001:C1:00.0": "0001:c1:00.0",
	} {
		if got, err := NormalizeBusID(in); err != nil || got != want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "3b:00", "zz:00.0", "0000:3b:00.8", "100000000:3b:00.0"} {
		if _, err := NormalizeBusID(bad); err == nil {
			t.Errorf("NormalizeBusID(%q) accepted", bad)
		}
	}
}

func TestChooseSysfs(t *testing.T) {
	root := fixture(t, map[string]string{
		"0000:db:00.0": "GPU-dddd", "0000:1b:00.0": "GPU-1111", "0000:9a:00.0": "GPU-9999", "0000:3b:00.0": "",
	})
	gpus, err := Scan(root)
	if err != nil || len(gpus) != 4 || gpus[0].BusID != "0000:1b:00.0" || gpus[3].BusID != "0000:db:00.0" || gpus[0].UUID != "GPU-1111" {
		t.Fatalf("Scan = %+v, %v", gpus, err)
	}
	for _, c := range []struct {
		name  string
		env   map[string]string
		lrank int
		dev   int
		bus   string
		uuid  string
	}{
		{"all visible, rank 1", nil, 1, 1, "0000:3b:00.0", ""},
		{"all visible, wraps", nil, 5, 1, "0000:3b:00.0", ""},
		{"indices", map[string]string{"CUDA_VISIBLE_DEVICES": "3,0"}, 0, 0, "0000:db:00.0", "GPU-dddd"},
		{"indices, rank 1", map[string]string{"CUDA_VISIBLE_DEVICES": "3,0"}, 1, 1, "0000:1b:00.0", "GPU-1111"},
		{"uuid prefix", map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-99"}, 2, 0, "0000:9a:00.0", "GPU-9999"},
		{"stops at invalid", map[string]string{"CUDA_VISIBLE_DEVICES": "2,7,0"}, 1, 0, "0000:9a:00.0", "GPU-9999"},
		{"MIG", map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-abcd"}, 0, 0, "", "MIG-abcd"},
	} {
		got, err := Choose(Input{LookupEnv: env(c.env), Root: root, LocalRank: c.lrank})
		if err != nil || got.CUDADevice != c.dev || got.BusID != c.bus || got.UUID != c.uuid || got.Source != "sysfs" {
			t.Errorf("%s: %+v, %v; want dev %d bus %q uuid %q", c.name, got, err, c.dev, c.bus, c.uuid)
		}
	}
	for _, none := range []string{"", "NoDevFiles", "-1"} {
		got, err := Choose(Input{LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": none}), Root: root})
		if err != nil || got.CUDADevice != -1 || got.BusID != "" {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q: %+v, %v; want no GPU", none, got, err)
		}
	}
	// No GPUs in sysfs: nothing visible, whatever CUDA_VISIBLE_DEVICES says.
	got, err := Choose(Input{LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}), Root: t.TempDir()})
	if err != nil || got.CUDADevice != -1 {
		t.Errorf("empty sysfs: %+v, %v", got, err)
	}
}

func TestChoosePlugin(t *testing.T) {
	root := fixture(t, map[string]string{"0000:1b:00.0": "GPU-1111"})
	got, err := Choose(Input{Root: root, LocalRank: 3, LookupEnv: env(map[string]string{
		"GPUBIND_GPUS": "5,4", "GPUBIND_PCI_BUS_IDS": "00000000:9A:00.0,0000:1b:00.0", "GPUBIND_UUIDS": "GPU-aa,",
		"GPUBIND_NUMA": "1,0", "CUDA_VISIBLE_DEVICES": "5,4",
	})})
	if err != nil || got.CUDADevice != 0 || got.BusID != "0000:9a:00.0" || got.UUID != "GPU-aa" || got.Source != "gpubind" || got.Visible != 2 {
		t.Fatalf("plugin: %+v, %v", got, err)
	}
	for name, e := range map[string]map[string]string{
		"count mismatch": {"GPUBIND_GPUS": "5,4", "GPUBIND_PCI_BUS_IDS": "0000:9a:00.0"},
		"bad bus id":     {"GPUBIND_GPUS": "5", "GPUBIND_PCI_BUS_IDS": "nine"},
		"bad uuid":       {"GPUBIND_GPUS": "5", "GPUBIND_UUIDS": "xyz"},
	} {
		if _, err := Choose(Input{Root: root, LookupEnv: env(e)}); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}
