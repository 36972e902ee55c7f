package nvmlmock

import (
	"encoding/hex"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpubind/gpubind/gpubind"
)

// Device is a mock GPU that also answers the fabric queries. go-nvml's
// GetGpuFabricInfoV returns a handler bound to a real device handle, which a mock
// cannot build, so Device answers gpubind.FabricInfoV instead.
type Device struct {
	*server.Device
	// Fabric is what the device reports; nil: every fabric query fails with
	// ERROR_NOT_SUPPORTED (a driver without fabric support).
	Fabric *gpubind.Fabric
	// MaxFabricVersion is the newest nvmlGpuFabricInfo version the "driver" knows
	// (3 by default): newer ones fail with ERROR_ARGUMENT_VERSION_MISMATCH, as NVML does.
	MaxFabricVersion int
}

var _ nvml.Device = (*Device)(nil)
var _ gpubind.FabricInfoV = (*Device)(nil)

func newDevice(d *server.Device, f *gpubind.Fabric) *Device {
	dev := &Device{Device: d, Fabric: f, MaxFabricVersion: 3}
	d.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		if dev.Fabric == nil {
			return nvml.GpuFabricInfo{}, nvml.ERROR_NOT_SUPPORTED
		}
		u, c, st := dev.raw()
		return nvml.GpuFabricInfo{ClusterUuid: u, CliqueId: c, State: st, Status: dev.Fabric.Status}, nvml.SUCCESS
	}
	return dev
}

func (d *Device) raw() (uuid [16]uint8, clique uint32, state uint8) {
	b, _ := hex.DecodeString(strings.ReplaceAll(d.Fabric.ClusterUUID, "-", ""))
	copy(uuid[:], b)
	switch d.Fabric.State {
	case gpubind.FabricNotStarted:
		state = nvml.GPU_FABRIC_STATE_NOT_STARTED
	case gpubind.FabricInProgress:
		state = nvml.GPU_FABRIC_STATE_IN_PROGRESS
	case gpubind.FabricCompleted:
		state = nvml.GPU_FABRIC_STATE_COMPLETED
	default:
		state = nvml.GPU_FABRIC_STATE_NOT_SUPPORTED
	}
	return uuid, d.Fabric.CliqueID, state
}

func summary(h string) uint8 {
	switch h {
	case gpubind.HealthHealthy:
		return nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY
	case gpubind.HealthUnhealthy:
		return nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
	case gpubind.HealthLimitedCapacity:
		return nvml.GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY
	}
	return nvml.GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED
}

// GpuFabricInfoV3 answers GetGpuFabricInfoV().V3().
func (d *Device) GpuFabricInfoV3() (nvml.GpuFabricInfo_v3, nvml.Return) {
	if d.Fabric == nil {
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_NOT_SUPPORTED
	}
	if d.MaxFabricVersion < 3 {
		return nvml.GpuFabricInfo_v3{}, nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	u, c, st := d.raw()
	return nvml.GpuFabricInfo_v3{ClusterUuid: u, CliqueId: c, State: st, Status: d.Fabric.Status,
		HealthMask: d.Fabric.HealthMask, HealthSummary: summary(d.Fabric.Health)}, nvml.SUCCESS
}

// GpuFabricInfoV2 answers GetGpuFabricInfoV().V2(): no health summary, only the mask.
func (d *Device) GpuFabricInfoV2() (nvml.GpuFabricInfo_v2, nvml.Return) {
	if d.Fabric == nil {
		return nvml.GpuFabricInfo_v2{}, nvml.ERROR_NOT_SUPPORTED
	}
	if d.MaxFabricVersion < 2 {
		return nvml.GpuFabricInfo_v2{}, nvml.ERROR_ARGUMENT_VERSION_MISMATCH
	}
	u, c, st := d.raw()
	return nvml.GpuFabricInfo_v2{ClusterUuid: u, CliqueId: c, State: st, Status: d.Fabric.Status,
		HealthMask: d.Fabric.HealthMask}, nvml.SUCCESS
}
