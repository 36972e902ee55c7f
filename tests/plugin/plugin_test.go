package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// One node declared with 8 CPUs (of this machine's 2), task/affinity, 8
// fake GPUs in PCI order, the DGX H100 fixture with NUMA 0 = CPU 0.
func TestDGXOneNode(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8,
		PlugStack: []string{line}, SlurmConf: []string{"SlurmdDebug=verbose"}})

	t.Run("help", func(t *testing.T) {
		out, _, err := c.Srun(ctx(t), "--help")
		if err != nil || !strings.Contains(out, "--gpu-bind-topo") {
			t.Fatalf("srun --help lacks --gpu-bind-topo (%v):\n%s", err, out)
		}
		out, errOut, err := c.Srun(ctx(t), "--gpu-bind-topo=help")
		if err != nil || !strings.Contains(out, "closest") || !strings.Contains(out, "per-task") {
			t.Fatalf("--gpu-bind-topo=help (%v):\n%s\n%s", err, out, errOut)
		}
	})

	t.Run("four tasks four GPUs", func(t *testing.T) {
		tasks, _ := srunTasks(t, c, "-N1", "-n4", "--gpus=4", "--gpu-bind-topo")
		if len(tasks) != 4 {
			t.Fatalf("%d tasks", len(tasks))
		}
		seen := map[string]bool{}
		for _, k := range tasks {
			step := splitList(k.StepGPUs)
			bus := splitList(k.BusIDs)
			if len(bus) != 1 || len(step) != 4 {
				t.Fatalf("task %+v", k)
			}
			if seen[bus[0]] {
				t.Errorf("GPU %s given twice: %+v", bus[0], tasks)
			}
			seen[bus[0]] = true
			in := false
			for _, g := range step {
				n, _ := strconv.Atoi(g)
				if dgxBus[n] == bus[0] && g == k.Visible {
					in = true
				}
			}
			if !in {
				t.Errorf("task %d: GPU %s (CUDA_VISIBLE_DEVICES=%s) is not one of the step's GPUs %s", k.Rank, bus[0], k.Visible, k.StepGPUs)
			}
		}
	})

	t.Run("closest with map_cpu", func(t *testing.T) {
		tasks, _ := srunTasks(t, c, "-n4", "--gpus=8", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest")
		checkClosest(t, tasks, dgxNUMA, 4)
	})

	t.Run("eight tasks on four GPUs", func(t *testing.T) {
		tasks, _ := srunTasks(t, c, "-n8", "--gpus=4", "--cpu-bind=map_cpu:0,1,0,1,0,1,0,1", "--gpu-bind-topo=closest")
		if len(tasks) != 8 {
			t.Fatalf("%d tasks", len(tasks))
		}
		use := map[string]int{}
		for _, k := range tasks {
			use[k.BusIDs]++
		}
		if len(use) != 4 {
			t.Errorf("GPUs used: %v, want 4 GPUs twice each", use)
		}
		for b, n := range use {
			if n != 2 {
				t.Errorf("GPU %s used %d times, want 2: %v", b, n, use)
			}
		}
		// Slurm allocates GRES 0-3, all on NUMA 0: the CPU 0 tasks take
		// them in order; the CPU 1 tasks (NUMA 1 holds none of the step's
		// GPUs) take them from the other end, so no GPU doubles up before
		// every GPU has a task: tasks 0-3 get 0, 3, 1, 2.
		for _, k := range tasks {
			if want := []int{0, 3, 1, 2}; k.Rank < 4 && k.BusIDs != dgxBus[want[k.Rank]] {
				t.Errorf("task %d (CPU %s): %s, want %s", k.Rank, k.CPUs, k.BusIDs, dgxBus[want[k.Rank]])
			}
			if dgxNUMA(k.BusIDs) != 0 {
				t.Errorf("task %d: %s is not a GPU of the step", k.Rank, k.BusIDs)
			}
		}
	})

	t.Run("map", func(t *testing.T) {
		tasks, _ := srunTasks(t, c, "-n4", "--gpus=8", "--gpu-bind-topo=map:7,5,3,1")
		for i, k := range tasks {
			want := []string{"7", "5", "3", "1"}[i]
			if k.Visible != want {
				t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s, want %s", i, k.Visible, want)
			}
			n, _ := strconv.Atoi(want)
			if k.BusIDs != dgxBus[n] {
				t.Errorf("task %d: bus %s, want %s", i, k.BusIDs, dgxBus[n])
			}
		}
	})

	t.Run("per-task:2", func(t *testing.T) {
		tasks, _ := srunTasks(t, c, "-n2", "--gpus=4", "--gpu-bind-topo=per-task:2")
		seen := map[string]bool{}
		for _, k := range tasks {
			bus := splitList(k.BusIDs)
			vis := splitList(k.Visible)
			if len(bus) != 2 || len(vis) != 2 {
				t.Fatalf("task %d: %s / %s, want 2 GPUs", k.Rank, k.Visible, k.BusIDs)
			}
			for _, b := range bus {
				if seen[b] {
					t.Errorf("GPU %s twice", b)
				}
				seen[b] = true
			}
		}
	})

	t.Run("nic flag", func(t *testing.T) {
		tasks, _ := srunTasks(t, c, "-n2", "--gpus=8", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,nic")
		for _, k := range tasks {
			if !strings.HasPrefix(k.HCA, "=mlx5_") || !strings.HasSuffix(k.HCA, ":1") {
				t.Errorf("task %d: NCCL_IB_HCA=%s", k.Rank, k.HCA)
			}
		}
	})

	t.Run("verbose to the user and the slurmd log", func(t *testing.T) {
		out, errOut, err := c.Srun(ctx(t), "-n2", "--gpus=2", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=verbose", "true")
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, out, errOut)
		}
		re := regexp.MustCompile(`gpubind: task (\d) \(rank (\d)\): CUDA_VISIBLE_DEVICES=(\d) -> GPU (\d) (\S+) GPU-\S+ NUMA (\d)`)
		if n := len(re.FindAllString(out+errOut, -1)); n != 2 {
			t.Errorf("%d mapping lines on the user's terminal, want 2:\n%s%s", n, out, errOut)
		}
		log := c.SlurmdLog(c.NodeNames[0])
		for _, m := range re.FindAllStringSubmatch(log, -1) {
			n, _ := strconv.Atoi(m[4])
			if dgxBus[n] != m[5] {
				t.Errorf("log line %q: bus id %s, fixture says %s", m[0], m[5], dgxBus[n])
			}
		}
		if len(re.FindAllString(log, -1)) == 0 {
			t.Errorf("no mapping line in the slurmd log")
		}
		if !regexp.MustCompile(`gpubind: step plan took [0-9.]+ ms`).MatchString(log) {
			t.Errorf("no plan time in the slurmd log")
		}
	})

	t.Run("sbatch steps inherit the option", func(t *testing.T) {
		dir := t.TempDir()
		outFile := filepath.Join(dir, "out")
		script := "echo B ${GPUBIND_PCI_BUS_IDS:--} ${SLURM_GPU_BIND_TOPO:--}; srun -n2 --cpu-bind=map_cpu:0,1 sh -c '" +
			strings.ReplaceAll(taskScript, "'", `'\''`) + "'"
		_, errOut, err := c.Run(ctx(t), "sbatch", "--wait", "-n2", "--gpus=8", "--gpu-bind-topo=spread,verbose", "-o", outFile, "--wrap", script)
		if err != nil {
			t.Fatalf("sbatch: %v\n%s", err, errOut)
		}
		b, err := os.ReadFile(outFile)
		if err != nil {
			t.Fatal(err)
		}
		out := string(b)
		if !strings.Contains(out, "B - spread,verbose") {
			t.Errorf("batch step: want unbound with SLURM_GPU_BIND_TOPO=spread,verbose:\n%s", out)
		}
		tasks := parseTasks(t, out)
		if len(tasks) != 2 || tasks[0].BusIDs == "-" || tasks[1].BusIDs == "-" || tasks[0].BusIDs == tasks[1].BusIDs {
			t.Errorf("steps in the batch job are not bound:\n%s", out)
		}
		if !strings.Contains(out, "gpubind: task 1 (rank 1)") {
			t.Errorf("verbose lines missing from the step's stderr:\n%s", out)
		}
	})

	t.Run("loaded but unused changes nothing", func(t *testing.T) {
		envOf := func() map[string]string {
			out, errOut, err := c.Srun(ctx(t), "-n2", "--gpus=2", "--cpu-bind=map_cpu:0,1", "sh", "-c", "env | sed \"s/^/$SLURM_PROCID /\"")
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			m := map[string]string{}
			for _, l := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(l, "="); ok {
					m[k] = v
				}
			}
			return m
		}
		setPlugStack(t, c)
		defer setPlugStack(t, c, line)
		a, b := envOf(), envOf()
		noisy := map[string]bool{}
		for k := range a {
			// Newer Slurm (26.05) sets SLURM_JOB_START_TIME/END_TIME: two quick runs may share
			// a second, and the run with the plugin may not.
			if strings.HasSuffix(k, "_TIME") {
				noisy[k] = true
			}
			if a[k] != b[k] {
				noisy[k] = true
			}
		}
		for k := range b {
			if a[k] != b[k] {
				noisy[k] = true
			}
		}
		setPlugStack(t, c, line)
		with := envOf()
		for k, v := range b {
			if !noisy[k] && with[k] != v {
				t.Errorf("with the plugin loaded: %s=%q, without %q", k, with[k], v)
			}
		}
		for k, v := range with {
			if _, ok := b[k]; !ok && !noisy[k] {
				t.Errorf("with the plugin loaded: new variable %s=%q", k, v)
			}
		}
		if len(with) < 20 {
			t.Fatalf("too few variables: %d", len(with))
		}
	})

	t.Run("plan failure in slurmstepd", func(t *testing.T) {
		// srun accepts the option; the engine in slurmstepd cannot read gres.conf.
		setPlugStack(t, c, line+" gres_conf=/nonexistent/gres.conf")
		defer setPlugStack(t, c, line)
		out, errOut, err := c.Srun(ctx(t), "-n2", "--gpus=2", "--gpu-bind-topo", "true")
		if err == nil {
			t.Errorf("enforce: the step succeeded:\n%s\n%s", out, errOut)
		}
		if !strings.Contains(errOut, "gpubind: error: ") || !strings.Contains(errOut, "/nonexistent/gres.conf") {
			t.Errorf("enforce: the user does not see the reason:\n%s", errOut)
		}
		if log := c.SlurmdLog(c.NodeNames[0]); !strings.Contains(log, "error: gpubind: ") || !strings.Contains(log, "/nonexistent/gres.conf") {
			t.Errorf("enforce: slurmd log lacks the reason")
		}
		setPlugStack(t, c, line+" gres_conf=/nonexistent/gres.conf mode=optional")
		tasks, errOut := srunTasks(t, c, "-n2", "--gpus=2", "--gpu-bind-topo")
		for _, k := range tasks {
			if k.BusIDs != "-" {
				t.Errorf("optional: task %d bound", k.Rank)
			}
		}
		if strings.Count(errOut, "gpubind: warning: ") != 1 || !strings.Contains(errOut, "tasks run unbound (mode=optional)") {
			t.Errorf("optional: want one warning for the user:\n%s", errOut)
		}
	})

	t.Run("bad option", func(t *testing.T) {
		out, errOut, err := c.Srun(ctx(t), "-n1", "--gpu-bind-topo=closets", "true")
		if err == nil || !strings.Contains(errOut, "closets") {
			t.Errorf("want a failure naming \"closets\"; err %v\n%s\n%s", err, out, errOut)
		}
		// The same text through the environment, with the srun check off
		// (mode=optional on the client), reaches slurmstepd.
		setPlugStack(t, c, line+" mode=optional")
		defer setPlugStack(t, c, line)
		tasks, errOut := srunTasks(t, c, "-n2", "--gpus=2", "--gpu-bind-topo=closets")
		if !strings.Contains(errOut, "gpubind: warning: ") || !strings.Contains(errOut, `"closets"`) {
			t.Errorf("optional: no warning naming \"closets\" from slurmstepd:\n%s", errOut)
		}
		for _, k := range tasks {
			if k.BusIDs != "-" {
				t.Errorf("optional: task %d bound (%s), want unbound", k.Rank, k.BusIDs)
			}
		}
	})
}

