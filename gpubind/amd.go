package gpubind

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// AMD Instinct GPUs from sysfs alone (no ROCm library): the KFD topology
// (/sys/devices/virtual/kfd/kfd/topology/nodes/N) and the amdgpu PCI devices. See
// docs/admin.md "AMD Instinct GPUs" for what is read and why.

// VendorAMD is GPU.Vendor for an AMD GPU.
const VendorAMD = "amd"

const (
	amdVendor = 0x1002
	// drmMajor is the character-device major number of /dev/dri/renderD<minor>.
	drmMajor = 226
	// KFD io_link types (kfd_topology.h / hsakmttypes.h): PCIe and XGMI.
	kfdLinkPCIe = 2
	kfdLinkXGMI = 11
)

// kfdTopologyDir is the KFD topology below the sysfs root.
var kfdTopologyDir = []string{"devices", "virtual", "kfd", "kfd", "topology", "nodes"}

// isAMD reports whether the GPU is an AMD GPU.
func (g *GPU) isAMD() bool { return g.Vendor == VendorAMD }

// IsAMD reports whether the topology's GPUs are AMD GPUs (a node is one or the other:
// DiscoverSysfs reads AMD GPUs only where it finds no NVIDIA GPU).
func (t *Topology) IsAMD() bool { return len(t.GPUs) > 0 && t.GPUs[0].isAMD() }

// AMDUUID is the UUID of a KFD unique_id as ROCr's ROCR_VISIBLE_DEVICES filter matches
// it: "GPU-" and 16 upper-case hex digits (ROCr compares tokens case-sensitively with
// this form; rocminfo prints the same digits in lower case). 0 (no UUID) gives "".
func AMDUUID(uniqueID uint64) string {
	if uniqueID == 0 {
		return ""
	}
	return fmt.Sprintf("GPU-%016X", uniqueID)
}

// kfdNode is one node of the KFD topology.
type kfdNode struct {
	id    int
	props map[string]uint64
	name  string
	links []kfdLink
	// hidden: its topology files answered EPERM (a GPU the device cgroup denies).
	hidden bool
}

type kfdLink struct {
	typ, to, weight int
}

func (n *kfdNode) isGPU() bool { return n.hidden || n.props["simd_count"] > 0 }

// readKFDProperties parses a KFD "properties" file: one "name value" pair per line,
// values unsigned decimal.
func readKFDProperties(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("%s line %d: %q is not \"NAME VALUE\"", path, i+1, line)
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %s=%q is not an unsigned number", path, i+1, f[0], f[1])
		}
		out[f[0]] = v
	}
	return out, nil
}

// readKFDNodes reads the KFD topology under root, nodes in id order. No KFD (no amdgpu
// driver) gives nil.
func readKFDNodes(root string) ([]kfdNode, error) {
	dir := rootPath(root, append([]string{"sys"}, kfdTopologyDir...)...)
	ents, err := readDirIfAny(dir)
	if err != nil {
		return nil, err
	}
	var nodes []kfdNode
	for _, e := range ents {
		id, err := strconv.Atoi(e.Name())
		if err != nil || id < 0 {
			continue
		}
		nd := filepath.Join(dir, e.Name())
		props, err := readKFDProperties(filepath.Join(nd, "properties"))
		if errors.Is(err, syscall.EPERM) {
			// KFD answers EPERM for the topology files of a GPU this process's
			// device cgroup denies (kfd_topology.c, kfd_devcgroup_check_permission);
			// CPU nodes never do. ROCr skips such a node (libhsakmt: EPERM on gpu_id
			// is "node not supported"), and so does this: a hidden GPU node.
			nodes = append(nodes, kfdNode{id: id, hidden: true})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("KFD node %d: %w", id, err)
		}
		n := kfdNode{id: id, props: props}
		if s, err := readTrim(filepath.Join(nd, "name")); err == nil {
			n.name = s
		}
		links, err := readDirIfAny(filepath.Join(nd, "io_links"))
		if err != nil {
			return nil, fmt.Errorf("KFD node %d: %w", id, err)
		}
		for _, l := range links {
			lp, err := readKFDProperties(filepath.Join(nd, "io_links", l.Name(), "properties"))
			if err != nil {
				return nil, fmt.Errorf("KFD node %d io_link %s: %w", id, l.Name(), err)
			}
			n.links = append(n.links, kfdLink{typ: int(lp["type"]), to: int(lp["node_to"]), weight: int(lp["weight"])})
		}
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].id < nodes[j].id })
	return nodes, nil
}

