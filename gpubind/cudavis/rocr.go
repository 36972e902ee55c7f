package cudavis

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// The AMD side: which AMD GPUs a process sees the way ROCr (the ROCm runtime under HIP,
// RCCL and OpenCL) counts them, without any ROCm library.
//
// ROCr enumerates the GPU nodes of the KFD topology in KFD order and skips a GPU whose
// render node (/dev/dri/renderD<drm_render_minor>) the process cannot open: missing, or
// denied by its device cgroup (Slurm's ConstrainDevices). It numbers the others from 0 and
// applies ROCR_VISIBLE_DEVICES to that list (ROCRVisible). HIP then applies
// HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES, relative to what ROCr shows (Visible on
// ROCRVisible's answer).

// kfdNodes is the KFD topology below a sysfs root.
const kfdNodes = "sys/devices/virtual/kfd/kfd/topology/nodes"

// ScanAMD lists the AMD GPUs of the KFD topology under root that the process can use, in
// KFD order (ROCr's): BusID from domain and location_id, UUID "GPU-" and 16 upper-case hex
// digits of unique_id (the form ROCR_VISIBLE_DEVICES takes; "" when unique_id is 0), Minor
// the render minor. A GPU whose render node in dev ("" is root/dev) is missing or denied
// (access(R_OK|W_OK): ENOENT, EPERM, EACCES) is left out, as ROCr leaves it out. No KFD
// topology (no amdgpu driver) gives none. A node whose properties answer EPERM is a GPU
// the process's device cgroup denies (KFD hides a denied GPU's topology files; CPU nodes
// never answer EPERM), left out as ROCr leaves it out (libhsakmt: EPERM is "node not
// supported"). A node whose properties cannot be read otherwise, or parsed, is an error
// naming the file.
func ScanAMD(root, dev string, access func(path string) error) ([]GPU, error) {
	root, dev, access = scanDefaults(root, dev, access)
	dir := filepath.Join(root, kfdNodes)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the KFD topology: %w", err)
	}
	type node struct {
		id int
		g  GPU
	}
	var nodes []node
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil || id < 0 {
			continue
		}
		path := filepath.Join(dir, e.Name(), "properties")
		b, err := os.ReadFile(path)
		if errors.Is(err, syscall.EPERM) {
			continue // a GPU the device cgroup denies: not the process's
		}
		if err != nil {
			return nil, fmt.Errorf("KFD node %d: %w", id, err)
		}
		p, err := kfdProperties(path, string(b))
		if err != nil {
			return nil, err
		}
		if p["simd_count"] == 0 {
			continue // a CPU node
		}
		loc, dom := p["location_id"], p["domain"]&0xffff
		g := GPU{BusID: fmt.Sprintf("%04x:%02x:%02x.%x", dom, (loc>>8)&0xff, (loc>>3)&0x1f, loc&7), Minor: -1}
		if _, err := os.Stat(filepath.Join(root, "sys/bus/pci/devices", g.BusID)); err != nil && loc&7 != 0 {
			// MI300: the low 3 bits are the partition (XCP) id, the GPU is function 0.
			g.BusID = g.BusID[:len(g.BusID)-1] + "0"
		}
		if u := p["unique_id"]; u != 0 {
			g.UUID = fmt.Sprintf("GPU-%016X", u)
		}
		if m, ok := p["drm_render_minor"]; ok && m < 1<<20 {
			g.Minor = int(m)
			err := access(filepath.Join(dev, "dri", "renderD"+strconv.Itoa(g.Minor)))
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
				continue
			}
		}
		nodes = append(nodes, node{id, g})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].id < nodes[j].id })
	out := make([]GPU, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n.g)
	}
	return out, nil
}

// kfdProperties parses a KFD properties file: "name value" lines, values unsigned decimal.
func kfdProperties(path, text string) (map[string]uint64, error) {
	out := map[string]uint64{}
	for i, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s line %d: %q, expected \"NAME VALUE\"", path, i+1, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %s=%q, expected an unsigned number", path, i+1, f[0], f[1])
		}
		out[f[0]] = v
	}
	return out, nil
}

// ROCRVisible applies ROCR_VISIBLE_DEVICES (value rvd; set says whether it is set at all)
// to gpus, the GPUs ROCr enumerates in its order (ScanAMD), as ROCr's filter does. Tokens
// are separated by commas (blanks around them ignored) and are either device indices
// (strtol base 0: decimal, 0x hex, or octal with a leading 0) or "GPU-" and a unique
// prefix of a device's UUID (compared without regard to case: ROCr upper-cases the token).
// The first token that is malformed, out of range, ambiguous, names no device, or names a
// device again ends the list; what came before it stays. Set but empty means no GPU.
func ROCRVisible(gpus []GPU, rvd string, set bool) []GPU {
	if !set {
		return gpus
	}
	var out []GPU
	used := map[int]bool{}
	for _, f := range strings.Split(rvd, ",") {
		f = strings.TrimSpace(f)
		idx := -1
		if len(f) > 4 && strings.EqualFold(f[:4], "GPU-") {
			tok := strings.ToUpper(f)
			for i, g := range gpus {
				if g.UUID != "" && strings.HasPrefix(strings.ToUpper(g.UUID), tok) {
					if idx >= 0 {
						return out // ambiguous
					}
					idx = i
				}
			}
		} else if n, ok := strtolIndex(f); ok && n < len(gpus) {
			idx = n
		}
		if idx < 0 || used[idx] {
			return out
		}
		used[idx] = true
		out = append(out, gpus[idx])
	}
	return out
}

// strtolIndex parses a whole token as strtol(s, &end, 0) with *end == 0 and a result >= 0.
func strtolIndex(s string) (int, bool) {
	base, digits := 10, s
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, digits = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, digits = 8, s[1:]
	}
	if digits == "" || strings.ContainsAny(digits, "+-_") {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, base, 31)
	if err != nil {
		return 0, false
	}
	return int(n), true
}
