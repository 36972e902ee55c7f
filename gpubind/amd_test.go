package gpubind_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// frontierBus are the Frontier GCDs' bus ids, GCD 0..7 (KFD and ROCr order).
var frontierBus = []string{"0000:c1:00.0", "0000:c6:00.0", "0000:c9:00.0", "0000:ce:00.0",
	"0000:d1:00.0", "0000:d6:00.0", "0000:d9:00.0", "0000:de:00.0"}

// frontierNUMACPU is a CPU of each NUMA node of the frontier fixture.
var frontierNUMACPU = []int{0, 16, 32, 48}

// TestAMDSysfsFrontier reads the frontier tree (KFD topology and amdgpu PCI functions,
// no ROCm library) and checks every GPU fact against the public mapping and the
// snapshot.
func TestAMDSysfsFrontier(t *testing.T) {
	got, err := gpubind.DiscoverSysfs(fixtures.Root("frontier"))
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, "frontier")
	if len(got.GPUs) != 8 || len(got.NUMA) != 4 || len(got.NICs) != 0 || !got.IsAMD() || got.Driver != "6.8.5" {
		t.Fatalf("%d GPUs, %d NUMA nodes, %d RDMA NICs, AMD %v, driver %q", len(got.GPUs), len(got.NUMA), len(got.NICs), got.IsAMD(), got.Driver)
	}
	for i, g := range got.GPUs {
		w := want.GPUs[i]
		if g.BusID != frontierBus[i] || g.Index != i || g.NUMA != fixtures.FrontierNUMA[i] || g.Minor != 128+i ||
			g.Device != fmt.Sprintf("/dev/dri/renderD%d", 128+i) || g.Name != "AMD Instinct MI250X" || g.Vendor != gpubind.VendorAMD {
			t.Errorf("GCD %d: %+v", i, g)
		}
		if len(g.UUID) != 20 || !strings.HasPrefix(g.UUID, "GPU-") || strings.ToUpper(g.UUID) != g.UUID {
			t.Errorf("GCD %d: UUID %q is not GPU- and 16 upper-case hex digits", i, g.UUID)
		}
		if g.UUID != w.UUID || !g.CPUs.Equal(w.CPUs) || !reflect.DeepEqual(g.PCIPath, w.PCIPath) || !reflect.DeepEqual(g.XGMI, w.XGMI) {
			t.Errorf("GCD %d:\n got %+v\nwant %+v", i, g, w)
		}
		if g.Source["uuid"] != gpubind.BackendSysfs || g.Source["xgmi"] != gpubind.BackendSysfs {
			t.Errorf("GCD %d sources %v", i, g.Source)
		}
	}
	// The OLCF mapping: the GCDs nearest NUMA 0 are 4 and 5, not 0 and 1.
	for n, gcds := range map[int][]int{0: {4, 5}, 1: {2, 3}, 2: {6, 7}, 3: {0, 1}} {
		for _, i := range gcds {
			if got.GPUs[i].NUMA != n || !got.GPUs[i].CPUs.Equal(got.NUMACPUs(n)) {
				t.Errorf("GCD %d: NUMA %d CPUs %v, want NUMA %d", i, got.GPUs[i].NUMA, got.GPUs[i].CPUs, n)
			}
		}
	}
	// XGMI: the package peers (0-1, 2-3, ...) are one hop (15), and so are 0-2, 0-6; 1-7 is three.
	for _, c := range []struct{ a, b int }{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {0, 2}, {0, 6}} {
		if l := got.GPULink(c.a, c.b); l.Class != gpubind.ClassNV || l.XGMI != 15 || l.String() != "XGMI15" {
			t.Errorf("GCD %d-%d: link %+v %s, want XGMI15", c.a, c.b, l, l)
		}
	}
	if l := got.GPULink(1, 7); l.XGMI != 45 || !got.GPULink(0, 1).Better(l) || l.Better(got.GPULink(0, 3)) {
		t.Errorf("GCD 1-7: %+v", l)
	}
	// `gpubind topo` prints the matrix with XGMI weights.
	if s := gpubind.FormatTopo(got); !strings.Contains(s, "XGMI15") || !strings.Contains(s, "GPU-") {
		t.Errorf("topo:\n%s", s)
	}
}

