package gpubind

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/procfs/sysfs"
)

const nvidiaVendor = 0x10de

// isGPUClass accepts 3D controllers (0x0302) and VGA controllers (0x0300).
func isGPUClass(class uint32) bool {
	c := class >> 8
	return c == 0x0302 || c == 0x0300
}

// rootPath joins a path below the discovery root ("" means "/").
func rootPath(root string, elem ...string) string {
	if root == "" {
		root = "/"
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// DiscoverSysfs reads GPUs, RDMA NICs and NUMA nodes from ROOT/sys and ROOT/proc:
// NVIDIA PCI devices of class 0x0302/0x0300 with numa_node, local_cpulist and their
// bridge chain; /sys/class/infiniband; /sys/devices/system/node; and minor numbers and
// UUIDs from /proc/driver/nvidia/gpus/*/information. NVLinks and MIG are not in sysfs.
// On a node without NVIDIA GPUs it reads AMD GPUs from the KFD topology (amd.go).
func DiscoverSysfs(root string) (*Topology, error) {
	sysRoot := rootPath(root, "sys")
	sfs, err := sysfs.NewFS(sysRoot)
	if err != nil {
		return nil, fmt.Errorf("sysfs at %s: %w", sysRoot, err)
	}
	devs, err := sfs.PciDevices()
	if err != nil {
		return nil, fmt.Errorf("reading PCI devices under %s: %w", sysRoot, err)
	}
	topo := &Topology{Version: SnapshotVersion, Backends: []string{BackendSysfs}}
	infos, err := readNvidiaInformation(root)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(devs))
	for name := range devs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		d := devs[name]
		if d.Vendor != nvidiaVendor || !isGPUClass(d.Class) {
			continue
		}
		bus := pciName(d.Location)
		g := GPU{Index: -1, Minor: -1, BusID: bus, NUMA: -1}
		g.setSource("pci_bus_id", BackendSysfs)
		g.setSource("index", BackendSysfs) // NVML numbers GPUs in PCI order
		if d.NumaNode != nil && *d.NumaNode >= 0 {
			g.NUMA = int(*d.NumaNode)
		}
		g.setSource("numa", BackendSysfs)
		if err := g.readPCIPlace(rootPath(root, "sys", "bus", "pci", "devices", bus)); err != nil {
			return nil, err
		}
		if info, ok := infos[bus]; ok {
			g.Minor, g.UUID, g.Name = info.minor, info.uuid, info.model
			if g.Minor >= 0 {
				g.Device = fmt.Sprintf("/dev/nvidia%d", g.Minor)
				g.setSource("minor", BackendSysfs)
			}
			if g.UUID != "" {
				g.setSource("uuid", BackendSysfs)
			}
		}
		topo.GPUs = append(topo.GPUs, g)
	}
	if topo.NICs, err = discoverNICs(root); err != nil {
		return nil, err
	}
	if topo.NUMA, err = discoverNUMA(root); err != nil {
		return nil, err
	}
	topo.Driver = DriverVersion(root)
	// AMD GPUs only where there is no NVIDIA GPU: an AMD integrated GPU beside NVIDIA
	// cards is not one Slurm manages, and must not shift the NVIDIA indices.
	if len(topo.GPUs) == 0 {
		if topo.GPUs, topo.Hidden, err = discoverAMD(root, topo.NUMA); err != nil {
			return nil, err
		}
		if len(topo.GPUs) > 0 {
			topo.Driver = AMDDriverVersion(root)
			ct := readCPUTopology(root, topo.NUMA)
			topo.Cores = ct.cores
			splitL3(topo, ct.l3)
		}
	}
	if h, err := readTrim(rootPath(root, "proc", "sys", "kernel", "hostname")); err == nil {
		topo.Host = h
	}
	if err := topo.Normalize(); err != nil {
		return nil, fmt.Errorf("sysfs under %s: %w", rootPath(root), err)
	}
	return topo, nil
}

