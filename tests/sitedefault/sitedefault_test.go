// Package sitedefault checks that an admin's `default=` in plugstack.conf is safe to turn on
// for every job: on a private Slurm cluster in the configuration most GPU sites run
// (task/cgroup+task/affinity, proctrack/cgroup, ConstrainDevices=yes, 8 fake GPUs), each job
// runs twice, once without the plugin and once with `default=closest mode=enforce`, and the
// two runs are compared: exit status, stderr, stdout, every task's environment and the GPU
// devices each task can open. Only a GPU step that the default binds may differ, and only in
// the variables docs/users.md lists. It needs root.
package sitedefault

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/testbuild"
)

// taskDump prints every variable of the task's environment and the minors of the fake GPUs it
// can open (access(2) asks the device cgroup), each line prefixed by "E RANK" or "D RANK".
const taskDump = `r=${SLURM_HET_JOB_ID:+het$SLURM_HET_JOB_OFFSET.}$SLURM_PROCID; env | LC_ALL=C sort | sed "s/^/E $r /"; ` +
	`a=; for f in @DEV@/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}${f##*nvidia}"; done; echo "D $r ${a:--}"`

// cudaOpen is a program each task runs to open a device by its CUDA ordinal as CUDA
// would: CUDA_VISIBLE_DEVICES (unset: every device the task can open) lists the devices,
// a number being a position among the devices the task can open in PCI order
// (ConstrainDevices numbering; the fixture's minors are in PCI order), a GPU- UUID the
// device with that UUID (@UUIDS@: "MINOR UUID" lines of the fixture); enumeration stops at
// the first entry that names no device it can open, as CUDA's does. Usage:
// cudaopen LABEL ORDINAL; it prints "O LABEL ORDINAL ok" or "O LABEL ORDINAL invalid".
const cudaOpen = `#!/bin/sh
allowed=
for f in @DEV@/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && allowed="$allowed ${f##*nvidia}"; done
allowed=$(for m in $allowed; do echo "$m"; done | sort -n | tr '\n' ' ')
if [ "${CUDA_VISIBLE_DEVICES+set}" ]; then
	list=
	for e in $(echo "$CUDA_VISIBLE_DEVICES" | tr ',' ' '); do
		m=
		case $e in
		GPU-*) m=$(awk -v u="$e" '$2 == u { print $1 }' @UUIDS@)
			case " $allowed " in *" $m "*) ;; *) m= ;; esac ;;
		*[!0-9]*) ;;
		*) m=$(echo $allowed | tr ' ' '\n' | sed -n "$((e + 1))p") ;;
		esac
		[ -n "$m" ] || break
		list="$list $m"
	done
else
	list=$allowed
fi
m=$(echo $list | tr ' ' '\n' | sed -n "$(($2 + 1))p")
if [ -n "$m" ]; then echo "O $1 $2 ok"; else echo "O $1 $2 invalid"; fi
`

// The variables the plugin may set in a task it binds (docs/users.md "What each task gets").
var bindVars = regexp.MustCompile(`^(CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|GPUBIND_[A-Z_]+)$`)

// Variables whose values differ from one job to the next whatever the plugin does: ids,
// times, ports, addresses, pids.
var volatileVars = regexp.MustCompile(`^(SLURM_(JOB_SLUID|[A-Z_]*_SLUID|JOB_ID|JOBID|JOB_ID_PACK_GROUP_[0-9]+|JOB_ID_HET_GROUP_[0-9]+|ARRAY_JOB_ID|HET_JOB_ID|HET_JOB_ID_SET|JOB_START_TIME|JOB_END_TIME|TASK_PID|SRUN_COMM_PORT|STEP_LAUNCHER_PORT|LAUNCH_NODE_IPADDR|SRUN_COMM_HOST|STEP_ID_SET|JOB_NODELIST_SET|SPANK_.*|CPU_BIND_VERBOSE_UNUSED)|PMI[A-Z_]*|PMIX[A-Z_]*|OMPI_[A-Z_]*|TMPDIR|OLDPWD|_|SHLVL|PPID|SLURM_SCRIPT_CONTEXT)$`)

