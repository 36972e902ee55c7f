package gpubind

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// nvidiaMajor is the character-device major number of /dev/nvidiaN.
const nvidiaMajor = 195

// maxExpand bounds hostlist/File= bracket expansion.
const maxExpand = 4096

// GresConf is what gpubind needs from gres.conf for one node: the GPU device files in
// File= order (their position is the GRES index), or AutoDetect=nvml without files
// (then GRES indices follow NVML's PCI order).
type GresConf struct {
	Files []string
	// Cores is each file's Cores= (the line's; CPUs= is its old name), "" when the line
	// has none: Slurm's logical core indices of the cores nearest that GPU.
	Cores      []string
	AutoDetect string // "nvml", "off", ... as written, lower case
	// OtherNodes counts Name=gpu lines skipped because their NodeName= is another node.
	OtherNodes int
	// NodeLines counts the Name=gpu lines for this node: Slurm manages GPUs here.
	NodeLines int
}

// parseGresConf reads gres.conf text for node (lines with a NodeName= that does not
// name it are skipped; node "" matches every line). Only Name=gpu lines matter; File= and MultipleFiles= may use
// brackets (/dev/nvidia[0-3]). Text has no file to be relative to, so Include is an error
// here (ReadConf follows it, for ParseGresLines).
func parseGresConf(text, node string) (*GresConf, error) {
	var lines []ConfLine
	for i, line := range strings.Split(text, "\n") {
		l := ConfLine{Line: i + 1, Fields: confFields(line)}
		if len(l.Fields) == 0 {
			continue
		}
		if strings.EqualFold(l.Fields[0], "include") {
			return nil, fmt.Errorf("%s: %s needs the including file's path (read the file with ReadConf)", l.where("gres.conf"), strings.Join(l.Fields, " "))
		}
		lines = append(lines, l)
	}
	return ParseGresLines(lines, node)
}

// ParseGresLines reads gres.conf lines (from ReadConf, Include lines followed) for node,
// as parseGresConf does.
func ParseGresLines(lines []ConfLine, node string) (*GresConf, error) {
	gc := &GresConf{}
	for _, l := range lines {
		if err := gc.addLine(l, node); err != nil {
			return nil, err
		}
	}
	return gc, nil
}

// addLine takes one gres.conf line into gc.
func (gc *GresConf) addLine(l ConfLine, node string) error {
	kv := map[string]string{}
	for _, f := range l.Fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("%s: %q is not KEY=VALUE", l.where("gres.conf"), f)
		}
		kv[strings.ToLower(k)] = v
	}
	if v, ok := kv["autodetect"]; ok && len(kv) == 1 {
		gc.AutoDetect = strings.ToLower(v)
		return nil
	}
	if nn, ok := kv["nodename"]; ok {
		hosts, err := expandHostlist(nn)
		if err != nil {
			return fmt.Errorf("%s: NodeName=%s: %w", l.where("gres.conf"), nn, err)
		}
		match := node == ""
		for _, h := range hosts {
			if h == node {
				match = true
			}
		}
		if !match {
			if strings.EqualFold(kv["name"], "gpu") {
				gc.OtherNodes++
			}
			return nil
		}
		if v, ok := kv["autodetect"]; ok {
			gc.AutoDetect = strings.ToLower(v)
		}
	}
	if !strings.EqualFold(kv["name"], "gpu") {
		return nil
	}
	gc.NodeLines++
	files := kv["file"]
	if files == "" {
		files = kv["multiplefiles"]
		// MultipleFiles (MIG): the first file is the parent GPU.
		if i := strings.IndexByte(files, ','); i >= 0 && !strings.Contains(files[:i], "[") {
			files = files[:i]
		}
	}
	if files == "" {
		return nil
	}
	list, err := expandHostlist(files)
	if err != nil {
		return fmt.Errorf("%s: File=%s: %w", l.where("gres.conf"), files, err)
	}
	cores := kv["cores"]
	if cores == "" {
		cores = kv["cpus"]
	}
	gc.Files = append(gc.Files, list...)
	for range list {
		gc.Cores = append(gc.Cores, cores)
	}
	return nil
}

// expandHostlist expands Slurm's bracket lists: "node[1-3,7],gpu" or "/dev/nvidia[0-3]".
// Zero padding is kept ("n[01-03]" gives n01 n02 n03).
func expandHostlist(s string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	var items []string
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
			if depth > 1 {
				return nil, fmt.Errorf("%q: nested brackets", s)
			}
		case ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("%q: unbalanced ]", s)
			}
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%q: unbalanced [", s)
	}
	items = append(items, s[start:])
	for _, it := range items {
		if it == "" {
			return nil, fmt.Errorf("%q: empty item", s)
		}
		open := strings.IndexByte(it, '[')
		if open < 0 {
			out = append(out, it)
			continue
		}
		cl := strings.IndexByte(it, ']')
		prefix, body, suffix := it[:open], it[open+1:cl], it[cl+1:]
		if strings.ContainsAny(suffix, "[]") {
			return nil, fmt.Errorf("%q: more than one bracket group in %q", s, it)
		}
		for _, r := range strings.Split(body, ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil || a < 0 {
				return nil, fmt.Errorf("%q: %q is not a number", s, lo)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil || b < a {
					return nil, fmt.Errorf("%q: bad range %q", s, r)
				}
			}
			if b-a+len(out) >= maxExpand {
				return nil, fmt.Errorf("%q: expands to more than %d items", s, maxExpand)
			}
			for n := a; n <= b; n++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), n, suffix))
			}
		}
	}
	return out, nil
}

