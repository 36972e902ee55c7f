package gpubind

import (
	"fmt"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Fabric states, as the snapshot and the table write them (nvmlGpuFabricState_t).
const (
	FabricNotSupported = "not_supported"
	FabricNotStarted   = "not_started"
	FabricInProgress   = "in_progress"
	FabricCompleted    = "completed"
)

// Fabric health summaries (nvmlGpuFabricInfo_v3 healthSummary, or derived from the v2
// health mask); "" is unknown (v1, or a driver that does not say).
const (
	HealthHealthy         = "healthy"
	HealthUnhealthy       = "unhealthy"
	HealthLimitedCapacity = "limited_capacity"
)

// Fabric is a GPU's multi-node NVLink fabric state (an NVL72 rack joins the GPUs of 18
// trays in one NVLink domain, split into cliques). NCCL takes two GPUs for multi-node
// NVLink peers only when both ClusterUUID and CliqueID match.
type Fabric struct {
	// ClusterUUID is nvmlGpuFabricInfo's clusterUuid, 8-4-4-4-12 lower-case hex (all
	// zeros when the GPU is in no NVLink domain).
	ClusterUUID string `json:"cluster_uuid"`
	CliqueID    uint32 `json:"clique_id"`
	// State is completed, in_progress, not_started or not_supported (PCIe and HGX GPUs).
	State string `json:"state"`
	// Status is the nvmlReturn_t of the GPU's fabric registration (0: success); it
	// matters once State is completed.
	Status uint32 `json:"status,omitempty"`
	// Health is healthy, unhealthy or limited_capacity ("" unknown), HealthMask NVML's
	// raw nvmlGpuFabricHealthMask (v2 and later).
	Health     string `json:"health,omitempty"`
	HealthMask uint32 `json:"health_mask,omitempty"`
	// Version is the nvmlGpuFabricInfo version that answered (1, 2 or 3; 0 unknown).
	Version int `json:"version,omitempty"`
}

const zeroUUID = "00000000-0000-0000-0000-000000000000"

// Clique is "<cluster_uuid>.<clique_id>" (Kubernetes' nvidia.com/gpu.clique label
// form) for a completed fabric, "" otherwise.
func (f *Fabric) Clique() string {
	if f == nil || f.State != FabricCompleted {
		return ""
	}
	return fmt.Sprintf("%s.%d", f.ClusterUUID, f.CliqueID)
}

// InDomain reports whether the GPU takes part in a multi-node NVLink domain: fabric
// info present and the state anything but not_supported.
func (f *Fabric) InDomain() bool {
	return f != nil && f.State != "" && f.State != FabricNotSupported
}

// Usable reports whether the clique can be used: completed, registered without
// error, and not known to be unhealthy.
func (f *Fabric) Usable() bool {
	return f != nil && f.State == FabricCompleted && f.Status == 0 && (f.Health == "" || f.Health == HealthHealthy)
}

// String is the short form topo and the mapping line print.
func (f *Fabric) String() string {
	if f == nil {
		return "-"
	}
	if !f.InDomain() {
		return f.State
	}
	s := f.State
	if f.Health != "" {
		s += "," + f.Health
	}
	return s + " " + f.ClusterUUID + "." + fmt.Sprint(f.CliqueID)
}

func (f *Fabric) validate() error {
	if f == nil {
		return nil
	}
	switch f.State {
	case FabricCompleted, FabricInProgress, FabricNotStarted, FabricNotSupported:
	default:
		return fmt.Errorf("fabric state %q: want completed, in_progress, not_started or not_supported", f.State)
	}
	switch f.Health {
	case "", HealthHealthy, HealthUnhealthy, HealthLimitedCapacity:
	default:
		return fmt.Errorf("fabric health %q: want healthy, unhealthy, limited_capacity or none", f.Health)
	}
	u := strings.ToLower(f.ClusterUUID)
	if u == "" {
		u = zeroUUID
	}
	if !isUUID(u) {
		return fmt.Errorf("fabric cluster_uuid %q: want 8-4-4-4-12 hex digits", f.ClusterUUID)
	}
	f.ClusterUUID = u
	return nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
	}
	return true
}