// TestAMDUUID: ROCr's ROCR_VISIBLE_DEVICES filter matches "GPU-" and 16 upper-case hex
// digits, zero padded; unique_id 0 (no UUID) gives none.
func TestAMDUUID(t *testing.T) {
	if u := gpubind.AMDUUID(0xab12); u != "GPU-000000000000AB12" {
		t.Errorf("%q", u)
	}
	if u := gpubind.AMDUUID(0); u != "" {
		t.Errorf("%q", u)
	}
}

// frontierPlan plans option on the frontier fixture (all 8 GCDs, or SLURM_STEP_GPUS
// gpus) and runs the rule for tasks bound to the CPUs in taskCPUs.
func frontierPlan(t *testing.T, option string, tasks int, gpus, cvd, taskCPUs string, num gpubind.Numbering) (*gpubind.Table, []rule.Result) {
	t.Helper()
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("frontier"))
	if err != nil {
		t.Fatal(err)
	}
	req := gpubind.PlanRequest{Topo: topo, Tasks: tasks, Option: option, Numbering: num,
		Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test"}
	if gpus != "" {
		req.Env.StepGPUs = &gpus
	}
	if cvd != "" {
		req.Env.CudaVisible = &cvd
	}
	tab, err := gpubind.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Vendor != gpubind.VendorAMD || !strings.Contains(tab.String(), "\nvendor amd\n") {
		t.Fatalf("table without vendor amd:\n%s", tab)
	}
	return tab, applyRule(t, tab, tasks, taskCPUs)
}

// TestAMDFrontierClosest: closest puts every task on a GCD of its NUMA node, with
// ROCR_VISIBLE_DEVICES naming it and HIP's variables counting from 0 (issue 38's
// "done when").
func TestAMDFrontierClosest(t *testing.T) {
	// Two tasks per NUMA node, in NUMA order: tasks 0,1 on NUMA 0 ... 6,7 on NUMA 3.
	var cpus []string
	for n := 0; n < 4; n++ {
		cpus = append(cpus, strconv.Itoa(frontierNUMACPU[n]), strconv.Itoa(frontierNUMACPU[n]+1))
	}
	tab, res := frontierPlan(t, "closest", 8, "", "", strings.Join(cpus, ";"), gpubind.NumberingGlobal)
	used := map[int]bool{}
	for L, r := range res {
		numa := L / 2
		if len(r.GPUs) != 1 {
			t.Fatalf("task %d: GPUs %v", L, r.GPUs)
		}
		g := tab.GPUs[r.GPUs[0]]
		env := envMap(r)
		if g.NUMA != numa || used[g.NVMLIndex] {
			t.Errorf("task %d on NUMA %d got GCD %d (NUMA %d)", L, numa, g.NVMLIndex, g.NUMA)
		}
		used[g.NVMLIndex] = true
		if env["ROCR_VISIBLE_DEVICES"] != strconv.Itoa(g.NVMLIndex) || env["GPUBIND_PCI_BUS_IDS"] != frontierBus[g.NVMLIndex] ||
			env["GPUBIND_GPUS"] != strconv.Itoa(g.NVMLIndex) || env["GPUBIND_NUMA"] != strconv.Itoa(numa) || env["GPUBIND_UUIDS"] != g.UUID {
			t.Errorf("task %d env %v", L, r.Env)
		}
		for _, v := range []string{"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "GPUBIND_CUDA_DEVICES"} {
			if env[v] != "0" {
				t.Errorf("task %d: %s=%q, want 0 (relative to ROCR_VISIBLE_DEVICES)", L, v, env[v])
			}
		}
		if _, set := env["CUDA_DEVICE_ORDER"]; set {
			t.Errorf("task %d sets CUDA_DEVICE_ORDER on AMD: %v", L, r.Env)
		}
		wantLog := fmt.Sprintf("task %d (rank %d): ROCR_VISIBLE_DEVICES=%d -> GPU %d %s %s NUMA %d", L, L, g.NVMLIndex, g.NVMLIndex, frontierBus[g.NVMLIndex], g.UUID, numa)
		if r.LogLine != wantLog {
			t.Errorf("log line\n got %s\nwant %s", r.LogLine, wantLog)
		}
	}
	// One task per NUMA node, NUMA 3 first: 0 or 1, then 2/3, 4/5, 6/7.
	tab, res = frontierPlan(t, "closest", 4, "", "", "48;16;0;32", gpubind.NumberingGlobal)
	for L, want := range []int{3, 1, 0, 2} {
		if g := tab.GPUs[res[L].GPUs[0]]; g.NUMA != want || fixtures.FrontierNUMA[g.NVMLIndex] != want {
			t.Errorf("task %d: GCD %d on NUMA %d, want NUMA %d", L, g.NVMLIndex, g.NUMA, want)
		}
	}
}

