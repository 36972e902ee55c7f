package gpubind_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

func snapshot(t testing.TB, name string) *gpubind.Topology {
	t.Helper()
	topo, err := gpubind.LoadSnapshot(fixtures.Snapshot(name))
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// planCase describes one dry run; want lists, per task, the NVML indices it gets
// ("0,1" for two GPUs), space separated.
type planCase struct {
	fixture  string
	policy   string
	tasks    int
	gpus     string // SLURM_STEP_GPUS; "" = all
	cvd      string // CUDA_VISIBLE_DEVICES; "" = unset
	taskCPUs string // "0;56;..." bind list; "" = no binding
	want     string
	visible  string // optional: CUDA_VISIBLE_DEVICES per task, space separated
	numbered gpubind.Numbering
}

func runCase(t testing.TB, c planCase, topo *gpubind.Topology, gc *gpubind.GresConf) (*gpubind.Table, []rule.Result, error) {
	req := gpubind.PlanRequest{Topo: topo, Tasks: c.tasks, Option: c.policy, Numbering: c.numbered, Gres: gc, GresFrom: "test"}
	if req.Gres == nil {
		req.Gres = &gpubind.GresConf{AutoDetect: "nvml"}
	}
	if c.gpus != "" {
		g := c.gpus
		req.Env.StepGPUs = &g
	}
	if c.cvd != "" {
		v := c.cvd
		req.Env.CudaVisible = &v
	}
	tab, err := gpubind.Plan(req)
	if err != nil {
		return nil, nil, err
	}
	out := applyRule(t, tab, c.tasks, c.taskCPUs)
	return tab, out, nil
}

func describe(tab *gpubind.Table, bs []rule.Result) (idx, vis string) {
	var a, b []string
	for _, bd := range bs {
		var x, y []string
		for _, id := range bd.GPUs {
			x = append(x, strconv.Itoa(tab.GPUs[id].NVMLIndex))
			y = append(y, tab.GPUs[id].Visible)
		}
		a = append(a, strings.Join(x, ","))
		b = append(b, strings.Join(y, ","))
	}
	return strings.Join(a, " "), strings.Join(b, " ")
}

// TestPoliciesOnFixtures runs every policy on every fixture, with the mapping written out.
func TestPoliciesOnFixtures(t *testing.T) {
	cases := []planCase{
		// DGX H100: GPUs 0-3 (18,2a,3a,5d) on NUMA 0, 4-7 (9a,ab,ba,db) on NUMA 1; NVSwitch.
		{fixture: "dgxh100", policy: "closest", tasks: 4, want: "0 1 4 5"},
		{fixture: "dgxh100", policy: "closest", tasks: 8, want: "0 1 2 3 4 5 6 7"},
		{fixture: "dgxh100", policy: "closest", tasks: 16, want: "0 0 1 1 2 2 3 3 4 4 5 5 6 6 7 7"},
		{fixture: "dgxh100", policy: "closest", tasks: 4, taskCPUs: "0;56;1;57", want: "0 4 1 5"},
		// Six tasks on NUMA 0 (112 is CPU 0's sibling): four take its GPUs, two take free
		// GPUs from the end of the fallback order rather than double up.
		{fixture: "dgxh100", policy: "closest", tasks: 6, taskCPUs: "0;1;2;3;4;112", want: "0 1 2 3 7 6"},
		{fixture: "dgxh100", policy: "closest", tasks: 2, gpus: "2,6", want: "2 6", visible: "2 6"},
		{fixture: "dgxh100", policy: "closest", tasks: 2, gpus: "2,6", taskCPUs: "60;0", want: "6 2"},
		{fixture: "dgxh100", policy: "closest", tasks: 2, gpus: "2,6", cvd: "0,1", want: "2 6", visible: "0 1"},
		{fixture: "dgxh100", policy: "pack", tasks: 4, want: "0 1 2 3"},
		{fixture: "dgxh100", policy: "pack", tasks: 16, want: "0 0 1 1 2 2 3 3 4 4 5 5 6 6 7 7"},
		{fixture: "dgxh100", policy: "spread", tasks: 4, want: "0 4 2 6"},
		{fixture: "dgxh100", policy: "spread", tasks: 8, want: "0 4 2 6 1 5 3 7"},
		{fixture: "dgxh100", policy: "per-task:2", tasks: 4, want: "0,1 2,3 4,5 6,7"},
		{fixture: "dgxh100", policy: "per-task:2", tasks: 2, taskCPUs: "0;56", want: "0,1 4,5"},
		{fixture: "dgxh100", policy: "per-task:4", tasks: 2, want: "0,1,2,3 4,5,6,7"},
		{fixture: "dgxh100", policy: "single:2", tasks: 4, want: "0 0 4 4"},
		{fixture: "dgxh100", policy: "single:2", tasks: 4, taskCPUs: "0;1;56;57", want: "0 0 4 4"},
		{fixture: "dgxh100", policy: "map:1,0", tasks: 4, want: "1 0 1 0"},
		{fixture: "dgxh100", policy: "map:0*2,7", tasks: 4, want: "0 0 7 0"},
		{fixture: "dgxh100-2cpu", policy: "closest", tasks: 4, gpus: "0,1,4,5", taskCPUs: "0;1;0;1", want: "0 4 1 5"},
		{fixture: "dgxh100-2cpu", policy: "closest", tasks: 8, gpus: "0,1,2,3", taskCPUs: "0;1;0;1;0;1;0;1", want: "0 3 1 2 0 1 2 3"},
		// NUMA 1 holds none of the step's GPUs: its tasks take the GPUs NUMA 0's tasks leave.
		{fixture: "dgxh100-2cpu", policy: "closest", tasks: 4, gpus: "0,1,2,3", taskCPUs: "0;1;0;1", want: "0 3 1 2"},
		{fixture: "dgxh100-2cpu", policy: "closest", tasks: 2, gpus: "0,1", taskCPUs: "0;1", want: "0 1"},

		// 8 NUMA nodes, PCI order 01..e1 on NUMA 3,2,1,0,7,6,5,4.
		{fixture: "numa8", policy: "closest", tasks: 8, want: "3 2 1 0 7 6 5 4"},
		{fixture: "numa8", policy: "closest", tasks: 8, taskCPUs: "0;16;32;48;64;80;96;112", want: "3 2 1 0 7 6 5 4"},
		{fixture: "numa8", policy: "closest", tasks: 2, taskCPUs: "64;65", want: "7 6"},
		{fixture: "numa8", policy: "closest", tasks: 4, want: "3 2 1 0"},
		{fixture: "numa8", policy: "pack", tasks: 8, want: "0 1 2 3 4 5 6 7"},
		{fixture: "numa8", policy: "spread", tasks: 8, want: "3 2 1 0 7 6 5 4"},
		{fixture: "numa8", policy: "per-task:2", tasks: 4, want: "0,1 2,3 4,5 6,7"},
		{fixture: "numa8", policy: "single:2", tasks: 4, want: "3 3 2 2"},
		{fixture: "numa8", policy: "map:7,6", tasks: 2, want: "7 6"},

		// misordered without gres.conf (PCI order): 1b,3d NUMA 0; 8a,b1 NUMA 1.
		{fixture: "misordered", policy: "closest", tasks: 4, want: "0 1 2 3"},
		{fixture: "misordered", policy: "closest", tasks: 2, taskCPUs: "16;0", want: "2 0"},
		{fixture: "misordered", policy: "pack", tasks: 4, want: "0 1 2 3"},
		{fixture: "misordered", policy: "spread", tasks: 4, want: "0 2 1 3"},
		{fixture: "misordered", policy: "per-task:2", tasks: 2, want: "0,1 2,3"},
		{fixture: "misordered", policy: "single:2", tasks: 4, want: "0 0 2 2"},
		{fixture: "misordered", policy: "map:3,0", tasks: 2, want: "3 0"},

		// PCIe only: 04/05 behind one switch, 84/85 behind another.
		{fixture: "pcie4", policy: "closest", tasks: 2, want: "0 1"},
		{fixture: "pcie4", policy: "pack", tasks: 2, want: "0 1"},
		{fixture: "pcie4", policy: "pack", tasks: 2, gpus: "0,2,3", want: "2 3"},
		{fixture: "pcie4", policy: "spread", tasks: 2, want: "0 2"},
		{fixture: "pcie4", policy: "per-task:2", tasks: 2, want: "0,1 2,3"},
		{fixture: "pcie4", policy: "per-task:2", tasks: 1, gpus: "1,2,3", want: "2,3"}, // the switch pair
		{fixture: "pcie4", policy: "single:2", tasks: 4, want: "0 0 1 1"},
		{fixture: "pcie4", policy: "map:3,2,1,0", tasks: 4, want: "3 2 1 0"},

		// VM: one GPU with numa_node -1.
		{fixture: "vm1", policy: "closest", tasks: 2, want: "0 0"},
		{fixture: "vm1", policy: "closest", tasks: 2, taskCPUs: "3;4", want: "0 0"},
		{fixture: "vm1", policy: "pack", tasks: 1, want: "0"},
		{fixture: "vm1", policy: "spread", tasks: 1, want: "0"},
		{fixture: "vm1", policy: "per-task:1", tasks: 1, want: "0"},
		{fixture: "vm1", policy: "single:4", tasks: 4, want: "0 0 0 0"},
		{fixture: "vm1", policy: "map:0", tasks: 2, want: "0 0"},

		// GH200 quad: GPU i on Grace NUMA node i.
		{fixture: "gh200", policy: "closest", tasks: 4, taskCPUs: "216;144;72;0", want: "3 2 1 0"},
		{fixture: "gh200", policy: "closest", tasks: 4, want: "0 1 2 3"},
		{fixture: "gh200", policy: "pack", tasks: 2, want: "0 1"},
		{fixture: "gh200", policy: "spread", tasks: 4, want: "0 1 2 3"},
		{fixture: "gh200", policy: "per-task:2", tasks: 2, want: "0,1 2,3"},
		{fixture: "gh200", policy: "single:4", tasks: 8, want: "0 0 0 0 1 1 1 1"},
		{fixture: "gh200", policy: "map:2", tasks: 2, want: "2 2"},

		// MIG: GPU 0 (1b) has 3 instances; GPU 1 (9b) is whole.
		{fixture: "h100mig", policy: "closest", tasks: 2, want: "0 1"},
		{fixture: "h100mig", policy: "pack", tasks: 2, want: "0 1"},
		{fixture: "h100mig", policy: "spread", tasks: 2, want: "0 1"},
		{fixture: "h100mig", policy: "per-task:2", tasks: 1, want: "0,1"},
		{fixture: "h100mig", policy: "single:2", tasks: 2, want: "0 0"},
		{fixture: "h100mig", policy: "map:1", tasks: 1, want: "1"},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s/n%d/g%s/c%s", c.fixture, c.policy, c.tasks, c.gpus, c.taskCPUs)
		t.Run(name, func(t *testing.T) {
			topo := snapshot(t, c.fixture)
			tab, bs, err := runCase(t, c, topo, nil)
			if err != nil {
				t.Fatal(err)
			}
			idx, vis := describe(tab, bs)
			if idx != c.want {
				t.Errorf("got %q, want %q\n%s", idx, c.want, tab)
			}
			if c.visible != "" && vis != c.visible {
				t.Errorf("visible %q, want %q", vis, c.visible)
			}
		})
	}
}

// TestMIGAndUUIDForms checks MIG- and GPU- UUID lists (Slurm 25.11 style and MIG).
func TestMIGAndUUIDForms(t *testing.T) {
	topo := snapshot(t, "h100mig")
	m := topo.GPUs[0].MIG
	c := planCase{fixture: "h100mig", policy: "closest", tasks: 2, cvd: m[2].UUID + "," + m[0].UUID}
	tab, bs, err := runCase(t, c, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, vis := describe(tab, bs)
	// Sorted by GI: MIG gi1 (m[0]) is id 0, gi3 (m[2]) id 1.
	if vis != m[0].UUID+" "+m[2].UUID {
		t.Errorf("MIG visible %q", vis)
	}
	g0, g1 := topo.GPUs[0].UUID, topo.GPUs[1].UUID
	c = planCase{fixture: "h100mig", policy: "map:" + g1 + "," + g0, tasks: 2, gpus: "0,1", cvd: g0 + "," + g1}
	tab, bs, err = runCase(t, c, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if idx, vis := describe(tab, bs); idx != "1 0" || vis != g1+" "+g0 {
		t.Errorf("UUID forms: %q %q", idx, vis)
	}
	// MIG slices allocated as GRES 0 and 1 (both on GPU 0), named by MIG- UUIDs. CUDA sees
	// only the first MIG device of CUDA_VISIBLE_DEVICES, so per-task:2 gives the task its
	// first slice only, with a warning (issue 33).
	c = planCase{fixture: "h100mig", policy: "per-task:2", tasks: 1, gpus: "0,1", cvd: m[1].UUID + "," + m[0].UUID}
	tab, bs, err = runCase(t, c, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, vis := describe(tab, bs); vis != m[0].UUID || tab.Status != gpubind.StatusWarn {
		t.Errorf("MIG slices: %q, status %v", vis, tab.Status)
	}
	// A MIG UUID on a GPU Slurm did not allocate is refused.
	g1c := planCase{fixture: "h100mig", policy: "closest", tasks: 1, gpus: "1", cvd: m[0].UUID}
	if _, _, err = runCase(t, g1c, topo, nil); err == nil || !strings.Contains(err.Error(), "not on a GPU of SLURM_STEP_GPUS") {
		t.Errorf("foreign MIG accepted: %v", err)
	}
	c = planCase{fixture: "h100mig", policy: "closest", tasks: 1, gpus: "0", cvd: "GPU-0000,GPU-1111"}
	if _, _, err = runCase(t, c, topo, nil); err == nil || !strings.Contains(err.Error(), "has 2 entries") {
		t.Errorf("mismatched UUID list accepted: %v", err)
	}
}

// TestPlanErrors checks that bad input is an error naming it.
func TestPlanErrors(t *testing.T) {
	for _, c := range []struct {
		planCase
		want string
	}{
		{planCase{fixture: "dgxh100", policy: "per-task:2", tasks: 5}, "needs 10 GPUs"},
		{planCase{fixture: "dgxh100", policy: "per-task:3", tasks: 1, gpus: "0,1"}, "asks 3 GPUs per task"},
		{planCase{fixture: "dgxh100", policy: "single:2", tasks: 5, gpus: "0,1"}, "needs 3 GPUs"},
		{planCase{fixture: "dgxh100", policy: "map:0,5", tasks: 2, gpus: "0,1"}, `map entry "5"`},
		{planCase{fixture: "dgxh100", policy: "closest", tasks: 1, gpus: "8"}, "GPU 8"},
		{planCase{fixture: "dgxh100", policy: "closest", tasks: 1, gpus: "0,0"}, "listed twice"},
		{planCase{fixture: "dgxh100", policy: "closest", tasks: 1, gpus: "1;2"}, `"1;2"`},
		{planCase{fixture: "dgxh100", policy: "closest", tasks: 1, cvd: "0,GPU-x"}, "mixes"},
		{planCase{fixture: "dgxh100", policy: "closest", tasks: 1, cvd: "MIG-nothere"}, "MIG-nothere"},
		{planCase{fixture: "dgxh100", policy: "fastest", tasks: 1}, `"fastest"`},
		{planCase{fixture: "vm1", policy: "closest", tasks: 1, gpus: "0", cvd: "12"}, ""},
	} {
		_, _, err := runCase(t, c.planCase, snapshot(t, c.fixture), nil)
		if c.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.planCase, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one containing %q", c.planCase, err, c.want)
		}
	}
	// No gres.conf: enforce refuses to guess, optional warns.
	g := "1"
	req := gpubind.PlanRequest{Topo: snapshot(t, "dgxh100"), Tasks: 1, Env: gpubind.StepEnv{StepGPUs: &g}}
	if _, err := gpubind.Plan(req); err == nil || !strings.Contains(err.Error(), "gres.conf") {
		t.Errorf("enforce without gres.conf: %v", err)
	}
	req.Mode = gpubind.ModeOptional
	if tab, err := gpubind.Plan(req); err != nil || tab.Status != gpubind.StatusWarn {
		t.Errorf("optional without gres.conf: %v", err)
	}
	// A step without GPUs binds nothing, with a warning.
	empty := ""
	req = gpubind.PlanRequest{Topo: snapshot(t, "dgxh100"), Tasks: 2, Env: gpubind.StepEnv{StepGPUs: &empty}, Gres: &gpubind.GresConf{}}
	if tab, err := gpubind.Plan(req); err != nil || tab.Status != gpubind.StatusWarn || len(tab.Tasks[1].GPUs) != 0 {
		t.Errorf("no GPUs: %v %v", err, tab)
	}
}

// TestNICsAndEnv checks the rails of the DGX H100 (GPU i -> mlx5_i), the env and log line.
func TestNICsAndEnv(t *testing.T) {
	topo := snapshot(t, "dgxh100")
	for i := range topo.GPUs {
		if got := topo.ClosestNIC(i); got != fmt.Sprintf("mlx5_%d", i) {
			t.Errorf("GPU %d closest NIC %s", i, got)
		}
	}
	if l := topo.GPULink(0, 5).String(); l != "NV18" {
		t.Errorf("GPU0-GPU5 %s", l)
	}
	if l := topo.NICLink(0, 1).String(); l != "PIX" {
		t.Errorf("GPU0-mlx5_1 %s", l)
	}
	if l := topo.NICLink(0, 2).String(); l != "NODE" {
		t.Errorf("GPU0-mlx5_2 %s", l)
	}
	if l := topo.NICLink(0, 7).String(); l != "SYS" {
		t.Errorf("GPU0-mlx5_7 %s", l)
	}
	p4 := snapshot(t, "pcie4")
	for i, want := range []string{"X", "PIX", "PHB", "PHB"} {
		if l := p4.GPULink(0, i).String(); l != want {
			t.Errorf("pcie4 GPU0-GPU%d %s want %s", i, l, want)
		}
	}
	if l := snapshot(t, "gh200").NICLink(1, 1).String(); l != "NODE" {
		t.Errorf("gh200 GPU1-mlx5_1 %s", l)
	}
	_, bs, err := runCase(t, planCase{policy: "closest,nic", tasks: 2, gpus: "5,0"}, topo, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := envMap(bs[1])
	want := map[string]string{
		"CUDA_VISIBLE_DEVICES": "5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GPUBIND_GPUS": "5",
		"GPUBIND_PCI_BUS_IDS": "0000:ab:00.0", "GPUBIND_UUIDS": topo.GPUs[5].UUID, "GPUBIND_NUMA": "1",
		"GPUBIND_CUDA_DEVICES": "0", "GPUBIND_NIC": "mlx5_5:1",
		// The node's rails, the same for every task (NCCL's rule); UCX the task's own.
		"NCCL_IB_HCA": "=mlx5_0:1,mlx5_5:1", "UCX_NET_DEVICES": "mlx5_5:1",
	}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env %v\nwant %v", env, want)
	}
	line := bs[1].LogLine
	if line != "task 1 (rank 1): CUDA_VISIBLE_DEVICES=5 -> GPU 5 0000:ab:00.0 "+topo.GPUs[5].UUID+" NUMA 1 nic mlx5_5:1" {
		t.Errorf("log line %q", line)
	}
	// cpus flag: GPU-first plans bind the CPUs of the GPU's NUMA node.
	tab, _, _ := runCase(t, planCase{policy: "closest,cpus", tasks: 2}, topo, nil)
	if tab.Tasks[0].CPUs.String() != "0-55,112-167" || tab.Tasks[1].CPUs.String() != "56-111,168-223" {
		t.Errorf("cpus flag: %v %v", tab.Tasks[0].CPUs, tab.Tasks[1].CPUs)
	}
}

// TestSysfsMatchesSnapshot reads every fixture tree and compares it with the snapshot,
// except the facts sysfs cannot know (NVLink, MIG).
func TestSysfsMatchesSnapshot(t *testing.T) {
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			got, err := gpubind.DiscoverSysfs(fixtures.Root(name))
			if err != nil {
				t.Fatal(err)
			}
			want := snapshot(t, name)
			if len(got.GPUs) != len(want.GPUs) || len(got.NICs) != len(want.NICs) || len(got.NUMA) != len(want.NUMA) {
				t.Fatalf("counts differ: %d/%d GPUs %d/%d NICs %d/%d NUMA", len(got.GPUs), len(want.GPUs), len(got.NICs), len(want.NICs), len(got.NUMA), len(want.NUMA))
			}
			for i := range want.GPUs {
				g, w := got.GPUs[i], want.GPUs[i]
				if g.BusID != w.BusID || g.Index != w.Index || g.Minor != w.Minor || g.UUID != w.UUID || g.NUMA != w.NUMA ||
					!g.CPUs.Equal(w.CPUs) || !reflect.DeepEqual(g.PCIPath, w.PCIPath) || g.Source["uuid"] != "sysfs" {
					t.Errorf("GPU %d:\n got %+v\nwant %+v", i, g, w)
				}
			}
			for i := range want.NICs {
				n, w := got.NICs[i], want.NICs[i]
				if n.Name != w.Name || n.BusID != w.BusID || n.NUMA != w.NUMA || n.Netdev != w.Netdev || !reflect.DeepEqual(n.PCIPath, w.PCIPath) {
					t.Errorf("NIC %d:\n got %+v\nwant %+v", i, n, w)
				}
			}
			for i := range want.NUMA {
				if got.NUMA[i].ID != want.NUMA[i].ID || !got.NUMA[i].CPUs.Equal(want.NUMA[i].CPUs) {
					t.Errorf("NUMA %d: %+v vs %+v", i, got.NUMA[i], want.NUMA[i])
				}
			}
			if got.Driver != "550.54.15" {
				t.Errorf("driver %q", got.Driver)
			}
		})
	}
}