// kfdBusID is the PCI function of a KFD GPU node: domain and location_id
// (bus<<8 | device<<3 | function). On MI300 the low 3 bits carry the partition (XCP)
// id instead: where sysfs has no such function, the partition is that number and the
// GPU is function 0.
func kfdBusID(root string, p map[string]uint64) (bus string, partition int) {
	loc, dom := p["location_id"], p["domain"]&0xffff
	full := fmt.Sprintf("%04x:%02x:%02x.%x", dom, (loc>>8)&0xff, (loc>>3)&0x1f, loc&7)
	if _, err := os.Stat(rootPath(root, "sys", "bus", "pci", "devices", full)); err == nil {
		return full, 0
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", dom, (loc>>8)&0xff, (loc>>3)&0x1f), int(loc & 7)
}

// discoverAMD reads the AMD GPUs of the KFD topology: one GPU per KFD GPU node, in KFD
// order (ROCr's device order, so Index is the number ROCR_VISIBLE_DEVICES takes), with
// its PCI function's NUMA node, local CPUs and bridge chain, render minor, UUID, model
// and XGMI weights to the other GPUs. numa are the node's NUMA nodes (a GPU whose PCI
// NUMA node is unknown or has no CPUs takes the CPU node its KFD links weigh least).
//
// A GPU node whose topology KFD hides from this process (EPERM: its device cgroup denies
// that GPU) is left out, as ROCr leaves it out, but still counts in the KFD order of the
// others (Index stays the node's ROCr index); its node id goes into hidden.
func discoverAMD(root string, numa []NUMANode) (gpus []GPU, hidden []int, err error) {
	nodes, err := readKFDNodes(root)
	if err != nil || len(nodes) == 0 {
		return nil, nil, err
	}
	busOf := map[int]string{}
	byBus := map[string][]int{} // bus id -> its GPUs (indices into gpus)
	var parts, nodeOf []int     // per GPU: location_id's partition bits, KFD node id
	ordinal := -1               // the GPU's position among the KFD GPU nodes, hidden ones included
	for _, n := range nodes {
		if !n.isGPU() {
			continue
		}
		ordinal++
		if n.hidden {
			hidden = append(hidden, n.id)
			continue
		}
		p := n.props
		if v := p["vendor_id"]; v != 0 && v != amdVendor {
			continue
		}
		bus, part := kfdBusID(root, p)
		byBus[bus] = append(byBus[bus], len(gpus))
		parts = append(parts, part)
		nodeOf = append(nodeOf, n.id)
		busOf[n.id] = bus
		g := GPU{Index: ordinal, Minor: -1, BusID: bus, NUMA: -1, Vendor: VendorAMD}
		for _, f := range []string{"pci_bus_id", "index", "numa", "minor", "uuid", "name", "xgmi"} {
			g.setSource(f, BackendSysfs)
		}
		if m, ok := p["drm_render_minor"]; ok && m >= 128 && m < 1<<20 {
			g.Minor = int(m)
			g.Device = fmt.Sprintf("/dev/dri/renderD%d", m)
		}
		g.UUID = AMDUUID(p["unique_id"])
		devDir := rootPath(root, "sys", "bus", "pci", "devices", bus)
		g.CardMinor = amdCardMinor(devDir)
		if s, err := readTrim(filepath.Join(devDir, "numa_node")); err == nil {
			if v, err := strconv.Atoi(s); err == nil && v >= 0 {
				g.NUMA = v
			}
		} else if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("KFD node %d names PCI device %s, which %s does not have", n.id, bus, rootPath(root, "sys", "bus", "pci", "devices"))
		}
		if err := g.readPCIPlace(devDir); err != nil {
			return nil, nil, err
		}
		g.Name = amdModel(devDir, n.name, p["device_id"])
		if near := nearestCPUNode(n, nodes, numa); (g.NUMA < 0 || cpuless(numa, g.NUMA)) && near >= 0 {
			g.NUMA = near
		}
		gpus = append(gpus, g)
	}
	if err := markPartitions(gpus, byBus, parts, nodeOf); err != nil {
		return nil, nil, err
	}
	// XGMI weights between GPUs, by bus id (the partitions of one device share theirs:
	// 13 to each other, the cross-device weight to the others' bus ids).
	k := 0
	for _, n := range nodes {
		if _, ok := busOf[n.id]; !ok {
			continue
		}
		for _, l := range n.links {
			peer, ok := busOf[l.to]
			if l.typ != kfdLinkXGMI || !ok || l.weight <= 0 {
				continue
			}
			if gpus[k].XGMI == nil {
				gpus[k].XGMI = map[string]int{}
			}
			gpus[k].XGMI[peer] = l.weight
		}
		k++
	}
	return gpus, hidden, nil
}

