// Package gpusel decides which GPU a process of libgpuhelper uses, without NVML or CUDA: from
// the gpubind SPANK plugin's GPUBIND_* variables when present, else by local rank over the
// GPUs that CUDA_VISIBLE_DEVICES lets the process see, found in sysfs and ordered by PCI bus id.
package gpusel

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Choice is the GPU a process should use.
type Choice struct {
	CUDADevice int    // index for cudaSetDevice, -1 when no GPU is visible
	BusID      string // "0000:1b:00.0", "" if unknown
	UUID       string // "GPU-..." or "MIG-...", "" if unknown
	Visible    int    // number of GPUs the process sees
	Source     string // "gpubind" (plugin variables), "sysfs", or "none"
}

// Input is what Choose looks at.
type Input struct {
	LookupEnv func(string) (string, bool) // environment lookup (nil: os.LookupEnv)
	Root      string                      // prefix for /sys and /proc ("" = "/"); test fixtures use a tree
	LocalRank int
}

// GPU is one NVIDIA display/3D controller found in sysfs.
type GPU struct {
	BusID string // normalised
	UUID  string // from /proc/driver/nvidia/gpus/BUS/information, "" if unavailable
}

var busRE = regexp.MustCompile(`^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// NormalizeBusID turns NVML ("00000000:3B:00.0"), sysfs ("0000:3b:00.0") and short
// ("3b:00.0") forms into the sysfs form.
func NormalizeBusID(s string) (string, error) {
	m := busRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return "", fmt.Errorf("PCI bus id %q, expected DOMAIN:BUS:DEVICE.FUNCTION like 0000:1b:00.0", s)
	}
	dom := uint64(0)
	if m[1] != "" {
		d, err := strconv.ParseUint(m[1], 16, 32)
		if err != nil || d > 0xffff {
			return "", fmt.Errorf("PCI bus id %q: domain out of range", s)
		}
		dom = d
	}
	return strings.ToLower(fmt.Sprintf("%04x:%s:%s.%s", dom, m[2], m[3], m[4])), nil
}

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
	gpus, err := Scan(in.Root)
	if err != nil {
		return Choice{}, err
	}
	cvd, set := lookup("CUDA_VISIBLE_DEVICES")
	vis, err := Visible(gpus, cvd, set)
	if err != nil {
		return Choice{}, err
	}
	if len(vis) == 0 {
		return Choice{CUDADevice: -1, Source: "none"}, nil
	}
	i := in.LocalRank % len(vis)
	return Choice{CUDADevice: i, BusID: vis[i].BusID, UUID: vis[i].UUID, Visible: len(vis), Source: "sysfs"}, nil
}

// fromPlugin reads the plugin's per-task variables (spank/PROTOCOL.md section 3): the task's
// GPUs in order, the first being CUDA device 0 of the CUDA_VISIBLE_DEVICES it also set.
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
	if len(buses) > 0 && buses[0] != "" {
		b, err := NormalizeBusID(buses[0])
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

// Scan lists NVIDIA GPUs (vendor 0x10de, class 0x0300xx VGA or 0x0302xx 3D controller) under
// root/sys/bus/pci/devices, ordered by bus id, with UUIDs from the driver's procfs when present.
func Scan(root string) ([]GPU, error) {
	if root == "" {
		root = "/"
	}
	dir := filepath.Join(root, "sys/bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	var out []GPU
	for _, e := range ents {
		vendor, err1 := os.ReadFile(filepath.Join(dir, e.Name(), "vendor"))
		class, err2 := os.ReadFile(filepath.Join(dir, e.Name(), "class"))
		if err1 != nil || err2 != nil {
			continue // not a complete device entry
		}
		c := strings.ToLower(strings.TrimSpace(string(class)))
		if strings.ToLower(strings.TrimSpace(string(vendor))) != "0x10de" ||
			!(strings.HasPrefix(c, "0x0302") || strings.HasPrefix(c, "0x0300")) {
			continue
		}
		bus, err := NormalizeBusID(e.Name())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
		}
		out = append(out, GPU{BusID: bus, UUID: procUUID(root, bus)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BusID < out[j].BusID })
	return out, nil
}

// procUUID reads "GPU UUID: GPU-..." from the NVIDIA driver's information file.
func procUUID(root, bus string) string {
	f, err := os.Open(filepath.Join(root, "proc/driver/nvidia/gpus", bus, "information"))
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok && strings.TrimSpace(k) == "GPU UUID" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Visible applies CUDA_VISIBLE_DEVICES (value cvd; set says whether it is set at all) to gpus,
// which must be in the order CUDA numbers them (PCI order with CUDA_DEVICE_ORDER=PCI_BUS_ID).
// Entries are indices, GPU-UUIDs (any unique prefix) or MIG-UUIDs. Like CUDA, the list ends at
// the first entry that names no device; a MIG entry is visible but its bus id is unknown here.
func Visible(gpus []GPU, cvd string, set bool) ([]GPU, error) {
	if !set {
		return gpus, nil
	}
	var out []GPU
	used := map[int]bool{}
	for _, f := range strings.Split(cvd, ",") {
		f = strings.TrimSpace(f)
		idx := -1
		switch {
		case f == "":
			return out, nil
		case strings.HasPrefix(f, "MIG-"):
			out = append(out, GPU{UUID: f})
			continue
		case strings.HasPrefix(f, "GPU-"):
			for i, g := range gpus {
				if g.UUID != "" && strings.HasPrefix(g.UUID, f) {
					if idx >= 0 {
						return nil, fmt.Errorf("CUDA_VISIBLE_DEVICES entry %q matches more than one GPU", f)
					}
					idx = i
				}
			}
		default:
			n, err := strconv.Atoi(f)
			if err != nil || n < 0 || n >= len(gpus) {
				return out, nil // CUDA stops at the first invalid entry ("NoDevFiles", "-1", ...)
			}
			idx = n
		}
		if idx < 0 || used[idx] {
			return out, nil
		}
		used[idx] = true
		out = append(out, gpus[idx])
	}
	return out, nil
}
