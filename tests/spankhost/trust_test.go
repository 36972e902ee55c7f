package spankhost

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// nobody is the other account of these tests: it owns a directory on the launcher's path.
const nobody = 65534

// trustTree makes dir/libexec/gpubind-launcher (a copy of launcher, root 0755) and
// dir/snapshot.txt (a copy of snap) in a new directory dir (root 0755).
func trustTree(t *testing.T, dir, launcher, snap string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "libexec"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "libexec", "gpubind-launcher"), mustRead(t, launcher), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "snapshot.txt"), mustRead(t, snap), 0o644))
}

// chownTree gives every file and directory under dir (dir too) to uid.
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	must(t, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, uid)
	}))
}

// The whole path from / must be root's, not only the file and its directory: a root-owned
// libexec under a directory that another account owns (a `make install
// PREFIX=/home/swadmin/opt` layout) is refused, naming that directory, and so is a snapshot
// there; a sticky directory others can write (/tmp) is passed only where the entry in it
// is root's. Before, both were accepted (only the file and its own directory were checked).
func TestWholePathTrusted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another account")
	}
	build(t)
	p := dgxPlan(t, 2, "-")
	base := t.TempDir()
	must(t, os.Chmod(base, 0o755))
	home := filepath.Join(base, "home")
	must(t, os.Mkdir(home, 0o755))
	good := filepath.Join(base, "root-owned")
	trustTree(t, good, bin.launchers["table"], p)
	under := filepath.Join(home, "opt")
	trustTree(t, under, bin.launchers["table"], p)
	must(t, os.Chown(home, nobody, nobody))
	// A sticky, world-writable directory: root's entry passes, another account's does not.
	sticky := filepath.Join(base, "sticky")
	must(t, os.Mkdir(sticky, 0o755))
	must(t, syscall.Chmod(sticky, 0o1777)) // os.Chmod wants os.ModeSticky for the bit
	inSticky := filepath.Join(sticky, "root-entry")
	trustTree(t, inSticky, bin.launchers["table"], p)
	theirs := filepath.Join(sticky, "their-entry")
	trustTree(t, theirs, bin.launchers["table"], p)
	chownTree(t, theirs, nobody)
	must(t, os.Chown(filepath.Join(theirs, "libexec", "gpubind-launcher"), 0, 0))
	// A symbolic link that leads there: the walk follows it and checks where it leads.
	link := filepath.Join(good, "to-home")
	must(t, os.Symlink(filepath.Join(home, "opt", "libexec"), link))

	launcher := func(d string) string { return filepath.Join(d, "libexec", "gpubind-launcher") }
	cases := []struct {
		name, launcher, snapshot, want string
	}{
		{"root-owned path", launcher(good), filepath.Join(good, "snapshot.txt"), ""},
		{"root's entry in a sticky directory", launcher(inSticky), filepath.Join(inSticky, "snapshot.txt"), ""},
		{"launcher under another account's directory", launcher(under), filepath.Join(good, "snapshot.txt"),
			"the directory " + home + " of launcher " + launcher(under) + " is owned by uid 65534, not root"},
		{"snapshot under another account's directory", launcher(good), filepath.Join(under, "snapshot.txt"),
			"the directory " + home + " of snapshot " + filepath.Join(under, "snapshot.txt") + " is owned by uid 65534, not root"},
		{"another account's entry in a sticky directory", launcher(theirs), filepath.Join(good, "snapshot.txt"),
			"the directory " + theirs + " of launcher " + launcher(theirs) + " is owned by uid 65534 in " + sticky + ", a directory others can write"},
		{"link into another account's directory", filepath.Join(link, "gpubind-launcher"), filepath.Join(good, "snapshot.txt"),
			"the directory " + home + " of launcher " + filepath.Join(link, "gpubind-launcher") + " is owned by uid 65534, not root"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := host(t, []string{"-n", "2", "-o", "closest"},
				"launcher="+c.launcher, "snapshot="+c.snapshot, "cache_dir="+dir, "mode=enforce", "plan_cache=0")
			tk := kv(t, r.lines["tasks ok"])
			_, ranErr := os.Stat(filepath.Join(dir, "request.txt"))
			if c.want == "" {
				if tk["ok"] != 2 || ranErr != nil {
					t.Fatalf("tasks %v, launcher ran: %v; want both bound:\n%s", tk, ranErr == nil, r.stderr)
				}
				return
			}
			if !strings.Contains(r.stderr, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, r.stderr)
			}
			if tk["ok"] != 0 {
				t.Errorf("tasks %v: want all failed (mode=enforce)", tk)
			}
			if ranErr == nil {
				t.Errorf("the refused launcher ran")
			}
		})
	}
}

