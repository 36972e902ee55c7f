// Package cudavis resolves which GPUs a process sees the way CUDA does, without NVML or
// CUDA: the NVIDIA GPUs the process can open (bound to the nvidia driver, device node readable
// and writable, so the device cgroup of Slurm's ConstrainDevices and containers count), in PCI
// bus id order (CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID), then CUDA_VISIBLE_DEVICES
// applied to that list (indices, GPU-/MIG- UUIDs). libgpuhelper (lib/gpusel) chooses its GPU
// with it, and `gpubind whereami` reports what a task really got.
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
// The devices looked at are the ones the nvidia driver names: its sysfs directory
// (root/sys/bus/pci/drivers/nvidia/BUS links) and its procfs list (root/proc/driver/nvidia/gpus),
// so the cost does not grow with the PCI devices of the host (hundreds on a large node, each
// a few file reads). Only without either list (no nvidia driver) are all PCI devices walked.
// Files are read with plain open/read/close (os.ReadFile makes about 9 system calls a file).
//
// access(2), not open(2): the device cgroup answers access(2) too (cgroup v1 devices list and v2
// BPF program both act in inode_permission; tests/cgroup TestAccessSeesDeviceCgroup shows it
// for both), it is what the gpubind plugin uses (rule/rule.c gb_result_restrict), and
// it has no side effects, where opening /dev/nvidiaN makes the driver set up the GPU (seconds
// without persistence mode). When no nvidiaN node exists at all, nothing is filtered: the
// nodes are created on first use by nvidia-modprobe.
func Scan(root string, access func(path string) error) ([]GPU, error) {
	return ScanDev(root, "", access)
}

// scanDefaults fills in what a scan's caller left empty: root "/", dev root/dev, access Access.
func scanDefaults(root, dev string, access func(path string) error) (string, string, func(path string) error) {
	if root == "" {
		root = "/"
	}
	if dev == "" {
		dev = filepath.Join(root, "dev")
	}
	if access == nil {
		access = Access
	}
	return root, dev, access
}

// ScanDev is Scan with the device nodes in dev ("" is root/dev): a test cluster's fake GPUs
// live in a directory of their own.
func ScanDev(root, dev string, access func(path string) error) ([]GPU, error) {
	root, dev, access = scanDefaults(root, dev, access)
	dir := filepath.Join(root, "sys/bus/pci/devices")
	procDir := filepath.Join(root, "proc/driver/nvidia/gpus")
	listed, driverLoaded := names(procDir)
	bound, haveBound := names(filepath.Join(root, "sys/bus/pci/drivers/nvidia"))
	var cands []string
	if driverLoaded || haveBound {
		seen := map[string]bool{}
		for _, l := range [][]string{bound, listed} {
			for _, n := range l {
				if !seen[n] && isBusID(n) {
					seen[n] = true
					cands = append(cands, n)
				}
			}
		}
	} else {
		all, ok := names(dir)
		if !ok {
			if _, err := os.Stat(dir); os.IsNotExist(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading %s: cannot list it", dir)
		}
		cands = all
	}
	inProc := map[string]bool{}
	for _, n := range listed {
		inProc[n] = true
	}
	var buf [4096]byte
	var out []GPU
	nodes := -1 // whether any dev/nvidiaN exists: looked up once, only when needed
	for _, name := range cands {
		d := filepath.Join(dir, name)
		vendor, ok := readSmall(filepath.Join(d, "vendor"), buf[:])
		if !ok || !strings.EqualFold(vendor, "0x10de") {
			continue // not a complete device entry, or not NVIDIA's
		}
		class, ok := readSmall(filepath.Join(d, "class"), buf[:])
		if c := strings.ToLower(class); !ok || !(strings.HasPrefix(c, "0x0302") || strings.HasPrefix(c, "0x0300")) {
			continue // NVSwitch bridges, audio functions: not GPUs
		}
		bus, err := NormalizeBusID(name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		if drv, err := os.Readlink(filepath.Join(d, "driver")); err == nil {
			if filepath.Base(drv) != "nvidia" {
				continue // vfio-pci, nouveau, ...: not for CUDA
			}
		} else if driverLoaded && !inProc[name] && !inProc[bus] {
			continue // the nvidia driver does not drive it
		}
		g := GPU{BusID: bus, Minor: -1}
		if info, ok := readSmall(filepath.Join(procDir, bus, "information"), buf[:]); ok {
			g.UUID, g.Minor = parseInformation(info)
		}
		if g.Minor >= 0 {
			err := access(filepath.Join(dev, "nvidia"+strconv.Itoa(g.Minor)))
			if errors.Is(err, syscall.ENOENT) && nodes < 0 {
				m, _ := filepath.Glob(filepath.Join(dev, "nvidia[0-9]*"))
				nodes = len(m)
			}
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || (errors.Is(err, syscall.ENOENT) && nodes > 0) {
				continue
			}
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BusID < out[j].BusID })
	return out, nil
}

// isBusID says whether a directory entry is named like a PCI device (DOMAIN:BUS:DEV.FN), not
// one of the driver directory's control files (bind, unbind, module, new_id, ...).
func isBusID(name string) bool { return strings.Count(name, ":") == 2 && strings.Contains(name, ".") }

// names lists a directory's entries; ok is false when it cannot be read (it does not exist).
func names(dir string) (list []string, ok bool) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	list, err = f.Readdirnames(-1)
	return list, err == nil
}

// readSmall reads a small file (sysfs, procfs) with open/read/close into buf, and returns its
// content without surrounding space; ok is false when it cannot be read.
func readSmall(path string, buf []byte) (string, bool) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		k, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return "", false
		}
		if k == 0 {
			break
		}
		n += k
	}
	return strings.TrimSpace(string(buf[:n])), true
}

// parseInformation reads the NVIDIA driver's information file of a GPU ("GPU UUID: GPU-...",
// "Device Minor: 3", ...): the UUID ("" if absent) and the minor (-1 if absent).
func parseInformation(info string) (uuid string, minor int) {
	minor = -1
	for len(info) > 0 {
		line, rest, _ := strings.Cut(info, "\n")
		info = rest
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "GPU UUID":
			uuid = strings.TrimSpace(v)
		case "Device Minor":
			if m, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && m >= 0 {
				minor = m
			}
		}
	}
	return uuid, minor
}

// Access is access(2) with R_OK|W_OK, Scan's default (tests pass their own: as root, file
// modes deny nothing).
func Access(path string) error { return syscall.Access(path, 6) }

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
