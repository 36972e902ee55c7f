package cgroup

// The same flags end to end: the real plugin (spank_gpubind.so + gpubind_engine.so, built
// from this tree) in a private Slurm 22.05 cluster (tests/cluster) with fake GPU nodes, on
// the fixture topology dgxh100-2cpu (GPUs 0-3 on NUMA node 0 = CPU 0, GPUs 4-7 on node 1 =
// CPU 1). Slurm runs cgroup/v1 here, so this proves v1 for real; v2 is proven in
// emulation by cgroup_test.go.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/testbuild"
	"golang.org/x/sys/unix"
)

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

// plugin builds the front end and the engine once per test binary, into buildDir's
// sibling, next to each other (the front end finds the engine next to itself).
func plugin(t *testing.T) string {
	t.Helper()
	tool(t)
	pluginOnce.Do(func() {
		pluginDir = filepath.Join(buildDir, "plugin")
		if pluginErr = os.MkdirAll(pluginDir, 0o755); pluginErr != nil {
			return
		}
		pluginErr = testbuild.Plugin(pluginDir)
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func startCluster(t *testing.T, task string, constrain bool, args ...string) *cluster.Cluster {
	t.Helper()
	if _, err := exec.LookPath("slurmd"); err != nil {
		t.Skip("Slurm is not installed (make deps)")
	}
	dir := plugin(t)
	fixture := filepath.Join(repoRoot(t), "tests", "fixtures", "dgxh100-2cpu.json")
	line := strings.Join(append([]string{"required", filepath.Join(dir, "spank_gpubind.so"),
		"source=snapshot", "snapshot=" + fixture}, args...), " ")
	c := cluster.StartT(t, cluster.Config{CPUs: 2, TaskPlugin: task, ConstrainDevices: constrain,
		PlugStack: []string{line}})
	// nvidiactl (195:255) must stay reachable with isolate; the cluster makes only GPUs.
	ctl := filepath.Join(c.DevDir, "nvidiactl")
	if err := unix.Mknod(ctl, unix.S_IFCHR|0o666, int(unix.Mkdev(195, 255))); err != nil && !os.IsExist(err) {
		t.Fatalf("mknod %s: %v", ctl, err)
	}
	return c
}

// taskView is what one task saw: its variables, its cgroups and the oracle.
type taskView struct {
	env    map[string]string
	cgroup []string
	probe  map[string]string
	aff    string
}

var labelRE = regexp.MustCompile(`^\s*(\d+): (.*)$`)

// runStep runs one srun step whose tasks report their view, and parses it by task.
func runStep(t *testing.T, c *cluster.Cluster, srunArgs ...string) (map[int]*taskView, string, error) {
	t.Helper()
	script := `echo "ENV CVD=$CUDA_VISIBLE_DEVICES"; echo "ENV GPUS=$GPUBIND_GPUS"; ` +
		`echo "ENV NUMA=$GPUBIND_NUMA"; echo "ENV STEP=$SLURM_STEP_GPUS"; echo "ENV JOB=$SLURM_JOB_ID"; ` +
		`sed 's/^/CG /' /proc/self/cgroup; exec "$0" probe "$1" 0 1 2 3 4 5 6 7 nvidiactl`
	args := append([]string{"-l"}, srunArgs...)
	args = append(args, "sh", "-c", script, tool(t), c.DevDir)
	out, errOut, err := c.Srun(ctxFor(t), args...)
	tasks := map[int]*taskView{}
	for _, line := range strings.Split(out, "\n") {
		m := labelRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		id, _ := strconv.Atoi(m[1])
		tv := tasks[id]
		if tv == nil {
			tv = &taskView{env: map[string]string{}, probe: map[string]string{}}
			tasks[id] = tv
		}
		body := m[2]
		switch {
		case strings.HasPrefix(body, "ENV "):
			k, v, _ := strings.Cut(strings.TrimPrefix(body, "ENV "), "=")
			tv.env[k] = v
		case strings.HasPrefix(body, "CG "):
			tv.cgroup = append(tv.cgroup, strings.TrimPrefix(body, "CG "))
		case strings.HasPrefix(body, "affinity "):
			tv.aff = strings.TrimPrefix(body, "affinity ")
		default:
			if k, v, ok := strings.Cut(body, " "); ok {
				tv.probe[k] = v
			}
		}
	}
	return tasks, out + errOut, err
}

// reachable lists the minors 0-7 that a task can open (ENXIO from the fake node).
func (tv *taskView) reachable() []int {
	var r []int
	for i := 0; i < 8; i++ {
		if tv.probe[strconv.Itoa(i)] == "ENXIO" {
			r = append(r, i)
		}
	}
	return r
}

func ints(s string) []int {
	var r []int
	for _, f := range strings.Split(s, ",") {
		if v, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			r = append(r, v)
		}
	}
	return r
}

// pluginCgroups: the plugin cgroups a task was in (from its /proc/self/cgroup), as paths.
func pluginCgroups(t *testing.T, tv *taskView) []string {
	m := findMounts(t)
	var paths []string
	for _, line := range tv.cgroup {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || !strings.Contains(f[2], "/gpubind_j") {
			continue
		}
		switch {
		case f[1] == "" && m.unified != "":
			paths = append(paths, filepath.Join(m.unified, f[2]))
		case slices.Contains(strings.Split(f[1], ","), "devices") && m.devices != "":
			paths = append(paths, filepath.Join(m.devices, f[2]))
		case slices.Contains(strings.Split(f[1], ","), "cpuset") && m.cpuset != "":
			paths = append(paths, filepath.Join(m.cpuset, f[2]))
		}
	}
	return paths
}

// leftBehind: which of the tasks' plugin cgroups still exist after the step.
func leftBehind(t *testing.T, tasks map[int]*taskView) []string {
	var left []string
	for _, tv := range tasks {
		for _, p := range pluginCgroups(t, tv) {
			if _, err := os.Stat(p); err == nil {
				left = append(left, p)
			}
		}
	}
	return left
}

// checkIsolated: every task reaches exactly its own GPU (the one its GPUBIND_GPUS names;
// minors equal NVML indices in the fixture), which is a GPU of the step, and control
// devices stay reachable. Afterwards no plugin cgroup is left.
func checkIsolated(t *testing.T, c *cluster.Cluster, tasks map[int]*taskView, out string, ntasks int) {
	t.Helper()
	if len(tasks) != ntasks {
		t.Fatalf("want %d tasks' reports, got %d:\n%s", ntasks, len(tasks), out)
	}
	for id, tv := range tasks {
		step := ints(tv.env["STEP"])
		own := ints(tv.env["GPUS"])
		got := tv.reachable()
		if len(own) != 1 || !slices.Equal(got, own) {
			t.Errorf("task %d: reaches minors %v, its GPUBIND_GPUS is %v\n%s", id, got, own, out)
		}
		for _, g := range got {
			if !slices.Contains(step, g) {
				t.Errorf("task %d reaches minor %d outside the step's GPUs %v", id, g, step)
			}
		}
		if tv.probe["nvidiactl"] != "ENXIO" {
			t.Errorf("task %d: nvidiactl %q, want it untouched (ENXIO)", id, tv.probe["nvidiactl"])
		}
		inPlugin := false
		for _, cg := range tv.cgroup {
			if strings.Contains(cg, ":devices:") && strings.Contains(cg, "/gpubind_j") {
				inPlugin = true
			}
		}
		if !inPlugin {
			t.Errorf("task %d is in no plugin devices cgroup: %q", id, tv.cgroup)
		}
	}
	if left := leftBehind(t, tasks); len(left) > 0 {
		t.Errorf("left behind after the step: %v\nslurmd log:\n%s", left, c.SlurmdLog("node1"))
	}
}

func TestClusterIsolate(t *testing.T) {
	needV1(t, "devices")
	for _, tc := range []struct {
		name      string
		task      string
		constrain bool
	}{
		{"task-none", "task/none", false},
		{"task-affinity", "task/affinity", false},
		{"task-cgroup-ConstrainDevices", "task/cgroup,task/affinity", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startCluster(t, tc.task, tc.constrain)
			tasks, out, err := runStep(t, c, "-n2", "--gpus=8", "--gpu-bind-topo=closest,isolate")
			if err != nil {
				t.Fatalf("srun: %v\n%s", err, out)
			}
			checkIsolated(t, c, tasks, out, 2)
			if tc.task != "task/none" {
				// Slurm bound task 0 to CPU 0 and task 1 to CPU 1: rule numa gives
				// each a GPU on its node, and the cgroup follows the same choice.
				for id, tv := range tasks {
					if want := strconv.Itoa(id); tv.env["NUMA"] != want {
						t.Errorf("task %d on CPU %s got a GPU on NUMA %q", id, tv.aff, tv.env["NUMA"])
					}
				}
			}
			if tc.constrain {
				// Narrowed inside Slurm's task cgroup; Slurm's cleanup still works.
				for id, tv := range tasks {
					want := fmt.Sprintf("/task_%d/gpubind_j", id)
					ok := false
					for _, cg := range tv.cgroup {
						ok = ok || (strings.Contains(cg, ":devices:") && strings.Contains(cg, want))
					}
					if !ok {
						t.Errorf("task %d: devices cgroup not inside Slurm's task_%d: %q", id, id, tv.cgroup)
					}
				}
				job := tasks[0].env["JOB"]
				m := findMounts(t)
				var left []string
				for i := 0; i < 50; i++ {
					left, _ = filepath.Glob(filepath.Join(m.devices, "slurm_*", "uid_*", "job_"+job, "step_0"))
					if len(left) == 0 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if len(left) > 0 {
					t.Errorf("Slurm could not remove its step cgroup: %v\n%s", left, c.SlurmdLog("node1"))
				}
				// Slurm's own rule still holds: a 2-GPU step cannot reach GPU 2-7.
				tasks, out, err = runStep(t, c, "-n2", "--gpus=2", "--gpu-bind-topo=closest,isolate")
				if err != nil {
					t.Fatalf("srun: %v\n%s", err, out)
				}
				for id, tv := range tasks {
					for _, g := range tv.reachable() {
						if g > 1 {
							t.Errorf("task %d of a step with GPUs 0,1 reaches minor %d", id, g)
						}
					}
				}
			}
		})
	}
}

// An admin's isolate=never wins over the user; isolate=force applies without the user.
func TestClusterAdminNeverForce(t *testing.T) {
	needV1(t, "devices")
	c := startCluster(t, "task/none", false, "isolate=never")
	tasks, out, err := runStep(t, c, "-n2", "--gpus=4", "--gpu-bind-topo=closest,isolate")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	for id, tv := range tasks {
		if got := tv.reachable(); len(got) != 8 {
			t.Errorf("isolate=never: task %d reaches only %v; want all 8 (no isolation)\n%s", id, got, out)
		}
		for _, cg := range tv.cgroup {
			if strings.Contains(cg, "gpubind_j") {
				t.Errorf("isolate=never: task %d is in a plugin cgroup %q", id, cg)
			}
		}
	}
	c.Stop()

	c = startCluster(t, "task/none", false, "isolate=force")
	tasks, out, err = runStep(t, c, "-n2", "--gpus=4", "--gpu-bind-topo")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	checkIsolated(t, c, tasks, out, 2)
}

// Whatever the option says, no task reaches a GPU outside its step.
func TestClusterNoOptionEscapesTheStep(t *testing.T) {
	needV1(t, "devices")
	c := startCluster(t, "task/none", false)
	for _, opt := range []string{"map:7,isolate", "map:0,1,2,3,4,5,6,7,isolate", "per-task:8,isolate",
		"single:8,isolate", "spread,isolate"} {
		tasks, out, _ := runStep(t, c, "-n2", "--gpus=2", "--gpu-bind-topo="+opt)
		for id, tv := range tasks {
			step := ints(tv.env["STEP"])
			for _, g := range tv.reachable() {
				if !slices.Contains(step, g) && tv.env["GPUS"] != "" {
					t.Errorf("%s: task %d reaches minor %d outside the step %v\n%s", opt, id, g, step, out)
				}
			}
		}
	}
}

func TestClusterCpus(t *testing.T) {
	needV1(t, "cpuset")
	c := startCluster(t, "task/none", false)
	tasks, out, err := runStep(t, c, "-n2", "--gpus=8", "--gpu-bind-topo=spread,cpus")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	if len(tasks) != 2 {
		t.Fatalf("want 2 tasks' reports:\n%s", out)
	}
	for id, tv := range tasks {
		// The fixture puts NUMA node n on CPU n: the task's cpuset is its GPU's node.
		if tv.aff != tv.env["NUMA"] {
			t.Errorf("task %d: affinity %q, its GPU is on NUMA %q\n%s", id, tv.aff, tv.env["NUMA"], out)
		}
		in := false
		for _, cg := range tv.cgroup {
			in = in || (strings.Contains(cg, ":cpuset:") && strings.Contains(cg, "/gpubind_j"))
		}
		if !in {
			t.Errorf("task %d is in no plugin cpuset cgroup: %q", id, tv.cgroup)
		}
	}
	if left := leftBehind(t, tasks); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	c.Stop()

	// task/affinity binds each task first: that binding is kept (no plugin cpuset) and the
	// GPU follows it. --cpu-bind=map_cpu:1,0 puts task 0 on CPU 1 (NUMA node 1).
	c = startCluster(t, "task/affinity", false)
	tasks, out, err = runStep(t, c, "-n2", "--gpus=8", "--cpu-bind=map_cpu:1,0", "--gpu-bind-topo=closest,cpus")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	for id, want := range map[int]string{0: "1", 1: "0"} {
		tv := tasks[id]
		if tv == nil {
			t.Fatalf("no report of task %d:\n%s", id, out)
		}
		if tv.aff != want || tv.env["NUMA"] != want {
			t.Errorf("task %d: affinity %q, GPU NUMA %q; want Slurm's CPU %s and a GPU on node %s\n%s",
				id, tv.aff, tv.env["NUMA"], want, want, out)
		}
		for _, cg := range tv.cgroup {
			if strings.Contains(cg, ":cpuset:") && strings.Contains(cg, "/gpubind_j") {
				t.Errorf("task %d: Slurm's binding must be kept, but it is in %q", id, cg)
			}
		}
	}
}

// Review finding: cleanup order. A task that leaves a process running (a daemon it
// started) keeps the plugin's devices cgroup busy at task_exit. Slurm removes its own
// task_N at step end, before slurm_spank_exit, and a child cgroup of ours still in it made
// that fail: job, step and task cgroups leaked. The plugin now moves what is left into
// Slurm's task_N, where Slurm's proctrack/cgroup kills it, and removes its own cgroup.
func TestClusterIsolateLeftoverProcess(t *testing.T) {
	needV1(t, "devices")
	if _, err := exec.LookPath("slurmd"); err != nil {
		t.Skip("Slurm is not installed (make deps)")
	}
	fixture := filepath.Join(repoRoot(t), "tests", "fixtures", "dgxh100-2cpu.json")
	line := strings.Join([]string{"required", filepath.Join(plugin(t), "spank_gpubind.so"),
		"source=snapshot", "snapshot=" + fixture}, " ")
	c := cluster.StartT(t, cluster.Config{CPUs: 2, TaskPlugin: "task/cgroup,task/affinity",
		Proctrack: "proctrack/cgroup", ConstrainDevices: true, PlugStack: []string{line}})
	out, errOut, err := c.Srun(ctxFor(t), "-n1", "--gpus=2", "--gpu-bind-topo=closest,isolate", "sh", "-c",
		`echo "JOB $SLURM_JOB_ID"; grep devices /proc/self/cgroup; setsid sleep 30 </dev/null >/dev/null 2>&1 & exit 0`)
	if err != nil {
		t.Fatalf("srun: %v\n%s\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "/gpubind_j") {
		t.Fatalf("the task was not in a plugin cgroup:\n%s", out)
	}
	job := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "JOB ", 2)[1], "\n", 2)[0])
	m := findMounts(t)
	var left []string
	for i := 0; i < 100; i++ {
		left, _ = filepath.Glob(filepath.Join(m.devices, "slurm*", "uid_*", "job_"+job))
		if len(left) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		var tree []string
		_ = filepath.Walk(left[0], func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		t.Errorf("job %s's devices cgroups leaked: %v\nslurmd log:\n%s", job, tree, c.SlurmdLog("node1"))
	}
}

// Issue 24: with visible=first, isolate allows exactly the GPUs the task sees, the step's
// GPUs (CUDA IPC/P2P between the tasks keeps working); with visible=own only its own. Either
// way nothing outside the step.
func TestClusterIsolateVisibleFirst(t *testing.T) {
	needV1(t, "devices")
	c := startCluster(t, "task/affinity", false)
	tasks, out, err := runStep(t, c, "-n2", "--gpus=4", "--gpu-bind-topo=closest,isolate,visible=first")
	if err != nil {
		t.Fatalf("srun: %v\n%s", err, out)
	}
	if len(tasks) != 2 {
		t.Fatalf("want 2 tasks' reports, got %d:\n%s", len(tasks), out)
	}
	for id, tv := range tasks {
		step := ints(tv.env["STEP"])
		got := tv.reachable()
		if !slices.Equal(got, step) {
			t.Errorf("task %d: reaches minors %v, want exactly the step's GPUs %v (visible=first)\n%s", id, got, step, out)
		}
		if own := ints(tv.env["GPUS"]); len(own) != 1 || len(ints(tv.env["CVD"])) != len(step) {
			t.Errorf("task %d: own GPUs %v, CUDA_VISIBLE_DEVICES %q: want one own of %d visible", id, own, tv.env["CVD"], len(step))
		}
		inPlugin := false
		for _, cg := range tv.cgroup {
			inPlugin = inPlugin || (strings.Contains(cg, ":devices:") && strings.Contains(cg, "/gpubind_j"))
		}
		if !inPlugin {
			t.Errorf("task %d is in no plugin devices cgroup: %q", id, tv.cgroup)
		}
	}
	if left := leftBehind(t, tasks); len(left) > 0 {
		t.Errorf("left behind after the step: %v", left)
	}
}
