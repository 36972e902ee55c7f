package spankhost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The plan cache (spank/frontend/plancache.c), through the real
// front end in the spankhost. The table test engine saves its request in
// cache_dir/request.txt each time it runs, so "request.txt appeared" means
// the engine child ran (a miss) and "none" means the plan came from the
// cache (a hit, which the verbose log line also says).

// tablePlan writes a "rule table" plan for n tasks over four GPUs: task i
// takes GPU gpus[i%len(gpus)], so two plans can be told apart by the tasks'
// CUDA_VISIBLE_DEVICES.
func tablePlan(t *testing.T, n int, gpus ...int) string {
	t.Helper()
	body := []string{"status ok", "mode enforce", "flags -", "rule table", "share 1", "per_task 1",
		fmt.Sprintf("ntasks %d", n), "numa 0 0", "numa 1 1",
		"gpu 0 0 0 0 0000:1b:00.0 GPU-aaaa 0 mlx5_0",
		"gpu 1 1 1 1 0000:43:00.0 GPU-bbbb 0 mlx5_1",
		"gpu 2 2 4 4 0000:9b:00.0 GPU-cccc 1 mlx5_4",
		"gpu 3 3 5 5 0000:c2:00.0 GPU-dddd 1 mlx5_5",
		"numagpus 0 0,1", "numagpus 1 2,3", "fallback 0,2,1,3"}
	for i := 0; i < n; i++ {
		body = append(body, fmt.Sprintf("task %d %d -", i, gpus[i%len(gpus)]))
	}
	return plan(t, body...)
}

type pcStep struct {
	r       result
	ran     bool   // the engine child ran
	hit     bool   // the log says the plan came from the cache
	visible string // the tasks' CUDA_VISIBLE_DEVICES, joined by ';'
}

// pcRun runs one step of n tasks with the table engine, plan file p and
// cache_dir dir, plus args; the request.txt of the run before is removed.
func pcRun(t *testing.T, dir, p string, n int, args ...string) pcStep {
	t.Helper()
	return pcRunEnv(t, dir, p, n, nil, args...)
}

// pcRunEnv is pcRun with more step environment (NAME=VALUE each).
func pcRunEnv(t *testing.T, dir, p string, n int, env []string, args ...string) pcStep {
	t.Helper()
	req := filepath.Join(dir, "request.txt")
	if err := os.Remove(req); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	flags := []string{"-n", itoa(n), "-e", "SLURM_STEP_GPUS=0,1,2,3", "-o", "closest"}
	for _, e := range env {
		flags = append(flags, "-e", e)
	}
	all := append([]string{"launcher=" + bin.launchers["table"], "snapshot=" + p, "cache_dir=" + dir}, args...)
	r := host(t, flags, all...)
	s := pcStep{r: r, hit: strings.Contains(r.stderr, ", plan cache hit)")}
	_, err := os.Stat(req)
	s.ran = err == nil
	if r.rc(t, "init_post_opt") != 0 || kv(t, r.lines["tasks ok"])["ok"] != n {
		t.Fatalf("step failed:\n%s\n%s", r.stdout, r.stderr)
	}
	var vis []string
	for i := 0; i < n; i++ {
		vis = append(vis, r.tasks[i]["CUDA_VISIBLE_DEVICES"])
	}
	s.visible = strings.Join(vis, ";")
	if s.ran == s.hit {
		t.Fatalf("engine ran=%v but plan cache hit=%v:\n%s", s.ran, s.hit, r.stderr)
	}
	return s
}

// entries lists the plan cache entries under dir/plans.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "plans", "p-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func onlyEntry(t *testing.T, dir string) string {
	t.Helper()
	e := entries(t, dir)
	if len(e) != 1 {
		t.Fatalf("want one plan cache entry, got %v", e)
	}
	return e[0]
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the plan cache is used only by root (slurmstepd)")
	}
}