// TestAMDEnvCombinations: what Slurm left in the step (CUDA_VISIBLE_DEVICES beside
// ROCR_VISIBLE_DEVICES, relative or global numbering) and the policy (per-task:2,
// visible=first) never leave HIP's variables pointing past what ROCr shows.
func TestAMDEnvCombinations(t *testing.T) {
	cases := []struct {
		name, option, gpus, cvd, cpus string
		tasks                         int
		num                           gpubind.Numbering
		rocr, hip, own                []string // per task
	}{
		// Slurm without amd_gpu_env, no ConstrainDevices: CUDA_VISIBLE_DEVICES=4,5 (global).
		{name: "global", option: "closest", gpus: "4,5", cvd: "4,5", cpus: "0;1", tasks: 2, num: gpubind.NumberingGlobal,
			rocr: []string{"4", "5"}, hip: []string{"0", "0"}, own: []string{"0", "0"}},
		// ConstrainDevices: the step sees GCDs 4,5 as ROCr devices 0,1.
		{name: "relative", option: "closest", gpus: "4,5", cvd: "0,1", cpus: "0;1", tasks: 2, num: gpubind.NumberingAuto,
			rocr: []string{"0", "1"}, hip: []string{"0", "0"}, own: []string{"0", "0"}},
		// Auto numbering with Slurm's global list kept.
		{name: "auto-global", option: "closest", gpus: "0,1", cvd: "0,1", cpus: "48;49", tasks: 2, num: gpubind.NumberingAuto,
			rocr: []string{"0", "1"}, hip: []string{"0", "0"}, own: []string{"0", "0"}},
		// Two GCDs per task: the package pairs (XGMI15), HIP sees 0,1.
		{name: "per-task", option: "per-task:2", gpus: "0,1,2,3", cpus: "48;16", tasks: 2, num: gpubind.NumberingGlobal,
			rocr: []string{"0,1", "2,3"}, hip: []string{"0,1", "0,1"}, own: []string{"0,1", "0,1"}},
		// visible=first: every task sees both, its own first.
		{name: "visible-first", option: "closest,visible=first", gpus: "4,5", cvd: "4,5", cpus: "0;1", tasks: 2, num: gpubind.NumberingGlobal,
			rocr: []string{"4,5", "4,5"}, hip: []string{"0,1", "0,1"}, own: []string{"0", "0"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, res := frontierPlan(t, c.option, c.tasks, c.gpus, c.cvd, c.cpus, c.num)
			for L, r := range res {
				env := envMap(r)
				if sortedList(env["ROCR_VISIBLE_DEVICES"]) != c.rocr[L] || env["GPUBIND_CUDA_DEVICES"] != c.own[L] {
					t.Errorf("task %d: %v", L, r.Env)
				}
				for _, v := range []string{"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"} {
					if env[v] != c.hip[L] {
						t.Errorf("task %d: %s=%q, want %q (env %v)", L, v, env[v], c.hip[L], r.Env)
					}
				}
			}
		})
	}
}

