// Package cgroup tests the plugin's per-task cgroup code (spank/frontend/cgroup/) on the
// real cgroups of this machine: cgroup v1 devices and cpuset, and cgroup v2 BPF device
// programs on the unified hierarchy, with Slurm's v2 layout built by hand. The oracle is a
// fake GPU node (mknod c 195 N): open gives ENXIO when the cgroup allows it, EPERM when
// it denies it. The C code runs in tests/cgroup/csrc/cgtool.c, which drives it the way
// slurmstepd does. Everything needs root.
package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
	toolPath  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func repoRoot(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the source directory")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates cgroups and loads BPF programs")
	}
}

// tool builds cgtool (with -Werror, like the plugin) once per test binary.
func tool(t testing.TB) string {
	t.Helper()
	needRoot(t)
	buildOnce.Do(func() {
		root := repoRoot(t)
		buildDir, buildErr = os.MkdirTemp("", "gpubind-cgtool-")
		if buildErr != nil {
			return
		}
		toolPath = filepath.Join(buildDir, "cgtool")
		// The whole cgroup layer (spank/frontend/cgroup/*.c) and the rule it formats
		// CPU lists with (rule/*.c, as the front end's Makefile and cgo take it).
		layer := filepath.Join(root, "spank", "frontend", "cgroup")
		srcs, _ := filepath.Glob(filepath.Join(layer, "*.c"))
		if len(srcs) == 0 {
			buildErr = fmt.Errorf("no C files in %s", layer)
			return
		}
		ruleSrcs, _ := filepath.Glob(filepath.Join(root, "rule", "*.c"))
		if len(ruleSrcs) == 0 {
			buildErr = fmt.Errorf("no C files in %s", filepath.Join(root, "rule"))
			return
		}
		args := []string{"-Wall", "-Wextra", "-Werror", "-O2", "-g", "-D_GNU_SOURCE",
			"-I", layer, "-I", filepath.Join(root, "rule"), filepath.Join(root, "tests", "cgroup", "csrc", "cgtool.c")}
		args = append(append(append(args, ruleSrcs...), srcs...), "-o", toolPath)
		out, err := exec.Command("gcc", args...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return toolPath
}

type mounts struct{ devices, cpuset, unified string }

// findMounts reads /proc/self/mountinfo, like the C code, so nothing is hard-coded.
func findMounts(t testing.TB) mounts {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var m mounts
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		dash := -1
		for i, f := range fields {
			if f == "-" && i >= 6 {
				dash = i
				break
			}
		}
		if dash < 0 || dash+3 > len(fields) {
			continue
		}
		dir := strings.ReplaceAll(fields[4], `\040`, " ")
		switch fields[dash+1] {
		case "cgroup2":
			if m.unified == "" {
				m.unified = dir
			}
		case "cgroup":
			for _, o := range strings.Split(fields[dash+3], ",") {
				if o == "devices" && m.devices == "" {
					m.devices = dir
				}
				if o == "cpuset" && m.cpuset == "" {
					m.cpuset = dir
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeGPUs makes nvidia0..7 (195:N), nvidia-modeset (195:254) and nvidiactl (195:255).
func fakeGPUs(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	mk := func(name string, minor uint32) {
		if err := unix.Mknod(filepath.Join(dir, name), unix.S_IFCHR|0o666,
			int(unix.Mkdev(195, minor))); err != nil {
			t.Fatalf("mknod %s: %v", name, err)
		}
	}
	for i := uint32(0); i < 8; i++ {
		mk(fmt.Sprintf("nvidia%d", i), i)
	}
	mk("nvidia-modeset", 254)
	mk("nvidiactl", 255)
	return dir
}

type result struct {
	prepare, apply, cleanup, fini int
	prepareMsg, applyMsg          string
	cleanupMsg, finiMsg           string
	path                          string
	probe                         map[string]string
	affinity                      string
	exit                          int
	timing                        map[string]int
	objs                          []string // "prog ID", "map ID": BPF objects prepare made
	dirs                          []string // cgroups apply made
	raw                           string
}

// job names the plugin's cgroups (gpubind_jJOB_...): the pid keeps concurrent runs of
// these tests (go test ./... elsewhere) apart.
func job() string { return strconv.Itoa(os.Getpid()) }

var (
	objsMu sync.Mutex
	objsOf = map[testing.TB][]string{}
)

func atoi(t testing.TB, s, line string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("cgtool line %q: %v", line, err)
	}
	return v
}

// runTask runs "cgtool task ARGS -- cgtool probe DEV PROBES..." and parses its report.
func runTask(t testing.TB, dev string, args []string, probes ...string) result {
	t.Helper()
	cg := tool(t)
	full := append([]string{"task"}, args...)
	full = append(full, "--", cg, "probe", dev)
	full = append(full, probes...)
	out, err := exec.Command(cg, full...).CombinedOutput()
	if err != nil {
		t.Fatalf("cgtool %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	r := result{prepare: 99, apply: 99, cleanup: 99, fini: 99, exit: -1,
		probe: map[string]string{}, timing: map[string]int{}, raw: string(out)}
	rc := func(line, key string) (int, string) {
		rest := strings.TrimPrefix(line, key+" rc=")
		num, msg, _ := strings.Cut(rest, " ")
		return atoi(t, num, line), msg
	}
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "prepare rc="):
			r.prepare, r.prepareMsg = rc(line, "prepare")
		case strings.HasPrefix(line, "apply rc="):
			r.apply, r.applyMsg = rc(line, "apply")
		case strings.HasPrefix(line, "cleanup rc="):
			r.cleanup, r.cleanupMsg = rc(line, "cleanup")
		case strings.HasPrefix(line, "fini rc="):
			r.fini, r.finiMsg = rc(line, "fini")
		case strings.HasPrefix(line, "bpf "):
			r.objs = append(r.objs, strings.TrimPrefix(line, "bpf "))
		case strings.HasPrefix(line, "dir "):
			r.dirs = append(r.dirs, strings.TrimPrefix(line, "dir "))
		case strings.HasPrefix(line, "path "):
			r.path = strings.TrimPrefix(line, "path ")
		case strings.HasPrefix(line, "exit "):
			r.exit = atoi(t, strings.TrimPrefix(line, "exit "), line)
		case strings.HasPrefix(line, "affinity "):
			r.affinity = strings.TrimPrefix(line, "affinity ")
		case strings.HasPrefix(line, "timing "):
			for _, kv := range strings.Fields(strings.TrimPrefix(line, "timing ")) {
				k, v, _ := strings.Cut(kv, "=")
				r.timing[k] = atoi(t, v, line)
			}
		default:
			if k, v, ok := strings.Cut(line, " "); ok {
				r.probe[k] = v
			}
		}
	}
	objsMu.Lock()
	objsOf[t] = append(objsOf[t], r.objs...)
	objsMu.Unlock()
	return r
}

// expect checks the oracle: ENXIO (reachable, no driver) or EPERM (denied by a cgroup).
func (r result) expect(t testing.TB, want map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got := r.probe[k]; got != want[k] {
			t.Errorf("open %s: got %q, want %q\n%s", k, got, want[k], r.raw)
		}
	}
}

func (r result) ok(t testing.TB) {
	t.Helper()
	if r.prepare != 0 || r.apply != 0 || r.exit != 0 || r.cleanup != 0 || r.fini != 0 {
		t.Fatalf("cgtool did not succeed:\n%s", r.raw)
	}
	for _, d := range r.dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("the task's cgroup %s is still there after task_exit (stat: %v)", d, err)
		}
	}
}

// gpus maps minors to the oracle's answer: allowed ones ENXIO, the rest of 0..7 EPERM.
func gpus(allowed ...int) map[string]string {
	m := map[string]string{}
	for i := 0; i < 8; i++ {
		m[strconv.Itoa(i)] = "EPERM"
	}
	for _, a := range allowed {
		m[strconv.Itoa(a)] = "ENXIO"
	}
	return m
}

func with(m map[string]string, kv ...string) map[string]string {
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

var allProbes = []string{"0", "1", "2", "3", "4", "5", "6", "7", "nvidia-modeset", "nvidiactl", "/dev/null"}

// testBase makes a private directory in a hierarchy (removed, with everything below, at the
// end; the removal must succeed: a left-over plugin cgroup would make it fail).
func testBase(t testing.TB, hierarchy string) string {
	t.Helper()
	base := filepath.Join(hierarchy, fmt.Sprintf("gpubind-test-%d-%s", os.Getpid(),
		strings.NewReplacer("/", "_").Replace(t.Name())))
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, base) })
	return base
}