// A miss runs the engine and stores the plan (root-owned, 0600, in a 0700
// plans/ directory); the same step again is a hit that gives every task the
// same answer without a child; another task count is another key.
func TestPlanCacheHitAndMiss(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	p := tablePlan(t, 4, 3, 1, 2, 0)
	first := pcRun(t, dir, p, 4)
	if !first.ran || first.visible != "3;1;2;0" {
		t.Fatalf("first step: ran=%v visible=%q", first.ran, first.visible)
	}
	e := onlyEntry(t, dir)
	for path, want := range map[string]os.FileMode{e: 0o600, filepath.Dir(e): 0o700 | os.ModeDir} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: mode %v uid %d, want %v root", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, want)
		}
	}
	for i := 0; i < 2; i++ {
		again := pcRun(t, dir, p, 4)
		if again.ran || again.visible != first.visible {
			t.Fatalf("repeat %d: ran=%v visible=%q, want a hit with %q:\n%s", i, again.ran, again.visible, first.visible, again.r.stderr)
		}
	}
	if other := pcRun(t, dir, tablePlan(t, 2, 0, 2), 2); !other.ran || other.visible != "0;2" {
		t.Fatalf("another shape: ran=%v visible=%q", other.ran, other.visible)
	}
	if n := len(entries(t, dir)); n != 2 {
		t.Errorf("%d entries, want 2", n)
	}
}

// A corrupt entry is ignored (the engine runs, the step is fine) and
// rewritten, so that the next step hits again.
func TestPlanCacheCorruptEntry(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	p := tablePlan(t, 2, 1, 0)
	pcRun(t, dir, p, 2)
	e := onlyEntry(t, dir)
	good, err := os.ReadFile(e)
	if err != nil {
		t.Fatal(err)
	}
	text := string(good)
	cases := map[string]string{
		"garbage":         "not a plan at all\n",
		"empty":           "",
		"truncated":       text[:len(text)/2],
		"no end line":     text[:strings.LastIndex(text, "end ")],
		"header too long": strings.Replace(text, "gpubind-plancache 1 ", "gpubind-plancache 1 9", 1),
		"bad table":       strings.Replace(text, "rule table", "rule bogus", 1),
		"error status":    reheader(t, strings.Replace(text, "status ok", "status error", 1)),
	}
	for name, bad := range cases {
		if err := os.WriteFile(e, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		s := pcRun(t, dir, p, 2)
		if !s.ran || s.visible != "1;0" {
			t.Errorf("%s: ran=%v visible=%q, want the engine's plan 1;0", name, s.ran, s.visible)
		}
		want := "gpubind: plan cache entry " + e + " ignored: corrupt"
		if name == "error status" {
			want = "gpubind: plan cache entry " + e + " ignored: status error"
		}
		if !strings.Contains(s.r.stderr, want) {
			t.Errorf("%s: the log does not name the corrupt entry:\n%s", name, s.r.stderr)
		}
		if got, _ := os.ReadFile(e); string(got) != text {
			t.Errorf("%s: entry not rewritten", name)
		}
		if s := pcRun(t, dir, p, 2); !s.hit || s.visible != "1;0" {
			t.Errorf("%s: after the rewrite: ran=%v visible=%q", name, s.ran, s.visible)
		}
	}
}

// Entries and directories not owned by root, writable by group or others,
// or reached through a symbolic link are never trusted: the engine runs,
// the log says why, and the entry is replaced by a root-owned one.
func TestPlanCacheUntrusted(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	p := tablePlan(t, 2, 2, 3)
	pcRun(t, dir, p, 2)
	e := onlyEntry(t, dir)
	good, err := os.ReadFile(e)
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		_ = os.Remove(e)
		if err := os.WriteFile(e, good, 0o600); err != nil {
			t.Fatal(err)
		}
		if s := pcRun(t, dir, p, 2); !s.hit {
			t.Fatal("restored entry does not hit")
		}
	}
	for _, c := range []struct {
		name  string
		spoil func()
	}{
		{"wrong owner", func() { must(t, os.Chown(e, 65534, 65534)) }},
		{"group-writable", func() { must(t, os.Chmod(e, 0o620)) }},
		{"world-writable", func() { must(t, os.Chmod(e, 0o606)) }},
		{"symlink", func() {
			other := filepath.Join(t.TempDir(), "entry")
			must(t, os.WriteFile(other, good, 0o600))
			must(t, os.Remove(e))
			must(t, os.Symlink(other, e))
		}},
	} {
		restore()
		c.spoil()
		s := pcRun(t, dir, p, 2)
		if !s.ran || s.visible != "2;3" {
			t.Errorf("%s: ran=%v visible=%q, want the engine run", c.name, s.ran, s.visible)
		}
		if !strings.Contains(s.r.stderr, "gpubind: warning: plan cache entry "+e+" ignored") {
			t.Errorf("%s: no warning naming the entry:\n%s", c.name, s.r.stderr)
		}
		fi, err := os.Lstat(e)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: entry not replaced by a root-owned 0600 file: %v %v", c.name, fi, err)
		}
	}
	// The plans directory itself.
	restore()
	must(t, os.Chmod(filepath.Join(dir, "plans"), 0o777))
	s := pcRun(t, dir, p, 2)
	if !s.ran || !strings.Contains(s.r.stderr, "gpubind: plan cache not written: "+filepath.Join(dir, "plans")+" is writable by group or others") {
		t.Errorf("world-writable plans/: ran=%v:\n%s", s.ran, s.r.stderr)
	}
	must(t, os.Chmod(filepath.Join(dir, "plans"), 0o700))
	must(t, os.Chown(filepath.Join(dir, "plans"), 65534, 65534))
	if s := pcRun(t, dir, p, 2); !s.ran {
		t.Errorf("plans/ owned by another user: used")
	}
}

