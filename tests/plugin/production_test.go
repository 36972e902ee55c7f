package plugin

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// The configuration most GPU sites run: select/cons_tres (the harness default),
// task/cgroup+task/affinity, proctrack/cgroup and ConstrainDevices=yes (cgroup/v1 on this
// machine; cgroup/v2 runs on the GPU machine, tests/gpu/slurm.sh), with every way users ask
// for GPUs. For each task: the GPUs the plugin chose are GPUs the task can open, and
// CUDA_VISIBLE_DEVICES names them as CUDA numbers them inside the task (PCI order among the
// devices it can open).
func TestProductionConfig(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity",
		Proctrack: "proctrack/cgroup", ConstrainDevices: true, GPUs: 8, PlugStack: []string{line}})
	script := prodScript(c)

	for _, tc := range []struct {
		name  string
		args  []string
		tasks int
	}{
		{"gpus=4", []string{"-n2", "--gpus=4"}, 2},
		{"gpus-per-node=4", []string{"-n2", "--gpus-per-node=4"}, 2},
		{"gres=gpu:3", []string{"-n2", "--gres=gpu:3"}, 2},
		{"gpus-per-task=1", []string{"-n2", "--gpus-per-task=1"}, 2},
		{"gpus-per-task=2", []string{"-n2", "--gpus-per-task=2"}, 2},
		{"ntasks-per-gpu=2", []string{"-n4", "--ntasks-per-gpu=2"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{}, tc.args...), "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo", "sh", "-c", script)
			out, errOut, err := c.Srun(ctx(t), args...)
			if err != nil {
				t.Fatalf("srun %v: %v\n%s\n%s", tc.args, err, out, errOut)
			}
			checkProd(t, c, out, tc.tasks)
		})
	}

	t.Run("srun inside sbatch", func(t *testing.T) {
		outFile := filepath.Join(c.Dir, "sbatch.out")
		_, errOut, err := c.Run(ctx(t), "sbatch", "--wait", "-n2", "--gpus=2", "-o", outFile, "--wrap",
			"srun --cpu-bind=map_cpu:0,1 --gpu-bind-topo sh -c "+shQuote(script))
		out, _ := os.ReadFile(outFile)
		if err != nil {
			t.Fatalf("sbatch: %v\n%s\n%s", err, out, errOut)
		}
		checkProd(t, c, string(out), 2)
	})
	t.Run("srun inside salloc", func(t *testing.T) {
		out, errOut, err := c.Run(ctx(t), "salloc", "-n2", "--gpus=2", c.Bin("srun"), "--cpu-bind=map_cpu:0,1",
			"--gpu-bind-topo", "sh", "-c", script)
		if err != nil {
			t.Fatalf("salloc: %v\n%s\n%s", err, out, errOut)
		}
		checkProd(t, c, out, 2)
	})
	t.Run("two concurrent steps with --overlap", func(t *testing.T) {
		step := c.Bin("srun") + " --overlap -n1 --cpu-bind=map_cpu:0 --gpu-bind-topo sh -c " + shQuote(script)
		out, errOut, err := c.Run(ctx(t), "salloc", "-n2", "--gpus=2", "sh", "-c", step+" & "+step+"; wait")
		if err != nil {
			t.Fatalf("salloc: %v\n%s\n%s", err, out, errOut)
		}
		checkProd(t, c, out, 2)
	})
}

// prodScript prints per task: local id, rank, CUDA_VISIBLE_DEVICES, the plugin's bus ids and
// the minors of the fake GPUs the task may open (access(2) asks the device cgroup).
func prodScript(c *cluster.Cluster) string {
	return `a=; for f in ` + c.DevDir + `/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}${f##*nvidia}"; done; ` +
		`echo "P $SLURM_LOCALID $SLURM_PROCID ${CUDA_VISIBLE_DEVICES:--} ${GPUBIND_PCI_BUS_IDS:--} ${a:--}"`
}

var prodRe = regexp.MustCompile(`(?m)^P (\d+) (\d+) (\S+) (\S+) (\S+)$`)