// The race of issue 34: between the check and the use, a directory above the launcher and
// the snapshot is swapped (renameat2 RENAME_EXCHANGE) with one that holds another
// launcher and snapshot, in a loop, while 1,000 steps run. The steps run through the
// spankhost (the real plugin's init_post_opt and the launcher start, without slurmd):
// what is raced is the plugin's walk, open and exec, which no part of Slurm takes part
// in, and a real cluster would run 1,000 steps some 50 times slower.
//
// Two layouts, steps alternating between them:
//   - home, owned by another account who swaps home/opt with home/evil: every step must be
//     refused (home is not root's) and nothing under it runs or is read;
//   - sys, root's, where sys/opt is swapped with sys/evil, whose launcher and snapshot
//     belong to the other account: each step runs sys/opt's launcher on sys/opt's snapshot
//     or is refused, never evil's (before, the path was checked and then spawned by name).
//
// Evil's launcher is the probe launcher (it writes cache_dir/probe.txt); its snapshot is a
// plan with status error and the message EVIL-SNAPSHOT, which the plugin would log.
func TestSwapAboveLauncherRace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another account")
	}
	build(t)
	steps := 1000
	if testbuild.Sanitize() {
		// The sanitizer pass checks the walk, open and exec for memory errors under the race;
		// the plain passes run all 1,000 steps (1,000 took 341 s under ASan on the loaded 2-core VM).
		steps = 200
	}
	good := dgxPlan(t, 1, "-")
	evil := plan(t, "status error", "mode enforce", "message EVIL-SNAPSHOT")
	base := t.TempDir()
	// The other account must reach base: t.TempDir's parent is 0700.
	must(t, os.Chmod(filepath.Dir(base), 0o755))
	must(t, os.Chmod(base, 0o755))
	home, sys := filepath.Join(base, "home"), filepath.Join(base, "sys")
	for _, top := range []string{home, sys} {
		must(t, os.Mkdir(top, 0o755))
		trustTree(t, filepath.Join(top, "opt"), bin.launchers["table"], good)
		trustTree(t, filepath.Join(top, "evil"), bin.launchers["probe"], evil)
		chownTree(t, filepath.Join(top, "evil"), nobody)
	}
	must(t, os.Chown(home, nobody, nobody))
	swapper := filepath.Join(base, "swapper") // the build directory is 0700
	must(t, os.WriteFile(swapper, mustRead(t, bin.swapper), 0o755))
	swap := func(top string, uid uint32) {
		cmd := exec.Command(swapper, filepath.Join(top, "opt"), filepath.Join(top, "evil"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out, err := cmd.StdoutPipe()
		must(t, err)
		cmd.Stderr = os.Stderr
		must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "swapping\n" {
			t.Fatalf("swapper %s: %q %v", top, l, err)
		}
	}
	swap(home, nobody)
	swap(sys, 0)

	cache := t.TempDir()
	var ranGood, refusedSys int
	for i := 0; i < steps; i++ {
		top := sys
		if i%2 == 0 {
			top = home
		}
		opt := filepath.Join(top, "opt")
		r, err := hostRun(t, time.Minute, []string{"-n", "1", "-o", "closest"},
			"launcher="+filepath.Join(opt, "libexec", "gpubind-launcher"), "snapshot="+filepath.Join(opt, "snapshot.txt"),
			"cache_dir="+cache, "mode=enforce", "plan_cache=0", "timeout=5000")
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(cache, "probe.txt")); err == nil {
			t.Fatalf("step %d (%s): the swapped-in launcher ran:\n%s", i, top, r.stderr)
		}
		if strings.Contains(r.stderr, "EVIL-SNAPSHOT") {
			t.Fatalf("step %d (%s): the swapped-in snapshot was read:\n%s", i, top, r.stderr)
		}
		ok := kv(t, r.lines["tasks ok"])["ok"] == 1
		switch {
		case top == home && ok:
			t.Fatalf("step %d: a launcher under another account's directory ran:\n%s", i, r.stderr)
		case top == home && !strings.Contains(r.stderr, "the directory "+home+" of "):
			t.Fatalf("step %d: refused, but not for %s:\n%s", i, home, r.stderr)
		case top == sys && ok:
			if got := r.tasks[0]["CUDA_VISIBLE_DEVICES"]; got != "0" {
				t.Fatalf("step %d: CUDA_VISIBLE_DEVICES=%q, want 0:\n%s", i, got, r.stderr)
			}
			ranGood++
		case top == sys:
			if !strings.Contains(r.stderr, "owned by uid 65534, not root") {
				t.Fatalf("step %d: failed, not for the other account's file:\n%s", i, r.stderr)
			}
			refusedSys++
		}
	}
	t.Logf("%d steps: under the other account's directory all refused; under root's, %d ran the checked launcher, %d refused the swapped-in one",
		steps, ranGood, refusedSys)
	if ranGood == 0 || refusedSys == 0 {
		t.Errorf("the race did not happen both ways (ran %d, refused %d): the test proved nothing", ranGood, refusedSys)
	}
}