// sortedList sorts a comma-separated list (the rule's order within a task's GPUs is
// the planner's, as on NVIDIA).
func sortedList(s string) string {
	l := strings.Split(s, ",")
	sort.Strings(l)
	return strings.Join(l, ",")
}

// frontierRenderNodes makes fake render nodes (mknod c 226 128+GCD, root) for the GCDs
// in order, in a private directory, and returns the gres.conf naming them (GRES index
// = position in order).
func frontierRenderNodes(t *testing.T, order []int) (dir string, gc *gpubind.GresConf) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mknod fake render nodes")
	}
	dir = t.TempDir()
	var lines []string
	for _, gcd := range order {
		p := filepath.Join(dir, fmt.Sprintf("renderD%d", 128+gcd))
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(226, uint32(128+gcd)))); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, "Name=gpu File="+p)
	}
	gc, err := gpubind.ParseGresConf(strings.Join(lines, "\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	return dir, gc
}

// wholeNodeRule plans closest for one task with all 8 GCDs (gres.conf gc, global
// numbering) and returns the plugin's parsed table.
func wholeNodeRule(t *testing.T, topo *gpubind.Topology, gc *gpubind.GresConf) *rule.Table {
	t.Helper()
	all := "0,1,2,3,4,5,6,7"
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 1, Option: "closest", Gres: gc, GresFrom: "test",
		Env: gpubind.StepEnv{StepGPUs: &all}, Numbering: gpubind.NumberingGlobal})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rule.Parse(tab.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	return rt
}

// applyDenied runs the rule for a task bound to cpu whose device cgroup denies denied,
// and returns its environment.
func applyDenied(t *testing.T, rt *rule.Table, cpu string, denied []string) map[string]string {
	t.Helper()
	mask, _ := gpubind.ParseCPUList(cpu)
	r, err := rt.Apply(rule.Task{Local: 0, BindType: "mask_cpu:", BindList: mask.Hex(), Own: mask, Denied: denied})
	if err != nil {
		t.Fatal(err)
	}
	return envMap(r)
}

// TestAMDRestrictKFDOrder: a task whose device cgroup denies some render nodes sees the
// others renumbered in KFD order (ROCr skips devices it cannot open and compacts).
func TestAMDRestrictKFDOrder(t *testing.T) {
	// gres.conf in reverse KFD order, so that GRES order and KFD order differ.
	dir, gc := frontierRenderNodes(t, []int{7, 6, 5, 4, 3, 2, 1, 0})
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("frontier"))
	if err != nil {
		t.Fatal(err)
	}
	rt := wholeNodeRule(t, topo, gc)
	// Only GCDs 6 and 7 may be opened; the task bound to NUMA 2 gets GCD 6 = ROCr 0.
	var denied []string
	for i := 0; i < 6; i++ {
		denied = append(denied, filepath.Join(dir, fmt.Sprintf("renderD%d", 128+i)))
	}
	apply := func(cpu string) map[string]string { return applyDenied(t, rt, cpu, denied) }
	env := apply("32")
	if env["ROCR_VISIBLE_DEVICES"] != "0" || env["GPUBIND_PCI_BUS_IDS"] != frontierBus[6] || env["HIP_VISIBLE_DEVICES"] != "0" {
		t.Errorf("task on NUMA 2: env %v", env)
	}
	env = apply("33")
	if env["ROCR_VISIBLE_DEVICES"] != "0" || env["GPUBIND_PCI_BUS_IDS"] != frontierBus[6] {
		t.Errorf("task on NUMA 2: env %v", env)
	}
	// A task on NUMA 0, whose GCDs 4,5 are denied, is filled up with an allowed GCD,
	// numbered among 6,7 in KFD order.
	env = apply("0")
	if b := env["GPUBIND_PCI_BUS_IDS"]; (b != frontierBus[6] || env["ROCR_VISIBLE_DEVICES"] != "0") && (b != frontierBus[7] || env["ROCR_VISIBLE_DEVICES"] != "1") {
		t.Errorf("task on NUMA 0: env %v", env)
	}
}