// checkClosest: every task's GPU sits on the NUMA node of its CPU.
func checkClosest(t *testing.T, tasks []task, numaOf func(string) int, want int) {
	t.Helper()
	if len(tasks) != want {
		t.Fatalf("%d tasks, want %d", len(tasks), want)
	}
	seen := map[string]bool{}
	for _, k := range tasks {
		cpu := cpuNUMA(k.CPUs)
		if cpu < 0 {
			t.Fatalf("task %d is not bound to one CPU: %q", k.Rank, k.CPUs)
		}
		if got := numaOf(k.BusIDs); got != cpu {
			t.Errorf("task %d on CPU %s (NUMA %d) got GPU %s on NUMA %d", k.Rank, k.CPUs, cpu, k.BusIDs, got)
		}
		if k.NUMA != strconv.Itoa(cpu) {
			t.Errorf("task %d: GPUBIND_NUMA=%s", k.Rank, k.NUMA)
		}
		if seen[k.BusIDs] {
			t.Errorf("task %d: GPU %s given twice", k.Rank, k.BusIDs)
		}
		seen[k.BusIDs] = true
	}
}

// Implicit binding: task/affinity binds 2 tasks to the 2 real CPUs with no
// --cpu-bind; the binding exists only inside each task.
func TestImplicitBinding(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{TaskPlugin: "task/affinity", GPUs: 8, PlugStack: []string{line}})
	for i := 0; i < 3; i++ {
		tasks, _ := srunTasks(t, c, "-n2", "--gpus=8", "--gpu-bind-topo")
		checkClosest(t, tasks, dgxNUMA, 2)
	}
}

