package gpubind_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

const testCluster = "2f6b2b6e-6d8a-4c1e-9a55-0b7b1c2d3e4f"

// withFabric is the dgxh100 snapshot with every GPU's fabric set to f (a copy each).
func withFabric(t *testing.T, f *gpubind.Fabric) *gpubind.Topology {
	topo := snapshot(t, "dgxh100")
	for i := range topo.GPUs {
		if f != nil {
			c := *f
			topo.GPUs[i].Fabric = &c
		}
	}
	return topo
}

// TestFabricDiscoveryNVML reads every fabric state through the go-nvml mock, through
// GetGpuFabricInfoV v3, its v2 fallback (no health summary: health from the mask) and
// GetGpuFabricInfo v1 (no health).
func TestFabricDiscoveryNVML(t *testing.T) {
	degradedMask := uint32(nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW |
		nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY)
	healthyMask := uint32(nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW |
		nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY)
	unhealthyMask := uint32(nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE << nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY)
	for _, c := range []struct {
		name    string
		fab     gpubind.Fabric
		version int
		want    gpubind.Fabric
		clique  string
	}{
		{"completed v3", gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 7, State: "completed", Health: "healthy", HealthMask: healthyMask}, 3,
			gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 7, State: "completed", Health: "healthy", HealthMask: healthyMask, Version: 3}, testCluster + ".7"},
		{"completed v2 healthy mask", gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 7, State: "completed", HealthMask: healthyMask}, 2,
			gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 7, State: "completed", Health: "healthy", HealthMask: healthyMask, Version: 2}, testCluster + ".7"},
		{"completed v2 degraded", gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 1, State: "completed", HealthMask: degradedMask}, 2,
			gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 1, State: "completed", Health: "limited_capacity", HealthMask: degradedMask, Version: 2}, testCluster + ".1"},
		{"completed v2 unhealthy", gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 1, State: "completed", HealthMask: unhealthyMask}, 2,
			gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 1, State: "completed", Health: "unhealthy", HealthMask: unhealthyMask, Version: 2}, testCluster + ".1"},
		{"completed v1", gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 3, State: "completed", Health: "healthy"}, 1,
			gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 3, State: "completed", Version: 1}, testCluster + ".3"},
		{"in progress", gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 0, State: "in_progress"}, 3,
			gpubind.Fabric{ClusterUUID: testCluster, State: "in_progress", Version: 3}, ""},
		{"not started", gpubind.Fabric{ClusterUUID: "", State: "not_started"}, 3,
			gpubind.Fabric{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: "not_started", Version: 3}, ""},
		// The H200 (driver 580.159.04): SUCCESS, state 0, clique 0, zero UUID.
		{"not supported (H200)", gpubind.Fabric{State: "not_supported"}, 3,
			gpubind.Fabric{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: "not_supported", Version: 3}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := c.fab
			if f.ClusterUUID == "" {
				f.ClusterUUID = "00000000-0000-0000-0000-000000000000"
			}
			lib := nvmlmock.New(withFabric(t, &f))
			for _, d := range lib.Devices {
				d.(*nvmlmock.Device).MaxFabricVersion = c.version
			}
			got, err := gpubind.DiscoverNVML(lib)
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range got.GPUs {
				if g.Fabric == nil || *g.Fabric != c.want || g.Source["fabric"] != "nvml" {
					t.Fatalf("GPU %d fabric %+v source %q, want %+v", g.Index, g.Fabric, g.Source["fabric"], c.want)
				}
				if g.Fabric.Clique() != c.clique {
					t.Errorf("clique %q, want %q", g.Fabric.Clique(), c.clique)
				}
			}
		})
	}
	// A driver without fabric support: no fabric object, no failure.
	got, err := gpubind.DiscoverNVML(nvmlmock.New(withFabric(t, nil)))
	if err != nil || got.GPUs[0].Fabric != nil {
		t.Fatalf("no fabric: %v %+v", err, got.GPUs[0].Fabric)
	}
}