func formatUUID(b [16]uint8) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func fabricState(s uint8) string {
	switch s {
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		return FabricNotStarted
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		return FabricInProgress
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		return FabricCompleted
	}
	return FabricNotSupported
}

func healthSummary(s uint8) string {
	switch s {
	case nvml.GPU_FABRIC_HEALTH_SUMMARY_HEALTHY:
		return HealthHealthy
	case nvml.GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY:
		return HealthUnhealthy
	case nvml.GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY:
		return HealthLimitedCapacity
	}
	return ""
}

// healthFromMask reads the v2 health mask (no summary there): a route marked
// unhealthy or an incorrect configuration is unhealthy, degraded bandwidth is limited
// capacity; a mask whose fields say "false" is healthy; all "not supported" is unknown.
func healthFromMask(m uint32) string {
	field := func(shift, width uint32) uint32 { return (m >> shift) & width }
	unhealthy := field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_ROUTE_UNHEALTHY)
	degraded := field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_DEGRADED_BW)
	config := field(nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_INCORRECT_CONFIGURATION, nvml.GPU_FABRIC_HEALTH_MASK_WIDTH_INCORRECT_CONFIGURATION)
	switch {
	case unhealthy == nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE:
		return HealthUnhealthy
	case config > nvml.GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE:
		return HealthUnhealthy
	case degraded == nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE:
		return HealthLimitedCapacity
	case unhealthy == nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE || degraded == nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE:
		return HealthHealthy
	}
	return ""
}

// FabricInfoV is the versioned query that go-nvml's Device.GetGpuFabricInfoV offers.
// go-nvml returns it as a handler bound to a real device handle, which a mock cannot
// build; a mock device implements this interface instead (nvmlmock does), and the
// real library is wrapped in it by fabricQuery.
type FabricInfoV interface {
	GpuFabricInfoV3() (nvml.GpuFabricInfo_v3, nvml.Return)
	GpuFabricInfoV2() (nvml.GpuFabricInfo_v2, nvml.Return)
}

type realFabricV struct{ h nvml.GpuFabricInfoHandler }

func (r realFabricV) GpuFabricInfoV3() (nvml.GpuFabricInfo_v3, nvml.Return) { return r.h.V3() }
func (r realFabricV) GpuFabricInfoV2() (nvml.GpuFabricInfo_v2, nvml.Return) { return r.h.V2() }

// fabricQuery knows which fabric entry points the loaded library has: a driver older
// than the symbol would abort the process at the call (go-nvml binds lazily).
type fabricQuery struct {
	hasV, hasV1 bool
}

func newFabricQuery(lib nvml.Interface) (q fabricQuery) {
	defer func() { _ = recover() }() // a mock without Extensions: assume both
	q.hasV, q.hasV1 = true, true
	ext := lib.Extensions()
	q.hasV = ext.LookupSymbol("nvmlDeviceGetGpuFabricInfoV") == nil
	q.hasV1 = ext.LookupSymbol("nvmlDeviceGetGpuFabricInfo") == nil
	return q
}

// read asks GetGpuFabricInfoV v3, then v2, then GetGpuFabricInfo (v1). nil when the
// driver answers none (too old, or a mock without fabric).
func (q fabricQuery) read(d nvml.Device) (f *Fabric) {
	defer func() {
		if recover() != nil { // a go-nvml mock whose fabric methods are not set
			f = nil
		}
	}()
	var v FabricInfoV
	if fv, ok := d.(FabricInfoV); ok {
		v = fv
	} else if q.hasV && isRealDevice(d) {
		v = realFabricV{d.GetGpuFabricInfoV()}
	}
	if v != nil {
		if i, ret := v.GpuFabricInfoV3(); ret == nvml.SUCCESS {
			f := &Fabric{ClusterUUID: formatUUID(i.ClusterUuid), CliqueID: i.CliqueId, State: fabricState(i.State),
				Status: i.Status, HealthMask: i.HealthMask, Health: healthSummary(i.HealthSummary), Version: 3}
			if f.Health == "" {
				f.Health = healthFromMask(i.HealthMask)
			}
			return f
		}
		if i, ret := v.GpuFabricInfoV2(); ret == nvml.SUCCESS {
			return &Fabric{ClusterUUID: formatUUID(i.ClusterUuid), CliqueID: i.CliqueId, State: fabricState(i.State),
				Status: i.Status, HealthMask: i.HealthMask, Health: healthFromMask(i.HealthMask), Version: 2}
		}
	}
	if !q.hasV1 {
		return nil
	}
	i, ret := d.GetGpuFabricInfo()
	if ret != nvml.SUCCESS {
		return nil
	}
	return &Fabric{ClusterUUID: formatUUID(i.ClusterUuid), CliqueID: i.CliqueId, State: fabricState(i.State),
		Status: i.Status, Version: 1}
}