type job struct {
	name string
	// argv runs the job; "@DUMP@" stands for taskDump, "@OUT@" for a fresh output file.
	argv []string
	// bound: a GPU step the default binds (the plugin's variables may differ there).
	bound bool
	// minVersion: the Slurm major.minor that has the syntax ("" any).
	minVersion string
	// plugstack: arguments added to the plugin's line (a launcher that cannot plan).
	plugstack string
	// failed: the plugin itself fails on this GPU step (launcher missing, untrusted,
	// hanging): the step runs as without the plugin, and its first task is told once.
	failed bool
}

func TestSiteDefault(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (private Slurm cluster)")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := testbuild.Plugin(dir); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	on := strings.Join([]string{"required", filepath.Join(dir, "spank_gpubind.so"),
		"root=" + filepath.Join(testbuild.RepoRoot(), "tests/fixtures/dgxh100-2cpu"), "source=sysfs",
		"cache_dir=" + cache, "default=closest", "mode=enforce"}, " ")
	// Two nodes: the components of a heterogeneous job do not share one here.
	// Launchers that cannot plan: none at the path, one that others may write, one
	// that hangs.
	broken := filepath.Join(dir, "broken")
	if err := os.Mkdir(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	hang := filepath.Join(broken, "hang")
	untrusted := filepath.Join(broken, "untrusted")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(untrusted, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(untrusted, 0o775); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(broken, "missing")
	c := cluster.StartT(t, cluster.Config{Nodes: 2, CPUs: 8, TaskPlugin: "task/cgroup,task/affinity",
		Proctrack: "proctrack/cgroup", ConstrainDevices: true, GPUs: 8,
		// Heterogeneous jobs are scheduled by the backfill scheduler only: every second here.
		SlurmConf: []string{"SchedulerParameters=bf_interval=1"}})
	version := slurmVersion(c)
	dump := shQuote(strings.ReplaceAll(taskDump, "@DEV@", c.DevDir))
	srun := c.Bin("srun")
	step := func(args ...string) string { return srun + " " + strings.Join(args, " ") + " sh -c " + dump }
	cuda := writeCudaOpen(t, dir, c.DevDir)
	// A task opening its SLURM_LOCALID's device (Megatron, NeMo, Lightning), device 0, or
	// forking 8 children that each open their LOCAL_RANK's (torchrun).
	openLocalID := "@DUMP@; " + cuda + " $SLURM_PROCID $SLURM_LOCALID"
	open0 := "@DUMP@; " + cuda + " $SLURM_PROCID 0"
	torchrun := "@DUMP@; for i in 0 1 2 3 4 5 6 7; do LOCAL_RANK=$i sh -c '" + cuda + " $SLURM_PROCID.$LOCAL_RANK $LOCAL_RANK' & done; wait"
	gpuSteps := func(name, args string) []job {
		var out []job
		for _, s := range []struct{ name, argv string }{
			{"cpu-only step", "srun -n2 sh -c @DUMP@"},
			{"--gres=none", "srun -n2 --gres=none sh -c @DUMP@"},
			{"GPU step", "srun -n2 --gpus=2 sh -c @DUMP@"},
		} {
			out = append(out, job{name: name + ", " + s.name, argv: strings.Fields(s.argv), plugstack: args,
				failed: s.name == "GPU step"})
		}
		return out
	}

	jobs := []job{
		{name: "cpu-only step", argv: []string{"srun", "-n2", "sh", "-c", "@DUMP@"}},
		{name: "--gres=none", argv: []string{"srun", "-n2", "--gres=none", "sh", "-c", "@DUMP@"}},
		{name: "--gpus=0", argv: []string{"srun", "-n1", "--gpus=0", "sh", "-c", "@DUMP@"}},
		{name: "cpu-only step inside a GPU job", argv: []string{"salloc", "-n2", "--gpus=2", "sh", "-c",
			step("-n2", "--gres=none") + "; " + step("-n1", "--gpus=0")}},
		{name: "exit code", argv: []string{"srun", "-n2", "sh", "-c", "exit $((3 + SLURM_PROCID))"}},
		{name: "chdir", argv: []string{"srun", "-n1", "--chdir=/tmp", "sh", "-c", "pwd; @DUMP@"}},
		{name: "user environment", argv: []string{"srun", "-n1", "--export=ALL,GB_USER_VAR=1,CUDA_VISIBLE_DEVICES=7", "sh", "-c", "@DUMP@"}},
		// A step-level --overcommit in a one-CPU job (a job-level one stays pending on 24.11).
		{name: "overcommit", argv: []string{"salloc", "-n1", "-c1", "sh", "-c", step("-n4", "--overcommit")}},
		{name: "signal forwarding", argv: []string{"salloc", "-n1", "sh", "-c",
			srun + ` -n1 sh -c 'trap "echo got USR1; exit 7" USR1; echo ready; while :; do sleep 0.1; done' & ` +
				`sleep 3; ` + c.Bin("scancel") + ` --signal=USR1 $SLURM_JOB_ID.0; wait $!; echo "srun status $?"`}},
		{name: "exclusive", argv: []string{"srun", "-n2", "--exclusive", "sh", "-c", "@DUMP@"}},
		{name: "two --overlap steps", argv: []string{"salloc", "-n2", "sh", "-c",
			step("--overlap", "-n1") + " & " + step("--overlap", "-n1") + "; wait"}},
		{name: "heterogeneous job", argv: []string{"srun", "-n1", "sh", "-c", "@DUMP@", ":", "-n1", "sh", "-c", "@DUMP@"}},
		{name: "batch step", argv: []string{"sbatch", "--wait", "-n2", "-o", "@OUT@", "--wrap", "sh -c " + dump}},
		{name: "batch step with GPUs and a CPU-only srun", argv: []string{"sbatch", "--wait", "-n2", "--gpus=2", "-o", "@OUT@", "--wrap",
			"sh -c " + dump + "; " + step("-n2", "--gres=none")}},
		{name: "job array", argv: []string{"sbatch", "--wait", "--array=0-1", "-n1", "-o", "@OUT@", "--wrap", step("-n1")}},
		// The user's own binding wins over the admin's default.
		{name: "--gpu-bind=map_gpu", argv: []string{"srun", "-n2", "--gpus=2", "--gpu-bind=map_gpu:1,0", "sh", "-c", "@DUMP@"}},
		{name: "--gpu-bind=single:1", argv: []string{"srun", "-n2", "--gpus=2", "--gpu-bind=single:1", "sh", "-c", "@DUMP@"}},
		{name: "--gpu-bind inside sbatch", argv: []string{"sbatch", "--wait", "-n2", "--gpus=2", "--gpu-bind=map_gpu:1,0", "-o", "@OUT@", "--wrap", step("-n2")}},
		{name: "--tres-bind=gres/gpu:map", minVersion: "24.11", argv: []string{"srun", "-n2", "--gpus=2", "--tres-bind=gres/gpu:map:1,0", "sh", "-c", "@DUMP@"}},
		{name: "--gpus-per-task", argv: []string{"srun", "-n2", "--gpus-per-task=1", "sh", "-c", "@DUMP@"}},
		// A GPU step that asked for nothing: the default binds it.
		{name: "GPU step bound by the default", bound: true, argv: []string{"srun", "-n2", "--gpus=2", "sh", "-c", "@DUMP@"}},
		// Issue 33: the jobs that fill GPU clusters. A task driving several GPUs, and
		// set_device(LOCAL_RANK) programs, see what they see without the plugin. (8 tasks
		// on one node run with --cpu-bind=none: task/affinity cannot lay 8 bound tasks
		// out on the 8 CPUs slurm.conf declares where the host has fewer.)
		{name: "1 task and 4 GPUs", argv: []string{"srun", "-n1", "--gpus=4", "sh", "-c", "@DUMP@; " + cuda + " 0 3"}},
		{name: "torchrun: 1 task per node on 2 nodes with 8 GPUs each", argv: []string{"srun", "-N2", "--ntasks-per-node=1",
			"--gpus-per-node=8", "sh", "-c", torchrun}},
		{name: "8 tasks and 8 GPUs opening device SLURM_LOCALID", bound: true, argv: []string{"srun", "-N1", "-n8", "--gpus=8", "--cpu-bind=none",
			"sh", "-c", openLocalID}},
		{name: "control: 8 tasks and 8 GPUs opening device 0", bound: true, argv: []string{"srun", "-N1", "-n8", "--gpus=8", "--cpu-bind=none",
			"sh", "-c", open0}},
		{name: "2 tasks and 8 GPUs", argv: []string{"srun", "-N1", "-n2", "--gpus=8", "sh", "-c", "@DUMP@; " + cuda + " $SLURM_PROCID 3"}},
		{name: "--gpu-bind=none", argv: []string{"srun", "-n2", "--gpus=2", "--gpu-bind=none", "sh", "-c", "@DUMP@"}},
		{name: "--gpu-bind=none inside sbatch", argv: []string{"sbatch", "--wait", "-n2", "--gpus=2", "--gpu-bind=none", "-o", "@OUT@", "--wrap", step("-n2")}},
		{name: "--tres-bind=gres/gpu:none", minVersion: "24.11", argv: []string{"srun", "-n2", "--gpus=2", "--tres-bind=gres/gpu:none", "sh", "-c", "@DUMP@"}},
		{name: "--ntasks-per-gpu=1", argv: []string{"srun", "-n2", "--ntasks-per-gpu=1", "sh", "-c", "@DUMP@"}},
	}
	jobs = append(jobs, gpuSteps("launcher missing", "launcher="+missing)...)
	jobs = append(jobs, gpuSteps("launcher untrusted", "launcher="+untrusted)...)
	jobs = append(jobs, gpuSteps("launcher hanging", "launcher="+hang+" timeout=500")...)
	for _, j := range jobs {
		t.Run(j.name, func(t *testing.T) {
			if j.minVersion != "" && versionLess(version, j.minVersion) {
				t.Skipf("needs Slurm %s (have %s)", j.minVersion, version)
			}
			setPlugStack(t, c, "")
			off := runJob(t, c, j, dump)
			setPlugStack(t, c, strings.TrimSpace(on+" "+j.plugstack))
			with := runJob(t, c, j, dump)
			compare(t, j, off, with, version)
		})
	}
	// The user who gives both --gpu-bind and --gpu-bind-topo gets ours, and is told once.
	t.Run("--gpu-bind with an explicit --gpu-bind-topo", func(t *testing.T) {
		setPlugStack(t, c, on)
		out, errOut, err := c.Run(context.Background(), "srun", "-n2", "--gpus=2", "--gpu-bind=map_gpu:1,0", "--gpu-bind-topo",
			"sh", "-c", `echo "B $SLURM_PROCID ${GPUBIND_PCI_BUS_IDS:--}"`)
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, out, errOut)
		}
		if n := strings.Count(errOut, "you gave both --gpu-bind-topo"); n != 1 {
			t.Errorf("%d warnings naming both options on stderr, want 1 (Slurm %s):\n%s", n, version, errOut)
		}
		if strings.Contains(out, " -\n") || strings.Count(out, "B ") != 2 {
			t.Errorf("not every task bound (Slurm %s):\n%s", version, out)
		}
	})
	// isolate=force: the user's --gpu-bind-topo=off means "as if I asked nothing", which
	// is the default with what the admin forces; off does not bypass force.
	t.Run("off does not bypass isolate=force", func(t *testing.T) {
		setPlugStack(t, c, on+" isolate=force")
		out, errOut, err := c.Run(context.Background(), "srun", "-n2", "--gpus=2", "--gpu-bind-topo=off", "sh", "-c",
			strings.ReplaceAll(`a=; for f in @DEV@/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}${f##*nvidia}"; done; echo "I $SLURM_PROCID ${a:--}"`, "@DEV@", c.DevDir))
		if err != nil {
			t.Fatalf("%v\n%s\n%s", err, out, errOut)
		}
		if m := regexp.MustCompile(`(?m)^I \d+ \d+$`).FindAllString(out, -1); len(m) != 2 {
			t.Errorf("with isolate=force and --gpu-bind-topo=off each task must open one GPU (Slurm %s):\n%s\n%s", version, out, errOut)
		}
	})
}