// removeTree removes a cgroup tree bottom-up (cgroup dirs are removed with rmdir only).
func removeTree(t testing.TB, dir string) {
	t.Helper()
	var dirs []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if strings.HasPrefix(filepath.Base(dirs[i]), "gpubind_j") {
			t.Errorf("left behind by the plugin: %s", dirs[i])
		}
		if err := unix.Rmdir(dirs[i]); err != nil {
			t.Errorf("rmdir %s: %v", dirs[i], err)
		}
	}
}

func mkdirs(t testing.TB, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func writeFile(t testing.TB, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatalf("write %q to %s: %v", text, path, err)
	}
}

// noLeftovers checks that every BPF program and map that the test's cgtool runs prepared is
// gone (the programs of a removed cgroup are freed by the kernel asynchronously, so this
// waits, bounded, for them to go). The cgroups themselves are checked by result.ok and by
// testBase's removal.
func noLeftovers(t testing.TB) {
	t.Helper()
	objsMu.Lock()
	mine := append([]string(nil), objsOf[t]...)
	objsMu.Unlock()
	if len(mine) == 0 {
		t.Fatal("no BPF objects recorded: cgtool did not report what it prepared")
	}
	var left []string
	for i := 0; i < 100; i++ {
		out, err := exec.Command(tool(t), "progs").CombinedOutput()
		if err != nil {
			t.Fatalf("cgtool progs: %v\n%s", err, out)
		}
		live := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			live[strings.TrimSpace(line)] = true
		}
		left = left[:0]
		for _, o := range mine {
			if live[o] {
				left = append(left, o)
			}
		}
		if len(left) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("BPF objects left behind after 10 s: %v", left)
}

