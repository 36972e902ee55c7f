package spankhost

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The engine process is the launcher program, exec'd, not a fork of the host: its
// /proc/PID/exe is the launcher, its environment only what the plugin gives it (none of
// the host's), its oom_score_adj 0 though the host runs at -1000 as slurmstepd does, it
// dies with its parent, holds fds 0-3 and the snapshot on 4 only and cannot dump core.
func TestLauncherProcess(t *testing.T) {
	build(t)
	p := dgxPlan(t, 2, "-")
	dir := t.TempDir()
	t.Setenv("GB_SECRET_OF_THE_HOST", "job-credential")
	r := host(t, []string{"-q", "-O", "-1000", "-n", "2", "-e", "GB_JOB_VAR=1", "-o", "closest"},
		planArgs(t, "probe", "snapshot="+p, "cache_dir="+dir, "plan_cache=0")...)
	if got := kv(t, r.lines["tasks ok"]); got["ok"] != 2 {
		t.Fatalf("tasks %v:\n%s", got, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "probe.txt"))
	if err != nil {
		t.Fatalf("the probe launcher did not run: %v\n%s", err, r.stderr)
	}
	probe := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, _ := strings.Cut(l, " ")
		probe[k] = append(probe[k], v)
	}
	one := func(k string) string {
		if len(probe[k]) != 1 {
			t.Fatalf("probe %s: %q\n%s", k, probe[k], b)
		}
		return probe[k][0]
	}
	want, _ := filepath.EvalSymlinks(bin.launchers["probe"])
	if got := one("exe"); got != want {
		t.Errorf("/proc/PID/exe = %q, want the launcher %q", got, want)
	}
	if got := one("oom_score_adj"); got != "0" {
		t.Errorf("oom_score_adj = %s, want 0 (the host: %q)", got, r.lines["oom_score_adj"])
	}
	if !strings.HasPrefix(r.lines["oom_score_adj"], "oom_score_adj set=-1000") {
		// Without CAP_SYS_RESOURCE the host cannot go below 0: the launcher's reset is
		// then not exercised here (it is wherever the tests run with all capabilities).
		t.Logf("the host could not set oom_score_adj -1000 (%q): only checked that the launcher has 0", r.lines["oom_score_adj"])
	}
	if got := one("pdeathsig"); got != "9" {
		t.Errorf("parent-death signal = %s, want 9 (SIGKILL)", got)
	}
	if got := one("core"); got != "0" {
		t.Errorf("RLIMIT_CORE = %s, want 0", got)
	}
	if got := one("nofile"); got != "1024" {
		t.Errorf("RLIMIT_NOFILE = %s, want 1024", got)
	}
	fds := probe["fd"]
	slices.Sort(fds)
	if !slices.Equal(fds, []string{"0", "1", "2", "3", "4"}) {
		t.Errorf("open fds %v, want 0 1 2 3 and 4 (the snapshot) only", fds)
	}
	env := probe["env"]
	slices.Sort(env)
	if !slices.Equal(env, []string{"GOGC=off", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}) {
		t.Errorf("environment %q, want only GOGC=off and PATH (nothing of the host's or the job's)", env)
	}
}

// What runs as root or is read as root must be root's and writable only by it: a
// launcher, its directory or a snapshot= file that others can write is refused, with a
// message naming it, and nothing is run; an engine library that others can write is not
// loaded into srun.
func TestUntrustedFilesRefused(t *testing.T) {
	build(t)
	p := dgxPlan(t, 2, "-")
	copyLauncher := func(t *testing.T, dirMode, mode os.FileMode) string {
		d := filepath.Join(t.TempDir(), "libexec")
		must(t, os.Mkdir(d, 0o755))
		l := filepath.Join(d, "gpubind-launcher")
		must(t, os.WriteFile(l, mustRead(t, bin.launchers["table"]), 0o755))
		must(t, os.Chmod(l, mode))
		must(t, os.Chmod(d, dirMode))
		return l
	}
	worldSnap := filepath.Join(t.TempDir(), "snapshot.txt")
	must(t, os.WriteFile(worldSnap, mustRead(t, p), 0o644))
	must(t, os.Chmod(worldSnap, 0o666))
	l755 := copyLauncher(t, 0o755, 0o755)
	// A link to a good launcher, in a directory others can write.
	linkDir := filepath.Join(t.TempDir(), "links")
	must(t, os.Mkdir(linkDir, 0o755))
	must(t, os.Chmod(linkDir, 0o777))
	link := filepath.Join(linkDir, "gpubind-launcher")
	must(t, os.Symlink(l755, link))
	lOther := copyLauncher(t, 0o755, 0o755)
	must(t, os.Chown(lOther, 65534, 65534))
	cases := []struct {
		name, launcher, snapshot, want string
	}{
		{"world-writable launcher", copyLauncher(t, 0o755, 0o777), p, "is writable by group or others (mode 0777)"},
		{"group-writable launcher", copyLauncher(t, 0o755, 0o775), p, "is writable by group or others (mode 0775)"},
		{"launcher owned by a user", lOther, p, "is owned by uid 65534, not root"},
		{"group-writable directory", copyLauncher(t, 0o775, 0o755), p, "the directory "},
		{"link in a world-writable directory", link, p, "the directory " + linkDir + " of launcher " + link + " is writable by group or others (mode 0777)"},
		{"world-writable snapshot", l755, worldSnap, "snapshot " + worldSnap + " is writable by group or others (mode 0666)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			r := host(t, []string{"-n", "2", "-o", "closest"},
				"launcher="+c.launcher, "snapshot="+c.snapshot, "cache_dir="+dir, "mode=enforce")
			named := c.launcher
			if strings.HasPrefix(c.want, "snapshot") {
				named = c.snapshot
			}
			if !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, named) {
				t.Errorf("stderr lacks %q naming %s:\n%s", c.want, named, r.stderr)
			}
			if got := kv(t, r.lines["tasks ok"]); got["ok"] != 0 {
				t.Errorf("tasks %v: want all failed (mode=enforce)", got)
			}
			if _, err := os.Stat(filepath.Join(dir, "request.txt")); err == nil {
				t.Errorf("the refused launcher ran")
			}
		})
	}
	t.Run("world-writable engine in srun", func(t *testing.T) {
		d := t.TempDir()
		eng := filepath.Join(d, "gpubind_engine.so")
		must(t, os.WriteFile(eng, mustRead(t, filepath.Join(bin.dir, "gpubind_engine.so")), 0o755))
		must(t, os.Chmod(eng, 0o777))
		r := host(t, []string{"-X", "local", "-o", "map:0,1"}, "engine="+eng)
		if want := "engine " + eng + " is writable by group or others (mode 0777)"; !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	})
}