// Two keys whose entries share a file name (a hash collision, or an entry
// of another key copied there): the key must match byte for byte, so the
// other step's plan is never used.
func TestPlanCacheKeyCollision(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	pa, pb := tablePlan(t, 2, 0, 1), tablePlan(t, 2, 3, 2)
	pcRun(t, dir, pa, 2)
	ea := onlyEntry(t, dir)
	a, err := os.ReadFile(ea)
	must(t, err)
	if s := pcRun(t, dir, pb, 2); s.visible != "3;2" {
		t.Fatalf("b: %q", s.visible)
	}
	var eb string
	for _, e := range entries(t, dir) {
		if e != ea {
			eb = e
		}
	}
	if eb == "" {
		t.Fatal("no entry for b")
	}
	must(t, os.WriteFile(eb, a, 0o600))
	s := pcRun(t, dir, pb, 2)
	if !s.ran || s.visible != "3;2" {
		t.Errorf("b with a's entry in its place: ran=%v visible=%q, want the engine's 3;2", s.ran, s.visible)
	}
	// One byte of the key differs (uid 0 -> uid 1 in the request text).
	forged := strings.Replace(string(a), "\nuid=0\n", "\nuid=1\n", 1)
	if forged == string(a) {
		t.Fatal("no uid=0 line in the entry's key")
	}
	must(t, os.WriteFile(ea, []byte(forged), 0o600))
	if s := pcRun(t, dir, pa, 2); !s.ran {
		t.Errorf("an entry whose key differs in one byte was used")
	}
}

// plan_cache=N keeps at most N entries, evicting the oldest written.
func TestPlanCacheFull(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	var plans []string
	for n := 1; n <= 4; n++ {
		plans = append(plans, tablePlan(t, n, 1))
		if s := pcRun(t, dir, plans[n-1], n, "plan_cache=2"); !s.ran {
			t.Fatalf("n=%d: not a miss", n)
		}
		time.Sleep(20 * time.Millisecond) // distinct mtimes
	}
	if e := entries(t, dir); len(e) != 2 {
		t.Fatalf("plan_cache=2: %d entries: %v", len(e), e)
	}
	if s := pcRun(t, dir, plans[3], 4, "plan_cache=2"); !s.hit {
		t.Errorf("newest entry evicted")
	}
	if s := pcRun(t, dir, plans[0], 1, "plan_cache=2"); !s.ran {
		t.Errorf("oldest entry kept")
	}
	// plan_cache=0: off, never read, never written.
	off := cacheDir(t)
	for i := 0; i < 2; i++ {
		if s := pcRun(t, off, plans[1], 2, "plan_cache=0"); !s.ran {
			t.Errorf("plan_cache=0: hit")
		}
	}
	if _, err := os.Stat(filepath.Join(off, "plans")); !os.IsNotExist(err) {
		t.Errorf("plan_cache=0 created plans/: %v", err)
	}
	r := host(t, nil, "plan_cache=-1")
	if r.rc(t, "init") != -1 || !strings.Contains(r.stderr, "plan_cache=-1: expected a number of entries") {
		t.Errorf("plan_cache=-1 accepted:\n%s", r.stderr)
	}
}