// TestAMDGresRenderNodes maps gres.conf File=/dev/dri/renderD<minor> to GCDs by render
// minor (root: mknod c 226 128+N), in a gres.conf order other than KFD order, and refuses
// a device that is no render node.
func TestAMDGresRenderNodes(t *testing.T) {
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("frontier"))
	if err != nil {
		t.Fatal(err)
	}
	order := []int{4, 5, 2, 3, 6, 7, 0, 1} // GRES index -> GCD, NUMA order
	dir, gc := frontierRenderNodes(t, order)
	gm, err := gpubind.BuildGresMap(topo, gc, "test")
	if err != nil {
		t.Fatal(err)
	}
	for idx, gcd := range order {
		if gm.GPUs[idx] != gcd {
			t.Errorf("GRES %d -> GPU %d, want GCD %d", idx, gm.GPUs[idx], gcd)
		}
	}
	// SLURM_STEP_GPUS=0,1 are GCDs 4,5; the task on NUMA 0 gets one of them.
	gpus := "0,1"
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 1, Option: "closest", Gres: gc, GresFrom: "test",
		Env: gpubind.StepEnv{StepGPUs: &gpus}, Numbering: gpubind.NumberingGlobal})
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.GPUs) != 2 || tab.GPUs[0].BusID != frontierBus[4] || tab.GPUs[1].BusID != frontierBus[5] ||
		tab.GPUs[0].Dev != filepath.Join(dir, "renderD132") {
		t.Errorf("step GPUs %+v", tab.GPUs)
	}
	// An NVIDIA node (major 195) in an AMD node's gres.conf: refused with its name.
	nv := filepath.Join(dir, "nvidia0")
	if err := mknod(nv, 0); err != nil {
		t.Fatal(err)
	}
	gc2, _ := gpubind.ParseGresConf("Name=gpu File="+nv, "")
	if _, err := gpubind.BuildGresMap(topo, gc2, "test"); err == nil || !strings.Contains(err.Error(), "not a DRM render node") || !strings.Contains(err.Error(), nv) {
		t.Errorf("NVIDIA device on an AMD node: %v", err)
	}
}

// copyTree copies the fixture src to dst (files and symlinks).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, out)
		case fi.IsDir():
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAMDBadTrees: MI300 compute partitions (several KFD nodes on one GPU) and a bad
// properties file are refused with a reason, never read as whole GPUs.
func TestAMDBadTrees(t *testing.T) {
	nodes := "sys/devices/virtual/kfd/kfd/topology/nodes"
	edit := func(t *testing.T, node int, from, to string) string {
		dir := t.TempDir()
		copyTree(t, fixtures.Root("frontier"), dir)
		p := filepath.Join(dir, nodes, strconv.Itoa(node), "properties")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), from) {
			t.Fatalf("%s has no %q", p, from)
		}
		if err := os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// KFD node 5 (GCD 1, c6) claims GCD 0's bus and partition id 0 (KFD node 4's): two
	// GPUs cannot be one compute partition.
	root := edit(t, 5, "location_id 50688", fmt.Sprintf("location_id %d", 0xc1<<8))
	if _, err := gpubind.DiscoverSysfs(root); err == nil || !strings.Contains(err.Error(), "KFD nodes 4 and 5 both claim compute partition 0 of the GPU at 0000:c1:00.0") {
		t.Errorf("partition: %v", err)
	}
	root = edit(t, 6, "drm_render_minor 130", "drm_render_minor x130")
	if _, err := gpubind.DiscoverSysfs(root); err == nil || !strings.Contains(err.Error(), "drm_render_minor") || !strings.Contains(err.Error(), "KFD node 6") {
		t.Errorf("bad properties: %v", err)
	}
}