// readPCIPlace reads the GPU's local CPUs (local_cpulist) and bridge chain from its PCI
// function's sysfs directory devDir.
func (g *GPU) readPCIPlace(devDir string) error {
	if s, err := readTrim(filepath.Join(devDir, "local_cpulist")); err == nil {
		if g.CPUs, err = ParseCPUList(s); err != nil {
			return fmt.Errorf("%s/local_cpulist: %w", devDir, err)
		}
		g.setSource("cpus", BackendSysfs)
	}
	var err error
	if g.PCIPath, err = pciPath(devDir); err != nil {
		return err
	}
	g.setSource("pci_path", BackendSysfs)
	return nil
}

func pciName(l sysfs.PciDeviceLocation) string {
	return fmt.Sprintf("%04x:%02x:%02x.%x", l.Segment, l.Bus, l.Device, l.Function)
}

// activePort is the lowest-numbered port under dir (/sys/class/infiniband/DEV/ports) whose
// state is ACTIVE, else the lowest port, else 0 (unknown).
func activePort(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var ports []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil && p > 0 {
			ports = append(ports, p)
		}
	}
	sort.Ints(ports)
	for _, p := range ports {
		if s, err := readTrim(filepath.Join(dir, strconv.Itoa(p), "state")); err == nil && strings.HasSuffix(s, "ACTIVE") {
			return p
		}
	}
	if len(ports) > 0 {
		return ports[0]
	}
	return 0
}

// RefreshNICPorts reads each NIC's active port again (root as for discovery): a port's state
// changes while the node is up, and a topology kept in the discovery cache must not freeze
// it. A NIC whose ports cannot be read keeps its port.
func RefreshNICPorts(t *Topology, root string) {
	for i := range t.NICs {
		if p := activePort(rootPath(root, "sys", "class", "infiniband", t.NICs[i].Name, "ports")); p > 0 {
			t.NICs[i].Port = p
		}
	}
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// pciPath reads the bridge chain of a PCI device from its sysfs link target
// ("../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0" gives
// [pci0000:15 0000:15:01.0 0000:16:00.0]).
func pciPath(devLink string) ([]string, error) {
	target, err := os.Readlink(devLink)
	if err != nil {
		// Not a link (a copied tree): fall back to the resolved directory name.
		if target, err = filepath.EvalSymlinks(devLink); err != nil {
			return nil, fmt.Errorf("PCI device %s: %w", devLink, err)
		}
	}
	parts := strings.Split(filepath.ToSlash(target), "/")
	start := -1
	for i, p := range parts {
		if strings.HasPrefix(p, "pci") {
			start = i
		}
	}
	if start < 0 || start >= len(parts)-1 {
		return nil, fmt.Errorf("PCI device %s: link target %q has no pciDDDD:BB host bridge", devLink, target)
	}
	path := append([]string(nil), parts[start:len(parts)-1]...)
	return path, nil
}

type nvInfo struct {
	minor       int
	uuid, model string
}

// readNvidiaInformation parses every ROOT/proc/driver/nvidia/gpus/*/information file,
// keyed by normalised bus id. A missing directory (no driver) gives an empty map.
func readNvidiaInformation(root string) (map[string]nvInfo, error) {
	dir := rootPath(root, "proc", "driver", "nvidia", "gpus")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]nvInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	out := map[string]nvInfo{}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name(), "information")
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		bus, info, err := parseNvidiaInformation(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out[bus] = info
	}
	return out, nil
}

// parseNvidiaInformation parses one /proc/driver/nvidia/gpus/BUS/information file and
// returns the normalised bus id with the minor number, UUID and model.
func parseNvidiaInformation(text string) (string, nvInfo, error) {
	info := nvInfo{minor: -1}
	var bus string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "Model":
			info.model = v
		case "GPU UUID":
			if !strings.HasPrefix(v, "GPU-") || strings.ContainsAny(v, " \t,") {
				return "", info, fmt.Errorf("line \"GPU UUID: %s\": want a GPU- UUID", v)
			}
			info.uuid = v
		case "Bus Location":
			b, err := NormalizeBusID(v)
			if err != nil {
				return "", info, fmt.Errorf("line \"Bus Location\": %w", err)
			}
			bus = b
		case "Device Minor":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 255 {
				return "", info, fmt.Errorf("line \"Device Minor: %s\": want 0..255", v)
			}
			info.minor = n
		}
	}
	if bus == "" {
		return "", info, errors.New(`no "Bus Location:" line`)
	}
	return bus, info, nil
}