type result struct {
	status string
	stderr []string
	lines  []string // stdout and output files, normalised and sorted
}

// Job and step ids differ from one run to the next.
var jobIDRe = regexp.MustCompile(`(?i)\b(job |jobid=|job_id=|stepid=|allocation |step |StepId=)\d+([._+]\d+)*`)

func runJob(t *testing.T, c *cluster.Cluster, j job, dump string) result {
	t.Helper()
	out := filepath.Join(c.Dir, fmt.Sprintf("out-%d", time.Now().UnixNano()))
	var argv []string
	for _, a := range j.argv {
		a = strings.ReplaceAll(a, "@DUMP@", strings.Trim(dump, "'"))
		a = strings.ReplaceAll(a, "@DEV@", c.DevDir)
		if a == "@OUT@" {
			a = out + "-%a"
		}
		argv = append(argv, a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdout, stderr, err := c.Run(ctx, argv[0], argv[1:]...)
	// A job that timed out must not hold a node for the next one, and the next one must not
	// wait for this one's resources (Slurm says so on stderr).
	_, _, _ = c.Run(context.Background(), "scancel", "--user=root")
	for i := 0; i < 100; i++ {
		if q, _, err := c.Run(context.Background(), "squeue", "-h"); err == nil && strings.TrimSpace(q) == "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	r := result{status: "0"}
	if err != nil {
		r.status = regexp.MustCompile(`exit status \d+|signal: \w+`).FindString(err.Error())
		if r.status == "" {
			r.status = err.Error()
		}
	}
	files, _ := filepath.Glob(out + "-*")
	sort.Strings(files)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		stdout += string(b)
	}
	r.lines = normalise(stdout)
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		// salloc's and sbatch's own chatter names the job id.
		if l == "" || strings.Contains(l, "Granted job allocation") || strings.Contains(l, "Relinquishing job allocation") ||
			strings.Contains(l, "Submitted batch job") || strings.Contains(l, "Job allocation") && strings.Contains(l, "has been revoked") ||
			strings.Contains(l, "Pending job allocation") || strings.Contains(l, "queued and waiting for resources") ||
			strings.Contains(l, "has been allocated resources") || strings.Contains(l, "Step created for StepId") ||
			strings.Contains(l, "Step creation temporarily disabled") || strings.Contains(l, "Requested nodes are busy") {
			continue
		}
		r.stderr = append(r.stderr, jobIDRe.ReplaceAllString(l, "${1}N"))
	}
	return r
}

// normalise drops the volatile variables and sorts the lines (tasks print concurrently).
func normalise(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimRight(l, " ")
		if l == "" || strings.HasPrefix(l, "Submitted batch job ") {
			continue
		}
		l = jobIDRe.ReplaceAllString(l, "${1}N")
		if f := strings.SplitN(l, " ", 3); len(f) == 3 && f[0] == "E" {
			key, _, _ := strings.Cut(f[2], "=")
			if volatileVars.MatchString(key) {
				continue
			}
		}
		lines = append(lines, l)
	}
	sort.Strings(lines)
	return lines
}

