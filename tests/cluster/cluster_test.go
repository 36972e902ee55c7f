package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestConfigRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Nodes: 257}, "Config.Nodes=257: expected 1..256"},
		{Config{Nodes: -1}, "Config.Nodes=-1"},
		{Config{TaskPlugin: "task/foo"}, `Config.TaskPlugin="task/foo"`},
		{Config{Proctrack: "proctrack/x"}, `Config.Proctrack="proctrack/x"`},
		{Config{GPUs: 2, GresOrder: []int{0}}, "GresOrder has 1 entries"},
		{Config{GresOrder: []int{1, 1}}, "GresOrder[1]=1: minor number listed twice"},
		{Config{GresOrder: []int{300}}, "GresOrder[0]=300"},
		{Config{ConstrainDevices: true}, "ConstrainDevices needs TaskPlugin with task/cgroup"},
		{Config{SlurmConf: []string{"A=1\nB=2"}}, "expected a single line"},
	} {
		_, err := tc.cfg.normalize()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("normalize(%+v) = %v, want error containing %q", tc.cfg, err, tc.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Nodes != 1 || cfg.CPUs != runtime.NumCPU() || cfg.TaskPlugin != "task/none" ||
		cfg.Proctrack != "proctrack/linuxproc" || cfg.GPUs != 8 || !slices.Equal(cfg.GresOrder, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = Config{TaskPlugin: "task/cgroup,task/affinity"}.normalize()
	if err != nil || cfg.Proctrack != "proctrack/cgroup" {
		t.Errorf("task/cgroup should default to proctrack/cgroup: %+v, %v", cfg, err)
	}
	cfg, err = Config{GresOrder: []int{3, 2}}.normalize()
	if err != nil || cfg.GPUs != 2 {
		t.Errorf("GresOrder alone should set GPUs: %+v, %v", cfg, err)
	}
}

// srun -N2 -n4 hostname shows both nodes: each slurmd has its own UTS namespace.
func TestTwoNodesHostname(t *testing.T) {
	c := StartT(t, Config{Nodes: 2})
	out, _, err := c.Srun(ctxT(t), "-N2", "-n4", "hostname")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(out)
	sort.Strings(lines)
	if want := []string{"node1", "node1", "node2", "node2"}; !slices.Equal(lines, want) {
		t.Errorf("srun -N2 -n4 hostname printed %q, want %q", lines, want)
	}
	if !slices.Equal(c.NodeNames, []string{"node1", "node2"}) {
		t.Errorf("NodeNames = %q", c.NodeNames)
	}
	if log := c.SlurmdLog("node2"); !strings.Contains(log, "slurmd started") {
		t.Errorf("node2 slurmd log lacks start message:\n%s", log)
	}
}

// AuthSlurm runs a cluster without munge (auth/slurm, Slurm 23.11 and later), as on the GPU
// machine, which has no munged.
func TestAuthSlurm(t *testing.T) {
	cfg, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(slurmBin(cfg.SlurmPrefix, "slurmd"), "-V").Output()
	var major, minor int
	if err != nil || len(strings.Fields(string(out))) < 2 {
		t.Skipf("slurmd -V: %v", err)
	}
	if _, err := fmt.Sscanf(strings.Fields(string(out))[1], "%d.%d", &major, &minor); err != nil || major*100+minor < 2311 {
		t.Skipf("auth/slurm needs Slurm 23.11 or later; this is %s", strings.TrimSpace(string(out)))
	}
	c := StartT(t, Config{Nodes: 2, AuthSlurm: true})
	conf, err := os.ReadFile(c.ConfPath)
	if err != nil || !strings.Contains(string(conf), "AuthType=auth/slurm") || strings.Contains(string(conf), "munge") {
		t.Fatalf("slurm.conf (%v):\n%s", err, conf)
	}
	if c.MungeSocket != "" {
		t.Errorf("MungeSocket = %q, want none", c.MungeSocket)
	}
	got, _, err := c.Srun(ctxT(t), "-N2", "-n2", "hostname")
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(got); len(f) != 2 {
		t.Errorf("srun -N2 -n2 hostname printed %q", got)
	}
}

// buildPMIxClient compiles tests/c/pmix_putget.c against the installed PMIx.
func buildPMIxClient(t *testing.T) string {
	t.Helper()
	flags, err := exec.Command("pkg-config", "--cflags", "--libs", "pmix").Output()
	if err != nil {
		t.Fatalf("pkg-config pmix (libpmix-dev, `make deps`): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "pmix_putget")
	args := append([]string{"-Wall", "-Wextra", "-Werror", "-O2", "-o", bin, "../c/pmix_putget.c"}, strings.Fields(string(flags))...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// srun --mpi=pmix gives a real PMIx server: rank 0 puts 128 bytes, every rank gets them,
// on rank 0's node and on the other one. The third step starts the second node's ranks 3 s
// late: rank 0 must still be there to serve them (its closing fence has to wait for them).
func TestPMIxPutGet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	bin := buildPMIxClient(t)
	c := StartT(t, Config{Nodes: 2})
	lateNode := []string{"sh", "-c", `[ "$SLURM_NODEID" = 1 ] && sleep 3; exec "$0" "$1"`}
	for seq, step := range []struct {
		args []string
		n    int
	}{
		{[]string{"-n4", "--mpi=pmix"}, 4},
		{[]string{"-N1", "-n2", "--mpi=pmix"}, 2},
		{append([]string{"-n4", "--mpi=pmix"}, lateNode...), 4},
	} {
		args := append(step.args, bin, fmt.Sprint(seq+1))
		out, stderr, err := c.Srun(ctxT(t), args...)
		if err != nil {
			t.Fatalf("%v\nstdout:\n%s", err, out)
		}
		n := step.n
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 9 && f[0] == "pmix_putget" && f[4] == fmt.Sprint(n) && f[5] == "ok" {
				got = append(got, f[2])
			}
		}
		sort.Strings(got)
		var want []string
		for r := range n {
			want = append(want, fmt.Sprint(r))
		}
		if !slices.Equal(got, want) {
			t.Errorf("srun %s: ranks reporting ok = %q, want %q\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, want, out, stderr)
		}
	}
}

// The fake GRES reach the step: SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES are set.
func TestGPUsInStep(t *testing.T) {
	c := StartT(t, Config{Nodes: 1})
	out, _, err := c.Srun(ctxT(t), "-N1", "-n2", "--gpus=4", "sh", "-c", `echo "$SLURM_STEP_GPUS|$CUDA_VISIBLE_DEVICES"`)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("expected 2 task lines, got %q", out)
	}
	for _, l := range lines {
		gpus, cvd, _ := strings.Cut(l, "|")
		if len(strings.Split(gpus, ",")) != 4 || cvd == "" || len(strings.Split(cvd, ",")) != 4 {
			t.Errorf("task saw SLURM_STEP_GPUS=%q CUDA_VISIBLE_DEVICES=%q, want 4 GPUs in each", gpus, cvd)
		}
	}
}

// GresOrder decides the gres.conf File= order; the nodes are real char devices 195:minor.
func TestGresOrderAndDevices(t *testing.T) {
	order := []int{3, 1, 2, 0}
	c := StartT(t, Config{GresOrder: order})
	conf, err := os.ReadFile(c.GresConfPath)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, m := range order {
		want = append(want, fmt.Sprintf("Name=gpu File=%s/nvidia%d", c.DevDir, m))
	}
	if got := strings.Split(strings.TrimSpace(string(conf)), "\n"); !slices.Equal(got, want) {
		t.Errorf("gres.conf = %q, want %q", got, want)
	}
	for _, m := range order {
		var st syscall.Stat_t
		p := filepath.Join(c.DevDir, fmt.Sprintf("nvidia%d", m))
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != uint64(195<<8|m) {
			t.Errorf("%s: mode %o rdev %x, want char 195:%d", p, st.Mode, st.Rdev, m)
		}
	}
	out, _, err := c.Srun(ctxT(t), "--gpus=1", "sh", "-c", "echo $SLURM_STEP_GPUS")
	if err != nil || strings.TrimSpace(out) != "0" {
		t.Errorf("--gpus=1: SLURM_STEP_GPUS=%q (%v), want 0", out, err)
	}
}

// More CPUs than the machine has (config_overrides) give room for 8 tasks with 8 GPUs.
func TestDeclaredCPUs(t *testing.T) {
	c := StartT(t, Config{CPUs: 8})
	out, _, err := c.Run(ctxT(t), "sinfo", "-h", "-N", "-o", "%c")
	if err != nil || strings.TrimSpace(out) != "8" {
		t.Fatalf("sinfo CPUs = %q (%v), want 8", out, err)
	}
	out, _, err = c.Srun(ctxT(t), "-n8", "--gpus-per-task=1", "sh", "-c", "echo $SLURM_STEP_GPUS")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(out)); n != 8 {
		t.Errorf("srun -n8 --gpus-per-task=1 printed %d lines, want 8:\n%s", n, out)
	}
}

// Two clusters at once: distinct ports, spools, munge sockets; each sees only its own jobs.
func TestTwoClustersAtOnce(t *testing.T) {
	a := StartT(t, Config{Nodes: 1, OwnMunge: true})
	b := StartT(t, Config{Nodes: 2, OwnMunge: true})
	if a.Dir == b.Dir || a.Name == b.Name {
		t.Fatalf("clusters share dir or name: %s %s", a.Dir, b.Dir)
	}
	outA, _, errA := a.Srun(ctxT(t), "-N1", "hostname")
	outB, _, errB := b.Srun(ctxT(t), "-N2", "hostname")
	if errA != nil || errB != nil {
		t.Fatalf("srun: %v / %v", errA, errB)
	}
	if strings.TrimSpace(outA) != "node1" || len(strings.Fields(outB)) != 2 {
		t.Errorf("cluster A ran on %q, cluster B on %q", outA, outB)
	}
	sa, _, _ := a.Run(ctxT(t), "scontrol", "show", "config")
	if !strings.Contains(sa, a.Name) || strings.Contains(sa, b.Name) {
		t.Errorf("cluster A's scontrol does not talk to cluster A (%s)", a.Name)
	}
}

// After Stop, no process (slurmstepd, task, srun, daemon) and no directory of the cluster remains.
func TestStopLeavesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	c, err := Start(Config{Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srunDone := make(chan error, 1)
	go func() {
		_, _, err := c.Srun(ctx, "-N2", "-n2", "sleep", "300")
		srunDone <- err
	}()
	// Wait until the step's tasks run: two sleeps carrying the cluster's marker.
	var stepds []int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		sleeps := 0
		stepds = stepds[:0]
		for _, pid := range markedPids(c.Dir) {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			switch strings.TrimSpace(string(comm)) {
			case "sleep":
				sleeps++
			case "slurmstepd":
				stepds = append(stepds, pid)
			}
		}
		if sleeps == 2 && len(stepds) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("step did not start: %d sleeps, stepds %v\n%s", sleeps, stepds, c.logTails(20))
		}
	}
	var daemonPids []int
	for _, d := range c.daemons {
		daemonPids = append(daemonPids, d.Pid)
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := <-srunDone; err == nil {
		t.Error("srun of a cancelled job exited 0")
	}
	if left := markedPids(c.Dir); len(left) > 0 {
		t.Errorf("processes of the cluster remain after Stop: %v", left)
	}
	for _, p := range append(daemonPids, stepds...) {
		if pidAlive(p) {
			t.Errorf("pid %d (daemon or slurmstepd) alive after Stop", p)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster dir %s remains after Stop (%v)", c.Dir, err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// task/cgroup with ConstrainDevices: a task opens its own GPUs (ENXIO: no driver) and is
// denied the others (EPERM). Stop removes the slurm_<node> cgroups.
func TestCgroupConstrainDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "devices")); err != nil {
		t.Skip("no cgroup v1 devices controller on this machine")
	}
	c, err := Start(Config{TaskPlugin: "task/cgroup,task/affinity", ConstrainDevices: true})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	script := fmt.Sprintf(`echo "cvd=$CUDA_VISIBLE_DEVICES"; for i in 0 1 2 3 4 5 6 7; do
		if err=$(exec 2>&1; : < %s/nvidia$i); then echo "$i open"; else echo "$i $err"; fi; done`, c.DevDir)
	out, _, err := c.Srun(ctxT(t), "-n1", "--gpus=2", "sh", "-c", script)
	if err != nil {
		t.Fatalf("%v\n%s", err, c.logTails(20))
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 9 || lines[0] != "cvd=0,1" {
		t.Fatalf("unexpected output:\n%s", out)
	}
	for i, l := range lines[1:] {
		want := "Operation not permitted"
		if i < 2 {
			want = "No such device or address"
		}
		if !strings.Contains(l, want) {
			t.Errorf("nvidia%d: %q, want %q", i, l, want)
		}
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// Another cgroup cluster may take the lock right after ours; check only while it is free.
	_, _ = withLockFile(func(f *os.File) (string, error) {
		if b, _ := readAll(f); len(strings.TrimSpace(string(b))) == 0 {
			if left, _ := filepath.Glob(filepath.Join(cgroupRoot, "*", "slurm_node1")); len(left) > 0 {
				t.Errorf("cgroups remain after Stop: %v", left)
			}
		}
		return "", nil
	})
}

// BenchmarkStartStop measures a one-node cluster's start (until idle) plus stop.
// go test -run=^$ -bench=StartStop -benchtime=5x ./tests/cluster/
func BenchmarkStartStop(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		c, err := Start(Config{})
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Stop(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Milliseconds()), "median-ms")
}

// A munged that already runs is reused (and left running); none is started.
func TestReusesRunningMunged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "gpubind-munge-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte(strings.Repeat("0123456789abcdef", 64)), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sock")
	m := exec.Command("munged", "-F", "--socket="+sock, "--key-file="+key, "--pid-file="+dir+"/pid",
		"--log-file="+dir+"/log", "--seed-file="+dir+"/seed")
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
	for i := 0; !mungeWorks(sock); i++ {
		if i == 100 {
			t.Fatal("hand-started munged does not answer")
		}
		time.Sleep(100 * time.Millisecond)
	}
	old := systemMungeSocket
	systemMungeSocket = sock
	t.Cleanup(func() { systemMungeSocket = old })

	c := StartT(t, Config{})
	if c.MungeSocket != sock {
		t.Errorf("MungeSocket = %q, want the running one %q", c.MungeSocket, sock)
	}
	for _, d := range c.daemons {
		if d.Name == "munged" {
			t.Errorf("started its own munged (pid %d) although one runs", d.Pid)
		}
	}
	if out, _, err := c.Srun(ctxT(t), "hostname"); err != nil || strings.TrimSpace(out) != "node1" {
		t.Errorf("srun hostname = %q, %v", out, err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if !mungeWorks(sock) {
		t.Error("Stop ended a munged it did not start")
	}
}

// task/affinity on the real CPUs: two tasks bound to cores get different CPUs.
func TestTaskAffinity(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	c := StartT(t, Config{TaskPlugin: "task/affinity", CPUs: 2})
	out, _, err := c.Srun(ctxT(t), "-n2", "--cpu-bind=cores", "sh", "-c", "grep Cpus_allowed_list /proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var cpus []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("unexpected line %q in:\n%s", l, out)
		}
		cpus = append(cpus, f[1])
	}
	sort.Strings(cpus)
	if len(cpus) != 2 || cpus[0] == cpus[1] || strings.ContainsAny(cpus[0]+cpus[1], ",-") {
		t.Errorf("tasks bound to %q, want one distinct CPU each", cpus)
	}
}

// A configuration slurmctld rejects makes Start fail with the daemon's log lines, leaving nothing.
func TestStartFailureReportsLogs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	parent, err := os.MkdirTemp("", "gpubind-failtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	if err := os.Chmod(parent, 0o755); err != nil { // munged wants its socket's dirs searchable
		t.Fatal(err)
	}
	c, err := Start(Config{SlurmConf: []string{"NoSuchSlurmParameter=1"}, ParentTempDir: parent, StartTimeout: time.Minute})
	if err == nil {
		c.Stop()
		t.Fatal("Start succeeded with an invalid slurm.conf")
	}
	if !strings.Contains(err.Error(), "NoSuchSlurmParameter") {
		t.Errorf("error does not quote the daemon's complaint:\n%v", err)
	}
	if left, _ := os.ReadDir(parent); len(left) > 0 {
		t.Errorf("failed Start left %v in %s", left, parent)
	}
}

// -O (overcommit) runs more tasks than CPUs for steps without GPUs.
func TestOvercommitWithoutGPUs(t *testing.T) {
	c := StartT(t, Config{CPUs: 2})
	out, _, err := c.Srun(ctxT(t), "-O", "-n6", "hostname")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(out)); n != 6 {
		t.Errorf("srun -O -n6 hostname printed %d lines, want 6", n)
	}
}

// The version matrix is real only if every daemon and client is the Slurm under test
// (SLURM_PREFIX): slurmd's log, srun and slurmd -V must name one version.
func TestRunsTheSlurmUnderTest(t *testing.T) {
	c := StartT(t, Config{})
	out, err := exec.Command(c.Bin("slurmd"), "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -V: %v %s", c.Bin("slurmd"), err, out)
	}
	want := strings.Fields(string(out))[1] // "slurm 26.05.3" or "slurm-wlm 22.05.8"
	srunV, _, err := c.Run(ctxT(t), "srun", "--version")
	if err != nil || !strings.Contains(srunV, want) {
		t.Errorf("srun --version = %q (%v), slurmd -V = %q", srunV, err, out)
	}
	if log := c.SlurmdLog("node1"); !strings.Contains(log, "slurmd version "+want+" started") {
		t.Errorf("slurmd log does not say version %s:\n%s", want, tail(log, 10))
	}
	if p := os.Getenv("SLURM_PREFIX"); p != "" && p != "/usr" && !strings.HasPrefix(c.Bin("srun"), p+"/") {
		t.Errorf("SLURM_PREFIX=%s but srun is %s", p, c.Bin("srun"))
	}
	t.Logf("Slurm %s (%s)", want, c.Bin("slurmd"))
}