// markPartitions finds MI300 compute partitions (CPX, DPX, QPX): several KFD GPU nodes
// on one PCI function, which share its bus id and unique_id; each is a GPU of its own
// to ROCr (a KFD index, a render node of its own: XCP 0 on the PCI function, XCPs 1-7
// on platform devices amdgpu_xcp.N), and its XCP id is in location_id's low 3 bits.
// Such GPUs get Partition; two nodes claiming one XCP of a device are an error. Their
// CardMinor is dropped: the PCI function's card node is the device's, not a
// partition's, so isolate cannot guard partitions by it (amdIsolate refuses).
func markPartitions(gpus []GPU, byBus map[string][]int, parts, nodeOf []int) error {
	for bus, ids := range byBus {
		if len(ids) == 1 && parts[ids[0]] == 0 {
			continue // a whole GPU (SPX)
		}
		claimed := map[int]int{}
		for _, i := range ids {
			if prev, dup := claimed[parts[i]]; dup {
				return fmt.Errorf("KFD nodes %d and %d both claim compute partition %d of the GPU at %s (location_id bits 2:0)", prev, nodeOf[i], parts[i], bus)
			}
			claimed[parts[i]] = nodeOf[i]
			x := parts[i]
			gpus[i].Partition = &x
			gpus[i].CardMinor = nil
			gpus[i].setSource("partition", BackendSysfs)
		}
	}
	return nil
}

// amdCardMinor is the minor of the GPU's DRM primary node (/dev/dri/card<N>): the
// one drm/cardN under its PCI function whose dev file says 226:N, else nil. Read from
// sysfs, not computed from the render minor: DRM numbers card and render nodes in
// separate ranges, so card = render - 128 only when every DRM device has both (a BMC's
// ast or mgag200, registered first, takes card0 without a render node, and then
// renderD128 is card1's). gres.conf names render nodes only. docs/cgroups.md "AMD GPUs".
func amdCardMinor(devDir string) *int {
	ents, err := os.ReadDir(filepath.Join(devDir, "drm"))
	if err != nil {
		return nil
	}
	var found *int
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "card")
		if !ok {
			continue
		}
		want, err := strconv.Atoi(n)
		if err != nil || want < 0 {
			continue
		}
		s, err := readTrim(filepath.Join(devDir, "drm", e.Name(), "dev"))
		if err != nil || s != fmt.Sprintf("%d:%d", drmMajor, want) || found != nil {
			return nil // unreadable, not DRM's, or two primary nodes: unknown
		}
		found = &want
	}
	return found
}

// cpuless: NUMA node id is known and has no CPUs (a memory-only node).
func cpuless(numa []NUMANode, id int) bool {
	for _, n := range numa {
		if n.ID == id {
			return n.CPUs.IsEmpty()
		}
	}
	return false
}

// nearestCPUNode is the NUMA node of the KFD CPU node n's links weigh least (KFD
// numbers its CPU nodes first, one per NUMA node with CPUs, in NUMA order), or -1.
func nearestCPUNode(n kfdNode, nodes []kfdNode, numa []NUMANode) int {
	var withCPUs []int
	for _, m := range numa {
		if !m.CPUs.IsEmpty() {
			withCPUs = append(withCPUs, m.ID)
		}
	}
	best, bestW := -1, 0
	for _, l := range n.links {
		if l.to < 0 || l.to >= len(nodes) || nodes[l.to].isGPU() || l.to >= len(withCPUs) || l.weight <= 0 {
			continue
		}
		if best < 0 || l.weight < bestW {
			best, bestW = withCPUs[l.to], l.weight
		}
	}
	return best
}

// amdModel names the GPU: the PCI device's product_name (amdgpu reads it from the
// board's FRU: "AMD Instinct MI250X"), else the KFD node's name, else the device id.
func amdModel(devDir, kfdName string, deviceID uint64) string {
	if s, err := readTrim(filepath.Join(devDir, "product_name")); err == nil && s != "" {
		return s
	}
	if kfdName != "" {
		return kfdName
	}
	return fmt.Sprintf("AMD GPU 0x%04x", deviceID)
}

// xgmiWeight is the XGMI weight between two GPUs (either direction), 0 for none.
func xgmiWeight(a, b *GPU) int {
	if w := a.XGMI[b.BusID]; w > 0 {
		return w
	}
	return b.XGMI[a.BusID]
}

// normalizeXGMI normalises the peers' bus ids and checks the weights.
func (g *GPU) normalizeXGMI() error {
	if len(g.XGMI) == 0 {
		g.XGMI = nil
		return nil
	}
	out := map[string]int{}
	for peer, w := range g.XGMI {
		p, err := NormalizeBusID(peer)
		if err != nil {
			return fmt.Errorf("gpu %s xgmi peer: %w", g.BusID, err)
		}
		if w <= 0 || w > 1<<16 {
			return fmt.Errorf("gpu %s xgmi peer %s: weight %d out of range", g.BusID, p, w)
		}
		out[p] = w
	}
	g.XGMI = out
	return nil
}