// TestFabricSnapshotRoundTrip: fabric info survives snapshot, parse and snapshot again;
// a bad state or UUID is an error naming it.
func TestFabricSnapshotRoundTrip(t *testing.T) {
	topo := withFabric(t, &gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 4, State: "completed", Health: "healthy", HealthMask: 42, Version: 3})
	topo.GPUs[7].Fabric = &gpubind.Fabric{ClusterUUID: strings.ToUpper(testCluster), State: "in_progress", Status: 3}
	var a bytes.Buffer
	if err := gpubind.WriteSnapshot(&a, topo); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.String(), `"fabric": {`) || !strings.Contains(a.String(), `"clique_id": 4`) {
		t.Fatalf("snapshot lacks fabric:\n%.2000s", a.String())
	}
	back, err := gpubind.ParseSnapshot(a.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.GPUs[0].Fabric, topo.GPUs[0].Fabric) || back.GPUs[7].Fabric.ClusterUUID != testCluster {
		t.Fatalf("round trip: %+v %+v", back.GPUs[0].Fabric, back.GPUs[7].Fabric)
	}
	var b, c bytes.Buffer
	_ = gpubind.WriteSnapshot(&b, back)
	again, err := gpubind.ParseSnapshot(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	_ = gpubind.WriteSnapshot(&c, again)
	if b.String() != c.String() {
		t.Errorf("second snapshot differs")
	}
	for _, bad := range []struct{ from, to, want string }{
		{`"state": "in_progress"`, `"state": "done"`, `fabric state "done"`},
		{`"health": "healthy"`, `"health": "fine"`, `fabric health "fine"`},
		{`"cluster_uuid": "` + testCluster + `"`, `"cluster_uuid": "xyz"`, `cluster_uuid "xyz"`},
		{`"clique_id": 4`, `"clique_id": -4`, `clique_id`},
		{`"clique_id": 4`, `"clique": 4`, `unknown field "clique"`},
	} {
		text := strings.Replace(a.String(), bad.from, bad.to, 1)
		if _, err := gpubind.ParseSnapshot([]byte(text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.to, err, bad.want)
		}
	}
}

// TestFabricInTopo: topo shows each GPU's fabric, and says when the backend (sysfs) has
// no fabric info.
func TestFabricInTopo(t *testing.T) {
	topo := withFabric(t, &gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 4, State: "completed", Health: "healthy"})
	for i := range topo.GPUs {
		topo.GPUs[i].Source = map[string]string{"fabric": "nvml"}
	}
	out := gpubind.FormatTopo(topo)
	if !strings.Contains(out, "FABRIC") || !strings.Contains(out, "completed,healthy "+testCluster+".4") || strings.Contains(out, "no fabric info") {
		t.Errorf("topo:\n%s", out)
	}
	// A snapshot written without sources (the fixtures) still shows its fabric.
	snap, _, err := gpubind.Discover(gpubind.DiscoverOptions{Source: "snapshot", Snapshot: fixtures.Snapshot("gb200")})
	if err != nil {
		t.Fatal(err)
	}
	if out := gpubind.FormatTopo(snap); strings.Contains(out, "no fabric info") || !strings.Contains(out, "fabric=snapshot") {
		t.Errorf("gb200 snapshot topo:\n%s", out)
	}
	sys, err := gpubind.DiscoverSysfs(fixtures.Root("dgxh100"))
	if err != nil {
		t.Fatal(err)
	}
	out = gpubind.FormatTopo(sys)
	if !strings.Contains(out, "fabric=none(no fabric info)") || !strings.Contains(out, "fabric: no fabric info") {
		t.Errorf("sysfs topo does not say it has no fabric info:\n%s", out)
	}
}