// Whatever the engine's answer depends on is in the key: a change of an
// admin setting, of a file the engine reads, of the step environment or of
// the engine itself is a miss, and the new answer is used.
func TestPlanCacheInvalidation(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	p := tablePlan(t, 2, 0, 1)
	gres := filepath.Join(t.TempDir(), "gres.conf")
	must(t, os.WriteFile(gres, []byte("Name=gpu File=/dev/nvidia[0-3]\n"), 0o644))
	base := []string{"gres_conf=" + gres, "isolate=never"}
	pcRun(t, dir, p, 2, base...)
	if s := pcRun(t, dir, p, 2, base...); !s.hit {
		t.Fatal("no hit with the same settings")
	}
	miss := func(what string, args ...string) {
		t.Helper()
		s := pcRun(t, dir, p, 2, args...)
		if !s.ran {
			t.Errorf("%s: the cached plan was used", what)
		}
		if s := pcRun(t, dir, p, 2, args...); !s.hit {
			t.Errorf("%s: no hit on the second step", what)
		}
	}
	miss("cpus=force added", append(base, "cpus=force")...)
	miss("mode=optional", append(base, "mode=optional")...)
	miss("isolate=allow", "gres_conf="+gres)
	miss("root= set", append(base, "root="+t.TempDir())...)
	// gres.conf edited in place (same size, new mtime/ctime).
	time.Sleep(10 * time.Millisecond)
	must(t, os.WriteFile(gres, []byte("Name=gpu File=/dev/nvidia[3-6]\n"), 0o644))
	miss("gres.conf edited", base...)
	// The snapshot (here the plan file) rewritten: the new plan is used.
	must(t, os.WriteFile(p, mustRead(t, tablePlan(t, 2, 3, 3)), 0o644))
	s := pcRun(t, dir, p, 2, base...)
	if !s.ran || s.visible != "3;3" {
		t.Errorf("snapshot rewritten: ran=%v visible=%q", s.ran, s.visible)
	}
	// The launcher replaced (an upgrade).
	eng := filepath.Join(t.TempDir(), "launcher")
	must(t, os.WriteFile(eng, mustRead(t, bin.launchers["table"]), 0o755))
	r := host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1,2,3", "-o", "closest"},
		append([]string{"launcher=" + eng, "snapshot=" + p, "cache_dir=" + dir}, base...)...)
	if strings.Contains(r.stderr, "plan cache hit") {
		t.Errorf("another launcher file: cached plan used")
	}
	// The step environment and the user's option.
	r = host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1,2", "-o", "closest"},
		append([]string{"launcher=" + bin.launchers["table"], "snapshot=" + p, "cache_dir=" + dir}, base...)...)
	if strings.Contains(r.stderr, "plan cache hit") {
		t.Errorf("other SLURM_STEP_GPUS: cached plan used")
	}
	r = host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1,2,3", "-o", "spread"},
		append([]string{"launcher=" + bin.launchers["table"], "snapshot=" + p, "cache_dir=" + dir}, base...)...)
	if strings.Contains(r.stderr, "plan cache hit") {
		t.Errorf("other option: cached plan used")
	}
}

// A cache directory the plan cache may not use (owned by another user, or
// on a read-only file system) costs the step nothing but the cache: every
// step runs the engine, is bound, and the log says why.
func TestPlanCacheDirUnwritable(t *testing.T) {
	build(t)
	needRoot(t)
	p := tablePlan(t, 2, 1, 3)
	t.Run("not root-owned", func(t *testing.T) {
		dir := cacheDir(t)
		must(t, os.Chown(dir, 65534, 65534))
		for i := 0; i < 2; i++ {
			s := pcRun(t, dir, p, 2)
			if !s.ran || s.visible != "1;3" {
				t.Errorf("step %d: ran=%v visible=%q", i, s.ran, s.visible)
			}
			if !strings.Contains(s.r.stderr, "gpubind: plan cache not used: "+dir+" is owned by uid 65534") {
				t.Errorf("step %d: no log line saying why:\n%s", i, s.r.stderr)
			}
		}
	})
	t.Run("read-only file system", func(t *testing.T) {
		dir := cacheDir(t)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Skipf("cannot mount a read-only tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
		for i := 0; i < 2; i++ {
			r := host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1,2,3", "-o", "closest"},
				"launcher="+bin.launchers["table"], "snapshot="+p, "cache_dir="+dir)
			if kv(t, r.lines["tasks ok"])["ok"] != 2 || r.tasks[0]["CUDA_VISIBLE_DEVICES"] != "1" {
				t.Fatalf("step %d failed:\n%s\n%s", i, r.stdout, r.stderr)
			}
			if strings.Contains(r.stderr, "plan cache hit") ||
				!strings.Contains(r.stderr, "gpubind: plan cache not written: mkdir "+dir+"/plans: Read-only file system") {
				t.Errorf("step %d: want a miss and the reason in the log:\n%s", i, r.stderr)
			}
		}
	})
}

