// Package gpusel decides which GPU a process of libgpuhelper uses, without NVML, CUDA or ROCm:
// from the gpubind SPANK plugin's GPUBIND_* variables when present, else by local rank over the
// GPUs that CUDA_VISIBLE_DEVICES lets the process see (on a node without NVIDIA GPUs: the AMD
// GPUs that ROCR_VISIBLE_DEVICES, then HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES, let it see).
//
// CUDA numbers the GPUs the process can open, not every GPU of the host: under Slurm's
// ConstrainDevices, in a container, or with GPUs bound to another driver (vfio-pci), the
// process sees fewer, and Slurm then writes local indices 0..k-1 into CUDA_VISIBLE_DEVICES.
// So Scan keeps only the NVIDIA GPUs bound to the nvidia driver whose /dev/nvidiaN the process
// may read and write, in PCI bus id order (CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID), and
// CUDA_VISIBLE_DEVICES is applied to that list.
//
// AMD GPUs (docs/helper.md "GPU choice"): where the scan finds no NVIDIA GPU, the AMD GPUs of
// the KFD topology that the process can open, in KFD order (ROCr's), with ROCR_VISIBLE_DEVICES
// applied as ROCr applies it, and then HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES, relative
// to that, as HIP counts. The index reported is HIP's device number (hipSetDevice).
package gpusel

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpubind/gpubind/gpubind/cudavis"
)

// Choice is the GPU a process should use.
type Choice struct {
	CUDADevice int    // index for cudaSetDevice, -1 when no GPU is visible
	BusID      string // "0000:1b:00.0", "" if unknown
	UUID       string // "GPU-..." or "MIG-...", "" if unknown
	Visible    int    // number of GPUs the process sees
	Source     string // "gpubind" (plugin variables), "sysfs", or "none"
	// Vendor is whose GPU it is: "nvidia", VendorAMD, or "" when unknown (no GPU, or
	// the plugin's variables name a bus id sysfs does not show and no AMD-form UUID).
	Vendor string
	// MIG is set when the choice is a MIG instance named by CUDA_VISIBLE_DEVICES among others:
	// CUDA shows a process one MIG instance only (the first MIG entry), so the process must run
	// with CUDA_VISIBLE_DEVICES set to MIG alone (then CUDADevice 0 is that instance). MIGFirst
	// says it is the first MIG entry, which CUDA shows as device 0 even with the longer list.
	MIG      string
	MIGFirst bool
	// Clique is the multi-node NVLink clique of the GPU ("<cluster_uuid>.<clique_id>"), ""
	// when none is known; libgpuhelper fills it (not Choose).
	Clique string
}

// Input is what Choose looks at.
type Input struct {
	LookupEnv func(string) (string, bool) // environment lookup (nil: os.LookupEnv)
	Root      string                      // prefix for /sys and /proc ("" = "/"); test fixtures use a tree
	LocalRank int
	// Scan lists the GPUs under a root (nil: Scan); libgpuhelper passes one that a helper
	// thread may have run already.
	Scan func(root string) ([]GPU, error)
	// ScanAMD lists the AMD GPUs under a root in ROCr's order (nil: cudavis.ScanAMD).
	ScanAMD func(root string) ([]GPU, error)
}

// The vendors of Choice.Vendor.
const (
	vendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
)

// GPU is one NVIDIA GPU the process can use (cudavis.GPU).
type GPU = cudavis.GPU

// normalizeBusID turns NVML, sysfs and short bus id forms into the sysfs form.
func normalizeBusID(s string) (string, error) { return cudavis.NormalizeBusID(s) }

// visible applies CUDA_VISIBLE_DEVICES to gpus as CUDA does (cudavis.Visible).
func visible(gpus []GPU, cvd string, set bool) ([]GPU, error) { return cudavis.Visible(gpus, cvd, set) }

// access is access(2) with R_OK|W_OK; a variable for tests (as root, file modes deny nothing).
var access = cudavis.Access