// The spawn path under a low RLIMIT_NOFILE: whatever step runs out of fds (the walk, the
// request memfd, the pipe, one pipe end moved above 9 and the other not), init_post_opt
// leaves no fd behind and the host lives. Before, a failed move of one pipe end leaked the
// other (limits 13 and 14 here left one fd open).
func TestSpawnUnderLowNofile(t *testing.T) {
	build(t)
	p := dgxPlan(t, 2, "-")
	bound := 0
	for n := 6; n <= 24; n++ {
		r := host(t, []string{"-F", strconv.Itoa(n), "-n", "2", "-o", "closest"},
			"launcher="+bin.launchers["table"], "snapshot="+p, "plan_cache=0", "mode=enforce")
		fds := kv(t, r.lines["fds before"])
		if _, ok := fds["before"]; !ok || fds["after"] != fds["before"] {
			t.Errorf("RLIMIT_NOFILE %d: %d fds open before init_post_opt, %d after:\n%s", n, fds["before"], fds["after"], r.stderr)
		}
		tk := kv(t, r.lines["tasks ok"])
		if tk["ok"] == 2 {
			bound++
		} else if !strings.Contains(r.stderr, "Too many open files") && !strings.Contains(r.stderr, "Invalid argument") {
			t.Errorf("RLIMIT_NOFILE %d: tasks %v, and not for lack of fds:\n%s", n, tk, r.stderr)
		}
	}
	if bound == 0 {
		t.Errorf("no limit up to 24 let the step plan")
	}
}

// The kernel clears the parent-death signal when the uid changes: the launcher, which
// dies with slurmstepd while root, must still die with it after dropping to the job's
// user. The stand-in launcher starts as the real one (launcher.c), drops with the real
// code (package privdrop), then waits; the host (slurmstepd's stand-in) is killed; the
// launcher must be gone. Before, it lived on as the job's user.
func TestLauncherDiesWithParentAfterDrop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to drop privileges")
	}
	build(t)
	snap := filepath.Join(t.TempDir(), "pause.txt")
	must(t, os.WriteFile(snap, []byte("pause-after-drop\n"), 0o644))
	args := append([]string{"-U", strconv.Itoa(nobody), "-n", "1", "-o", "closest", bin.plugin},
		"launcher="+bin.goDropLauncher, "snapshot="+snap, "plan_cache=0", "timeout=120000")
	cmd := exec.Command(bin.host, args...)
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The launcher, once it runs as the job's user.
	var pid int
	for deadline := time.Now().Add(time.Minute); pid == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the launcher never ran as uid 65534")
		}
		pid = processAs(bin.goDropLauncher, nobody)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	must(t, cmd.Process.Kill())
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if processAs(bin.goDropLauncher, nobody) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("launcher %d still alive 10 s after its parent was killed", pid)
		}
	}
}

// processAs is the pid of a live process running exe with real uid uid, or 0.
func processAs(exe string, uid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || l != exe {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				if !strings.Contains(string(st), "State:\tZ") {
					return pid
				}
			}
		}
	}
	return 0
}
