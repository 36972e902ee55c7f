package gpubind

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Backend names, recorded per fact in the Source maps of the model.
const (
	BackendNVML     = "nvml"
	BackendSysfs    = "sysfs"
	BackendSnapshot = "snapshot"
)

// SnapshotVersion is the version of the JSON snapshot format written by Snapshot.
const SnapshotVersion = 1

// Topology is one node's GPUs, RDMA NICs and NUMA nodes. GPUs are kept in PCI bus id
// order, which is NVML's index order.
type Topology struct {
	Version int        `json:"version"`
	Host    string     `json:"host,omitempty"`
	Driver  string     `json:"driver_version,omitempty"`
	GPUs    []GPU      `json:"gpus"`
	NICs    []NIC      `json:"nics,omitempty"`
	NUMA    []NUMANode `json:"numa"`
	// Backends lists the backends that contributed, in the order they ran.
	Backends []string `json:"backends,omitempty"`
	// Cores are the node's cores in Slurm's logical order (gres.conf Cores= numbers
	// them), each core's CPUs (hardware threads); read on AMD nodes only (cores.go),
	// nil elsewhere and when sysfs does not say.
	Cores []CPUSet `json:"cores,omitempty"`
	// Hidden are the KFD GPU nodes whose topology files answered EPERM (amd.go): GPUs
	// this process's device cgroup denies. Never in a snapshot.
	Hidden []int `json:"-"`
}

// GPU is one physical GPU.
type GPU struct {
	Index  int    `json:"index"`            // NVML index (PCI order); AMD: ROCr's (KFD order)
	Minor  int    `json:"minor"`            // /dev/nvidiaN minor (AMD: render minor), -1 unknown
	Device string `json:"device,omitempty"` // /dev/nvidiaN (AMD: /dev/dri/renderD<minor>)
	UUID   string `json:"uuid,omitempty"`   // GPU-...
	BusID  string `json:"pci_bus_id"`       // normalised 0000:1b:00.0
	Name   string `json:"name,omitempty"`
	NUMA   int    `json:"numa"` // -1 none; always a node with CPUs when one is known
	// Vendor is "" for NVIDIA and VendorAMD for an AMD Instinct GPU (amd.go).
	Vendor string `json:"vendor,omitempty"`
	// CardMinor is an AMD GPU's DRM primary node minor (/dev/dri/card<N>, from its
	// PCI function's drm/cardN/dev), which isolate denies to the step's other tasks;
	// nil when unknown and on NVIDIA.
	CardMinor *int `json:"card_minor,omitempty"`
	// Partition is an AMD MI300 compute partition's XCP id (CPX/DPX/QPX: several KFD
	// nodes, each a GPU to ROCr, on one PCI function, sharing its bus id and unique_id;
	// amd.go markPartitions); nil for a whole GPU. Render minors tell partitions apart.
	Partition *int `json:"partition,omitempty"`
	// L3 is an AMD GPU's share of its NUMA node's L3 domains (cores.go, splitL3): the
	// CPUs the cpus flag binds its tasks to when gres.conf gives it no Cores=; empty:
	// its NUMA node's CPUs.
	L3 CPUSet `json:"l3_cpus,omitzero"`
	// MemoryNUMA are CPU-less NUMA nodes that hold the GPU's own memory (Grace: GH200,
	// GB200), which NVML reports as the GPU's NUMA node; never used for CPU binding.
	MemoryNUMA []int  `json:"memory_numa,omitempty"`
	CPUs       CPUSet `json:"cpus"` // local CPUs
	// PCIPath is the chain above the GPU: the host bridge ("pci0000:15") then each
	// bridge down to the GPU's parent. It drives the PIX/PXB/PHB/NODE/SYS classes.
	PCIPath []string `json:"pci_path,omitempty"`
	// NVLinks maps a peer GPU's bus id to the number of NVLinks joining them.
	NVLinks map[string]int `json:"nvlinks,omitempty"`
	// XGMI maps a peer GPU's bus id to the KFD io_link weight of the XGMI link joining
	// them (AMD: 15 x hops); lower is closer.
	XGMI map[string]int `json:"xgmi,omitempty"`
	MIG  []MIGDevice    `json:"mig,omitempty"`
	// Fabric is the multi-node NVLink fabric state (NVML only; nil when unknown).
	Fabric *Fabric `json:"fabric,omitempty"`
	// Source names the backend that supplied each fact ("uuid", "minor", "numa", ...).
	Source map[string]string `json:"source,omitempty"`
}