// reheader fixes the table length in an entry's header after an edit.
func reheader(t *testing.T, entry string) string {
	t.Helper()
	hdr, rest, _ := strings.Cut(entry, "\n")
	f := strings.Fields(hdr)
	if len(f) != 4 {
		t.Fatalf("entry header %q", hdr)
	}
	var kl int
	if _, err := fmt.Sscan(f[2], &kl); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s %s %s %d\n", f[0], f[1], f[2], len(rest)-kl) + rest
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An entry holds the identity of every file its table depends on ("depends" lines: the
// configuration the engine read, slurm.conf's included files too) and is used only while
// none changed. (A file changed as the step began may have been read in either state, so
// that plan is not stored: the sleeps keep this test clear of it.) "depends ?" (a file the
// engine could not name) is never stored.
func TestPlanCacheDependsOnTheFilesRead(t *testing.T) {
	build(t)
	needRoot(t)
	dir := cacheDir(t)
	inc := filepath.Join(t.TempDir(), "task.conf")
	must(t, os.WriteFile(inc, []byte("TaskPlugin=task/affinity\n"), 0o644))
	withDepends := func(dep string) string {
		text := string(mustRead(t, tablePlan(t, 2, 0, 1)))
		lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
		body := append(lines[1:len(lines)-1], "depends "+dep)
		return plan(t, body...)
	}
	p := withDepends(inc)
	time.Sleep(300 * time.Millisecond) // older than the step: the plan may be stored
	if s := pcRun(t, dir, p, 2); !s.ran {
		t.Fatal("first step: no engine run")
	}
	if s := pcRun(t, dir, p, 2); !s.hit {
		t.Fatal("the plan was not reused while its files were unchanged")
	}
	must(t, os.WriteFile(inc, []byte("TaskPlugin=task/cgroup\n"), 0o644))
	if s := pcRun(t, dir, p, 2); !s.ran {
		t.Error("a file the plan depends on changed, but the cached plan was used")
	}
	time.Sleep(300 * time.Millisecond)
	pcRun(t, dir, p, 2)
	if s := pcRun(t, dir, p, 2); !s.hit {
		t.Error("no hit once the file had settled")
	}
	q := withDepends("?")
	for i := 0; i < 2; i++ {
		if s := pcRun(t, dir, q, 2); !s.ran {
			t.Error(`"depends ?": the cached plan was used`)
		}
	}
}

// Issue 23: users could fill the root-owned plan cache (a tmpfs) and evict each other's
// entries: three one-task steps with a 60 KB junk SLURM_JOB_GPUS left 202 KB of entries.
// Now the key holds only what the plan uses (SLURM_JOB_GPUS is read only without
// SLURM_STEP_GPUS), a key over 16 KiB is not cached, and each uid keeps at most a quarter
// of the entries.
func TestPlanCacheBounds(t *testing.T) {
	build(t)
	needRoot(t)
	p := tablePlan(t, 1, 2)
	junk := func(c byte) string { return strings.Repeat(string(c), 60*1024) }

	t.Run("unused variable not in the key", func(t *testing.T) {
		dir := cacheDir(t)
		if s := pcRunEnv(t, dir, p, 1, []string{"SLURM_JOB_GPUS=" + junk('1')}); !s.ran {
			t.Fatal("first step not a miss")
		}
		if s := pcRunEnv(t, dir, p, 1, []string{"SLURM_JOB_GPUS=" + junk('2')}); !s.hit {
			t.Errorf("another SLURM_JOB_GPUS beside SLURM_STEP_GPUS split the key")
		}
		fi, err := os.Stat(onlyEntry(t, dir))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 16*1024 {
			t.Errorf("entry of %d bytes holds the unused variable", fi.Size())
		}
	})
	t.Run("key over 16 KiB not cached", func(t *testing.T) {
		dir := cacheDir(t)
		for i := 0; i < 3; i++ {
			if s := pcRunEnv(t, dir, p, 1, []string{"CUDA_VISIBLE_DEVICES=" + junk('3')}); !s.ran {
				t.Errorf("step %d: a 60 KB key was cached", i)
			}
		}
		if e := entries(t, dir); len(e) != 0 {
			t.Errorf("entries written for a 60 KB key: %v", e)
		}
	})
	t.Run("one uid cannot evict the others", func(t *testing.T) {
		dir := cacheDir(t)
		plans := filepath.Join(dir, "plans")
		must(t, os.Mkdir(plans, 0o700))
		old := time.Now().Add(-time.Hour)
		for i := 0; i < 4; i++ {
			f := filepath.Join(plans, fmt.Sprintf("p-u1000-%016x", i))
			must(t, os.WriteFile(f, []byte("gpubind-plancache 1 0 0\n"), 0o600))
			must(t, os.Chtimes(f, old, old))
		}
		var last string
		for n := 1; n <= 16; n++ {
			last = tablePlan(t, n, 1)
			if s := pcRun(t, dir, last, n, "plan_cache=16"); !s.ran {
				t.Fatalf("n=%d: not a miss", n)
			}
		}
		mine, other := 0, 0
		for _, e := range entries(t, dir) {
			switch {
			case strings.HasPrefix(filepath.Base(e), "p-u1000-"):
				other++
			case strings.HasPrefix(filepath.Base(e), fmt.Sprintf("p-u%d-", os.Getuid())):
				mine++
			}
		}
		if other != 4 || mine != 4 {
			t.Errorf("plan_cache=16: uid %d keeps %d entries (want its quarter, 4), uid 1000 keeps %d of its 4",
				os.Getuid(), mine, other)
		}
		if s := pcRun(t, dir, last, 16, "plan_cache=16"); !s.hit {
			t.Errorf("the newest entry of the uid was evicted")
		}
	})
}

// Issue 23: with source=snapshot the engine never makes cache_dir (it caches no discovery),
// and the plan cache failed on every step (mkdir CACHE_DIR/plans: ENOENT). Now the front end
// makes it.
func TestPlanCacheWithoutCacheDir(t *testing.T) {
	build(t)
	needRoot(t)
	dir := filepath.Join(t.TempDir(), "fresh")
	p := tablePlan(t, 2, 1, 0)
	flags := []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1,2,3", "-o", "closest"}
	args := []string{"launcher=" + bin.launchers["table"], "snapshot=" + p, "cache_dir=" + dir}
	var hits []bool
	for i := 0; i < 2; i++ {
		r := host(t, flags, args...)
		if r.rc(t, "init_post_opt") != 0 || kv(t, r.lines["tasks ok"])["ok"] != 2 {
			t.Fatalf("step failed:\n%s\n%s", r.stdout, r.stderr)
		}
		hits = append(hits, strings.Contains(r.stderr, ", plan cache hit)"))
	}
	if hits[0] || !hits[1] {
		t.Errorf("plan cache hits %v, want [false true]: no plan cache without a cache_dir made beforehand", hits)
	}
}

// The NIC port states are in the key only for a plan whose option has the nic flag, the one
// flag whose output (NCCL_IB_HCA, UCX_NET_DEVICES, GPUBIND_NIC: NAME:PORT) reads them. Any
// other plan keeps its entry when a port flaps (issue 35: every request carries a "nics="
// line, so a search for the text "nic" put the ports into every key).
func TestPlanCacheNICPortsOnlyForNICPlans(t *testing.T) {
	build(t)
	needRoot(t)
	root := t.TempDir()
	state := filepath.Join(root, "sys", "class", "infiniband", "mlx5_0", "ports", "1", "state")
	must(t, os.MkdirAll(filepath.Dir(state), 0o755))
	setPort := func(s string) {
		t.Helper()
		must(t, os.WriteFile(state, []byte(s+"\n"), 0o644))
	}
	for _, tc := range []struct {
		option   string
		wantMiss bool // after the port flapped
	}{
		{"closest", false},
		{"closest,verbose", false},
		{"closest,nic", true},
		{"closest,verbose,nic", true},
	} {
		t.Run(tc.option, func(t *testing.T) {
			dir := cacheDir(t)
			p := tablePlan(t, 2, 0, 1)
			step := func() bool { // whether the plan came from the cache
				t.Helper()
				r := host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1,2,3", "-o", tc.option},
					"launcher="+bin.launchers["table"], "snapshot="+p, "cache_dir="+dir, "root="+root)
				if r.rc(t, "init_post_opt") != 0 {
					t.Fatalf("step failed:\n%s\n%s", r.stdout, r.stderr)
				}
				return strings.Contains(r.stderr, "plan cache hit")
			}
			setPort("4: ACTIVE")
			step()
			if !step() {
				t.Fatal("no hit with the same port states")
			}
			setPort("1: DOWN")
			if hit := step(); hit == tc.wantMiss {
				t.Errorf("after a port went down: plan cache hit=%v, want %v", hit, !tc.wantMiss)
			}
		})
	}
}
