package gpubind_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// TestAMDMI300XCPX: an MI300X node in CPX mode (fixture mi300x-cpx: 2 devices x 8
// compute partitions, 16 KFD GPU nodes). Each partition is a GPU to ROCr: its own KFD
// index and render node, sharing its device's bus id and unique_id (XCP id in
// location_id bits 2:0), XGMI weight 13 to its device's other partitions and 41 to the
// other device's. Discovery matches the fixture's model and snapshot; closest gives
// each task its own partition in ROCR_VISIBLE_DEVICES (KFD index); the mapping line
// names the partition's render node, since the bus id does not tell partitions apart;
// per-task:8 packs one device's partitions together.
func TestAMDMI300XCPX(t *testing.T) {
	got, err := gpubind.DiscoverSysfs(fixtures.Root("mi300x-cpx"))
	if err != nil {
		t.Fatal(err)
	}
	want := snapshot(t, "mi300x-cpx")
	if len(got.GPUs) != 16 || len(want.GPUs) != 16 {
		t.Fatalf("%d GPUs (snapshot %d), want 16 partitions", len(got.GPUs), len(want.GPUs))
	}
	for i, g := range got.GPUs {
		w := want.GPUs[i]
		if g.BusID != fixtures.MI300XBus[i/8] || g.Index != i || g.Minor != 128+i || g.Partition == nil || *g.Partition != i%8 ||
			g.UUID != w.UUID || g.UUID != got.GPUs[i/8*8].UUID || !reflect.DeepEqual(g.XGMI, w.XGMI) ||
			w.Partition == nil || *w.Partition != i%8 || g.CardMinor != nil || g.NUMA != 0 {
			t.Errorf("partition %d:\n got %+v\nwant %+v", i, g, w)
		}
		for j := range got.GPUs {
			wantW := 41
			if i/8 == j/8 {
				wantW = 13
			}
			if l := got.GPULink(i, j); i != j && l.XGMI != wantW {
				t.Errorf("partitions %d-%d: %+v, want XGMI %d", i, j, l, wantW)
			}
		}
	}
	if g := got.GPUs[11]; g.Key() != "0000:26:00.0 xcp 3" {
		t.Errorf("GPU 11 key %q", g.Key())
	}

	// closest, 16 tasks on NUMA 0: each its own partition, in KFD order.
	var cpus []string
	for i := 0; i < 16; i++ {
		cpus = append(cpus, strconv.Itoa(i))
	}
	req := gpubind.PlanRequest{Topo: got, Tasks: 16, Option: "closest", Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test", Numbering: gpubind.NumberingGlobal}
	tab, err := gpubind.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for L, r := range applyRule(t, tab, 16, strings.Join(cpus, ";")) {
		g := tab.GPUs[r.GPUs[0]]
		env := envMap(r)
		if seen[g.NVMLIndex] || env["ROCR_VISIBLE_DEVICES"] != strconv.Itoa(g.NVMLIndex) || env["HIP_VISIBLE_DEVICES"] != "0" ||
			env["GPUBIND_PCI_BUS_IDS"] != fixtures.MI300XBus[g.NVMLIndex/8] {
			t.Errorf("task %d: partition %d, env %v", L, g.NVMLIndex, r.Env)
		}
		seen[g.NVMLIndex] = true
		wantLog := fmt.Sprintf("task %d (rank %d): ROCR_VISIBLE_DEVICES=%d -> GPU %d %s xcp %d renderD%d %s NUMA 0",
			L, L, g.NVMLIndex, g.NVMLIndex, fixtures.MI300XBus[g.NVMLIndex/8], g.NVMLIndex%8, 128+g.NVMLIndex, g.UUID)
		if r.LogLine != wantLog {
			t.Errorf("log line\n got %s\nwant %s", r.LogLine, wantLog)
		}
	}
	if !strings.Contains(tab.String(), "\npart 11 3\n") {
		t.Errorf("table has no part line for GPU 11:\n%s", tab)
	}

	// per-task:8: each task gets the 8 partitions of one device (weight 13 < 41).
	req.Tasks, req.Option = 2, "per-task:8"
	tab, err = gpubind.Plan(req)
	if err != nil {
		t.Fatal(err)
	}
	for L, r := range applyRule(t, tab, 2, "") {
		dev := map[int]bool{}
		for _, id := range r.GPUs {
			dev[tab.GPUs[id].NVMLIndex/8] = true
		}
		if len(r.GPUs) != 8 || len(dev) != 1 {
			t.Errorf("per-task:8 task %d: GPUs %v span devices %v", L, r.GPUs, dev)
		}
	}
}

// TestAMDMI300XCPXRefusals: what cannot work on partitions says why. uuid: ROCr's
// GPU-<unique_id> names the device, which all its partitions share, so the flag is an
// error naming the partitions (mode=enforce) or dropped with that warning (optional), and
// a GPU- UUID in map: or the step's GPU list is an error. isolate: the partitions of a
// device share its card node, so isolate is refused likewise.
func TestAMDMI300XCPXRefusals(t *testing.T) {
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("mi300x-cpx"))
	if err != nil {
		t.Fatal(err)
	}
	uuid0 := topo.GPUs[0].UUID
	plan := func(option string, mode gpubind.Mode, env gpubind.StepEnv) (*gpubind.Table, error) {
		return gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 2, Option: option, Mode: mode, Env: env,
			Gres: &gpubind.GresConf{AutoDetect: "rsmi"}, GresFrom: "test", Numbering: gpubind.NumberingGlobal})
	}
	two := "0,9"
	_, err = plan("closest,uuid", gpubind.ModeEnforce, gpubind.StepEnv{StepGPUs: &two})
	if err == nil || !strings.Contains(err.Error(), "GPU 0 (0000:05:00.0 xcp 0, renderD128, "+uuid0+")") ||
		!strings.Contains(err.Error(), "GPU 9 (0000:26:00.0 xcp 1, renderD137") || !strings.Contains(err.Error(), "compute partitions") {
		t.Errorf("uuid in enforce mode: %v", err)
	}
	tab, err := plan("closest,uuid", gpubind.ModeOptional, gpubind.StepEnv{StepGPUs: &two})
	if err != nil {
		t.Fatal(err)
	}
	if tab.Flags.UUID || tab.Status != gpubind.StatusWarn || !strings.Contains(strings.Join(tab.Messages, "\n"), "uuid dropped; ROCR_VISIBLE_DEVICES lists indices") {
		t.Errorf("uuid in optional mode: flags %+v status %v messages %q", tab.Flags, tab.Status, tab.Messages)
	}
	for _, r := range applyRule(t, tab, 2, "") {
		if v := envMap(r)["ROCR_VISIBLE_DEVICES"]; strings.HasPrefix(v, "GPU-") {
			t.Errorf("ROCR_VISIBLE_DEVICES=%s after the uuid flag was dropped", v)
		}
	}
	_, err = plan("closest,isolate", gpubind.ModeEnforce, gpubind.StepEnv{StepGPUs: &two})
	if err == nil || !strings.Contains(err.Error(), "isolate cannot guard MI300 compute partitions") {
		t.Errorf("isolate in enforce mode: %v", err)
	}
	if _, err = plan("map:"+uuid0, gpubind.ModeEnforce, gpubind.StepEnv{StepGPUs: &two}); err == nil ||
		!strings.Contains(err.Error(), "which the compute partitions") || !strings.Contains(err.Error(), "renderD135") {
		t.Errorf("map by a partitioned device's UUID: %v", err)
	}
	cvd := uuid0
	if _, err = plan("closest", gpubind.ModeEnforce, gpubind.StepEnv{CudaVisible: &cvd}); err == nil || !strings.Contains(err.Error(), "use indices") {
		t.Errorf("CUDA_VISIBLE_DEVICES by a partitioned device's UUID: %v", err)
	}
}