// GRES, minor and PCI order all differ; the fixture's NUMA nodes are CPUs 0 and 1.
func TestMisordered(t *testing.T) {
	line := plugLine(t, "root="+fixture("misordered-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/affinity", GPUs: 4, GresOrder: []int{3, 1, 0, 2},
		PlugStack: []string{line}})
	tasks, _ := srunTasks(t, c, "-n4", "--gpus=4", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest")
	checkClosest(t, tasks, misNUMA, 4)
	// CUDA_VISIBLE_DEVICES is in the numbering CUDA uses with
	// CUDA_DEVICE_ORDER=PCI_BUS_ID (PCI order), not Slurm's GRES index.
	pci := []string{"0000:1b:00.0", "0000:3d:00.0", "0000:8a:00.0", "0000:b1:00.0"}
	for _, k := range tasks {
		n, _ := strconv.Atoi(k.Visible)
		if n < 0 || n >= len(pci) || pci[n] != k.BusIDs {
			t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s is not the PCI position of %s", k.Rank, k.Visible, k.BusIDs)
		}
	}
	// map: takes Slurm's GRES indices, as --gpu-bind=map_gpu does.
	tasks, _ = srunTasks(t, c, "-n4", "--gpus=4", "--gpu-bind-topo=map:3,2,1,0")
	for i, k := range tasks {
		if k.BusIDs != misBus[3-i] {
			t.Errorf("map: task %d got %s, want GRES %d = %s", i, k.BusIDs, 3-i, misBus[3-i])
		}
	}
	tasks, _ = srunTasks(t, c, "-n2", "--gpus=4", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=spread")
	if len(tasks) != 2 || tasks[0].BusIDs == tasks[1].BusIDs {
		t.Errorf("spread: %+v", tasks)
	}
}

// Both numberings: without ConstrainDevices tasks see global GRES indices,
// with it indices relative to the step's GPUs; the bus ids are the same.
func TestConstrainDevices(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	// One cgroup cluster at a time (the harness serialises them): each in
	// its own subtest, stopped at the subtest's end.
	run := func(constrain bool) (tasks []task) {
		t.Run(fmt.Sprintf("ConstrainDevices=%v", constrain), func(t *testing.T) {
			c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity", ConstrainDevices: constrain,
				GPUs: 8, PlugStack: []string{line}})
			// The step gets GRES 0-3 (NUMA 0) and 4-5 (NUMA 1) of the job's 6.
			tasks, _ = srunTasks(t, c, "-n4", "--gpus=6", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest")
			checkClosest(t, tasks, dgxNUMA, 4)
		})
		if len(tasks) != 4 {
			t.FailNow()
		}
		return tasks
	}
	global := run(false)
	relative := run(true)
	for i := range global {
		g, r := global[i], relative[i]
		if g.BusIDs != r.BusIDs {
			t.Errorf("task %d: bus %s without ConstrainDevices, %s with", i, g.BusIDs, r.BusIDs)
		}
		gi, _ := strconv.Atoi(g.Visible)
		if dgxBus[gi] != g.BusIDs {
			t.Errorf("global: task %d CUDA_VISIBLE_DEVICES=%s is not GRES index of %s", i, g.Visible, g.BusIDs)
		}
		// Relative: the position among the step's GPUs (GRES order).
		step := splitList(r.StepGPUs)
		ri, _ := strconv.Atoi(r.Visible)
		if ri >= len(step) || step[ri] != g.Visible {
			t.Errorf("relative: task %d CUDA_VISIBLE_DEVICES=%s, step GPUs %s, want the position of %s", i, r.Visible, r.StepGPUs, g.Visible)
		}
	}
}

// Two nodes: each node plans its own tasks and logs its own lines.
func TestTwoNodes(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{Nodes: 2, CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8, PlugStack: []string{line}})
	tasks, _ := srunTasks(t, c, "-N2", "-n4", "--ntasks-per-node=2", "--gpus-per-node=8", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,verbose")
	if len(tasks) != 4 {
		t.Fatalf("%d tasks", len(tasks))
	}
	perNode := map[string][]task{}
	for _, k := range tasks {
		perNode[k.Node] = append(perNode[k.Node], k)
	}
	if len(perNode) != 2 {
		t.Fatalf("tasks on %d nodes: %+v", len(perNode), tasks)
	}
	for node, ks := range perNode {
		sort.Slice(ks, func(i, j int) bool { return ks[i].Local < ks[j].Local })
		// Local task 0 on CPU 0 (NUMA 0), local 1 on CPU 1 (NUMA 1): the
		// first GPU of each NUMA node, on both nodes.
		if len(ks) != 2 || ks[0].BusIDs != dgxBus[0] || ks[1].BusIDs != dgxBus[4] {
			t.Errorf("node %s: %+v", node, ks)
		}
		log := c.SlurmdLog(node)
		for _, k := range ks {
			want := fmt.Sprintf("gpubind: task %d (rank %d): CUDA_VISIBLE_DEVICES=%s -> GPU", k.Local, k.Rank, k.Visible)
			if !strings.Contains(log, want) {
				t.Errorf("node %s log lacks %q", node, want)
			}
		}
	}
}