// Scan lists the GPUs the process can use, in PCI order (cudavis.Scan).
func Scan(root string) ([]GPU, error) { return cudavis.Scan(root, access) }

// Choose picks the GPU for a process.
func Choose(in Input) (Choice, error) {
	lookup := in.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	getenv := func(name string) string { v, _ := lookup(name); return v }
	if in.LocalRank < 0 {
		return Choice{}, fmt.Errorf("local rank %d, expected >= 0", in.LocalRank)
	}
	if getenv("GPUBIND_GPUS") != "" || getenv("GPUBIND_PCI_BUS_IDS") != "" {
		c, err := fromPlugin(getenv)
		if err == nil {
			c.Vendor = pluginVendor(in.Root, c)
		}
		return c, err
	}
	scan := in.Scan
	if scan == nil {
		scan = Scan
	}
	gpus, err := scan(in.Root)
	if err != nil {
		return Choice{}, err
	}
	if len(gpus) == 0 {
		// No NVIDIA GPU the process can use: AMD GPUs, if any (an AMD node; an NVIDIA node
		// whose GPUs this process may not open has none: its KFD topology is empty or absent).
		scanAMD := in.ScanAMD
		if scanAMD == nil {
			scanAMD = func(root string) ([]GPU, error) { return cudavis.ScanAMD(root, "", access) }
		}
		amd, err := scanAMD(in.Root)
		if err != nil {
			return Choice{}, err
		}
		if len(amd) > 0 {
			return chooseAMD(amd, lookup, in.LocalRank)
		}
	}
	cvd, set := lookup("CUDA_VISIBLE_DEVICES")
	vis, err := visible(gpus, cvd, set)
	if err != nil {
		return Choice{}, err
	}
	if len(vis) == 0 {
		return Choice{CUDADevice: -1, Source: "none"}, nil
	}
	i := in.LocalRank % len(vis)
	c := Choice{CUDADevice: i, BusID: vis[i].BusID, UUID: vis[i].UUID, Visible: len(vis), Source: "sysfs", Vendor: vendorNVIDIA}
	if strings.HasPrefix(vis[i].UUID, "MIG-") {
		// One MIG instance per process: this one, as CUDA device 0 once it is alone in
		// CUDA_VISIBLE_DEVICES.
		first := true
		for _, g := range vis[:i] {
			first = first && !strings.HasPrefix(g.UUID, "MIG-")
		}
		c.CUDADevice, c.Visible, c.MIG, c.MIGFirst = 0, 1, vis[i].UUID, first && i == 0
	}
	return c, nil
}

// fromPlugin reads the plugin's per-task variables (spank/PROTOCOL.md section 3): the task's
// GPUs in order, the first being CUDA device GPUBIND_CUDA_DEVICES names in the
// CUDA_VISIBLE_DEVICES it also set (device 0 without it, and with visible=own or first; entry
// SLURM_LOCALID with visible=localid).
func fromPlugin(getenv func(string) string) (Choice, error) {
	split := func(name string) []string {
		v := getenv(name)
		if v == "" {
			return nil
		}
		return strings.Split(v, ",")
	}
	gpus, buses, uuids := split("GPUBIND_GPUS"), split("GPUBIND_PCI_BUS_IDS"), split("GPUBIND_UUIDS")
	n := max(len(gpus), len(buses))
	if n == 0 {
		return Choice{CUDADevice: -1, Source: "gpubind"}, nil
	}
	for name, l := range map[string][]string{"GPUBIND_GPUS": gpus, "GPUBIND_PCI_BUS_IDS": buses, "GPUBIND_UUIDS": uuids} {
		if l != nil && len(l) != n {
			return Choice{}, fmt.Errorf("%s=%q has %d entries, expected %d like the other GPUBIND_* variables", name, getenv(name), len(l), n)
		}
	}
	c := Choice{CUDADevice: 0, Visible: n, Source: "gpubind"}
	if cvd := getenv("CUDA_VISIBLE_DEVICES"); cvd != "" && len(strings.Split(cvd, ",")) > n {
		c.Visible = len(strings.Split(cvd, ",")) // visible=first|localid: the step's GPUs
	}
	if cd := split("GPUBIND_CUDA_DEVICES"); len(cd) > 0 {
		k, err := strconv.Atoi(cd[0])
		if err != nil || k < 0 || k >= c.Visible {
			return Choice{}, fmt.Errorf("GPUBIND_CUDA_DEVICES=%q: want CUDA device numbers below %d", getenv("GPUBIND_CUDA_DEVICES"), c.Visible)
		}
		c.CUDADevice = k
	}
	if len(buses) > 0 && buses[0] != "" {
		b, err := normalizeBusID(buses[0])
		if err != nil {
			return Choice{}, fmt.Errorf("GPUBIND_PCI_BUS_IDS: %w", err)
		}
		c.BusID = b
	}
	if len(uuids) > 0 {
		u := strings.TrimSpace(uuids[0])
		if u != "" && !strings.HasPrefix(u, "GPU-") && !strings.HasPrefix(u, "MIG-") {
			return Choice{}, fmt.Errorf("GPUBIND_UUIDS entry %q, expected a GPU- or MIG- UUID", u)
		}
		c.UUID = u
	}
	return c, nil
}