// MIGDevice is one MIG instance of a GPU.
type MIGDevice struct {
	UUID    string `json:"uuid"` // MIG-...
	GI      int    `json:"gi"`
	CI      int    `json:"ci"`
	Profile string `json:"profile,omitempty"`
}

// NIC is one RDMA device (/sys/class/infiniband).
type NIC struct {
	Name   string `json:"name"`
	BusID  string `json:"pci_bus_id"`
	NUMA   int    `json:"numa"`
	Netdev string `json:"netdev,omitempty"`
	// Port is the port NCCL and UCX should use: the first ACTIVE one (0: unknown, taken
	// as 1).
	Port    int               `json:"port,omitempty"`
	PCIPath []string          `json:"pci_path,omitempty"`
	Source  map[string]string `json:"source,omitempty"`
}

// nicPort is "NAME:PORT" for the NIC named name (port 1 when unknown), "" for "".
func (t *Topology) nicPort(name string) string {
	if name == "" {
		return ""
	}
	port := 1
	for _, n := range t.NICs {
		if n.Name == name && n.Port > 0 {
			port = n.Port
		}
	}
	return name + ":" + strconv.Itoa(port)
}

// NUMANode is one NUMA node and its CPUs.
type NUMANode struct {
	ID   int    `json:"id"`
	CPUs CPUSet `json:"cpus"`
}

func (g *GPU) setSource(fact, backend string) {
	if g.Source == nil {
		g.Source = map[string]string{}
	}
	g.Source[fact] = backend
}

func (n *NIC) setSource(fact, backend string) {
	if n.Source == nil {
		n.Source = map[string]string{}
	}
	n.Source[fact] = backend
}