func needV1(t testing.TB, ctrl string) mounts {
	t.Helper()
	tool(t)
	m := findMounts(t)
	if (ctrl == "devices" && m.devices == "") || (ctrl == "cpuset" && m.cpuset == "") {
		t.Skipf("no cgroup v1 %s hierarchy mounted here", ctrl)
	}
	return m
}

func needV2(t testing.TB) mounts {
	t.Helper()
	tool(t)
	m := findMounts(t)
	if m.unified == "" {
		t.Skip("cgroup2 is not mounted here")
	}
	return m
}

// ---- cgroup v1 --------------------------------------------------------------------------

func TestV1IsolateOwnGPUOnly(t *testing.T) {
	needV1(t, "devices")
	dev := fakeGPUs(t)
	for _, cloneVM := range []bool{false, true} {
		args := []string{"--version", "1", "--isolate", "--job", job(), "--step-minors", "0,1,2,3", "--minors", "1"}
		if cloneVM {
			args = append(args, "--clone-vm")
		}
		r := runTask(t, dev, args, allProbes...)
		r.ok(t)
		r.expect(t, with(gpus(1), "nvidiactl", "ENXIO", "nvidia-modeset", "ENXIO", "/dev/null", "OK"))
	}
}

// fakeAMD: an AMD node's device nodes: render nodes renderD128-131 (226:128+N, GPU N),
// card nodes card1-4 (226:1+N, GPU N: card0 is a BMC's VGA, no GPU's, as on many nodes)
// and a kfd (char 241:0: its real major is dynamic). None has a driver: an open the
// device cgroup lets through fails ENXIO, one it denies EPERM.
func fakeAMD(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	mk := func(name string, major, minor uint32) {
		if err := unix.Mknod(filepath.Join(dir, name), unix.S_IFCHR|0o666,
			int(unix.Mkdev(major, minor))); err != nil {
			t.Fatalf("mknod %s: %v", name, err)
		}
	}
	for i := uint32(0); i < 4; i++ {
		mk(fmt.Sprintf("renderD%d", 128+i), 226, 128+i)
		mk(fmt.Sprintf("card%d", 1+i), 226, 1+i)
	}
	mk("card0", 226, 0)
	mk("kfd", 241, 0)
	return dir
}

var amdProbes = []string{"renderD128", "renderD129", "renderD130", "renderD131", "card0", "card1", "card2", "card3", "card4", "kfd", "/dev/null"}

// isolateAMD: step GPUs 0-2 (render 128-130, card 1-3) on a 4-GPU node, the task on GPU
// 1: the other step GPUs' render and card nodes are denied; its own, GPU 3's (outside the
// step: Slurm's to decide), card0 and the kfd keep Slurm's rule (allowed here).
var (
	isolateAMDArgs = []string{"--isolate", "--amd", "--step-minors", "128,1,129,2,130,3", "--minors", "129,2"}
	isolateAMDWant = map[string]string{"renderD128": "EPERM", "renderD129": "ENXIO", "renderD130": "EPERM",
		"renderD131": "ENXIO", "card0": "ENXIO", "card1": "EPERM", "card2": "ENXIO", "card3": "EPERM",
		"card4": "ENXIO", "kfd": "ENXIO", "/dev/null": "OK"}
)

func TestV1IsolateAMD(t *testing.T) {
	needV1(t, "devices")
	dev := fakeAMD(t)
	r := runTask(t, dev, append([]string{"--version", "1", "--job", job()}, isolateAMDArgs...), amdProbes...)
	r.ok(t)
	r.expect(t, isolateAMDWant)
}

// A render node Slurm denied (v1: its task cgroup) stays denied under isolate, even when
// a table names it as the task's own.
func TestV1IsolateAMDKeepsSlurmDenials(t *testing.T) {
	m := needV1(t, "devices")
	dev := fakeAMD(t)
	base := testBase(t, m.devices)
	task := filepath.Join(base, "job_104", "step_0", "task_0")
	mkdirs(t, task)
	writeFile(t, filepath.Join(base, "job_104", "devices.deny"), "c 226:131 rwm")
	r := runTask(t, dev, []string{"--version", "1", "--isolate", "--amd", "--job", job(),
		"--step-minors", "128,1,131,4", "--minors", "131,4", "--slurm-v1-devices", task}, amdProbes...)
	r.ok(t)
	r.expect(t, map[string]string{"renderD131": "EPERM", "card4": "ENXIO", "renderD128": "EPERM", "card1": "EPERM", "kfd": "ENXIO"})
}