// chooseAMD picks among the AMD GPUs the process can open, in ROCr's order: ROCR_VISIBLE_DEVICES
// first (ROCr's filter: a bad token ends the list), then HIP_VISIBLE_DEVICES, else
// CUDA_VISIBLE_DEVICES, counted relative to what ROCr shows (HIP's rule, and the plugin's and
// `gpubind whereami`'s). The process takes HIP device local_rank % count.
func chooseAMD(gpus []GPU, lookup func(string) (string, bool), localRank int) (Choice, error) {
	rvd, set := lookup("ROCR_VISIBLE_DEVICES")
	shown := cudavis.ROCRVisible(gpus, rvd, set)
	name := "HIP_VISIBLE_DEVICES"
	hip, set := lookup(name)
	if !set {
		name = "CUDA_VISIBLE_DEVICES"
		hip, set = lookup(name)
	}
	vis, err := visible(shown, hip, set)
	if err != nil {
		return Choice{}, fmt.Errorf("%s (relative to the %d GPUs ROCR_VISIBLE_DEVICES leaves): %w", name, len(shown), err)
	}
	if len(vis) == 0 {
		return Choice{CUDADevice: -1, Source: "none", Vendor: VendorAMD}, nil
	}
	i := localRank % len(vis)
	return Choice{CUDADevice: i, BusID: vis[i].BusID, UUID: vis[i].UUID, Visible: len(vis), Source: "sysfs", Vendor: VendorAMD}, nil
}

// pluginVendor says whose GPU the plugin's variables name: the PCI vendor of its bus id in
// sysfs (0x10de NVIDIA, 0x1002 AMD), else by the UUID's form (AMD's are "GPU-" and 16 hex
// digits, NVIDIA's "GPU-" and 36 characters, "MIG-" NVIDIA's), else unknown.
func pluginVendor(root string, c Choice) string {
	if root == "" {
		root = "/"
	}
	if c.BusID != "" {
		if b, err := os.ReadFile(filepath.Join(root, "sys/bus/pci/devices", c.BusID, "vendor")); err == nil {
			switch strings.ToLower(strings.TrimSpace(string(b))) {
			case "0x10de":
				return vendorNVIDIA
			case "0x1002":
				return VendorAMD
			}
		}
	}
	switch u := c.UUID; {
	case strings.HasPrefix(u, "MIG-"), strings.HasPrefix(u, "GPU-") && len(u) == 40:
		return vendorNVIDIA
	case strings.HasPrefix(u, "GPU-") && len(u) == 20 && strings.Trim(strings.ToLower(u[4:]), "0123456789abcdef") == "":
		return VendorAMD
	}
	return ""
}
