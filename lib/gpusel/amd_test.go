package gpusel

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind/cudavis"
)

// amdGPU is one GPU node of amdFixture.
type amdGPU struct {
	node  int    // KFD node id
	loc   uint64 // location_id: bus<<8 | dev<<3 | fn
	minor int    // render minor
	uid   uint64 // unique_id
}

// amdGPUs: KFD nodes 2..5 and 10 (numeric order, not the directory listing's: "10" < "2"),
// with bus ids out of KFD order (ROCr counts in KFD order, rocm-smi in bus order).
var amdGPUs = []amdGPU{
	{2, 0xd100, 128, 0x1111aaaa2222bbbb},
	{3, 0xd600, 129, 0x00000000000000c3},
	{4, 0xc100, 130, 0x1111aaaa2222cccc},
	{5, 0xc600, 131, 0xabcdef0123456789},
	{10, 0xc900, 132, 0x0fedcba987654321},
}

// amdFixture writes a KFD topology (two CPU nodes, then amdGPUs) and render nodes (plain
// files: denyNodes decides what access(2) says) under a fresh root.
func amdFixture(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	node := func(id int, props string) {
		d := filepath.Join(root, "sys/devices/virtual/kfd/kfd/topology/nodes", fmt.Sprint(id))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "properties"), []byte(props), 0o644))
	}
	node(0, "cpu_cores_count 16\nsimd_count 0\nlocation_id 0\ndomain 0\nunique_id 0\n")
	node(1, "cpu_cores_count 16\nsimd_count 0\nlocation_id 0\ndomain 0\nunique_id 0\n")
	must(t, os.MkdirAll(filepath.Join(root, "dev/dri"), 0o755))
	for _, g := range amdGPUs {
		node(g.node, fmt.Sprintf("cpu_cores_count 0\nsimd_count 440\nvendor_id 4098\nlocation_id %d\ndomain 0\ndrm_render_minor %d\nunique_id %d\n", g.loc, g.minor, g.uid))
		must(t, os.WriteFile(filepath.Join(root, "dev/dri", fmt.Sprintf("renderD%d", g.minor)), nil, 0o666))
	}
	return root
}

func TestScanAMD(t *testing.T) {
	root := amdFixture(t)
	denyNodes(t, "renderD%d")
	gpus, err := cudavis.ScanAMD(root, "", access)
	if err != nil {
		t.Fatal(err)
	}
	if got := buses(gpus); got != "d1,d6,c1,c6,c9" {
		t.Errorf("ScanAMD order %s, want KFD order (nodes 2,3,4,5,10)", got)
	}
	if gpus[0].UUID != "GPU-1111AAAA2222BBBB" || gpus[1].UUID != "GPU-00000000000000C3" || gpus[0].Minor != 128 {
		t.Errorf("ScanAMD UUIDs/minor %+v, want GPU- and 16 upper-case hex digits of unique_id", gpus[:2])
	}
	// A render node the device cgroup denies, and one that is missing: ROCr skips both and
	// numbers the rest from 0.
	denyNodes(t, "renderD%d", 129)
	must(t, os.Remove(filepath.Join(root, "dev/dri/renderD131")))
	gpus, err = cudavis.ScanAMD(root, "", access)
	if err != nil || buses(gpus) != "d1,c1,c9" {
		t.Errorf("ScanAMD with renderD129 denied and renderD131 missing: %s, %v", buses(gpus), err)
	}
	// No KFD: no AMD GPU, no error.
	if gpus, err := cudavis.ScanAMD(t.TempDir(), "", access); err != nil || len(gpus) != 0 {
		t.Errorf("ScanAMD without KFD: %v, %v", gpus, err)
	}
	// A malformed properties file is an error naming it.
	bad := filepath.Join(root, "sys/devices/virtual/kfd/kfd/topology/nodes/3/properties")
	must(t, os.WriteFile(bad, []byte("simd_count lots\n"), 0o644))
	if _, err := cudavis.ScanAMD(root, "", access); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("ScanAMD with a bad properties file: %v, want an error naming %s", err, bad)
	}
}