// isRealDevice: a handle of go-nvml's own library (not a mock).
func isRealDevice(d nvml.Device) bool {
	return fmt.Sprintf("%T", d) == "nvml.nvmlDevice"
}

// Discovery cache lifetimes of a topology with fabric info: the fabric state changes
// without a reboot (fabric manager restarts, a tray joins), so a cached answer is
// trusted for FabricTTL, and for FabricPendingTTL while some GPU's fabric is not
// completed yet (it converges within a minute or so).
const (
	FabricTTL        = 60 * time.Second
	FabricPendingTTL = 5 * time.Second
)

// FabricTTL returns how long a discovery of t may be reused: 0 (until reboot or a
// driver change) when no GPU is in an NVLink domain.
func (t *Topology) FabricTTL() time.Duration {
	ttl := time.Duration(0)
	for _, g := range t.GPUs {
		if !g.Fabric.InDomain() {
			continue
		}
		if !g.Fabric.Usable() {
			return FabricPendingTTL
		}
		ttl = FabricTTL
	}
	return ttl
}

// HasFabric reports whether some GPU is in a multi-node NVLink domain.
func (t *Topology) HasFabric() bool {
	for _, g := range t.GPUs {
		if g.Fabric.InDomain() {
			return true
		}
	}
	return false
}

// hasFabricSource: some backend (NVML, a snapshot) reported fabric facts.
func (t *Topology) hasFabricSource() bool {
	for _, g := range t.GPUs {
		if g.Fabric != nil {
			return true
		}
	}
	return false
}

// TableFabric is a "fabric" line: a step GPU in a multi-node NVLink domain.
type TableFabric struct {
	ID          int
	State       string // completed, in_progress, not_started
	Status      uint32
	Health      string // "" unknown
	ClusterUUID string
	CliqueID    uint32
}

// addFabric fills the table's fabric lines for the step GPUs in an NVLink domain (none
// for PCIe and HGX nodes, whose tables stay as they were), the imex line, and keeps
// such a plan out of the plugin's plan cache: the fabric changes without a file
// changing.
func (tab *Table) addFabric(t *Topology, st *step, root string) {
	for id, sg := range st.GPUs {
		f := t.GPUs[sg.Topo].Fabric
		if !f.InDomain() {
			continue
		}
		tab.Fabric = append(tab.Fabric, TableFabric{ID: id, State: f.State, Status: f.Status, Health: f.Health,
			ClusterUUID: f.ClusterUUID, CliqueID: f.CliqueID})
	}
	if len(tab.Fabric) > 0 {
		tab.IMEXDir = IMEXDir(root)
		tab.NoCache = true
	}
}

func (tab *Table) encodeFabric(add func(string, ...any)) {
	for _, f := range tab.Fabric {
		add("fabric %d %s %d %s %s %d", f.ID, f.State, f.Status, dash(f.Health), f.ClusterUUID, f.CliqueID)
	}
	if tab.IMEXDir != "" {
		add("imex %s", tab.IMEXDir)
	}
}

// problem says why a fabric in an NVLink domain is not usable ("" when it is).
func (f *Fabric) problem() string {
	switch {
	case f.Usable():
		return ""
	case f.State != FabricCompleted:
		return f.State
	case f.Status != 0:
		return fmt.Sprintf("completed, registration failed (NVML error %d)", f.Status)
	}
	return "completed but " + f.Health
}
