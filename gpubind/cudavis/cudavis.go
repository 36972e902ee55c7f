// Package cudavis resolves which GPUs a process sees the way CUDA does, without NVML or
// CUDA: the NVIDIA GPUs the process can open (bound to the nvidia driver, device node readable
// and writable, so the device cgroup of Slurm's ConstrainDevices and containers count), in PCI
// bus id order (CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID), then CUDA_VISIBLE_DEVICES
// applied to that list (indices, GPU-/MIG- UUIDs). libgpuhelper (lib/gpusel) chooses its GPU
// with it, and `gpubind whereami` reports what a task really got.
package cudavis

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// GPU is one NVIDIA display/3D controller found in sysfs.
type GPU struct {
	BusID string // normalised
	UUID  string // from /proc/driver/nvidia/gpus/BUS/information, "" if unavailable
	Minor int    // device minor (/dev/nvidiaN), -1 if unknown
}

// NormalizeBusID turns NVML ("00000000:3B:00.0"), sysfs ("0000:3b:00.0") and short
// ("3b:00.0") forms into the sysfs form. (Parsed by hand: a package-level regexp costs the
// library's every process its compilation at load time.)
func NormalizeBusID(s string) (string, error) {
	bad := fmt.Errorf("PCI bus id %q, expected DOMAIN:BUS:DEVICE.FUNCTION like 0000:1b:00.0", s)
	t := strings.TrimSpace(s)
	hex := func(f string, min, max int) bool {
		if len(f) < min || len(f) > max {
			return false
		}
		for _, c := range f {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		return true
	}
	parts := strings.Split(t, ":")
	dom := "0"
	switch len(parts) {
	case 3:
		dom = parts[0]
		if !hex(dom, 4, 8) {
			return "", bad
		}
		parts = parts[1:]
	case 2:
	default:
		return "", bad
	}
	dev, fn, ok := strings.Cut(parts[1], ".")
	if !ok || !hex(parts[0], 2, 2) || !hex(dev, 2, 2) || len(fn) != 1 || fn[0] < '0' || fn[0] > '7' {
		return "", bad
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil || d > 0xffff {
		return "", fmt.Errorf("PCI bus id %q: domain out of range", s)
	}
	return strings.ToLower(fmt.Sprintf("%04x:%s:%s.%s", d, parts[0], dev, fn)), nil
}

// Scan lists the NVIDIA GPUs (vendor 0x10de, class 0x0300xx VGA or 0x0302xx 3D controller) under
// root/sys/bus/pci/devices that this process can use, ordered by bus id, with UUIDs and minors
// from the driver's procfs. A GPU is left out when
//   - it is bound to another driver than nvidia (sysfs driver link), or, without a driver link,
//     the nvidia driver is loaded (root/proc/driver/nvidia/gpus exists) but does not list it;
//   - its device node root/dev/nvidiaN denies read+write access (EPERM: the device cgroup of
//     Slurm's ConstrainDevices; EACCES: file permissions), or is missing while other nvidiaN
//     nodes exist (a container that was given only some GPUs).
//
// access(2), not open(2): the device cgroup answers access(2) too (cgroup v1 devices list and v2
// BPF program both act in inode_permission; tests/cgroup TestAccessSeesDeviceCgroup shows it
// for both), it is what the gpubind plugin uses (rule/table.c gb_result_restrict), and
// it has no side effects, where opening /dev/nvidiaN makes the driver set up the GPU (seconds
// without persistence mode). When no nvidiaN node exists at all, nothing is filtered: the
// nodes are created on first use by nvidia-modprobe.
func Scan(root string, access func(path string) error) ([]GPU, error) {
	return ScanDev(root, "", access)
}

// ScanDev is Scan with the device nodes in dev ("" is root/dev): a test cluster's fake GPUs
// live in a directory of their own.
func ScanDev(root, dev string, access func(path string) error) ([]GPU, error) {
	if access == nil {
		access = Access
	}
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
	procDir := filepath.Join(root, "proc/driver/nvidia/gpus")
	_, perr := os.Stat(procDir)
	driverLoaded := perr == nil
	if dev == "" {
		dev = filepath.Join(root, "dev")
	}
	nodes, _ := filepath.Glob(filepath.Join(dev, "nvidia[0-9]*"))
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
		info, inProc := procInfo(root, bus)
		if drv, err := os.Readlink(filepath.Join(dir, e.Name(), "driver")); err == nil {
			if filepath.Base(drv) != "nvidia" {
				continue // vfio-pci, nouveau, ...: not for CUDA
			}
		} else if driverLoaded && !inProc {
			continue // the nvidia driver does not drive it
		}
		g := GPU{BusID: bus, UUID: info["GPU UUID"], Minor: -1}
		if m, err := strconv.Atoi(info["Device Minor"]); err == nil && m >= 0 {
			g.Minor = m
		}
		if g.Minor >= 0 && len(nodes) > 0 && !canUse(access, filepath.Join(dev, fmt.Sprintf("nvidia%d", g.Minor))) {
			continue
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BusID < out[j].BusID })
	return out, nil
}

// Access is access(2) with R_OK|W_OK, Scan's default (tests pass their own: as root, file
// modes deny nothing).
func Access(path string) error { return syscall.Access(path, 6) }

// canUse reports whether the process may read and write the device node dev.
func canUse(access func(string) error, dev string) bool {
	err := access(dev)
	return !(errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOENT))
}

// procInfo reads the NVIDIA driver's information file of a GPU ("GPU UUID: GPU-...",
// "Device Minor: 3", ...); ok says whether the driver lists the GPU at all.
func procInfo(root, bus string) (info map[string]string, ok bool) {
	info = map[string]string{}
	dir := filepath.Join(root, "proc/driver/nvidia/gpus", bus)
	if _, err := os.Stat(dir); err != nil {
		return info, false
	}
	f, err := os.Open(filepath.Join(dir, "information"))
	if err != nil {
		return info, true
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if ok {
			info[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return info, true
}

// Visible applies CUDA_VISIBLE_DEVICES (value cvd; set says whether it is set at all) to gpus,
// which must be the GPUs the process can use in the order CUDA numbers them (PCI order with
// CUDA_DEVICE_ORDER=PCI_BUS_ID): under ConstrainDevices Slurm's indices 0..k-1 count those.
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