func discoverNICs(root string) ([]NIC, error) {
	sfs, err := sysfs.NewFS(rootPath(root, "sys"))
	if err != nil {
		return nil, err
	}
	names, err := sfs.InfiniBandClassDevices()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing RDMA devices: %w", err)
	}
	sort.Strings(names)
	var nics []NIC
	for _, name := range names {
		devLink := rootPath(root, "sys", "class", "infiniband", name, "device")
		target, err := filepath.EvalSymlinks(devLink)
		if err != nil {
			continue // a software RDMA device (rxe, siw) has no PCI function
		}
		bus, err := NormalizeBusID(filepath.Base(target))
		if err != nil {
			continue
		}
		n := NIC{Name: name, BusID: bus, NUMA: -1}
		pciDev := rootPath(root, "sys", "bus", "pci", "devices", bus)
		if s, err := readTrim(filepath.Join(pciDev, "numa_node")); err == nil {
			if v, err := strconv.Atoi(s); err == nil && v >= 0 {
				n.NUMA = v
			}
		}
		if p, err := pciPath(pciDev); err == nil {
			n.PCIPath = p
		}
		if ents, err := os.ReadDir(filepath.Join(target, "net")); err == nil && len(ents) > 0 {
			n.Netdev = ents[0].Name()
		}
		n.Port = activePort(rootPath(root, "sys", "class", "infiniband", name, "ports"))
		for _, f := range []string{"pci_bus_id", "numa", "pci_path", "netdev"} {
			n.setSource(f, BackendSysfs)
		}
		nics = append(nics, n)
	}
	return nics, nil
}

// readDirIfAny lists dir: nil for a missing one, an error naming it for others.
func readDirIfAny(dir string) ([]os.DirEntry, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	return ents, nil
}

func discoverNUMA(root string) ([]NUMANode, error) {
	dir := rootPath(root, "sys", "devices", "system", "node")
	ents, err := readDirIfAny(dir)
	if err != nil {
		return nil, err
	}
	var nodes []NUMANode
	for _, e := range ents {
		idStr, ok := strings.CutPrefix(e.Name(), "node")
		if !ok {
			continue
		}
		id, err := strconv.Atoi(idStr)
		if err != nil || id < 0 {
			continue
		}
		s, err := readTrim(filepath.Join(dir, e.Name(), "cpulist"))
		if err != nil {
			return nil, fmt.Errorf("NUMA node %d: %w", id, err)
		}
		cpus, err := ParseCPUList(s)
		if err != nil {
			return nil, fmt.Errorf("%s/%s/cpulist: %w", dir, e.Name(), err)
		}
		nodes = append(nodes, NUMANode{ID: id, CPUs: cpus})
	}
	return nodes, nil
}

// DriverVersion returns the NVIDIA kernel module version from ROOT/proc/driver/nvidia/version,
// or "" when there is no driver.
func DriverVersion(root string) string {
	b, err := os.ReadFile(rootPath(root, "proc", "driver", "nvidia", "version"))
	if err != nil {
		return ""
	}
	return parseDriverVersion(string(b))
}

// parseDriverVersion extracts the version from the "NVRM version:" line of
// /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ...").
func parseDriverVersion(text string) string {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "NVRM version:")
		if !ok {
			continue
		}
		for _, w := range strings.Fields(rest) {
			if len(w) > 0 && w[0] >= '0' && w[0] <= '9' && strings.Contains(w, ".") {
				return w
			}
		}
	}
	return ""
}
