// Package gpusel decides which GPU a process of libgpuhelper uses, without NVML or CUDA: from
// the gpubind SPANK plugin's GPUBIND_* variables when present, else by local rank over the
// GPUs that CUDA_VISIBLE_DEVICES lets the process see.
//
// CUDA numbers the GPUs the process can open, not every GPU of the host: under Slurm's
// ConstrainDevices, in a container, or with GPUs bound to another driver (vfio-pci), the
// process sees fewer, and Slurm then writes local indices 0..k-1 into CUDA_VISIBLE_DEVICES.
// So Scan keeps only the NVIDIA GPUs bound to the nvidia driver whose /dev/nvidiaN the process
// may read and write, in PCI bus id order (CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID), and
// CUDA_VISIBLE_DEVICES is applied to that list.
package gpusel

import (
	"fmt"
	"os"
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
}

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
		return fromPlugin(getenv)
	}
	scan := in.Scan
	if scan == nil {
		scan = Scan
	}
	gpus, err := scan(in.Root)
	if err != nil {
		return Choice{}, err
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
	c := Choice{CUDADevice: i, BusID: vis[i].BusID, UUID: vis[i].UUID, Visible: len(vis), Source: "sysfs"}
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