// TestROCRVisible: ROCr's ROCR_VISIBLE_DEVICES filter over the fixture's 5 GPUs (KFD order:
// index 0 = d1, 1 = d6, 2 = c1, 3 = c6, 4 = c9): indices (strtol base 0), GPU- UUID prefixes
// in any case, and the first bad, unknown, ambiguous or repeated token ends the list.
func TestROCRVisible(t *testing.T) {
	root := amdFixture(t)
	denyNodes(t, "renderD%d")
	gpus, err := cudavis.ScanAMD(root, "", access)
	if err != nil || len(gpus) != 5 {
		t.Fatalf("ScanAMD: %d GPUs, %v", len(gpus), err)
	}
	for _, c := range []struct {
		rvd  string
		set  bool
		want string
	}{
		{"", false, "d1,d6,c1,c6,c9"},
		{"", true, ""},
		{"3", true, "c6"},
		{"4,0", true, "c9,d1"},
		{" 2 , 1 ", true, "c1,d6"},
		{"0x3", true, "c6"},
		{"04", true, "c9"},                   // octal 4
		{"010", true, ""},                    // octal 8: no such device
		{"GPU-ABCDEF0123456789", true, "c6"}, // the full UUID
		{"GPU-abcdef0123456789", true, "c6"}, // ROCr upper-cases the token
		{"GPU-0F", true, "c9"},               // a unique prefix
		{"1,GPU-1111AAAA2222", true, "d6"},   // ambiguous prefix (nodes 2 and 4) ends the list
		{"1,bad,2", true, "d6"},
		{"1,,2", true, "d6"},
		{"1,-1,2", true, "d6"},
		{"1,5,2", true, "d6"},
		{"1,1,2", true, "d6"},
		{"2,GPU-1111AAAA2222CCCC", true, "c1"}, // the same device again
		{"GPU-0000000000000000", true, ""},
		{"NoDevFiles", true, ""},
	} {
		if got := buses(cudavis.ROCRVisible(gpus, c.rvd, c.set)); got != c.want {
			t.Errorf("ROCR_VISIBLE_DEVICES=%q (set %v): %q, want %q", c.rvd, c.set, got, c.want)
		}
	}
}