// Slurm's task/cgroup (v1) puts the task in devices:.../job/step/task with the other job's
// GPUs denied; the plugin narrows inside, and Slurm's rmdir of task_N still works.
func TestV1InsideSlurmTaskCgroup(t *testing.T) {
	m := needV1(t, "devices")
	dev := fakeGPUs(t)
	base := testBase(t, m.devices)
	jobDir, step, task := filepath.Join(base, "job_102"), filepath.Join(base, "job_102", "step_0"),
		filepath.Join(base, "job_102", "step_0", "task_0")
	mkdirs(t, task)
	for _, minor := range []int{4, 5, 6, 7} { // another job's GPUs
		writeFile(t, filepath.Join(jobDir, "devices.deny"), fmt.Sprintf("c 195:%d rwm", minor))
	}
	writeFile(t, filepath.Join(step, "devices.deny"), "c 195:3 rwm") // in the job, not the step

	r := runTask(t, dev, []string{"--version", "1", "--isolate", "--job", job(),
		"--step-minors", "0,1,2", "--minors", "0", "--slurm-v1-devices", task}, allProbes...)
	r.ok(t)
	if !strings.HasPrefix(r.path, task+"/") {
		t.Errorf("plugin cgroup %s is not below Slurm's task cgroup %s", r.path, task)
	}
	r.expect(t, with(gpus(0), "nvidiactl", "ENXIO", "/dev/null", "OK"))

	// A table that claims another job's GPU (minor 4) cannot open it: v1 children inherit
	// the parent's denials.
	r = runTask(t, dev, []string{"--version", "1", "--isolate", "--job", job(),
		"--step-minors", "0,1,2,4", "--minors", "4", "--slurm-v1-devices", task}, "4")
	r.ok(t)
	r.expect(t, map[string]string{"4": "EPERM"})

	// Slurm's own cleanup: rmdir task, step, job must work (done by testBase's cleanup).
	if err := unix.Rmdir(task); err != nil {
		t.Errorf("Slurm's rmdir of its task cgroup fails after the plugin ran: %v", err)
	}
}

// Review finding: under a parent whose device rule is a wildcard
// ("c 195:* rwm"), v1 devices.deny of one minor is silently a no-op, so isolate would
// leave every GPU open. The plugin reads devices.list back and refuses.
func TestV1WildcardParentRefused(t *testing.T) {
	m := needV1(t, "devices")
	dev := fakeGPUs(t)
	base := testBase(t, m.devices)
	task := filepath.Join(base, "job_103", "step_0", "task_0")
	// Top down: v1 changes a cgroup's default only while it has no children.
	for _, d := range []string{filepath.Join(base, "job_103"), filepath.Join(base, "job_103", "step_0"), task} {
		mkdirs(t, d)
		writeFile(t, filepath.Join(d, "devices.deny"), "a")
		writeFile(t, filepath.Join(d, "devices.allow"), "c 195:* rwm")
		writeFile(t, filepath.Join(d, "devices.allow"), "c 1:3 rwm")
	}
	r := runTask(t, dev, []string{"--version", "1", "--isolate", "--job", job(),
		"--step-minors", "0,1,2", "--minors", "0", "--slurm-v1-devices", task}, "1")
	if r.apply != -2 || !strings.Contains(r.applyMsg, "c 195:* rwm") {
		t.Errorf("want a refusal at apply naming the wildcard, got apply=%d %q; GPU 1 probe %q\n%s",
			r.apply, r.applyMsg, r.probe["1"], r.raw)
	}
}

func TestV1Cpuset(t *testing.T) {
	m := needV1(t, "cpuset")
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	dev := fakeGPUs(t)
	for _, cpu := range []string{"0", "1"} {
		r := runTask(t, dev, []string{"--version", "1", "--cpus-flag", "--job", job(),
			"--cpus", cpu, "--mems", "0"}, "0")
		r.ok(t)
		if r.affinity != cpu {
			t.Errorf("cpus %s: sched_getaffinity gives %q\n%s", cpu, r.affinity, r.raw)
		}
	}
	// isolate and cpus together.
	r := runTask(t, dev, []string{"--version", "1", "--isolate", "--cpus-flag", "--job", job(),
		"--step-minors", "0,1", "--minors", "1", "--cpus", "1", "--mems", "0"}, "0", "1")
	r.ok(t)
	r.expect(t, map[string]string{"0": "EPERM", "1": "ENXIO"})
	if r.affinity != "1" {
		t.Errorf("affinity %q, want 1", r.affinity)
	}

	// Inside a Slurm-like cpuset that allows CPU 0 only: CPU 1 is refused (never widened),
	// and 0-3 narrows to 0.
	base := testBase(t, m.cpuset)
	task := filepath.Join(base, "job_104", "step_0", "task_0")
	mkdirs(t, task)
	for _, d := range []string{base, filepath.Dir(filepath.Dir(task)), filepath.Dir(task), task} {
		writeFile(t, filepath.Join(d, "cpuset.cpus"), "0")
		writeFile(t, filepath.Join(d, "cpuset.mems"), "0")
	}
	r = runTask(t, dev, []string{"--version", "1", "--cpus-flag", "--job", job(),
		"--cpus", "1", "--mems", "0", "--slurm-v1-cpuset", task}, "0")
	if r.apply != -2 || !strings.Contains(r.applyMsg, "outside") {
		t.Errorf("CPU 1 outside Slurm's cpuset 0: want refusal (rc -2), got\n%s", r.raw)
	}
	if r.affinity != "0" || r.cleanup != 0 {
		t.Errorf("refused task must keep Slurm's CPUs 0 and clean up:\n%s", r.raw)
	}
	r = runTask(t, dev, []string{"--version", "1", "--cpus-flag", "--job", job(),
		"--cpus", "0-3", "--mems", "0", "--slurm-v1-cpuset", task}, "0")
	r.ok(t)
	if r.affinity != "0" {
		t.Errorf("cpus 0-3 inside cpuset 0: affinity %q, want 0", r.affinity)
	}
}

