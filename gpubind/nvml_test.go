package gpubind_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// TestNVMLMatchesSnapshot runs the NVML backend on a mock built from each snapshot and
// checks every NVML fact, including NVLinks (switch or direct) and MIG.
func TestNVMLMatchesSnapshot(t *testing.T) {
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			want := snapshot(t, name)
			got, err := gpubind.DiscoverNVML(nvmlmock.New(want))
			if err != nil {
				t.Fatal(err)
			}
			if len(got.GPUs) != len(want.GPUs) || got.Driver != "550.54.15" {
				t.Fatalf("%d GPUs, driver %q", len(got.GPUs), got.Driver)
			}
			for i := range want.GPUs {
				g, w := got.GPUs[i], want.GPUs[i]
				wantNUMA := w.NUMA
				if len(w.MemoryNUMA) > 0 {
					wantNUMA = w.MemoryNUMA[0] // Grace: NVML alone names the memory node (Merge mends it)
				}
				if g.BusID != w.BusID || g.Index != i || g.Minor != w.Minor || g.UUID != w.UUID || g.NUMA != wantNUMA ||
					!reflect.DeepEqual(g.Fabric, w.Fabric) ||
					!g.CPUs.Equal(w.CPUs) || !reflect.DeepEqual(g.NVLinks, w.NVLinks) || !reflect.DeepEqual(g.MIG, w.MIG) {
					t.Errorf("GPU %d:\n got %+v\nwant %+v", i, g, w)
				}
				if g.Source["uuid"] != gpubind.BackendNVML || g.Source["pci_bus_id"] != gpubind.BackendNVML {
					t.Errorf("GPU %d sources %v", i, g.Source)
				}
			}
		})
	}
}

// TestAutoMergesSysfs checks source auto: NVML for GPU facts, sysfs for NICs, bridges
// and NUMA nodes, with the backend of each fact recorded.
func TestAutoMergesSysfs(t *testing.T) {
	snap := snapshot(t, "dgxh100")
	nv, err := gpubind.DiscoverNVML(nvmlmock.New(snap))
	if err != nil {
		t.Fatal(err)
	}
	sys, err := gpubind.DiscoverSysfs(fixtures.Root("dgxh100"))
	if err != nil {
		t.Fatal(err)
	}
	m := gpubind.Merge(nv, sys)
	if len(m.NICs) != 8 || len(m.NUMA) != 2 || !reflect.DeepEqual(m.Backends, []string{"nvml", "sysfs"}) {
		t.Fatalf("merge: %d NICs %d NUMA %v", len(m.NICs), len(m.NUMA), m.Backends)
	}
	g := m.GPUs[3]
	if g.Source["uuid"] != "nvml" || g.Source["nvlinks"] != "nvml" || g.Source["pci_path"] != "sysfs" || len(g.PCIPath) != 4 {
		t.Errorf("sources %v path %v", g.Source, g.PCIPath)
	}
	if m.ClosestNIC(3) != "mlx5_3" || m.GPULink(0, 7).String() != "NV18" {
		t.Errorf("merged topology lost facts")
	}
	// Through Discover: auto with a fixture root skips NVML (it describes the host).
	_, notes, err := gpubind.Discover(gpubind.DiscoverOptions{Root: fixtures.Root("dgxh100"), NVML: nvmlmock.New(snap)})
	if err != nil || len(notes) != 1 {
		t.Errorf("auto on a fixture root: %v %v", err, notes)
	}
	// auto on the host root with a failing NVML falls back to sysfs, saying why.
	failing := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	top, notes, err := gpubind.Discover(gpubind.DiscoverOptions{Source: "nvml", NVML: failing})
	if err == nil {
		t.Errorf("source nvml without a library: %v %v", top, notes)
	}
}

// TestSysfsPairedWithSnapshot: a sysfs tree plus its snapshot gives NVLinks and MIG.
func TestSysfsPairedWithSnapshot(t *testing.T) {
	topo, _, err := gpubind.Discover(gpubind.DiscoverOptions{Source: "sysfs", Root: fixtures.Root("h100mig"), Snapshot: fixtures.Snapshot("h100mig")})
	if err != nil {
		t.Fatal(err)
	}
	if len(topo.GPUs[0].MIG) != 3 || topo.GPUs[0].Source["mig"] != "snapshot" || topo.GPUs[0].Source["uuid"] != "sysfs" {
		t.Errorf("paired: %+v", topo.GPUs[0])
	}
	dgx, _, err := gpubind.Discover(gpubind.DiscoverOptions{Source: "sysfs", Root: fixtures.Root("dgxh100"), Snapshot: fixtures.Snapshot("dgxh100")})
	if err != nil || dgx.GPULink(0, 7).String() != "NV18" {
		t.Errorf("paired dgx: %v", err)
	}
}

// TestCapturedH200: a snapshot captured with `gpubind snapshot` (real NVML plus sysfs) on
// the lent single-H200 VM (numa_node -1) loads and plans like the vm1 fixture.
func TestCapturedH200(t *testing.T) {
	topo, err := gpubind.LoadSnapshot(filepath.Join(fixtures.Dir(), "captured", "h200-vm.json"))
	if err != nil {
		t.Fatal(err)
	}
	g := topo.GPUs[0]
	if g.BusID != "0000:00:06.0" || g.NUMA != -1 || g.Source["uuid"] != "nvml" || g.Source["pci_path"] != "sysfs" || topo.Driver != "580.159.04" {
		t.Fatalf("captured: %+v", g)
	}
	c := planCase{policy: "closest,cpus", tasks: 2, taskCPUs: "0;5"}
	tab, bs, err := runCase(t, c, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if idx, _ := describe(tab, bs); idx != "0 0" || tab.Tasks[0].CPUs.String() != "0-15" {
		t.Errorf("plan %q cpus %v", idx, tab.Tasks[0].CPUs)
	}
}