// readSmallFile reads a regular file of at most limit bytes. It refuses FIFOs, devices
// and longer files, so a path from the environment cannot make a reader block or
// allocate without bound.
func readSmallFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, fi.Size(), limit)
	}
	b := make([]byte, fi.Size()+1)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, err
	}
	if int64(n) > limit {
		return nil, fmt.Errorf("%s grew past %d bytes", path, limit)
	}
	return b[:n], nil
}

// DeviceMinor returns the minor number of an NVIDIA character device (stat rdev). It is
// an error when the file is missing, not a character device, or not major 195.
func DeviceMinor(path string) (int, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return -1, fmt.Errorf("GPU device %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return -1, fmt.Errorf("GPU device %s is not a character device", path)
	}
	if maj := unix.Major(uint64(st.Rdev)); maj != nvidiaMajor {
		return -1, fmt.Errorf("GPU device %s has major %d, want %d (nvidia)", path, maj, nvidiaMajor)
	}
	return int(unix.Minor(uint64(st.Rdev))), nil
}

// gresDeviceMinor is the minor number of a gres.conf File=: an NVIDIA device node
// (DeviceMinor), or on a node with AMD GPUs a render node /dev/dri/renderD<minor>
// (major 226, minor 128 and up); amd says which.
func gresDeviceMinor(t *Topology, path string) (minor int, amd bool, err error) {
	if !t.IsAMD() {
		minor, err = DeviceMinor(path)
		return minor, false, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return -1, true, fmt.Errorf("GPU device %s: %w", path, err)
	}
	maj, min := unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || maj != drmMajor || min < 128 {
		return -1, true, fmt.Errorf("GPU device %s is not a DRM render node (want a character device of major %d, minor 128 or more: /dev/dri/renderD<minor>)", path, drmMajor)
	}
	return int(min), true, nil
}

// gresMap maps GRES indices to GPUs (as topology indices). Index i is GRES index i.
type gresMap struct {
	GPUs []int // index into Topology.GPUs
	// Files are the gres.conf File= device paths, one per GRES index; nil in PCI order.
	Files []string
	// Cores are the CPUs of each GRES index's gres.conf Cores= (empty: none given);
	// read on AMD nodes only (cores.go). nil in PCI order.
	Cores []CPUSet
	// Source says how the map was built ("gres.conf FILE", "PCI order").
	Source string
	// Assumed is true when no gres.conf told the order and PCI order was assumed.
	Assumed bool
	// Managed: Slurm manages GPU GRES on this node (a Name=gpu line of gres.conf, or a
	// Gres=gpu of slurm.conf, for it). A step Slurm gave no GPUs then has none.
	Managed bool
}

// buildGresMap maps each gres.conf File= entry to a GPU: file -> minor (stat rdev) ->
// GPU with that minor (from /proc/driver/nvidia/gpus/*/information or NVML). Without
// File= entries (AutoDetect=nvml, or gc nil) GRES indices follow PCI order; with gc nil
// the map is marked Assumed.
func buildGresMap(t *Topology, gc *GresConf, from string) (*gresMap, error) {
	if gc == nil || len(gc.Files) == 0 {
		m := &gresMap{Source: "PCI order", Assumed: gc == nil}
		if gc != nil {
			m.Source = "PCI order (gres.conf " + from + " has no GPU File= for this node, AutoDetect=" + gc.AutoDetect + ")"
			// GPU lines only for other nodes and no AutoDetect=nvml: the node name is
			// probably wrong; do not guess.
			m.Assumed = gc.OtherNodes > 0 && gc.AutoDetect != "nvml"
		}
		m.Managed = gc != nil && gc.NodeLines > 0
		for i := range t.GPUs {
			m.GPUs = append(m.GPUs, i)
		}
		return m, nil
	}
	m := &gresMap{Source: "gres.conf " + from, Managed: true}
	for idx, f := range gc.Files {
		minor, amd, err := gresDeviceMinor(t, f)
		if err != nil {
			return nil, fmt.Errorf("GRES index %d (%s): %w", idx, from, err)
		}
		g := -1
		for i := range t.GPUs {
			if t.GPUs[i].Minor == minor && t.GPUs[i].isAMD() == amd {
				g = i
			}
		}
		if g < 0 {
			return nil, fmt.Errorf("GRES index %d (%s File=%s): minor %d is not a GPU of this node's topology (known minors %s)", idx, from, f, minor, knownMinors(t))
		}
		m.GPUs = append(m.GPUs, g)
		m.Files = append(m.Files, f)
		var cs CPUSet
		if amd && idx < len(gc.Cores) && gc.Cores[idx] != "" {
			if cs, err = coresCPUs(t, gc.Cores[idx]); err != nil {
				return nil, fmt.Errorf("GRES index %d (%s File=%s): %w", idx, from, f, err)
			}
		}
		m.Cores = append(m.Cores, cs)
	}
	return m, nil
}

func knownMinors(t *Topology) string {
	var s []string
	for _, g := range t.GPUs {
		s = append(s, strconv.Itoa(g.Minor))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}
