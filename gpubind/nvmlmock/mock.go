// Package nvmlmock builds a go-nvml mock server (github.com/NVIDIA/go-nvml/pkg/nvml/mock)
// that reports a given topology: PCI bus ids, UUIDs, minors, NUMA nodes, CPU affinity,
// NVLinks (through an NVSwitch when every pair has the same link count) and MIG
// instances, and each GPU's multi-node NVLink fabric info (GetGpuFabricInfoV v3/v2 and
// GetGpuFabricInfo v1). Tests and benchmarks use it to run the NVML backend without a GPU.
package nvmlmock

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpubind/gpubind/gpubind"
)

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	// NVML prints an 8-digit domain and upper-case hex.
	var dom, b, d, f uint32
	fmt.Sscanf(bus, "%x:%x:%x.%x", &dom, &b, &d, &f)
	s := fmt.Sprintf("%08X:%02X:%02X.%X", dom, b, d, f)
	for i := 0; i < len(s) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(s[i])
	}
	p.Domain, p.Bus, p.Device = dom, b, d
	return p
}

// New returns a mock NVML whose devices are t's GPUs, in t's (PCI) order.
func New(t *gpubind.Topology) *server.Server {
	cfgs := gpus.Multiple(len(t.GPUs), gpus.H100_SXM5_80GB)
	s := dgxh100.NewWithGPUs(cfgs...)
	// An NVSwitch fabric: every pair joined by the same count.
	fabric := 0
	for _, g := range t.GPUs {
		for _, n := range g.NVLinks {
			if fabric == 0 {
				fabric = n
			}
			if n != fabric || len(g.NVLinks) != len(t.GPUs)-1 {
				fabric = -1
			}
		}
	}
	for i := range t.GPUs {
		g := t.GPUs[i]
		d := s.Devices[i].(*server.Device)
		d.UUID, d.PciBusID, d.Minor, d.Index = g.UUID, g.BusID, g.Minor, i
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(g.BusID), nvml.SUCCESS }
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
			if len(g.MemoryNUMA) > 0 {
				return g.MemoryNUMA[0], nvml.SUCCESS // Grace: NVML names the GPU's memory node
			}
			if g.NUMA < 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return g.NUMA, nvml.SUCCESS
		}
		d.GetCpuAffinityFunc = func(n int) ([]uint, nvml.Return) {
			words := make([]uint, n)
			for _, c := range g.CPUs.CPUs() {
				if c/64 < n {
					words[c/64] |= 1 << uint(c%64)
				}
			}
			return words, nvml.SUCCESS
		}
		// Link l: through the switch, or to the peers in bus order, NVLinks[peer] each.
		var remotes []string
		if fabric > 0 {
			for l := 0; l < fabric; l++ {
				remotes = append(remotes, fmt.Sprintf("0000:%02x:00.0", 0x05+l%4)) // NVSwitch functions
			}
		} else {
			for _, p := range t.GPUs {
				for k := 0; k < g.NVLinks[p.BusID]; k++ {
					remotes = append(remotes, p.BusID)
				}
			}
		}
		d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if link >= len(remotes) {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
			if link >= len(remotes) {
				return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			return pciInfo(remotes[link]), nvml.SUCCESS
		}
		s.Devices[i] = newDevice(d, g.Fabric)
		migs := g.MIG
		if len(migs) > 0 {
			d.MigMode = nvml.DEVICE_MIG_ENABLE
		}
		d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
		d.GetMigDeviceHandleByIndexFunc = func(k int) (nvml.Device, nvml.Return) {
			if k >= len(migs) {
				return nil, nvml.ERROR_NOT_FOUND
			}
			m := migs[k]
			return &mock.Device{
				GetUUIDFunc:              func() (string, nvml.Return) { return m.UUID, nvml.SUCCESS },
				GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return m.GI, nvml.SUCCESS },
				GetComputeInstanceIdFunc: func() (int, nvml.Return) { return m.CI, nvml.SUCCESS },
				GetNameFunc:              func() (string, nvml.Return) { return m.Profile, nvml.SUCCESS },
			}, nvml.SUCCESS
		}
	}
	// The server's own look-ups expect its device type; ours wraps it.
	s.DeviceGetHandleByUUIDFunc = func(uuid string) (nvml.Device, nvml.Return) {
		for _, d := range s.Devices {
			if d.(*Device).UUID == uuid {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	s.DeviceGetHandleByPciBusIdFunc = func(busID string) (nvml.Device, nvml.Return) {
		for _, d := range s.Devices {
			if d.(*Device).PciBusID == busID {
				return d, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return s
}