// TestAMDKFDOrderNotBusOrder: where KFD order differs from PCI order (GCD 0 and GCD 7's
// KFD nodes swapped), ROCr's indices follow KFD order: in the GPUs' Index, in the
// relative numbering of a constrained step, and in the renumbering of a task whose
// device cgroup denies some GPUs.
func TestAMDKFDOrderNotBusOrder(t *testing.T) {
	root := t.TempDir()
	copyTree(t, fixtures.Root("frontier"), root)
	nodes := filepath.Join(root, "sys/devices/virtual/kfd/kfd/topology/nodes")
	for _, mv := range [][2]string{{"4", "x"}, {"11", "4"}, {"x", "11"}} {
		if err := os.Rename(filepath.Join(nodes, mv[0]), filepath.Join(nodes, mv[1])); err != nil {
			t.Fatal(err)
		}
	}
	topo, err := gpubind.DiscoverSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	c1, de := topo.GPUByBusID(frontierBus[0]), topo.GPUByBusID(frontierBus[7])
	if c1.Index != 7 || de.Index != 0 || c1.Minor != 128 || de.Minor != 135 {
		t.Fatalf("c1 %+v\nde %+v", c1, de)
	}
	// Constrained step of c1 and de (Slurm: relative 0,1): ROCr shows de first.
	_, gc := frontierRenderNodes(t, []int{0, 7})
	gpus, cvd := "0,1", "0,1"
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 1, Option: "closest", Gres: gc, GresFrom: "test",
		Env: gpubind.StepEnv{StepGPUs: &gpus, CudaVisible: &cvd}, Numbering: gpubind.NumberingRelative})
	if err != nil {
		t.Fatal(err)
	}
	vis := map[string]string{}
	for _, g := range tab.GPUs {
		vis[g.BusID] = g.Visible
	}
	if vis[frontierBus[7]] != "0" || vis[frontierBus[0]] != "1" {
		t.Errorf("relative numbering %v, want de=0 c1=1 (KFD order)", vis)
	}
	// Whole node, global numbering, the task's cgroup allows only c1 and de: the task on
	// NUMA 3 gets c1, which ROCr numbers 1 (after de).
	dir, gc := frontierRenderNodes(t, []int{0, 1, 2, 3, 4, 5, 6, 7})
	rt := wholeNodeRule(t, topo, gc)
	var denied []string
	for i := 1; i < 7; i++ {
		denied = append(denied, filepath.Join(dir, fmt.Sprintf("renderD%d", 128+i)))
	}
	if env := applyDenied(t, rt, "48", denied); env["GPUBIND_PCI_BUS_IDS"] != frontierBus[0] || env["ROCR_VISIBLE_DEVICES"] != "1" || env["GPUBIND_GPUS"] != "7" {
		t.Errorf("env %v, want c1 as ROCr device 1", env)
	}
}