// AMDDriverVersion is the amdgpu module's version (a DKMS build has one), "" when none.
func AMDDriverVersion(root string) string {
	s, _ := readTrim(rootPath(root, "sys", "module", "amdgpu", "version"))
	return s
}

// KFDGeneration is the KFD topology's generation_id ("" without KFD): it changes when
// the KFD topology does.
func KFDGeneration(root string) string {
	s, _ := readTrim(rootPath(root, append(append([]string{"sys"}, kfdTopologyDir[:len(kfdTopologyDir)-1]...), "generation_id")...))
	return s
}

// amdIsolate: on AMD GPUs isolate denies each task the step's other GPUs' render and
// card nodes (docs/cgroups.md "AMD GPUs"), so it needs both minors of every GPU of the
// node. Where one is unknown (no drm/cardN or renderD minor in sysfs) isolate is an
// error in enforce mode, and dropped with the returned warning in optional mode, naming
// the GPU. Slurm's own ConstrainDevices still applies.
func amdIsolate(t *Topology, o *Option, mode Mode) (warning string, err error) {
	if !t.IsAMD() || !o.Flags.Isolate {
		return "", nil
	}
	for _, g := range t.GPUs {
		what := ""
		switch {
		case g.Partition != nil:
			why := fmt.Sprintf("isolate cannot guard MI300 compute partitions: GPU %d (%s) is one, and the partitions of a device share its card node (/dev/dri/cardN), which isolate would have to deny", g.Index, g.Key())
			if mode == ModeEnforce {
				return "", fmt.Errorf("%s: leave out isolate (Slurm's ConstrainDevices still limits each step to its render nodes), or run in mode=optional", why)
			}
			o.Flags.Isolate = false
			return why + ": isolate dropped; each task still gets its own GPU in ROCR_VISIBLE_DEVICES", nil
		case g.Minor < 0:
			what = "render node minor (KFD drm_render_minor)"
		case g.CardMinor == nil:
			what = "card node minor (sysfs drm/cardN/dev under its PCI device; a snapshot from before gpubind read it has none)"
		default:
			continue
		}
		why := fmt.Sprintf("isolate needs the render and card node of every AMD GPU, and GPU %d (%s) has no %s", g.Index, g.BusID, what)
		if mode == ModeEnforce {
			return "", fmt.Errorf("%s: leave out isolate, or run in mode=optional", why)
		}
		o.Flags.Isolate = false
		return why + ": isolate dropped; each task still gets its own GPU in ROCR_VISIBLE_DEVICES", nil
	}
	return "", nil
}

// hiddenError says that KFD hid GPUs from this process, and what to do.
func (t *Topology) hiddenError() error {
	ids := make([]string, len(t.Hidden))
	for i, id := range t.Hidden {
		ids[i] = strconv.Itoa(id)
	}
	return fmt.Errorf("KFD hides GPU nodes %s from this process (their topology files answer EPERM: its device cgroup denies those GPUs), so the node's topology is incomplete; "+
		"read it outside the job's device cgroup (the plugin does, in slurmstepd before any task is restricted) or use a snapshot= made there", strings.Join(ids, ","))
}

// amdPartitionUUID: the uuid flag puts GPU- UUIDs in ROCR_VISIBLE_DEVICES, and the
// compute partitions of an MI300 device share one (ROCr's GPU-<unique_id> names the
// device): with a partition among the step's GPUs the flag is an error naming them in
// enforce mode, and dropped with the returned warning in optional mode (indices name
// partitions exactly).
func amdPartitionUUID(t *Topology, st *step, o *Option, mode Mode) (warning string, err error) {
	if !t.IsAMD() || !o.Flags.UUID {
		return "", nil
	}
	var parts []string
	for _, sg := range st.GPUs {
		if g := &t.GPUs[sg.Topo]; g.Partition != nil {
			parts = append(parts, fmt.Sprintf("GPU %d (%s, renderD%d, %s)", g.Index, g.Key(), g.Minor, g.UUID))
		}
	}
	if len(parts) == 0 {
		return "", nil
	}
	why := "uuid: the step's GPUs " + strings.Join(parts, ", ") + " are MI300 compute partitions, which share their device's UUID (ROCr's GPU-<unique_id>), so ROCR_VISIBLE_DEVICES cannot name them by UUID"
	if mode == ModeEnforce {
		return "", fmt.Errorf("%s: leave out uuid, or run in mode=optional", why)
	}
	o.Flags.UUID = false
	return why + ": uuid dropped; ROCR_VISIBLE_DEVICES lists indices", nil
}