// TestGresMapping maps GRES indices through gres.conf File= order, device minors and
// /proc/driver/nvidia to bus ids on the misordered fixture (root: mknod).
func TestGresMapping(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mknod fake GPU device nodes")
	}
	f, _ := fixtures.Get("misordered")
	dir := t.TempDir()
	var lines []string
	for _, minor := range f.GresOrder {
		p := filepath.Join(dir, fmt.Sprintf("nvidia%d", minor))
		if err := mknod(p, minor); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, "Name=gpu File="+p)
	}
	gc, err := gpubind.ParseGresConf(strings.Join(lines, "\n"), "node1")
	if err != nil {
		t.Fatal(err)
	}
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("misordered"))
	if err != nil {
		t.Fatal(err)
	}
	gm, err := gpubind.BuildGresMap(topo, gc, "test")
	if err != nil {
		t.Fatal(err)
	}
	var buses []string
	for _, i := range gm.GPUs {
		buses = append(buses, topo.GPUs[i].BusID)
	}
	// GRES 0 = nvidia3 = 8a, 1 = nvidia1 = b1, 2 = nvidia0 = 3d, 3 = nvidia2 = 1b.
	if strings.Join(buses, " ") != "0000:8a:00.0 0000:b1:00.0 0000:3d:00.0 0000:1b:00.0" {
		t.Fatalf("GRES map %v", buses)
	}
	for _, c := range []struct {
		planCase
		wantIdx, wantVis string
	}{
		// Slurm gave GRES 0,2 = 8a (NUMA 1) and 3d (NUMA 0). Task 0 runs on NUMA 1.
		{planCase{policy: "closest", tasks: 2, gpus: "0,2", taskCPUs: "16;0", numbered: gpubind.NumberingGlobal}, "2 1", "2 1"},
		// ConstrainDevices: the task sees 3d as 0 and 8a as 1 (PCI order), whatever Slurm's order.
		{planCase{policy: "closest", tasks: 2, gpus: "0,2", taskCPUs: "16;0", numbered: gpubind.NumberingRelative}, "2 1", "1 0"},
		{planCase{policy: "closest", tasks: 2, gpus: "0,2", cvd: "0,1", taskCPUs: "16;0"}, "2 1", "1 0"},
		{planCase{policy: "map:3,0", tasks: 2, gpus: "0,1,2,3"}, "0 2", "0 2"},
	} {
		tab, bs, err := runCase(t, c.planCase, topo, gc)
		if err != nil {
			t.Fatal(err)
		}
		if idx, vis := describe(tab, bs); idx != c.wantIdx || vis != c.wantVis {
			t.Errorf("%+v: got %q/%q want %q/%q", c.planCase, idx, vis, c.wantIdx, c.wantVis)
		}
	}
	// A File= that is not an NVIDIA device is an error naming it.
	bad := &gpubind.GresConf{Files: []string{"/dev/null"}}
	if _, err := gpubind.BuildGresMap(topo, bad, "x"); err == nil || !strings.Contains(err.Error(), "/dev/null") {
		t.Errorf("/dev/null as GPU: %v", err)
	}
	// A minor the topology lacks.
	p := filepath.Join(dir, "nvidia9")
	if err := mknod(p, 9); err != nil {
		t.Fatal(err)
	}
	if _, err := gpubind.BuildGresMap(topo, &gpubind.GresConf{Files: []string{p}}, "x"); err == nil || !strings.Contains(err.Error(), "minor 9") {
		t.Errorf("unknown minor: %v", err)
	}
}