// TestAMDMI300XCPXGres: gres.conf lists the partitions' render nodes (Slurm's own
// AutoDetect=rsmi does the same per partition); SLURM_STEP_GPUS maps by render minor,
// and under ConstrainDevices ROCr numbers the step's partitions the task can open in
// KFD order.
func TestAMDMI300XCPXGres(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mknod fake render nodes")
	}
	topo, err := gpubind.DiscoverSysfs(fixtures.Root("mi300x-cpx"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// GRES order: the second device's partitions first, then the first's.
	var lines []string
	order := []int{8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}
	for _, p := range order {
		path := filepath.Join(dir, fmt.Sprintf("renderD%d", 128+p))
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(226, uint32(128+p)))); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, "Name=gpu File="+path)
	}
	gc, err := gpubind.ParseGresConf(strings.Join(lines, "\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	// GRES 0 and 9: partitions 8 and 1; relative numbering (ConstrainDevices).
	gpus := "0,9"
	cvd := "0,1"
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 2, Option: "closest", Gres: gc, GresFrom: "test",
		Env: gpubind.StepEnv{StepGPUs: &gpus, CudaVisible: &cvd}, Numbering: gpubind.NumberingRelative})
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.GPUs) != 2 || tab.GPUs[0].NVMLIndex != 1 || tab.GPUs[1].NVMLIndex != 8 ||
		tab.GPUs[0].Dev != filepath.Join(dir, "renderD129") || tab.GPUs[1].Dev != filepath.Join(dir, "renderD136") {
		t.Fatalf("step GPUs %+v", tab.GPUs)
	}
	rt, err := rule.Parse(tab.String())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for L := 0; L < 2; L++ {
		r, err := rt.Apply(rule.Task{Local: L, Rank: L})
		if err != nil {
			t.Fatal(err)
		}
		g := tab.GPUs[r.GPUs[0]]
		if v := envMap(r)["ROCR_VISIBLE_DEVICES"]; v != strconv.Itoa(r.GPUs[0]) || !strings.Contains(r.LogLine, fmt.Sprintf("xcp %d renderD%d", g.NVMLIndex%8, 128+g.NVMLIndex)) {
			t.Errorf("task %d: ROCR_VISIBLE_DEVICES=%s (want %d, the step's partitions in KFD order), log %s", L, v, r.GPUs[0], r.LogLine)
		}
	}
}