// TestChooseAMD: on a node without NVIDIA GPUs the choice is among the AMD GPUs the process
// can open, in KFD order, through ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES (else
// CUDA_VISIBLE_DEVICES) relative to that; cuda_device is HIP's device number.
func TestChooseAMD(t *testing.T) {
	root := amdFixture(t)
	denyNodes(t, "renderD%d")
	for _, c := range []struct {
		name  string
		env   map[string]string
		lrank int
		dev   int
		bus   string
		vis   int
	}{
		{"no variables, local rank 1", nil, 1, 1, "0000:d6:00.0", 5},
		{"no variables, local rank 6 wraps", nil, 6, 1, "0000:d6:00.0", 5},
		{"ROCR per task", map[string]string{"ROCR_VISIBLE_DEVICES": "3"}, 1, 0, "0000:c6:00.0", 1},
		{"ROCR UUID per task", map[string]string{"ROCR_VISIBLE_DEVICES": "GPU-0fedcba987654321"}, 0, 0, "0000:c9:00.0", 1},
		{"ROCR list, local rank 1", map[string]string{"ROCR_VISIBLE_DEVICES": "4,2"}, 1, 1, "0000:c1:00.0", 2},
		{"ROCR with a bad token", map[string]string{"ROCR_VISIBLE_DEVICES": "4,x,2"}, 1, 0, "0000:c9:00.0", 1},
		{"HIP relative to ROCR", map[string]string{"ROCR_VISIBLE_DEVICES": "4,2,0", "HIP_VISIBLE_DEVICES": "2"}, 0, 0, "0000:d1:00.0", 1},
		{"HIP before CUDA", map[string]string{"ROCR_VISIBLE_DEVICES": "4,2", "HIP_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}, 0, 0, "0000:c1:00.0", 1},
		{"CUDA relative to ROCR", map[string]string{"ROCR_VISIBLE_DEVICES": "4,2", "CUDA_VISIBLE_DEVICES": "1,0"}, 0, 0, "0000:c1:00.0", 2},
		// Slurm without amd_gpu_env: a one-GPU ROCR list beside CUDA_VISIBLE_DEVICES=4,5
		// leaves HIP no device (issue 38); the library says none rather than guess.
		{"stale CUDA_VISIBLE_DEVICES", map[string]string{"ROCR_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "4,5"}, 0, -1, "", 0},
		{"ROCR empty", map[string]string{"ROCR_VISIBLE_DEVICES": ""}, 0, -1, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Choose(Input{LookupEnv: env(c.env), Root: root, LocalRank: c.lrank})
			if err != nil {
				t.Fatal(err)
			}
			if got.CUDADevice != c.dev || got.BusID != c.bus || got.Visible != c.vis || got.Vendor != VendorAMD {
				t.Errorf("Choose = %+v, want device %d bus %q of %d visible, vendor amd", got, c.dev, c.bus, c.vis)
			}
		})
	}
	// Under ConstrainDevices the step's render nodes are the ones the task may open, and ROCr
	// numbers those from 0: Slurm's ROCR_VISIBLE_DEVICES=1 is the second openable GPU.
	t.Run("constrained", func(t *testing.T) {
		denyNodes(t, "renderD%d", 128, 130)
		got, err := Choose(Input{LookupEnv: env(map[string]string{"ROCR_VISIBLE_DEVICES": "1"}), Root: root})
		if err != nil || got.BusID != "0000:c6:00.0" || got.CUDADevice != 0 {
			t.Errorf("Choose = %+v, %v; want c6 (openable: d6, c6, c9)", got, err)
		}
	})
}

// TestChooseNVIDIABesideAMD: NVIDIA GPUs the process can use win; the KFD topology (an AMD
// integrated GPU) and ROCR_VISIBLE_DEVICES (Slurm sets it on NVIDIA nodes too without
// gres.conf Flags) are not read.
func TestChooseNVIDIABesideAMD(t *testing.T) {
	root := fixture(t, map[string]string{"0000:1b:00.0": "GPU-1111", "0000:3b:00.0": "GPU-3333"})
	amd := amdFixture(t)
	must(t, os.Rename(filepath.Join(amd, "sys/devices"), filepath.Join(root, "sys/devices")))
	denyNodes(t, "renderD%d")
	got, err := Choose(Input{LookupEnv: env(map[string]string{"ROCR_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "1"}), Root: root})
	if err != nil || got.BusID != "0000:3b:00.0" || got.Vendor != vendorNVIDIA {
		t.Errorf("Choose = %+v, %v; want the NVIDIA GPU 3b", got, err)
	}
}

// TestPluginVendor: with the plugin's variables the vendor comes from the bus id's sysfs
// vendor, else from the UUID's form.
func TestPluginVendor(t *testing.T) {
	root := t.TempDir()
	for bus, v := range map[string]string{"0000:c1:00.0": "0x1002", "0000:1b:00.0": "0x10de"} {
		d := filepath.Join(root, "sys/bus/pci/devices", bus)
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "vendor"), []byte(v+"\n"), 0o644))
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GPUBIND_GPUS": "4", "GPUBIND_PCI_BUS_IDS": "0000:c1:00.0", "GPUBIND_UUIDS": "GPU-1111AAAA2222CCCC"}, VendorAMD},
		{map[string]string{"GPUBIND_GPUS": "0", "GPUBIND_PCI_BUS_IDS": "0000:1b:00.0"}, vendorNVIDIA},
		{map[string]string{"GPUBIND_GPUS": "4", "GPUBIND_PCI_BUS_IDS": "0000:d1:00.0", "GPUBIND_UUIDS": "GPU-1111AAAA2222CCCC"}, VendorAMD},
		{map[string]string{"GPUBIND_GPUS": "0", "GPUBIND_UUIDS": "GPU-6f1c0bd4-89f2-4f53-8b1a-5a47b0c3e0d1"}, vendorNVIDIA},
		{map[string]string{"GPUBIND_GPUS": "0"}, ""},
	} {
		got, err := Choose(Input{LookupEnv: env(c.env), Root: root})
		if err != nil || got.Vendor != c.want {
			t.Errorf("%v: vendor %q, %v; want %q", c.env, got.Vendor, err, c.want)
		}
	}
}
