package gpubind

import (
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Discovery sources accepted by Discover.
const (
	SourceAuto     = "auto"
	SourceNVML     = "nvml"
	SourceSysfs    = "sysfs"
	SourceSnapshot = "snapshot"
)

// DiscoverOptions selects where topology facts come from.
type DiscoverOptions struct {
	Source   string // auto (default), nvml, sysfs, snapshot
	Root     string // read ROOT/sys and ROOT/proc; "" or "/" for the host
	Snapshot string // snapshot file (source snapshot)
	// SnapshotData, when not nil, is the snapshot file's content, already read (the
	// launcher reads it from the fd the plugin checked); Snapshot then only names it.
	SnapshotData []byte
	NVML         nvml.Interface // nil: go-nvml's real library
}

// Discover builds the topology. With source auto it uses NVML when the library loads
// and sysfs for what NVML lacks (NICs, NUMA nodes, PCIe bridges); when NVML does not
// load (or Root is not the host's /, since NVML always describes the host) it uses
// sysfs alone. Notes says which backends were tried and why one was skipped.
//
// A topology that misses GPUs KFD hides from this process (Topology.Hidden: its device
// cgroup denies them) is an error here: planning, snapshots and the discovery cache need
// the whole node. DiscoverSysfs itself returns what the process can see (whereami).
func Discover(o DiscoverOptions) (topo *Topology, notes []string, err error) {
	topo, notes, err = discover(o)
	if err == nil && topo != nil && len(topo.Hidden) > 0 {
		return nil, nil, topo.hiddenError()
	}
	return topo, notes, err
}

func discover(o DiscoverOptions) (topo *Topology, notes []string, err error) {
	src := o.Source
	if src == "" {
		src = SourceAuto
	}
	hostRoot := o.Root == "" || o.Root == "/"
	lib := o.NVML
	if lib == nil {
		lib = NewNVML()
	}
	switch src {
	case SourceSnapshot:
		if o.Snapshot == "" {
			return nil, nil, fmt.Errorf("source snapshot needs a snapshot file")
		}
		t, err := o.loadSnapshot()
		if err != nil {
			return nil, nil, err
		}
		for i := range t.GPUs {
			for f := range t.GPUs[i].Source {
				t.GPUs[i].Source[f] = BackendSnapshot
			}
			if t.GPUs[i].Fabric != nil {
				t.GPUs[i].setSource("fabric", BackendSnapshot)
			}
		}
		for i := range t.NICs {
			for f := range t.NICs[i].Source {
				t.NICs[i].Source[f] = BackendSnapshot
			}
		}
		t.Backends = []string{BackendSnapshot}
		return t, nil, nil
	case SourceSysfs:
		t, err := DiscoverSysfs(o.Root)
		if err != nil || o.Snapshot == "" {
			return t, nil, err
		}
		// A tree paired with its snapshot: sysfs facts plus the snapshot's NVLinks and MIG.
		snap, err := o.loadSnapshot()
		if err != nil {
			return nil, nil, err
		}
		return pairSnapshot(t, snap), nil, nil
	case SourceNVML:
		nv, err := DiscoverNVML(lib)
		if err != nil {
			return nil, nil, err
		}
		sys, serr := DiscoverSysfs(o.Root)
		if serr != nil {
			return nv, []string{"sysfs not merged: " + serr.Error()}, nil
		}
		return merge(nv, sys), nil, nil
	case SourceAuto:
		sys, serr := DiscoverSysfs(o.Root)
		if !hostRoot {
			if serr != nil {
				return nil, nil, serr
			}
			return sys, []string{"nvml skipped: root " + o.Root + " is not the host"}, nil
		}
		nv, nerr := DiscoverNVML(lib)
		switch {
		case nerr != nil && serr != nil:
			return nil, nil, fmt.Errorf("no discovery backend worked: %v; %v", nerr, serr)
		case nerr != nil:
			return sys, []string{"nvml skipped: " + nerr.Error()}, nil
		case serr != nil:
			return nv, []string{"sysfs skipped: " + serr.Error()}, nil
		case len(nv.GPUs) == 0 && sys.IsAMD():
			return sys, []string{"nvml lists no GPU: AMD GPUs from sysfs (KFD)"}, nil
		}
		return merge(nv, sys), nil, nil
	}
	return nil, nil, fmt.Errorf("source %q: want auto, nvml, sysfs or snapshot", src)
}

// merge fills the NVML topology with the facts only sysfs has (bridge chains, NICs,
// NUMA nodes' CPUs) or that NVML did not report, recording sysfs as their source. GPUs
// NVML does not list (hidden by the driver) are not added.
func merge(nv, sys *Topology) *Topology {
	out := *nv
	out.GPUs = slices.Clone(nv.GPUs)
	for i := range out.GPUs {
		g := &out.GPUs[i]
		g.Source = cloneMap(g.Source)
		s := sys.GPUByBusID(g.BusID)
		if s == nil {
			continue
		}
		if len(g.PCIPath) == 0 && len(s.PCIPath) > 0 {
			g.PCIPath = s.PCIPath
			g.setSource("pci_path", BackendSysfs)
		}
		if g.CPUs.IsEmpty() && !s.CPUs.IsEmpty() {
			g.CPUs = s.CPUs
			g.setSource("cpus", BackendSysfs)
		}
		if g.Source["numa"] == "" && s.NUMA >= 0 {
			g.NUMA = s.NUMA
			g.setSource("numa", BackendSysfs)
		}
		graceMemoryNode(g, s, sys)
		if g.Minor < 0 && s.Minor >= 0 {
			g.Minor, g.Device = s.Minor, s.Device
			g.setSource("minor", BackendSysfs)
		}
		if g.UUID == "" && s.UUID != "" {
			g.UUID = s.UUID
			g.setSource("uuid", BackendSysfs)
		}
	}
	out.NICs = sys.NICs
	out.NUMA = sys.NUMA
	if out.Driver == "" {
		out.Driver = sys.Driver
	}
	out.Backends = []string{BackendNVML, BackendSysfs}
	return &out
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// pairSnapshot adds the facts sysfs cannot know (NVLinks, MIG instances, fabric) from a snapshot
// of the same node, matching GPUs by bus id.
func pairSnapshot(t, snap *Topology) *Topology {
	for i := range t.GPUs {
		g := &t.GPUs[i]
		s := snap.GPUByBusID(g.BusID)
		if s == nil {
			continue
		}
		if len(s.NVLinks) > 0 {
			g.NVLinks = s.NVLinks
			g.setSource("nvlinks", BackendSnapshot)
		}
		if len(s.MIG) > 0 {
			g.MIG = s.MIG
			g.setSource("mig", BackendSnapshot)
		}
		if s.Fabric != nil {
			g.Fabric = s.Fabric
			g.setSource("fabric", BackendSnapshot)
		}
	}
	t.Backends = append(t.Backends, BackendSnapshot)
	return t
}

// graceMemoryNode: on Grace (GH200, GB200) NVML names the GPU's own memory as its NUMA
// node, a node without CPUs. Binding CPUs to it would bind to nothing, so the GPU's
// NUMA node becomes the CPU node nearest it (sysfs's numa_node of the PCI device, else
// the node holding most of its local CPUs), and the memory node is kept as MemoryNUMA.
func graceMemoryNode(g, s *GPU, sys *Topology) {
	if g.NUMA < 0 || len(sys.NUMA) == 0 || !sys.NUMACPUs(g.NUMA).IsEmpty() {
		return
	}
	near := -1
	if s.NUMA >= 0 && !sys.NUMACPUs(s.NUMA).IsEmpty() {
		near = s.NUMA
	} else {
		best := 0
		for _, n := range sys.NUMA {
			if c := n.CPUs.Intersect(g.CPUs).Count(); c > best {
				near, best = n.ID, c
			}
		}
	}
	if !slices.Contains(g.MemoryNUMA, g.NUMA) {
		g.MemoryNUMA = append(slices.Clone(g.MemoryNUMA), g.NUMA)
	}
	g.NUMA = near
	g.setSource("numa", BackendSysfs)
	g.setSource("memory_numa", BackendNVML)
}

// loadSnapshot is the snapshot of o: its SnapshotData, else the file Snapshot.
func (o DiscoverOptions) loadSnapshot() (*Topology, error) {
	if o.SnapshotData == nil {
		return LoadSnapshot(o.Snapshot)
	}
	t, err := ParseSnapshot(o.SnapshotData)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.Snapshot, err)
	}
	return t, nil
}
