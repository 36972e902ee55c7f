package spankhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// (a) The Go runtime lives only in the engine child: after init_post_opt
// the host has no extra thread, and every child exit reaches its signalfd.
func TestNoGoRuntimeInHost(t *testing.T) {
	p := dgxPlan(t, 4, "-")
	r := host(t, []string{"-q", "-n", "4", "-C", "200", "-o", "closest"},
		"launcher="+bin.goLauncher, "snapshot="+p)
	if r.rc(t, "init_post_opt") != 0 {
		t.Fatalf("init_post_opt failed:\n%s", r.stderr)
	}
	th := kv(t, r.lines["threads before"])
	if th["after"] != 1 {
		t.Errorf("threads after init_post_opt = %d, want 1 (the host's own); line %q", th["after"], r.lines["threads before"])
	}
	ch := kv(t, r.lines["children forked"])
	if ch["seen"] != 200 {
		t.Errorf("children seen on the signalfd = %d of 200", ch["seen"])
	}
	if got := kv(t, r.lines["tasks ok"]); got["ok"] != 4 {
		t.Errorf("tasks: %v", got)
	}
}

// The check above can fail: the same Go library loaded into the host
// itself starts threads that take SIGCHLD away from the signalfd.
func TestNoGoRuntimeInHostDetectsInProcessGo(t *testing.T) {
	build(t)
	p := dgxPlan(t, 1, "-")
	r, err := hostRun(t, 30*time.Second, []string{"-q", "-w", "200", "-n", "1", "-C", "20", "-G", bin.goEngine, "-o", "closest"},
		"launcher="+bin.goLauncher, "snapshot="+p, "timeout=1000", "mode=optional")
	if err != nil {
		t.Logf("negative control: the host with an in-process Go runtime failed or hung: %.300v", err)
		return
	}
	th := kv(t, r.lines["threads before"])
	ch := kv(t, r.lines["children forked"])
	if th["after"] <= 1 && ch["seen"] == 20 {
		t.Fatalf("in-process Go runtime went unnoticed: threads %d, seen %d of 20", th["after"], ch["seen"])
	}
	t.Logf("negative control: threads after=%d, children seen=%d of 20", th["after"], ch["seen"])
}

// (b) 1000 forked tasks run task_init while other host threads hammer
// malloc: every task finishes with its binding.
func TestThousandTasksUnderLoad(t *testing.T) {
	if testbuild.Sanitize() {
		t.Skip("sanitizer build: gcc 12's ASan allocator takes no lock around fork, so a task the host forks while its -L threads malloc can hang in it for good (97 of 1,000 tasks did); the plain build runs this test")
	}
	const n = 1000
	p := dgxPlan(t, n, "-")
	masks := make([]string, n)
	for i := range masks {
		masks[i] = fmt.Sprintf("0x%x", 1<<(i%2))
	}
	r := host(t, []string{"-n", fmt.Sprint(n), "-L", "4", "-t", "mask_cpu:", "-l", strings.Join(masks, ","), "-o", "closest"},
		"launcher="+bin.launchers["table"], "snapshot="+p)
	if got := kv(t, r.lines["tasks ok"]); got["ok"] != n || got["failed"] != 0 {
		t.Fatalf("tasks: %v\n%s", got, tail(r.stderr))
	}
	if len(r.tasks) != n {
		t.Fatalf("%d task lines, want %d", len(r.tasks), n)
	}
	// k-th task on a NUMA node takes the k-th GPU of that node, cyclically.
	for i := 0; i < n; i++ {
		k := i / 2
		want := []string{"0", "1"}[k%2]
		if i%2 == 1 {
			want = []string{"2", "3"}[k%2]
		}
		if got := r.tasks[i]["CUDA_VISIBLE_DEVICES"]; got != want {
			t.Fatalf("task %d: CUDA_VISIBLE_DEVICES=%q, want %q", i, got, want)
		}
	}
}