// NormalizeBusID turns the PCI bus id forms NVML and sysfs print ("00000000:3B:00.0",
// "0000:3b:00.0", "3b:00.0") into "0000:3b:00.0".
func NormalizeBusID(s string) (string, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(t, ":")
	var dom, bus, devfn string
	switch len(parts) {
	case 3:
		dom, bus, devfn = parts[0], parts[1], parts[2]
	case 2:
		dom, bus, devfn = "0", parts[0], parts[1]
	default:
		return "", fmt.Errorf("PCI bus id %q: want DOMAIN:BUS:DEVICE.FUNCTION such as 0000:1b:00.0", s)
	}
	dev, fn, ok := strings.Cut(devfn, ".")
	if !ok {
		return "", fmt.Errorf("PCI bus id %q: no .FUNCTION part", s)
	}
	d, err1 := strconv.ParseUint(dom, 16, 32)
	b, err2 := strconv.ParseUint(bus, 16, 8)
	v, err3 := strconv.ParseUint(dev, 16, 5)
	f, err4 := strconv.ParseUint(fn, 16, 3)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(dom) > 8 || len(bus) > 2 || len(dev) > 2 || len(fn) > 1 {
		return "", fmt.Errorf("PCI bus id %q: want hex DOMAIN:BUS:DEVICE.FUNCTION such as 0000:1b:00.0", s)
	}
	if d > 0xffff {
		return "", fmt.Errorf("PCI bus id %q: domain above ffff", s)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", d, b, v, f), nil
}

// Key names the GPU uniquely on its node: its bus id, and for an AMD compute partition
// also its XCP id ("0000:05:00.0 xcp 3"), since partitions share the bus id.
func (g *GPU) Key() string {
	if g.Partition != nil {
		return fmt.Sprintf("%s xcp %d", g.BusID, *g.Partition)
	}
	return g.BusID
}

// GPUByBusID returns the GPU with that (normalised) bus id, or nil.
func (t *Topology) GPUByBusID(bus string) *GPU {
	for i := range t.GPUs {
		if t.GPUs[i].BusID == bus {
			return &t.GPUs[i]
		}
	}
	return nil
}

// GPUByMinor returns the GPU with that minor number, or nil.
func (t *Topology) GPUByMinor(minor int) *GPU {
	for i := range t.GPUs {
		if t.GPUs[i].Minor == minor && minor >= 0 {
			return &t.GPUs[i]
		}
	}
	return nil
}

// NUMACPUs returns the CPUs of NUMA node id (empty when unknown).
func (t *Topology) NUMACPUs(id int) CPUSet {
	for _, n := range t.NUMA {
		if n.ID == id {
			return n.CPUs
		}
	}
	return CPUSet{}
}

// AllCPUs is the union of the CPUs of all NUMA nodes.
func (t *Topology) AllCPUs() CPUSet {
	var s CPUSet
	for _, n := range t.NUMA {
		s = s.Union(n.CPUs)
	}
	return s
}

// Normalize sorts GPUs by bus id, renumbers NVML indices in that order when they are
// unset (-1), sorts NICs and NUMA nodes, and checks that the model is consistent.
func (t *Topology) Normalize() error {
	if t.Version == 0 {
		t.Version = SnapshotVersion
	}
	if t.Version != SnapshotVersion {
		return fmt.Errorf("topology version %d: this gpubind reads version %d", t.Version, SnapshotVersion)
	}
	seen := map[string]bool{}
	for i := range t.GPUs {
		g := &t.GPUs[i]
		b, err := NormalizeBusID(g.BusID)
		if err != nil {
			return fmt.Errorf("gpu %d: %w", i, err)
		}
		g.BusID = b
		if seen[g.Key()] {
			return fmt.Errorf("gpu %s listed twice", g.Key())
		}
		seen[g.Key()] = true
		links := map[string]int{}
		for peer, n := range g.NVLinks {
			p, err := NormalizeBusID(peer)
			if err != nil {
				return fmt.Errorf("gpu %s nvlink peer: %w", b, err)
			}
			if n < 0 || n > 1024 {
				return fmt.Errorf("gpu %s nvlink peer %s: link count %d out of range", b, p, n)
			}
			links[p] = n
		}
		if len(links) > 0 {
			g.NVLinks = links
		} else {
			g.NVLinks = nil
		}
		if err := g.normalizeXGMI(); err != nil {
			return err
		}
		if g.NUMA < -1 {
			g.NUMA = -1
		}
		if err := g.Fabric.validate(); err != nil {
			return fmt.Errorf("gpu %s: %w", b, err)
		}
		for _, m := range g.MIG {
			if !strings.HasPrefix(m.UUID, "MIG-") {
				return fmt.Errorf("gpu %s: MIG uuid %q does not start with MIG-", b, m.UUID)
			}
		}
	}
	sort.SliceStable(t.GPUs, func(i, j int) bool { return t.GPUs[i].BusID < t.GPUs[j].BusID })
	idx := map[int]bool{}
	for i := range t.GPUs {
		g := &t.GPUs[i]
		if g.Index < 0 {
			g.Index = i
		}
		if idx[g.Index] {
			return fmt.Errorf("gpu %s: NVML index %d used twice", g.BusID, g.Index)
		}
		idx[g.Index] = true
	}
	for i := range t.NICs {
		b, err := NormalizeBusID(t.NICs[i].BusID)
		if err != nil {
			return fmt.Errorf("nic %s: %w", t.NICs[i].Name, err)
		}
		t.NICs[i].BusID = b
		if t.NICs[i].Name == "" || strings.ContainsAny(t.NICs[i].Name, " \t\n,") {
			return fmt.Errorf("nic %s: name %q is empty or holds spaces/commas", b, t.NICs[i].Name)
		}
	}
	sort.SliceStable(t.NICs, func(i, j int) bool { return t.NICs[i].Name < t.NICs[j].Name })
	sort.SliceStable(t.NUMA, func(i, j int) bool { return t.NUMA[i].ID < t.NUMA[j].ID })
	for i := 1; i < len(t.NUMA); i++ {
		if t.NUMA[i].ID == t.NUMA[i-1].ID {
			return fmt.Errorf("NUMA node %d listed twice", t.NUMA[i].ID)
		}
	}
	for _, n := range t.NUMA {
		if n.ID < 0 {
			return fmt.Errorf("NUMA node id %d is negative", n.ID)
		}
	}
	return nil
}

// Link is a distance class between two devices, as `nvidia-smi topo -m` prints it.
type Link struct {
	Class   LinkClass
	NVLinks int // for ClassNV
	// XGMI is the KFD weight of an AMD XGMI link (ClassNV with NVLinks 0; 15 x hops):
	// lower is closer.
	XGMI int
}

// LinkClass orders the classes from best (NV) to worst (SYS).
type LinkClass int

// The classes of `nvidia-smi topo -m`, best first.
const (
	ClassSelf LinkClass = iota
	ClassNV
	ClassPIX
	ClassPXB
	ClassPHB
	ClassNODE
	ClassSYS
)

func (l Link) String() string {
	switch l.Class {
	case ClassSelf:
		return "X"
	case ClassNV:
		if l.XGMI > 0 {
			return "XGMI" + strconv.Itoa(l.XGMI)
		}
		return "NV" + strconv.Itoa(l.NVLinks)
	case ClassPIX:
		return "PIX"
	case ClassPXB:
		return "PXB"
	case ClassPHB:
		return "PHB"
	case ClassNODE:
		return "NODE"
	}
	return "SYS"
}

// Better reports whether l is a better (closer) link than o.
func (l Link) Better(o Link) bool {
	if l.Class != o.Class {
		return l.Class < o.Class
	}
	if l.XGMI > 0 && o.XGMI > 0 {
		return l.XGMI < o.XGMI
	}
	return l.NVLinks > o.NVLinks
}

// pciClass classifies the PCIe path between two devices from their bridge chains:
// different host bridges -> NODE (same NUMA node) or SYS; same host bridge but
// different root ports -> PHB; below one switch -> PIX; several bridges -> PXB.
func pciClass(a, b []string, numaA, numaB int) LinkClass {
	c := 0
	for c < len(a) && c < len(b) && a[c] == b[c] {
		c++
	}
	switch {
	case c == 0:
		if numaA == numaB {
			return ClassNODE
		}
		return ClassSYS
	case c == 1:
		return ClassPHB
	}
	if max(len(a)-c, len(b)-c) <= 1 {
		return ClassPIX
	}
	return ClassPXB
}

// GPULink is the link class between GPUs i and j (indices into t.GPUs).
func (t *Topology) GPULink(i, j int) Link {
	if i == j {
		return Link{Class: ClassSelf}
	}
	a, b := &t.GPUs[i], &t.GPUs[j]
	if n := a.NVLinks[b.BusID]; n > 0 {
		return Link{Class: ClassNV, NVLinks: n}
	}
	if n := b.NVLinks[a.BusID]; n > 0 {
		return Link{Class: ClassNV, NVLinks: n}
	}
	if w := xgmiWeight(a, b); w > 0 {
		return Link{Class: ClassNV, XGMI: w}
	}
	return Link{Class: pciClass(a.PCIPath, b.PCIPath, a.NUMA, b.NUMA)}
}

// NICLink is the link class between GPU i and NIC k.
func (t *Topology) NICLink(i, k int) Link {
	a, n := &t.GPUs[i], &t.NICs[k]
	return Link{Class: pciClass(a.PCIPath, n.PCIPath, a.NUMA, n.NUMA)}
}

// ClosestNIC returns the name of the NIC nearest GPU i ("" when there is none). Ties go
// to the NIC whose rank among equally close NICs matches the GPU's rank among the GPUs
// sharing that class, so that two GPUs behind one switch with two NICs get one NIC each
// (one rail per GPU); then to the lowest name.
func (t *Topology) ClosestNIC(i int) string {
	if len(t.NICs) == 0 {
		return ""
	}
	best := Link{Class: ClassSYS + 1}
	var cands []int
	for k := range t.NICs {
		l := t.NICLink(i, k)
		switch {
		case l.Better(best):
			best, cands = l, []int{k}
		case l.Class == best.Class:
			cands = append(cands, k)
		}
	}
	// GPUs that see the same candidate set at the same class share the NICs in order.
	var peers []int
	for j := range t.GPUs {
		same := true
		for _, k := range cands {
			if t.NICLink(j, k).Class != best.Class {
				same = false
				break
			}
		}
		if same {
			peers = append(peers, j)
		}
	}
	rank := 0
	for r, j := range peers {
		if j == i {
			rank = r
		}
	}
	return t.NICs[cands[rank%len(cands)]].Name
}
