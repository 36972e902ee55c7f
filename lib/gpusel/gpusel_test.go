package gpusel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
		p := filepath.Join(root, "proc/driver/nvidia/gpus", bus)
		must(t, os.MkdirAll(p, 0o755))
		info := "Model: \t\t NVIDIA H100\n"
		if uuid != "" {
			info += "GPU UUID: \t " + uuid + "\n"
		}
		must(t, os.WriteFile(filepath.Join(p, "information"), []byte(info), 0o644))
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
		if got, err := normalizeBusID(in); err != nil || got != want {
			t.Errorf("normalizeBusID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "3b:00", "zz:00.0", "0000:3b:00.8", "100000000:3b:00.0"} {
		if _, err := normalizeBusID(bad); err == nil {
			t.Errorf("normalizeBusID(%q) accepted", bad)
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
		{"second MIG is device 0 alone", map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-abcd,MIG-ef01"}, 1, 0, "", "MIG-ef01"},
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
	// visible=localid: the task's GPU is entry SLURM_LOCALID of the step's four.
	got, err = Choose(Input{Root: root, LocalRank: 2, LookupEnv: env(map[string]string{
		"GPUBIND_GPUS": "6", "GPUBIND_PCI_BUS_IDS": "0000:ba:00.0", "GPUBIND_CUDA_DEVICES": "2",
		"CUDA_VISIBLE_DEVICES": "4,5,6,7",
	})})
	if err != nil || got.CUDADevice != 2 || got.BusID != "0000:ba:00.0" || got.Visible != 4 {
		t.Fatalf("plugin, visible=localid: %+v, %v", got, err)
	}
	for name, e := range map[string]map[string]string{
		"cuda device out of range": {"GPUBIND_GPUS": "6", "GPUBIND_CUDA_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "4,6"},
		"count mismatch":           {"GPUBIND_GPUS": "5,4", "GPUBIND_PCI_BUS_IDS": "0000:9a:00.0"},
		"bad bus id":               {"GPUBIND_GPUS": "5", "GPUBIND_PCI_BUS_IDS": "nine"},
		"bad uuid":                 {"GPUBIND_GPUS": "5", "GPUBIND_UUIDS": "xyz"},
	} {
		if _, err := Choose(Input{Root: root, LookupEnv: env(e)}); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// usableFixture is a tree of 4 GPUs in PCI order 1b, 3d, 8a, b1 with minors 2, 0, 3, 1 (the
// misordered fixture), device nodes dev/nvidia0..3 (plain files: only their names matter, and
// access is faked), and each GPU bound to the nvidia driver through a sysfs driver link.
func usableFixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	minors := map[string]int{"0000:1b:00.0": 2, "0000:3d:00.0": 0, "0000:8a:00.0": 3, "0000:b1:00.0": 1}
	must(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers/nvidia"), 0o755))
	must(t, os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers/vfio-pci"), 0o755))
	for bus, m := range minors {
		d := filepath.Join(root, "sys/bus/pci/devices", bus)
		p := filepath.Join(root, "proc/driver/nvidia/gpus", bus)
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.MkdirAll(p, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "vendor"), []byte("0x10de\n"), 0o644))
		must(t, os.WriteFile(filepath.Join(d, "class"), []byte("0x030200\n"), 0o644))
		must(t, os.Symlink("../../drivers/nvidia", filepath.Join(d, "driver")))
		must(t, os.WriteFile(filepath.Join(p, "information"), []byte(fmt.Sprintf(
			"Model: \t\t NVIDIA A100\nGPU UUID: \t GPU-%s\nBus Location: \t %s\nDevice Minor: \t %d\n", bus[5:7], bus, m)), 0o644))
		must(t, os.WriteFile(filepath.Join(root, "dev", fmt.Sprintf("nvidia%d", m)), nil, 0o666))
	}
	return root
}

// denyNodes makes access(2) deny (EPERM, as the device cgroup does) the device nodes named by
// node (a format: "nvidia%d", "renderD%d") with the listed minors.
func denyNodes(t *testing.T, node string, denied ...int) {
	t.Helper()
	old := access
	t.Cleanup(func() { access = old })
	access = func(p string) error {
		for _, m := range denied {
			if filepath.Base(p) == fmt.Sprintf(node, m) {
				return syscall.EPERM
			}
		}
		_, err := os.Stat(p)
		return err
	}
}

func buses(gpus []GPU) string {
	var b []string
	for _, g := range gpus {
		b = append(b, g.BusID[5:7])
	}
	return strings.Join(b, ",")
}

// Issue 15 finding 1: only the GPUs the process can use count, as CUDA counts them.
func TestScanUsable(t *testing.T) {
	for _, c := range []struct {
		name   string
		denied []int
		setup  func(root string)
		want   string
	}{
		{"all usable", nil, nil, "1b,3d,8a,b1"},
		// ConstrainDevices: a step owning GRES minors 3 and 1 (8a, b1).
		{"device cgroup allows 3,1", []int{0, 2}, nil, "8a,b1"},
		{"device cgroup allows 0", []int{1, 2, 3}, nil, "3d"},
		// A container given two GPUs: only their nodes exist.
		{"container with nvidia1,nvidia2", nil, func(root string) {
			must(t, os.Remove(filepath.Join(root, "dev/nvidia0")))
			must(t, os.Remove(filepath.Join(root, "dev/nvidia3")))
		}, "1b,b1"},
		// No device nodes at all: nvidia-modprobe makes them on first use; keep every GPU.
		{"no device nodes yet", nil, func(root string) { must(t, os.RemoveAll(filepath.Join(root, "dev"))) }, "1b,3d,8a,b1"},
		{"8a bound to vfio-pci", nil, func(root string) {
			l := filepath.Join(root, "sys/bus/pci/devices/0000:8a:00.0/driver")
			must(t, os.Remove(l))
			must(t, os.Symlink("../../drivers/vfio-pci", l))
			must(t, os.RemoveAll(filepath.Join(root, "proc/driver/nvidia/gpus/0000:8a:00.0")))
		}, "1b,3d,b1"},
		{"3d unbound, not in the driver's list", nil, func(root string) {
			must(t, os.Remove(filepath.Join(root, "sys/bus/pci/devices/0000:3d:00.0/driver")))
			must(t, os.RemoveAll(filepath.Join(root, "proc/driver/nvidia/gpus/0000:3d:00.0")))
		}, "1b,8a,b1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := usableFixture(t)
			if c.setup != nil {
				c.setup(root)
			}
			denyNodes(t, "nvidia%d", c.denied...)
			gpus, err := Scan(root)
			if err != nil || buses(gpus) != c.want {
				t.Fatalf("Scan = %s, %v; want %s", buses(gpus), err, c.want)
			}
		})
	}
}

// Slurm with ConstrainDevices writes local indices: CUDA_VISIBLE_DEVICES=0,1 for the step
// owning 8a and b1 means 8a and b1 (the library said 1b and 3d before).
func TestChooseConstrained(t *testing.T) {
	root := usableFixture(t)
	denyNodes(t, "nvidia%d", 0, 2)
	for lrank, want := range []string{"0000:8a:00.0", "0000:b1:00.0", "0000:8a:00.0"} {
		got, err := Choose(Input{Root: root, LocalRank: lrank, LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"})})
		if err != nil || got.BusID != want || got.CUDADevice != lrank%2 || got.Visible != 2 || got.UUID != "GPU-"+want[5:7] {
			t.Errorf("local rank %d: %+v, %v; want cuda %d bus %s", lrank, got, err, lrank%2, want)
		}
	}
	// UUIDs name the GPUs directly; one the process cannot open ends the list, as in CUDA.
	got, err := Choose(Input{Root: root, LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-b1,GPU-1b,GPU-8a"})})
	if err != nil || got.BusID != "0000:b1:00.0" || got.Visible != 1 {
		t.Errorf("UUIDs: %+v, %v; want b1 alone", got, err)
	}
}

// Slurm 26.05's gres.conf Flags=env_uuid and the plugin's uuid flag list UUIDs in an order of
// their own (not PCI order): CUDA numbers them in list order, and so does the library, local
// rank by local rank; GPUBIND_CUDA_DEVICES still says which entry is the task's (visible=localid).
func TestChooseUUIDList(t *testing.T) {
	root := usableFixture(t)
	denyNodes(t, "nvidia%d")
	for lrank, want := range []string{"0000:b1:00.0", "0000:1b:00.0", "0000:8a:00.0", "0000:b1:00.0"} {
		got, err := Choose(Input{Root: root, LocalRank: lrank, LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-b1,GPU-1b,GPU-8a"})})
		if err != nil || got.BusID != want || got.CUDADevice != lrank%3 || got.Visible != 3 || got.UUID != "GPU-"+want[5:7] {
			t.Errorf("local rank %d: %+v, %v; want cuda %d bus %s", lrank, got, err, lrank%3, want)
		}
	}
	got, err := Choose(Input{Root: root, LocalRank: 2, LookupEnv: env(map[string]string{
		"GPUBIND_GPUS": "2", "GPUBIND_PCI_BUS_IDS": "0000:8a:00.0", "GPUBIND_UUIDS": "GPU-8a", "GPUBIND_CUDA_DEVICES": "2",
		"CUDA_VISIBLE_DEVICES": "GPU-b1,GPU-1b,GPU-8a,GPU-3d",
	})})
	if err != nil || got.CUDADevice != 2 || got.BusID != "0000:8a:00.0" || got.UUID != "GPU-8a" || got.Visible != 4 || got.Source != "gpubind" {
		t.Errorf("plugin, uuid,visible=localid: %+v, %v; want cuda 2 bus 8a of 4", got, err)
	}
}

// Issue 15 finding 7: one MIG instance per process. Each local rank gets its own instance as
// CUDA device 0 of a CUDA_VISIBLE_DEVICES holding that instance alone.
func TestChooseMIG(t *testing.T) {
	root := usableFixture(t)
	cvd := env(map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-aaaa,MIG-bbbb,MIG-cccc"})
	for lrank, want := range []string{"MIG-aaaa", "MIG-bbbb", "MIG-cccc", "MIG-aaaa"} {
		got, err := Choose(Input{Root: root, LocalRank: lrank, LookupEnv: cvd})
		if err != nil || got.CUDADevice != 0 || got.UUID != want || got.MIG != want || got.Visible != 1 || got.MIGFirst != (lrank%3 == 0) {
			t.Errorf("local rank %d: %+v, %v; want device 0 = %s", lrank, got, err, want)
		}
	}
	// A whole GPU before the MIG entries: the MIG instance is not CUDA's first.
	got, err := Choose(Input{Root: root, LocalRank: 1, LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,MIG-aaaa"})})
	if err != nil || got.MIG != "MIG-aaaa" || got.MIGFirst {
		t.Errorf("GPU then MIG: %+v, %v", got, err)
	}
	got, err = Choose(Input{Root: root, LocalRank: 0, LookupEnv: env(map[string]string{"CUDA_VISIBLE_DEVICES": "0,MIG-aaaa"})})
	if err != nil || got.MIG != "" || got.BusID != "0000:1b:00.0" {
		t.Errorf("GPU then MIG, rank 0: %+v, %v", got, err)
	}
}

// bigTree is a host of 300 PCI devices: 8 GPUs and 4 NVSwitches bound to the nvidia driver
// (its sysfs directory links them, its procfs lists the GPUs), a GPU bound to vfio-pci, and
// 287 other devices, as on a large GPU node.
func bigTree(tb testing.TB) string {
	tb.Helper()
	root := tb.TempDir()
	mk := func(err error) {
		if err != nil {
			tb.Fatal(err)
		}
	}
	drv := filepath.Join(root, "sys/bus/pci/drivers/nvidia")
	mk(os.MkdirAll(drv, 0o755))
	mk(os.MkdirAll(filepath.Join(root, "sys/bus/pci/drivers/vfio-pci"), 0o755))
	for _, f := range []string{"bind", "unbind", "new_id", "remove_id", "uevent"} {
		mk(os.WriteFile(filepath.Join(drv, f), nil, 0o644))
	}
	mk(os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	dev := func(bus, vendor, class, driver string) {
		d := filepath.Join(root, "sys/bus/pci/devices", bus)
		mk(os.MkdirAll(d, 0o755))
		mk(os.WriteFile(filepath.Join(d, "vendor"), []byte(vendor+"\n"), 0o644))
		mk(os.WriteFile(filepath.Join(d, "class"), []byte(class+"\n"), 0o644))
		if driver != "" {
			mk(os.Symlink("../../drivers/"+driver, filepath.Join(d, "driver")))
		}
		if driver == "nvidia" {
			mk(os.Symlink("../../devices/"+bus, filepath.Join(drv, bus)))
		}
	}
	n := 0
	for i := 0; i < 8; i++ {
		bus := fmt.Sprintf("0000:%02x:00.0", 0x10+0x10*i)
		dev(bus, "0x10de", "0x030200", "nvidia")
		p := filepath.Join(root, "proc/driver/nvidia/gpus", bus)
		mk(os.MkdirAll(p, 0o755))
		mk(os.WriteFile(filepath.Join(p, "information"), []byte(fmt.Sprintf("Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-%d\nDevice Minor: \t %d\n", i, i)), 0o644))
		mk(os.WriteFile(filepath.Join(root, "dev", fmt.Sprintf("nvidia%d", i)), nil, 0o666))
		n++
	}
	for i := 0; i < 4; i++ {
		dev(fmt.Sprintf("0000:%02x:00.0", 0x95+i), "0x10de", "0x068000", "nvidia") // NVSwitch
		n++
	}
	dev("0000:e0:00.0", "0x10de", "0x030200", "vfio-pci")
	n++
	for i := 0; n < 300; i++ {
		dev(fmt.Sprintf("0001:%02x:%02x.%d", i/32, i%32, 0), "0x8086", "0x060400", "pcieport")
		n++
	}
	return root
}

// The driver's lists give the same GPUs as the walk over every PCI device.
func TestScanDriverLists(t *testing.T) {
	root := bigTree(t)
	denyNodes(t, "nvidia%d")
	got, err := Scan(root)
	if err != nil || len(got) != 8 || got[0].BusID != "0000:10:00.0" || got[0].UUID != "GPU-0" || got[7].Minor != 7 {
		t.Fatalf("Scan = %+v, %v; want the 8 GPUs bound to nvidia", got, err)
	}
	// The same tree without the driver's lists (no driver loaded): the walk finds the same 8
	// (bound to nvidia by their driver links) and not the one bound to vfio-pci.
	must(t, os.RemoveAll(filepath.Join(root, "sys/bus/pci/drivers/nvidia")))
	must(t, os.RemoveAll(filepath.Join(root, "proc")))
	walked, err := Scan(root)
	if err != nil || buses(walked) != buses(got) {
		t.Fatalf("walk = %s, %v; want %s", buses(walked), err, buses(got))
	}
}

// BenchmarkScan300: Scan on a host of 300 PCI devices (bigTree). bench/RESULTS.md has figures.
func BenchmarkScan300(b *testing.B) {
	root := bigTree(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if g, err := Scan(root); err != nil || len(g) != 8 {
			b.Fatal(g, err)
		}
	}
}