// ---- cgroup v2 --------------------------------------------------------------------------

// slurmProg attaches a Slurm-like device program (allow all but the listed GPU minors).
func slurmProg(t testing.TB, dir, flags, deny string) string {
	t.Helper()
	out, err := exec.Command(tool(t), "slurmprog", dir, flags, deny).CombinedOutput()
	if err != nil {
		t.Fatalf("slurmprog %s %s %s: %v\n%s", dir, flags, deny, err, out)
	}
	return strings.TrimSpace(string(out))
}

func attached(t testing.TB, dir string) string {
	t.Helper()
	out, err := exec.Command(tool(t), "query", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("query %s: %v\n%s", dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// probeIn runs the oracle from inside cgroup dir (v2).
func probeIn(t testing.TB, dir, dev string, probes ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`,
		"sh", dir, tool(t), "probe", dev)
	cmd.Args = append(cmd.Args, probes...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("probe in %s: %v\n%s", dir, err, out)
	}
	res := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			res[k] = v
		}
	}
	return res
}

// Slurm's cgroup/v2 layout by hand: job and step programs attached with ALLOW_OVERRIDE
// (job 105 has minors 0-3; minors 4-7 belong to another job; the step has 0-1), tasks in
// step/user/task_N. Slurm's task/cgroup would do this with ConstrainDevices=yes.
func slurmV2Layout(t testing.TB, base string) (step string) {
	t.Helper()
	jobDir := filepath.Join(base, "job_105")
	step = filepath.Join(jobDir, "step_0")
	mkdirs(t, filepath.Join(step, "user", "task_0"), filepath.Join(step, "user", "task_1"),
		filepath.Join(step, "user", "task_2"))
	slurmProg(t, jobDir, "override", "4,5,6,7")
	slurmProg(t, step, "override", "2,3,4,5,6,7")
	return step
}

func TestV2OverrideHazardIsReal(t *testing.T) {
	// The control experiment: a plain "deny GPU 1" program attached (even with
	// ALLOW_MULTI) below Slurm's ALLOW_OVERRIDE programs replaces them, and the task
	// reaches the other job's GPUs. If this ever stops being true, the test layout no
	// longer models the danger the plugin guards against.
	m := needV2(t)
	dev := fakeGPUs(t)
	step := slurmV2Layout(t, testBase(t, m.unified))
	task := filepath.Join(step, "user", "task_0")
	if got := probeIn(t, task, dev, "0", "2", "4"); got["0"] != "ENXIO" || got["2"] != "EPERM" || got["4"] != "EPERM" {
		t.Fatalf("Slurm-like layout does not restrict as built: %v", got)
	}
	naive := filepath.Join(task, "naive")
	mkdirs(t, naive)
	slurmProg(t, naive, "multi", "1")
	got := probeIn(t, naive, dev, "1", "4")
	if got["1"] != "EPERM" || got["4"] != "ENXIO" {
		t.Errorf("expected the override hazard (1 EPERM, 4 ENXIO), got %v", got)
	}
}

func TestV2SlurmLayout(t *testing.T) {
	m := needV2(t)
	dev := fakeGPUs(t)
	base := testBase(t, m.unified)
	step := slurmV2Layout(t, base)
	task0 := filepath.Join(step, "user", "task_0")
	v2 := []string{"--version", "2", "--isolate", "--job", job()}

	for _, cloneVM := range []bool{false, true} {
		args := append(append([]string{}, v2...), "--step-minors", "0,1", "--minors", "0",
			"--slurm-v2", task0)
		if cloneVM {
			args = append(args, "--clone-vm")
		}
		r := runTask(t, dev, args, allProbes...)
		r.ok(t)
		// The task stays in Slurm's task cgroup, where Slurm's cgroup/v2 looks for it
		// (signals, proctrack's wait, accounting read task_N/cgroup.procs only).
		if r.path != task0 {
			t.Errorf("isolated task is in %s, not in Slurm's task cgroup %s", r.path, task0)
		}
		// Own GPU only; the step's other GPU, the job's other GPUs and the other
		// job's GPUs all denied; control devices and /dev/null as before.
		r.expect(t, with(gpus(0), "nvidiactl", "ENXIO", "nvidia-modeset", "ENXIO", "/dev/null", "OK"))
	}

	// The second task of the step gets the other GPU.
	r := runTask(t, dev, append(append([]string{}, v2...), "--task", "1", "--ntasks", "2",
		"--step-minors", "0,1", "--minors", "1", "--slurm-v2", filepath.Join(step, "user", "task_1")), allProbes...)
	r.ok(t)
	r.expect(t, gpus(1))

	// Even a table that names another job's GPU (4) as a step GPU cannot open it:
	// Slurm's program still decides everything the plugin does not deny.
	r = runTask(t, dev, append(append([]string{}, v2...), "--step-minors", "0,1,4",
		"--minors", "4", "--slurm-v2", task0), "0", "1", "4")
	r.ok(t)
	r.expect(t, map[string]string{"0": "EPERM", "1": "EPERM", "4": "EPERM"})

	// A minor that is not a step GPU at all is refused before anything changes.
	r = runTask(t, dev, append(append([]string{}, v2...), "--step-minors", "0,1",
		"--minors", "5", "--slurm-v2", task0), "0", "1", "5")
	if r.apply != -2 || !strings.Contains(r.applyMsg, "not a GPU of this step") {
		t.Errorf("minor 5 outside the step: want refusal, got\n%s", r.raw)
	}
	r.expect(t, map[string]string{"0": "ENXIO", "1": "ENXIO", "5": "EPERM"})
	noLeftovers(t)
}

// Slurm puts an exclusive (flags=0) program on a task cgroup when the task has its own
// device rules. Nothing can be attached below it; the plugin swaps it for its own program
// (which tail-calls Slurm's) and puts Slurm's back at task exit.
func TestV2ExclusiveTaskProgram(t *testing.T) {
	m := needV2(t)
	dev := fakeGPUs(t)
	step := slurmV2Layout(t, testBase(t, m.unified))
	task := filepath.Join(step, "user", "task_2")
	slurmProg(t, task, "none", "0,2,3,4,5,6,7") // Slurm's own rule: this task gets GPU 1
	before := attached(t, task)

	r := runTask(t, dev, []string{"--version", "2", "--isolate", "--job", job(), "--task", "2",
		"--ntasks", "3", "--step-minors", "0,1", "--minors", "1", "--slurm-v2", task}, allProbes...)
	r.ok(t)
	r.expect(t, with(gpus(1), "nvidiactl", "ENXIO", "/dev/null", "OK"))
	if after := attached(t, task); after != before {
		t.Errorf("Slurm's task program not restored: before %q, after %q", before, after)
	}

	// The plugin's table says GPU 0, Slurm's task rule says GPU 1: the intersection is empty.
	r = runTask(t, dev, []string{"--version", "2", "--isolate", "--job", job(), "--task", "2",
		"--ntasks", "3", "--step-minors", "0,1", "--minors", "0", "--slurm-v2", task}, "0", "1")
	r.ok(t)
	r.expect(t, map[string]string{"0": "EPERM", "1": "EPERM"})
	if after := attached(t, task); after != before {
		t.Errorf("Slurm's task program not restored: before %q, after %q", before, after)
	}
	noLeftovers(t)
}

// An exclusive program above the task's own cgroup covers other tasks: refuse, change nothing.
func TestV2ExclusiveStepProgramRefused(t *testing.T) {
	m := needV2(t)
	dev := fakeGPUs(t)
	base := testBase(t, m.unified)
	step := filepath.Join(base, "job_106", "step_0")
	task := filepath.Join(step, "task_0")
	mkdirs(t, task)
	slurmProg(t, step, "none", "4,5,6,7")
	r := runTask(t, dev, []string{"--version", "2", "--isolate", "--job", job(),
		"--step-minors", "0,1", "--minors", "1", "--slurm-v2", task}, "0", "1", "4")
	if r.apply != -2 || !strings.Contains(r.applyMsg, "exclusive") {
		t.Errorf("want refusal naming the exclusive program, got\n%s", r.raw)
	}
	r.expect(t, map[string]string{"0": "ENXIO", "1": "ENXIO", "4": "EPERM"})
	if r.cleanup != 0 || r.fini != 0 {
		t.Errorf("cleanup after refusal failed:\n%s", r.raw)
	}
	noLeftovers(t)
}

// Issue 23: with proctrack/cgroup but neither task/cgroup with a Constrain* option nor
// jobacct_gather/cgroup, Slurm's cgroup/v2 puts every task of the step in the shared
// task_special. Moving a task into a child of it hid the task from Slurm (step_get_pids reads
// each task cgroup's own cgroup.procs): isolate refuses and names what is needed; cpus alone
// is left to sched_setaffinity. The task stays where Slurm put it.
func TestV2SharedTaskSpecialRefused(t *testing.T) {
	m := needV2(t)
	dev := fakeGPUs(t)
	special := filepath.Join(testBase(t, m.unified), "job_107", "step_0", "user", "task_special")
	mkdirs(t, special)
	r := runTask(t, dev, []string{"--version", "2", "--isolate", "--job", job(),
		"--step-minors", "0,1", "--minors", "0", "--slurm-v2", special}, "0", "1")
	if r.apply != -2 || !strings.Contains(r.applyMsg, "task_special") || !strings.Contains(r.applyMsg, "ConstrainDevices") {
		t.Errorf("want a refusal naming task_special and what is needed, got\n%s", r.raw)
	}
	if len(r.dirs) != 0 {
		t.Errorf("cgroups made below Slurm's %s: %v", special, r.dirs)
	}
	r.expect(t, map[string]string{"0": "ENXIO", "1": "ENXIO"})
	r = runTask(t, dev, []string{"--version", "2", "--cpus-flag", "--job", job(),
		"--cpus", "0", "--mems", "0", "--slurm-v2", special}, "0")
	if r.apply != -3 || len(r.dirs) != 0 {
		t.Errorf("cpus alone in task_special: want GB_CG_UNSUPPORTED and the task left in place, got\n%s", r.raw)
	}
	noLeftovers(t)
}

// task/none or task/affinity: no Slurm cgroup; the plugin's cgroup goes below the stepd's.
func TestV2WithoutSlurmCgroups(t *testing.T) {
	m := needV2(t)
	dev := fakeGPUs(t)
	base := testBase(t, m.unified)
	r := runTask(t, dev, []string{"--version", "2", "--isolate", "--job", job(),
		"--step-minors", "0,1,2,3,4,5,6,7", "--minors", "3,6", "--slurm-v2", base}, allProbes...)
	r.ok(t)
	r.expect(t, with(gpus(3, 6), "nvidiactl", "ENXIO", "nvidia-modeset", "ENXIO", "/dev/null", "OK"))
	noLeftovers(t)
}

func TestV2IsolateAMD(t *testing.T) {
	m := needV2(t)
	dev := fakeAMD(t)
	base := testBase(t, m.unified)
	r := runTask(t, dev, append([]string{"--version", "2", "--job", job(), "--slurm-v2", base}, isolateAMDArgs...), amdProbes...)
	r.ok(t)
	r.expect(t, isolateAMDWant)
	noLeftovers(t)
}

func TestV2CpusWithoutCpusetController(t *testing.T) {
	m := needV2(t)
	ctrl, err := os.ReadFile(filepath.Join(m.unified, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ctrl), "cpuset") {
		t.Skip("cpuset is enabled on this cgroup2 tree")
	}
	dev := fakeGPUs(t)
	base := testBase(t, m.unified)
	r := runTask(t, dev, []string{"--version", "2", "--isolate", "--cpus-flag", "--job", job(),
		"--step-minors", "0,1", "--minors", "0", "--cpus", "0", "--mems", "0", "--slurm-v2", base}, "0", "1")
	if r.apply != -3 || !strings.Contains(r.applyMsg, "cpuset controller is not enabled") {
		t.Errorf("want GB_CG_UNSUPPORTED for cpus, got\n%s", r.raw)
	}
	// The device part still applies.
	r.expect(t, map[string]string{"0": "ENXIO", "1": "EPERM"})
	if r.cleanup != 0 {
		t.Errorf("cleanup failed:\n%s", r.raw)
	}
	// cpus alone: nothing to do on v2 here, so no cgroup is made at all.
	r = runTask(t, dev, []string{"--version", "2", "--cpus-flag", "--job", job(),
		"--cpus", "0", "--mems", "0", "--slurm-v2", base}, "0")
	if r.apply != -3 || len(r.dirs) != 0 || (r.affinity == "0" && runtime.NumCPU() > 1) {
		t.Errorf("cpus alone on v2 without cpuset: want rc -3, no cgroup, affinity untouched:\n%s", r.raw)
	}
	noLeftovers(t)
}

// The task child learns which GPUs it may use from access(2), which asks the device cgroup
// (v1 devices list, v2 BPF program) without opening the device: what gb_result_restrict relies
// on for isolate and for Slurm's per-task device binding.
func TestAccessSeesDeviceCgroup(t *testing.T) {
	bin := tool(t)
	m := findMounts(t)
	dev := fakeGPUs(t)
	for _, tc := range []struct {
		version, minors, want string
		ok                    bool
	}{
		{"1", "3,1", "access 1,3", m.devices != ""},
		{"2", "3,1", "access 1,3", m.unified != ""},
		{"2", "-", "access", m.unified != ""},
	} {
		if !tc.ok {
			continue
		}
		out, err := exec.Command(bin, "task", "--version", tc.version, "--isolate", "--job", job(),
			"--step-minors", "0,1,2,3", "--minors", tc.minors, "--", bin, "access", dev).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(string(out), "\n"+tc.want+"\n") || !strings.Contains(string(out), "cleanup rc=0") {
			t.Errorf("v%s minors %s: want %q in\n%s", tc.version, tc.minors, tc.want, out)
		}
	}
	out, err := exec.Command(bin, "access", dev).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "access 0,1,2,3,4,5,6,7" {
		t.Errorf("outside any plugin cgroup: %q, %v; want all 8", out, err)
	}
}

// ---- refusals and discovery -------------------------------------------------------------

func TestRefusals(t *testing.T) {
	tool(t)
	dev := fakeGPUs(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"mig", []string{"--isolate", "--mig", "--step-minors", "0", "--minors", "0"}, "MIG"},
		{"unknown minor", []string{"--isolate", "--step-minors", "0,-1", "--minors", "0"}, "minor -1"},
		{"minor 254", []string{"--isolate", "--step-minors", "254", "--minors", "254"}, "minor 254"},
	} {
		r := runTask(t, dev, tc.args, "0")
		if r.prepare != -2 || !strings.Contains(r.prepareMsg, tc.want) {
			t.Errorf("%s: want refusal at prepare naming %q, got\n%s", tc.name, tc.want, r.raw)
		}
	}
}

// Issue 23: on cgroup v1 the plugin moves each task into a cgroup of its own in the devices
// (isolate) and cpuset (cpus) hierarchies. Where such a hierarchy is co-mounted with freezer
// (proctrack/cgroup) or cpuacct/memory (jobacct_gather/cgroup), that move takes the task out
// of the cgroup where Slurm finds it: refused before anything changes, naming the mount.
func TestV1CoMountRefused(t *testing.T) {
	tool(t)
	dev := fakeGPUs(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, mount, flag, want string }{
		{"devices,freezer", "rw,devices,freezer", "--isolate", "co-mounted with freezer"},
		{"devices,memory", "rw,memory,devices", "--isolate", "co-mounted with memory"},
		{"cpuset,cpuacct", "rw,cpuset,cpu,cpuacct", "--cpus-flag", "co-mounted with cpuacct"},
	} {
		mi := filepath.Join(dir, strings.ReplaceAll(tc.name, ",", "_"))
		writeFile(t, mi, "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"+
			"34 31 0:31 / /sys/fs/cgroup/x rw,relatime - cgroup cgroup "+tc.mount+"\n")
		r := runTask(t, dev, []string{"--version", "1", tc.flag, "--step-minors", "0", "--minors", "0",
			"--cpus", "0", "--mems", "0", "--mountinfo", mi}, "0")
		if r.prepare != -2 || !strings.Contains(r.prepareMsg, tc.want) {
			t.Errorf("%s: want a refusal at prepare naming %q, got\n%s", tc.name, tc.want, r.raw)
		}
	}
}

func TestMountinfo(t *testing.T) {
	bin := tool(t)
	dir := t.TempDir()
	for _, tc := range []struct{ name, text, want1, want2 string }{
		{"hybrid with escapes",
			"31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" +
				"34 31 0:31 / /x\\040y/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset\n" +
				"36 31 0:33 / /x\\040y/devices rw,relatime - cgroup cgroup rw,devices\n" +
				"41 31 0:38 / /x\\040y/unified rw,relatime - cgroup2 cgroup2 rw\n",
			"v1 rc=0 cgroup v1 (devices at /x y/devices, cpuset at /x y/cpuset)",
			"v2 rc=0 cgroup v2 at /x y/unified (BPF device programs)"},
		{"v2 only",
			"25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			"v1 rc=0 cgroup v1 (devices at -, cpuset at -)",
			"v2 rc=0 cgroup v2 at /sys/fs/cgroup (BPF device programs)"},
		{"no cgroups", "1 0 0:1 / / rw - ext4 /dev/sda rw\n",
			"v1 rc=0 cgroup v1 (devices at -, cpuset at -)",
			"v2 rc=-2 cgroup: neither a cgroup v1 cpuset hierarchy nor cgroup2 is mounted"},
		{"garbage", "not a mountinfo line\n",
			"v1 rc=-1 " + filepath.Join(dir, "garbage") + " line 1: expected",
			"v2 rc=-1 " + filepath.Join(dir, "garbage") + " line 1: expected"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(strings.Fields(tc.name)[0], "/", "_"))
		writeFile(t, p, tc.text)
		out, err := exec.Command(bin, "describe", p).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		if !strings.Contains(string(out), tc.want1) || !strings.Contains(string(out), tc.want2) {
			t.Errorf("%s: got\n%s\nwant lines starting %q and %q", tc.name, out, tc.want1, tc.want2)
		}
	}
}

// ---- cost -------------------------------------------------------------------------------

// BenchmarkApply reports the median time of prepare (before fork), apply (task_post_fork)
// and task_exit, per backend, as measured inside cgtool.
func BenchmarkApply(b *testing.B) {
	needRoot(b)
	m := findMounts(b)
	dev := fakeGPUs(b)
	for _, v := range []struct {
		name string
		ok   bool
	}{{"v1", m.devices != ""}, {"v2", m.unified != ""}} {
		b.Run(v.name, func(b *testing.B) {
			if !v.ok {
				b.Skip("hierarchy not mounted")
			}
			var prep, apply, exit []int
			for i := 0; i < b.N; i++ {
				r := runTask(b, dev, []string{"--version", v.name[1:], "--isolate", "--job", job(),
					"--step-minors", "0,1,2,3", "--minors", "1"}, "1")
				if r.apply != 0 {
					b.Fatalf("apply failed:\n%s", r.raw)
				}
				prep = append(prep, r.timing["prepare_us"])
				apply = append(apply, r.timing["apply_us"])
				exit = append(exit, r.timing["exit_us"])
			}
			med := func(x []int) float64 { sort.Ints(x); return float64(x[len(x)/2]) }
			b.ReportMetric(med(prep), "prepare-us")
			b.ReportMetric(med(apply), "apply-us")
			b.ReportMetric(med(exit), "exit-us")
		})
	}
}