// TestAMDIsolate: isolate on AMD GPUs (docs/cgroups.md "AMD GPUs"). The table names each
// step GPU's card node minor ("card ID MINOR", from sysfs drm/cardN: the frontier fixture
// has a BMC's card0, so GCD N is card N+1, not render minor - 128), the front end's parser
// reads it and gb_gpu_dev_minors gives the cgroup layer render then card minor per GPU.
// Without a card node in sysfs isolate is an error in enforce mode and dropped with a
// warning naming the GPU in optional mode; NVIDIA tables never get card lines.
func TestAMDIsolate(t *testing.T) {
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("frontier"))
	if err != nil {
		t.Fatal(err)
	}
	req := gpubind.PlanRequest{Topo: topo, Tasks: 2, Option: "closest,isolate", Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test"}
	tab, err := gpubind.Plan(req)
	if err != nil || !tab.Flags.Isolate || tab.Status != gpubind.StatusOK {
		t.Fatalf("enforce: %v %+v", err, tab)
	}
	var text strings.Builder
	if err := tab.Encode(&text); err != nil {
		t.Fatal(err)
	}
	var wantCards []string
	for _, g := range tab.GPUs {
		if g.Card != g.NVMLIndex+1 {
			t.Errorf("GPU %d (KFD %d, %s): card minor %d, want %d (sysfs drm/card%d)", g.ID, g.NVMLIndex, g.BusID, g.Card, g.NVMLIndex+1, g.NVMLIndex+1)
		}
		wantCards = append(wantCards, fmt.Sprintf("card %d %d", g.ID, g.NVMLIndex+1))
	}
	var gotCards []string
	for _, l := range strings.Split(text.String(), "\n") {
		if strings.HasPrefix(l, "card ") {
			gotCards = append(gotCards, l)
		}
	}
	if strings.Join(gotCards, ";") != strings.Join(wantCards, ";") {
		t.Errorf("card lines %q, want %q", gotCards, wantCards)
	}
	rt, err := rule.Parse(text.String())
	if err != nil {
		t.Fatalf("front end parser: %v\n%s", err, text.String())
	}
	rt.Close()
	// The fixture snapshots (frontier*.json) have no card_minor: a binary from before
	// the field rejects unknown fields, and tests/structure/plancompare.sh runs one on
	// them. So isolate from such a snapshot is refused, naming the GPU.
	snap, _, err := gpubind.Discover(gpubind.DiscoverOptions{Source: "snapshot", Snapshot: fixtures.Snapshot("frontier")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gpubind.Plan(gpubind.PlanRequest{Topo: snap, Tasks: 2, Option: "closest,isolate", Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test"}); err == nil || !strings.Contains(err.Error(), "no card node minor") {
		t.Errorf("snapshot without card minors: %v", err)
	}
	// Without isolate: no card lines (an older front end would refuse the unknown line).
	req.Option = "closest"
	if tab, err := gpubind.Plan(req); err != nil {
		t.Fatal(err)
	} else {
		var b strings.Builder
		_ = tab.Encode(&b)
		if strings.Contains(b.String(), "\ncard ") {
			t.Errorf("card line without isolate:\n%s", b.String())
		}
	}

	// A GCD without a card node in sysfs (GCD 3: bus ce).
	dir := t.TempDir()
	copyTree(t, fixtures.Root("frontier"), dir)
	drm, err := filepath.Glob(filepath.Join(dir, "sys/devices/*/*/0000:ce:00.0/drm/card*"))
	if err != nil || len(drm) != 1 {
		t.Fatalf("card node of GCD 3 in the copy: %v %v", drm, err)
	}
	if err := os.RemoveAll(drm[0]); err != nil {
		t.Fatal(err)
	}
	topo2, err := gpubind.DiscoverSysfs(dir)
	if err != nil {
		t.Fatal(err)
	}
	req = gpubind.PlanRequest{Topo: topo2, Tasks: 2, Option: "closest,isolate", Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test"}
	if _, err := gpubind.Plan(req); err == nil || !strings.Contains(err.Error(), "GPU 3 (0000:ce:00.0) has no card node minor") {
		t.Errorf("enforce without card node: %v", err)
	}
	req.Mode = gpubind.ModeOptional
	tab, err = gpubind.Plan(req)
	if err != nil || tab.Flags.Isolate || tab.Status != gpubind.StatusWarn || !strings.Contains(strings.Join(tab.Messages, "\n"), "isolate dropped") {
		t.Errorf("optional without card node: %v %+v", err, tab)
	}
	// Admin-forced isolate there: the same.
	req.Option, req.Force = "closest", gpubind.Flags{Isolate: true}
	if tab, err := gpubind.Plan(req); err != nil || tab.Flags.Isolate {
		t.Errorf("forced, optional, without card node: %v %+v", err, tab)
	}
}

// TestAMDUUIDFlag: with the uuid flag ROCR_VISIBLE_DEVICES names the task's GCD by the
// UUID ROCr matches (GPU- and 16 upper-case hex digits, at most 20 characters, which
// ROCr's filter takes), and HIP's variables still count from 0.
func TestAMDUUIDFlag(t *testing.T) {
	tab, res := frontierPlan(t, "closest,uuid", 2, "", "", "0;16", gpubind.NumberingGlobal)
	for L, r := range res {
		g := tab.GPUs[r.GPUs[0]]
		env := envMap(r)
		if env["ROCR_VISIBLE_DEVICES"] != g.UUID || len(g.UUID) != 20 || env["HIP_VISIBLE_DEVICES"] != "0" || env["CUDA_VISIBLE_DEVICES"] != "0" {
			t.Errorf("task %d: %v", L, r.Env)
		}
	}
}

// TestAMDMI300XSPX: an MI300X platform in SPX mode (one KFD node per GPU, PCIe to the
// CPU, XGMI weight 15 between every pair) reads like the snapshot, and closest puts each
// task on a GPU of its socket.
func TestAMDMI300XSPX(t *testing.T) {
	got, err := gpubind.DiscoverSysfs(fixtures.Root("mi300x-spx"))
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, "mi300x-spx")
	if len(got.GPUs) != 8 || len(got.NUMA) != 2 {
		t.Fatalf("%d GPUs, %d NUMA nodes", len(got.GPUs), len(got.NUMA))
	}
	for i, g := range got.GPUs {
		w := want.GPUs[i]
		if g.BusID != fixtures.MI300XBus[i] || g.Index != i || g.NUMA != i/4 || g.Minor != 128+i || g.UUID != w.UUID ||
			g.Name != "AMD Instinct MI300X" || !reflect.DeepEqual(g.XGMI, w.XGMI) || len(g.XGMI) != 7 {
			t.Errorf("GPU %d:\n got %+v\nwant %+v", i, g, w)
		}
		for j := range got.GPUs {
			if l := got.GPULink(i, j); i != j && l.XGMI != 15 {
				t.Errorf("GPU %d-%d: %+v", i, j, l)
			}
		}
	}
	req := gpubind.PlanRequest{Topo: got, Tasks: 4, Option: "closest", Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test", Numbering: gpubind.NumberingGlobal}
	tab, err := gpubind.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	for L, r := range applyRule(t, tab, 4, "0;96;1;97") {
		g := tab.GPUs[r.GPUs[0]]
		if env := envMap(r); g.NUMA != L%2 || env["ROCR_VISIBLE_DEVICES"] != strconv.Itoa(g.NVMLIndex) || env["HIP_VISIBLE_DEVICES"] != "0" {
			t.Errorf("task %d (NUMA %d): GPU %d NUMA %d, env %v", L, L%2, g.NVMLIndex, g.NUMA, r.Env)
		}
	}
}

// TestAMDBesideNVIDIA: a node with NVIDIA GPUs and an AMD GPU in KFD (an integrated GPU,
// which Slurm does not manage) reads as the NVIDIA node it was: the AMD GPU neither joins
// nor shifts the NVIDIA indices.
func TestAMDBesideNVIDIA(t *testing.T) {
	root := t.TempDir()
	copyTree(t, fixtures.Root("dgxh100"), root)
	kfd := "sys/devices/virtual/kfd"
	copyTree(t, filepath.Join(fixtures.Root("frontier"), kfd), filepath.Join(root, kfd))
	got, err := gpubind.DiscoverSysfs(root)
	if err != nil {
		t.Fatal(err)
	}
	want, err := gpubind.DiscoverSysfs(fixtures.Root("dgxh100"))
	if err != nil {
		t.Fatal(err)
	}
	if got.IsAMD() || len(got.GPUs) != len(want.GPUs) || got.Driver != want.Driver {
		t.Fatalf("%d GPUs (AMD %v, driver %q), want the %d NVIDIA GPUs", len(got.GPUs), got.IsAMD(), got.Driver, len(want.GPUs))
	}
	for i := range got.GPUs {
		if g, w := got.GPUs[i], want.GPUs[i]; g.BusID != w.BusID || g.Index != w.Index || g.Minor != w.Minor || g.UUID != w.UUID {
			t.Errorf("GPU %d: %+v, want %+v", i, g, w)
		}
	}
}