// compare fails the test on any difference the plugin may not make.
func compare(t *testing.T, j job, off, with result, version string) {
	t.Helper()
	if strings.Contains(off.status, "killed") {
		t.Errorf("the job did not end within the time limit even without the plugin (Slurm %s): nothing compared", version)
	}
	if off.status != with.status {
		t.Errorf("exit status %q with default=closest, %q without the plugin (Slurm %s)", with.status, off.status, version)
	}
	errA, errB := off.stderr, with.stderr
	if j.failed {
		// One warning, on the first task's stderr, that the plugin failed and the
		// step runs as Slurm set it up.
		var n int
		errB, n = dropPluginWarnings(errB)
		if n != 1 {
			t.Errorf("%d gpubind warnings on stderr where the plugin failed, want 1 (Slurm %s):\n%s", n, version, strings.Join(with.stderr, "\n"))
		}
	}
	if d := diff(errA, errB); d != "" {
		t.Errorf("stderr differs (Slurm %s):\n%s", version, d)
	}
	a, b := off.lines, with.lines
	if j.bound {
		a, b = dropBindVars(a), dropBindVars(b)
		bound := 0
		for _, l := range with.lines {
			if strings.Contains(l, " GPUBIND_PCI_BUS_IDS=") {
				bound++
			}
		}
		if bound == 0 {
			t.Errorf("the default bound no task of a GPU step that asked for nothing (Slurm %s)", version)
		}
	}
	if d := diff(a, b); d != "" {
		t.Errorf("task output differs from the same job without the plugin (Slurm %s):\n%s", version, d)
	}
	if t.Failed() {
		t.Logf("argv: %q\nwithout the plugin: %s\n%s\nwith default=closest: %s\n%s", j.argv,
			off.status, strings.Join(off.stderr, "\n"), with.status, strings.Join(with.stderr, "\n"))
	}
}