func checkProd(t *testing.T, c *cluster.Cluster, out string, tasks int) {
	t.Helper()
	lines := prodRe.FindAllStringSubmatch(out, -1)
	if len(lines) != tasks {
		t.Fatalf("%d task lines, want %d:\n%s", len(lines), tasks, out)
	}
	for _, m := range lines {
		open := []int{}
		for _, s := range splitList(m[5]) {
			n, _ := strconv.Atoi(s)
			open = append(open, n)
		}
		sort.Ints(open) // dgxh100: minor order is PCI order
		buses, visible := splitList(m[4]), splitList(m[3])
		if len(buses) == 0 || len(buses) != len(visible) {
			t.Errorf("task %s: CUDA_VISIBLE_DEVICES=%s for GPUs %s", m[2], m[3], m[4])
			continue
		}
		for i, bus := range buses {
			minor := slices.Index(dgxBus, bus) // GRES index = minor in this cluster
			pos := slices.Index(open, minor)
			if pos < 0 {
				t.Errorf("task %s was given GPU %s (minor %d) but can open only minors %v (Slurm %s)",
					m[2], bus, minor, open, slurmVersion(c))
				continue
			}
			if visible[i] != strconv.Itoa(pos) {
				t.Errorf("task %s: CUDA_VISIBLE_DEVICES entry %q for GPU %s; CUDA in the task sees minors %v and numbers it %d (Slurm %s)",
					m[2], visible[i], bus, open, pos, slurmVersion(c))
			}
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

func slurmVersion(c *cluster.Cluster) string {
	out, _, _ := c.Run(context.Background(), "srun", "--version")
	return strings.TrimSpace(out)
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Each node maps GRES indices with its own gres.conf lines. An srun inside sbatch carries the
// batch host's SLURMD_NODENAME in the job's environment to every node; the plugin must name
// the node it runs on (slurmstepd's own SLURMD_NODENAME). Here node2 lists the GPUs in the
// reverse order, so GRES index 0 is minor 0 on node1 and minor 7 on node2.
func TestPerNodeGresConfInsideSbatch(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{Nodes: 2, CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8,
		PlugStack: []string{line}, GresConf: []string{
			"NodeName=node1 Name=gpu File=@DEV@/nvidia[0-7]",
			"NodeName=node2 Name=gpu File=@DEV@/nvidia7,@DEV@/nvidia6,@DEV@/nvidia5,@DEV@/nvidia4," +
				"@DEV@/nvidia3,@DEV@/nvidia2,@DEV@/nvidia1,@DEV@/nvidia0",
		}})
	outFile := filepath.Join(c.Dir, "pernode.out")
	_, errOut, err := c.Run(ctx(t), "sbatch", "--wait", "-N2", "--ntasks-per-node=1", "--gpus-per-node=1",
		"-o", outFile, "--wrap", "srun --cpu-bind=none --gpu-bind-topo sh -c "+shQuote(taskScript))
	out, _ := os.ReadFile(outFile)
	if err != nil {
		t.Fatalf("sbatch: %v\n%s\n%s", err, out, errOut)
	}
	want := map[string]string{"node1": dgxBus[0], "node2": dgxBus[7]}
	tasks := parseTasks(t, string(out))
	if len(tasks) != 2 {
		t.Fatalf("%d tasks:\n%s", len(tasks), out)
	}
	for _, tk := range tasks {
		if tk.BusIDs != want[tk.Node] {
			t.Errorf("%s: GRES index 0 mapped to %s, want %s (its own gres.conf line; Slurm %s)",
				tk.Node, tk.BusIDs, want[tk.Node], slurmVersion(c))
		}
	}
}

// A step without GPUs (--gres=none, --gpus=0) in a job with GPUs has no SLURM_STEP_GPUS but
// inherits SLURM_JOB_GPUS. Those GPUs belong to the job's other steps: the plugin binds
// nothing.
func TestStepWithoutGPUsInAJobWithGPUs(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8, PlugStack: []string{line}})
	outFile := filepath.Join(c.Dir, "nogpu.out")
	_, errOut, err := c.Run(ctx(t), "sbatch", "--wait", "-n1", "--gpus=2", "-o", outFile, "--wrap",
		"for o in --gres=none --gpus=0; do srun -n1 $o --cpu-bind=none --gpu-bind-topo sh -c "+shQuote(taskScript)+"; done")
	out, _ := os.ReadFile(outFile)
	if err != nil {
		t.Fatalf("sbatch: %v\n%s\n%s", err, out, errOut)
	}
	tasks := parseTasks(t, string(out))
	if len(tasks) != 2 {
		t.Fatalf("%d task lines, want 2:\n%s", len(tasks), out)
	}
	for i, tk := range tasks {
		if tk.BusIDs != "-" || tk.Visible != "-" {
			t.Errorf("step %d without GPUs was bound: CUDA_VISIBLE_DEVICES=%s GPUs %s (Slurm %s)\n%s",
				i, tk.Visible, tk.BusIDs, slurmVersion(c), out)
		}
	}
}

// Review finding: a step-wide CPU mask counted as a per-task binding, and tasks on one
// NUMA node doubled up on its GPUs while others idled. gres.conf lists the GPUs as minors
// 0,4,5,1,2,6,3,7, so Slurm's first four are 0,4,5,1: two on each NUMA node
// (dgxh100-2cpu: CPU 0 and GPUs 0-3 are NUMA 0, CPU 1 and GPUs 4-7 NUMA 1). A step of four
// tasks in a one-CPU job (--overcommit) without per-task binding must still give each task
// its own GPU. Before, all four chose from the one node's two GPUs and doubled up.
//
// Review finding: per-task:N gave overlapping or short groups. Slurm's first six GPUs are
// 0,4,5,1,2,6: three on each node. Two tasks bound to CPU 0 ask for 2 GPUs each: each must
// get two GPUs of its own (before: {0,1} and {2,0}).
func TestTaskBindingInProduction(t *testing.T) {
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	var gres []string
	for _, m := range []int{0, 4, 5, 1, 2, 6, 3, 7} {
		gres = append(gres, "Name=gpu File=@DEV@/nvidia"+strconv.Itoa(m))
	}
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity",
		Proctrack: "proctrack/cgroup", ConstrainDevices: true, GPUs: 8, PlugStack: []string{line}, GresConf: gres})
	script := `a=; for f in ` + c.DevDir + `/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}${f##*nvidia}"; done; ` +
		`echo "B $SLURM_LOCALID ${GPUBIND_PCI_BUS_IDS:--} $(awk '/Cpus_allowed_list/{print $2}' /proc/self/status) ${a:--} $SLURM_CPU_BIND_TYPE $SLURM_CPU_BIND_LIST $SLURM_CPU_BIND"`
	busRe := regexp.MustCompile(`(?m)^B (\d+) (\S+) (\S+) (\S+)`)
	check := func(t *testing.T, tasks, perTask int, args ...string) {
		out, errOut, err := c.Run(ctx(t), args[0], append(args[1:], "sh", "-c", script)...)
		if err != nil {
			t.Fatalf("srun %v: %v\n%s\n%s", args, err, out, errOut)
		}
		lines := busRe.FindAllStringSubmatch(out, -1)
		if len(lines) != tasks {
			t.Fatalf("srun %v: %d task lines, want %d:\n%s", args, len(lines), tasks, out)
		}
		owner := map[string]string{}
		for _, m := range lines {
			buses := splitList(m[2])
			if len(buses) != perTask {
				t.Errorf("task %s got GPUs %v, want %d (Slurm %s)", m[1], buses, perTask, slurmVersion(c))
			}
			for _, b := range buses {
				if o, ok := owner[b]; ok {
					t.Errorf("GPU %s given to tasks %s and %s though there are enough for all (Slurm %s)", b, o, m[1], slurmVersion(c))
				}
				owner[b] = m[1]
			}
		}
		if t.Failed() {
			t.Logf("srun %v:\n%s", args, out)
		}
	}
	t.Run("step cpuset is no per-task binding", func(t *testing.T) {
		// A one-CPU job (a job-level --overcommit stays pending on 24.11), four tasks in it.
		check(t, 4, 1, "salloc", "-n1", "-c1", "--gpus=4", c.Bin("srun"), "-n4", "--overcommit",
			"--cpu-bind=none", "--gpu-bind-topo")
	})
	t.Run("per-task:2 groups are exclusive", func(t *testing.T) {
		check(t, 2, 2, "srun", "-n2", "--gpus=6", "--cpu-bind=map_cpu:0,0", "--gpu-bind-topo=per-task:2")
	})
	// Review finding: nic overwrote the user's NCCL_IB_HCA. The task's NIC (mlx5_K next to
	// its GPU, on the ACTIVE port 1) fills in only what the user did not set.
	t.Run("nic keeps the user's NCCL_IB_HCA", func(t *testing.T) {
		nic := `echo "N ${NCCL_IB_HCA:--} ${UCX_NET_DEVICES:--}"`
		for _, c2 := range []struct{ env, want string }{
			{"GPUBIND_UNSET=1", `(?m)^N =(mlx5_\d+:1) mlx5_\d+:1$`},
			{"NCCL_IB_HCA==mlx5_9:2", `(?m)^N =mlx5_9:2 mlx5_\d+:1$`},
		} {
			out, errOut, err := c.Run(ctx(t), "env", c2.env, c.Bin("srun"), "-n1", "--gpus=1",
				"--gpu-bind-topo=closest,nic", "sh", "-c", nic)
			if err != nil || !regexp.MustCompile(c2.want).MatchString(out) {
				t.Errorf("%s: want %q (Slurm %s): %v\n%s\n%s", c2.env, c2.want, slurmVersion(c), err, out, errOut)
			}
		}
	})
}