// fabricPlan plans 8 tasks of closest on the dgxh100 with the fabric f on every GPU
// (mod changes single GPUs) and the IMEX directory dir, and runs the rule.
func fabricPlan(t *testing.T, f *gpubind.Fabric, mod func(*gpubind.Topology), dir string, denied ...string) (*gpubind.Table, []rule.Result) {
	t.Helper()
	topo := withFabric(t, f)
	if mod != nil {
		mod(topo)
	}
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 8, Option: "closest", Gres: &gpubind.GresConf{AutoDetect: "nvml"}, GresFrom: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if tab.IMEXDir != "" {
		tab.IMEXDir = dir
	}
	// The GPUs' device nodes exist (plain files here): a missing node is one the task
	// cannot open, and the device limit runs whenever denied is given.
	devs := t.TempDir()
	for i := range tab.GPUs {
		tab.GPUs[i].Dev = filepath.Join(devs, fmt.Sprintf("nvidia%d", i))
		if err := os.WriteFile(tab.GPUs[i].Dev, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := rule.Parse(tab.String())
	if err != nil {
		t.Fatalf("%v\n%s", err, tab)
	}
	defer rt.Close()
	var out []rule.Result
	for L := 0; L < 8; L++ {
		r, err := rt.Apply(rule.Task{Local: L, Rank: L, Denied: denied})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return tab, out
}

// TestFabricEnvAndWarnings: the per-task decision of rule/fabric.c for every state.
func TestFabricEnvAndWarnings(t *testing.T) {
	dir := t.TempDir()
	chans := filepath.Join(dir, "nvidia-caps-imex-channels")
	if err := os.Mkdir(chans, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chans, "channel0"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	clique := testCluster + ".5"
	completed := &gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 5, State: "completed", Health: "healthy"}

	tab, rs := fabricPlan(t, completed, nil, chans)
	text := tab.String()
	if !strings.Contains(text, "fabric 0 completed 0 healthy "+testCluster+" 5\n") || !strings.Contains(text, "imex "+chans+"\n") ||
		!strings.Contains(text, "depends ?\n") {
		t.Fatalf("table lacks fabric, imex or depends ? lines:\n%s", text)
	}
	for L, r := range rs {
		if envMap(r)["GPUBIND_NVL_CLIQUE"] != clique || r.Warning != "" || !strings.Contains(r.LogLine, "fabric completed,healthy clique "+clique) {
			t.Fatalf("task %d: env %v warning %q line %q", L, r.Env, r.Warning, r.LogLine)
		}
	}
	// Unknown health (v1 driver) counts as usable.
	_, rs = fabricPlan(t, &gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 5, State: "completed"}, nil, chans)
	if envMap(rs[0])["GPUBIND_NVL_CLIQUE"] != clique || rs[0].Warning != "" {
		t.Errorf("completed, health unknown: %v %q", rs[0].Env, rs[0].Warning)
	}

	// Not ready or not healthy: no variable, a warning naming the state.
	for _, c := range []struct {
		f    gpubind.Fabric
		want string
	}{
		{gpubind.Fabric{ClusterUUID: testCluster, State: "in_progress"}, "NVLink fabric is in_progress, not completed"},
		{gpubind.Fabric{ClusterUUID: testCluster, State: "not_started"}, "NVLink fabric is not_started, not completed"},
		{gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 5, State: "completed", Health: "unhealthy"}, "completed but unhealthy"},
		{gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 5, State: "completed", Health: "limited_capacity"}, "completed but limited_capacity"},
		{gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 5, State: "completed", Status: 999}, "registration failed (NVML error 999)"},
	} {
		_, rs := fabricPlan(t, &c.f, nil, chans)
		for L, r := range rs {
			if _, ok := envMap(r)["GPUBIND_NVL_CLIQUE"]; ok || !strings.Contains(r.Warning, c.want) || !strings.HasPrefix(r.Warning, "task ") {
				t.Errorf("%s task %d: env %v warning %q", c.f.State, L, r.Env, r.Warning)
			}
		}
	}

	// not_supported (PCIe, HGX, the H200) and no fabric info: neither, and the table
	// is as it was (no fabric, imex or depends ? line).
	for _, f := range []*gpubind.Fabric{{ClusterUUID: "00000000-0000-0000-0000-000000000000", State: "not_supported"}, nil} {
		tab, rs := fabricPlan(t, f, nil, chans)
		if s := tab.String(); strings.Contains(s, "fabric ") || strings.Contains(s, "imex ") || strings.Contains(s, "depends ?") {
			t.Errorf("table of a node without NVLink domain:\n%s", s)
		}
		if _, ok := envMap(rs[0])["GPUBIND_NVL_CLIQUE"]; ok || rs[0].Warning != "" || strings.Contains(rs[0].LogLine, "fabric") {
			t.Errorf("not_supported: %v %q %q", rs[0].Env, rs[0].Warning, rs[0].LogLine)
		}
	}

	// GPUs of one task in two cliques.
	tabs, err := gpubind.Plan(gpubind.PlanRequest{Topo: withFabric(t, completed), Tasks: 1, Option: "per-task:2", Gres: &gpubind.GresConf{AutoDetect: "nvml"}, GresFrom: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range tabs.Fabric {
		tabs.Fabric[i].CliqueID = uint32(i)
	}
	tabs.IMEXDir = chans
	r := applyRule(t, tabs, 1, "")[0]
	if _, ok := envMap(r)["GPUBIND_NVL_CLIQUE"]; ok || !strings.Contains(r.Warning, "span NVLink cliques") {
		t.Errorf("two cliques: %v %q", r.Env, r.Warning)
	}

	// IMEX: no channel device, or none the task may open: a warning naming the device,
	// the variable still set.
	empty := t.TempDir()
	_, rs = fabricPlan(t, completed, nil, empty)
	if envMap(rs[0])["GPUBIND_NVL_CLIQUE"] != clique || !strings.Contains(rs[0].Warning, "no IMEX channel device ("+empty+"/channelN)") ||
		!strings.Contains(rs[0].Warning, "CUDA_ERROR_NOT_PERMITTED") {
		t.Errorf("no channel: %v %q", rs[0].Env, rs[0].Warning)
	}
	_, rs = fabricPlan(t, completed, nil, filepath.Join(empty, "missing"))
	if !strings.Contains(rs[0].Warning, "no IMEX channel device") {
		t.Errorf("no channel directory: %q", rs[0].Warning)
	}
	_, rs = fabricPlan(t, completed, nil, chans, filepath.Join(chans, "channel0"))
	if !strings.Contains(rs[0].Warning, "cannot open the IMEX channel "+filepath.Join(chans, "channel0")) {
		t.Errorf("denied channel: %q", rs[0].Warning)
	}
	// Another channel the task may open is enough.
	if err := os.WriteFile(filepath.Join(chans, "channel12"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	_, rs = fabricPlan(t, completed, nil, chans, filepath.Join(chans, "channel0"))
	if rs[0].Warning != "" {
		t.Errorf("channel12 open: %q", rs[0].Warning)
	}
}

// TestFabricTableErrors: the C parser refuses malformed fabric and imex lines.
func TestFabricTableErrors(t *testing.T) {
	tab, _ := fabricPlan(t, &gpubind.Fabric{ClusterUUID: testCluster, CliqueID: 5, State: "completed", Health: "healthy"}, nil, "/dev/nvidia-caps-imex-channels")
	good := tab.String()
	line := "fabric 0 completed 0 healthy " + testCluster + " 5"
	for _, bad := range []string{
		"fabric 0 done 0 healthy " + testCluster + " 5",
		"fabric 0 completed 0 fine " + testCluster + " 5",
		"fabric 0 completed 0 healthy not-a-uuid 5",
		"fabric 0 completed 0 healthy " + testCluster + " -1",
		"fabric 0 completed 0 healthy " + testCluster + " 4294967296",
		"fabric 99 completed 0 healthy " + testCluster + " 5",
		"fabric 1 completed 0 healthy " + testCluster + " 5",
		"fabric 0 completed 0 healthy " + testCluster,
		"imex relative/dir",
	} {
		text := strings.Replace(good, line, bad, 1)
		if bad == "imex relative/dir" {
			text = strings.Replace(good, "imex /dev/nvidia-caps-imex-channels", bad, 1)
		}
		if text == good {
			t.Fatalf("no replacement for %q", bad)
		}
		if rt, err := rule.Parse(text); err == nil {
			rt.Close()
			t.Errorf("parsed a table with %q", bad)
		}
	}
}
