package gpubind

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NewNVML returns go-nvml's real library (dlopens libnvidia-ml at Init).
func NewNVML() nvml.Interface { return nvml.New() }

// DiscoverNVML reads the GPUs through an nvml.Interface (the real library or a go-nvml
// mock): index, minor, UUID, bus id, NUMA node, CPU affinity, NVLink peers and MIG
// instances. It calls Init and Shutdown itself. NICs, NUMA nodes' CPUs and PCIe bridge
// chains are not NVML facts; Discover takes those from sysfs.
func DiscoverNVML(lib nvml.Interface) (topo *Topology, err error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML init: %s", nvmlErr(lib, ret))
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML device count: %s", nvmlErr(lib, ret))
	}
	topo = &Topology{Version: SnapshotVersion, Backends: []string{BackendNVML}}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		topo.Driver = v
	}
	fq := newFabricQuery(lib)
	devs := make([]nvml.Device, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d: %s", i, nvmlErr(lib, ret))
		}
		devs[i] = d
		g := GPU{Index: i, Minor: -1, NUMA: -1}
		g.setSource("index", BackendNVML)
		pci, ret := d.GetPciInfo()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("NVML device %d PCI info: %s", i, nvmlErr(lib, ret))
		}
		if g.BusID, err = NormalizeBusID(busIDString(pci)); err != nil {
			return nil, fmt.Errorf("NVML device %d: %w", i, err)
		}
		g.setSource("pci_bus_id", BackendNVML)
		if u, ret := d.GetUUID(); ret == nvml.SUCCESS {
			g.UUID = u
			g.setSource("uuid", BackendNVML)
		}
		if name, ret := d.GetName(); ret == nvml.SUCCESS {
			g.Name = name
		}
		if m, ret := d.GetMinorNumber(); ret == nvml.SUCCESS {
			g.Minor = m
			g.Device = fmt.Sprintf("/dev/nvidia%d", m)
			g.setSource("minor", BackendNVML)
		}
		if node, ret := d.GetNumaNodeId(); ret == nvml.SUCCESS {
			g.NUMA = node
			g.setSource("numa", BackendNVML)
		}
		if words, ret := d.GetCpuAffinity(maxCPU / 64); ret == nvml.SUCCESS {
			var s CPUSet
			for w, bitsWord := range words {
				for b := 0; b < 64; b++ {
					if uint64(bitsWord)&(1<<uint(b)) != 0 {
						s.Add(w*64 + b)
					}
				}
			}
			if !s.IsEmpty() {
				g.CPUs = s
				g.setSource("cpus", BackendNVML)
			}
		}
		if g.Fabric = fq.read(d); g.Fabric != nil {
			g.setSource("fabric", BackendNVML)
		}
		g.MIG = nvmlMIG(d)
		if len(g.MIG) > 0 {
			g.setSource("mig", BackendNVML)
		}
		topo.GPUs = append(topo.GPUs, g)
	}
	for i, d := range devs {
		links := map[string]int{}
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				break // NOT_SUPPORTED past the last link, or no NVLink at all
			}
			if st != nvml.FEATURE_ENABLED {
				continue
			}
			rp, ret := d.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				continue
			}
			peer, err := NormalizeBusID(busIDString(rp))
			if err != nil {
				continue
			}
			links[peer]++
		}
		// Links that end on an NVSwitch: every GPU reaching the switch fabric is a peer
		// with the GPU's own link count (NV18 on a DGX H100).
		total, direct := 0, map[string]int{}
		for peer, c := range links {
			total += c
			if topo.GPUByBusID(peer) != nil {
				direct[peer] = c
			}
		}
		if total > 0 && len(direct) == 0 {
			for j := range topo.GPUs {
				if j != i {
					direct[topo.GPUs[j].BusID] = total
				}
			}
		}
		if len(direct) > 0 {
			topo.GPUs[i].NVLinks = direct
			topo.GPUs[i].setSource("nvlinks", BackendNVML)
		}
	}
	if err := topo.Normalize(); err != nil {
		return nil, fmt.Errorf("NVML: %w", err)
	}
	return topo, nil
}

func nvmlMIG(d nvml.Device) []MIGDevice {
	cur, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS || cur != nvml.DEVICE_MIG_ENABLE {
		return nil
	}
	count, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []MIGDevice
	for k := 0; k < count; k++ {
		m, ret := d.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			continue
		}
		u, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		gi, _ := m.GetGpuInstanceId()
		ci, _ := m.GetComputeInstanceId()
		name, _ := m.GetName()
		out = append(out, MIGDevice{UUID: u, GI: gi, CI: ci, Profile: name})
	}
	return out
}

func busIDString(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if b.Len() == 0 {
		for _, c := range p.BusIdLegacy {
			if c == 0 {
				break
			}
			b.WriteByte(byte(c))
		}
	}
	return b.String()
}

func nvmlErr(lib nvml.Interface, ret nvml.Return) string {
	return fmt.Sprintf("%s (%d)", ret.Error(), int32(ret))
}