func dropPluginWarnings(lines []string) (out []string, n int) {
	for _, l := range lines {
		if strings.HasPrefix(l, "gpubind: warning: ") {
			n++
			continue
		}
		out = append(out, l)
	}
	return out, n
}

// writeCudaOpen writes cudaOpen for the cluster's fake GPUs (the fixture's UUIDs by minor)
// and returns its path.
func writeCudaOpen(t *testing.T, dir, devDir string) string {
	t.Helper()
	infos, err := filepath.Glob(filepath.Join(testbuild.RepoRoot(), "tests/fixtures/dgxh100-2cpu/proc/driver/nvidia/gpus/*/information"))
	if err != nil || len(infos) == 0 {
		t.Fatalf("fixture GPUs: %v", err)
	}
	var uuids strings.Builder
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var minor, uuid string
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch strings.TrimSpace(k) {
			case "Device Minor":
				minor = strings.TrimSpace(v)
			case "GPU UUID":
				uuid = strings.TrimSpace(v)
			}
		}
		fmt.Fprintf(&uuids, "%s %s\n", minor, uuid)
	}
	up := filepath.Join(dir, "uuids")
	if err := os.WriteFile(up, []byte(uuids.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "cudaopen")
	script := strings.NewReplacer("@DEV@", devDir, "@UUIDS@", up).Replace(cudaOpen)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func dropBindVars(lines []string) []string {
	var out []string
	for _, l := range lines {
		if f := strings.SplitN(l, " ", 3); len(f) == 3 && f[0] == "E" {
			key, _, _ := strings.Cut(f[2], "=")
			if bindVars.MatchString(key) {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}

// diff lists the lines only one side has ("-" without the plugin, "+" with it).
func diff(a, b []string) string {
	count := map[string]int{}
	for _, l := range a {
		count[l]++
	}
	for _, l := range b {
		count[l]--
	}
	var out []string
	for l, n := range count {
		for ; n > 0; n-- {
			out = append(out, "- "+l)
		}
		for ; n < 0; n++ {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

func setPlugStack(t *testing.T, c *cluster.Cluster, lines ...string) {
	t.Helper()
	if err := os.WriteFile(c.PlugStackPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func slurmVersion(c *cluster.Cluster) string {
	out, _, _ := c.Run(context.Background(), "srun", "--version")
	return strings.TrimPrefix(strings.TrimSpace(out), "slurm ")
}

// versionLess compares major.minor of have ("22.05.8") with want ("24.11").
func versionLess(have, want string) bool {
	var hm, hn, wm, wn int
	fmt.Sscanf(have, "%d.%d", &hm, &hn)
	fmt.Sscanf(want, "%d.%d", &wm, &wn)
	return hm < wm || hm == wm && hn < wn
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