// TestSlurmEnvUUID: Slurm 26.05's gres.conf Flags=env_uuid writes the step's GPUs by UUID into
// CUDA_VISIBLE_DEVICES (GRES index order; SLURM_STEP_GPUS keeps the indices). The engine takes
// them as the step's GPUs and every task's CUDA_VISIBLE_DEVICES names its GPU by UUID, with
// or without the uuid flag; GPUBIND_* describe the same GPU.
func TestSlurmEnvUUID(t *testing.T) {
	topo := snapshot(t, "dgxh100")
	u := func(i int) string { return topo.GPUs[i].UUID }
	for _, policy := range []string{"closest", "closest,uuid", "closest,visible=localid"} {
		c := planCase{fixture: "dgxh100", policy: policy, tasks: 2, gpus: "2,6", cvd: u(2) + "," + u(6)}
		tab, bs, err := runCase(t, c, topo, nil)
		if err != nil {
			t.Fatalf("%s: %v", policy, err)
		}
		if idx, _ := describe(tab, bs); !strings.HasPrefix(idx, "2") || !strings.Contains(idx, "6") {
			t.Errorf("%s: tasks on GPUs %q, want 2 and 6", policy, idx)
		}
		for L, r := range bs {
			env := map[string]string{}
			for _, kv := range r.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			own := tab.GPUs[r.Own[0]]
			cvd := strings.Split(env["CUDA_VISIBLE_DEVICES"], ",")
			cd, _ := strconv.Atoi(strings.Split(env["GPUBIND_CUDA_DEVICES"], ",")[0])
			if cd >= len(cvd) || cvd[cd] != topo.GPUs[own.NVMLIndex].UUID || env["GPUBIND_UUIDS"] != cvd[cd] ||
				env["GPUBIND_GPUS"] != strconv.Itoa(own.NVMLIndex) {
				t.Errorf("%s task %d: CUDA_VISIBLE_DEVICES=%s GPUBIND_CUDA_DEVICES=%s GPUBIND_UUIDS=%s GPUBIND_GPUS=%s disagree",
					policy, L, env["CUDA_VISIBLE_DEVICES"], env["GPUBIND_CUDA_DEVICES"], env["GPUBIND_UUIDS"], env["GPUBIND_GPUS"])
			}
		}
	}
}