// (c) Engines that crash, hang, write garbage, stop early, write too much,
// or do not exit: the host lives; in enforce mode every task fails with the
// reason on its stderr (the user's terminal), in optional mode the tasks
// run unbound and task 0 prints the warning.
func TestBadEngines(t *testing.T) {
	build(t)
	p := dgxPlan(t, 2, "-")
	cases := []struct{ engine, want string }{
		{"crash", "engine crashed: signal 11"},
		{"hang", "engine did not finish within 1000 ms"},
		{"garbage", `plan line 1 is not "gpubind-plan 1"`},
		{"truncated", "plan truncated: no end line"},
		{"huge", "engine wrote more than 1048576 bytes"},
		{"missing", "launcher /nonexistent/launcher: No such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.engine, func(t *testing.T) {
			eng := bin.launchers[c.engine]
			if c.engine == "missing" {
				eng = "/nonexistent/launcher"
			}
			for _, mode := range []string{"enforce", "optional"} {
				r := host(t, []string{"-n", "2", "-C", "20", "-o", "closest"},
					"launcher="+eng, "snapshot="+p, "timeout=1000", "mode="+mode)
				if !strings.Contains(r.stderr, "gpubind: ") || !strings.Contains(r.stderr, c.want) {
					t.Errorf("%s: stderr lacks %q:\n%s", mode, c.want, r.stderr)
				}
				if got := r.rc(t, "init_post_opt"); got != 0 {
					t.Errorf("%s: init_post_opt rc=%d, want 0 (the tasks report)", mode, got)
				}
				tk := kv(t, r.lines["tasks ok"])
				if mode == "enforce" && (tk["ok"] != 0 || tk["failed"] != 2 || strings.Count(r.stderr, "\ngpubind: error: ") != 2) {
					t.Errorf("enforce: tasks %v, want both failed with the reason on stderr:\n%s", tk, r.stderr)
				}
				if mode == "optional" && (tk["ok"] != 2 || strings.Count(r.stderr, "\ngpubind: warning: ") != 1) {
					t.Errorf("optional: tasks %v, want both run and one warning on stderr:\n%s", tk, r.stderr)
				}
				if ch := kv(t, r.lines["children forked"]); ch["seen"] != 20 {
					t.Errorf("%s: children seen %d of 20", mode, ch["seen"])
				}
				if th := kv(t, r.lines["threads before"]); th["after"] != 1 {
					t.Errorf("%s: threads after=%d", mode, th["after"])
				}
				for id, env := range r.tasks {
					if _, ok := env["CUDA_VISIBLE_DEVICES"]; ok {
						t.Errorf("%s: unbound task %d got CUDA_VISIBLE_DEVICES", mode, id)
					}
				}
				if mode == "optional" && !strings.Contains(r.stderr, "tasks run unbound (mode=optional)") {
					t.Errorf("optional: no warning:\n%s", r.stderr)
				}
			}
		})
	}
	// A plan written completely by a child that then does not exit is used,
	// with a warning; the child is killed at the deadline.
	t.Run("linger", func(t *testing.T) {
		r := host(t, []string{"-n", "2", "-o", "closest"}, "launcher="+bin.launchers["linger"], "snapshot="+p, "timeout=500")
		if r.rc(t, "init_post_opt") != 0 || !strings.Contains(r.stderr, "engine did not exit within 500 ms") {
			t.Errorf("init_post_opt:\n%s", r.stderr)
		}
		if got := kv(t, r.lines["tasks ok"]); got["ok"] != 2 {
			t.Errorf("tasks %v", got)
		}
	})
}

// (d) contain_spank: user_init and task_post_fork run in a clone(CLONE_VM)
// child sharing the host's memory.
func TestContainSpank(t *testing.T) {
	p := dgxPlan(t, 8, "-")
	r := host(t, []string{"-c", "-n", "8", "-t", "mask_cpu:", "-l", "0x1,0x2", "-o", "closest"},
		"launcher="+bin.goLauncher, "snapshot="+p)
	if r.rc(t, "user_init contained") != 0 {
		t.Errorf("user_init in the contained child failed:\n%s", tail(r.stderr))
	}
	if got := kv(t, r.lines["post_fork calls"])["calls"]; got != 8 {
		t.Errorf("post_fork calls=%d, want 8\n%s", got, tail(r.stderr))
	}
	if got := kv(t, r.lines["tasks ok"]); got["ok"] != 8 {
		t.Errorf("tasks %v", got)
	}
	if c := strings.Count(r.stderr, "gpubind: task "); c < 8 {
		t.Errorf("%d task log lines", c)
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

// An engine that SIGKILL cannot end at once (here: frozen by the cgroup v1 freezer, as a child
// in uninterruptible sleep would be) must not hold slurmstepd: the front end waits a bounded
// time after the kill, reports it, and goes on. Before, it waited in waitpid forever.
func TestEngineThatCannotDie(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (cgroup v1 freezer)")
	}
	if _, err := os.Stat("/sys/fs/cgroup/freezer"); err != nil {
		t.Skip("no cgroup v1 freezer on this machine")
	}
	dir := filepath.Join("/sys/fs/cgroup/freezer", fmt.Sprintf("gpubind-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(dir, "freezer.state"), []byte("THAWED"), 0o644)
		for i := 0; i < 100; i++ {
			if b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(strings.TrimSpace(string(b))) == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	build(t)
	p := dgxPlan(t, 2, "-")
	start := time.Now()
	r, err := hostRun(t, time.Minute, []string{"-n", "2", "-C", "20", "-o", "closest"},
		"launcher="+bin.launchers["frozen"], "root="+dir, "snapshot="+p, "timeout=1000", "mode=enforce")
	if err != nil {
		t.Fatalf("the host did not come back from an engine that cannot die: %v", err)
	}
	took := time.Since(start)
	if !strings.Contains(r.stderr, "not gone 2000 ms later: left to slurmstepd") {
		t.Errorf("stderr lacks the reason:\n%s", r.stderr)
	}
	if took > 30*time.Second {
		t.Errorf("the host took %v", took)
	}
}
