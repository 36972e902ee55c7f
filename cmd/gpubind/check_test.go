package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/testbuild"
)

// The fixture node: the DGX H100 tree (8 GPUs, minors 0-7), v1 cgroups, a Slurm config
// split over Include/include files, and the plugin built from this tree against the
// system's Slurm headers.
const fixturePluginDir = "/usr/lib/slurm"

var (
	pluginOnce sync.Once
	pluginDir  string
	pluginErr  error
)

func TestMain(m *testing.M) {
	// A test that must run the CLI inside a cgroup re-runs this binary with
	// GPUBIND_TEST_RUN_MAIN=1: it is then the gpubind command (whereami_eperm_test.go).
	if os.Getenv("GPUBIND_TEST_RUN_MAIN") == "1" {
		os.Exit(runTestChild(os.Args[1:]))
	}
	code := m.Run()
	if pluginDir != "" {
		os.RemoveAll(pluginDir)
	}
	os.Exit(code)
}

// builtPlugin builds spank_gpubind.so and gpubind_engine.so once per test binary.
func builtPlugin(t *testing.T) string {
	t.Helper()
	pluginOnce.Do(func() {
		if pluginDir, pluginErr = os.MkdirTemp("", "gpubind-check-plugin-"); pluginErr == nil {
			pluginErr = testbuild.Plugin(pluginDir)
		}
	})
	if pluginErr != nil {
		t.Fatal(pluginErr)
	}
	return pluginDir
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// node is a fixture tree and the command line that checks it.
type node struct {
	root   string
	slurmd string
}

// healthyNode builds a tree where every item is ok. Device nodes need root (mknod).
func healthyNode(t *testing.T) *node {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (mknod of fixture GPU device nodes, root-owned cache dir)")
	}
	slurmd, err := exec.LookPath("slurmd")
	if err != nil {
		t.Skip("slurmd not installed (make deps)")
	}
	plug := builtPlugin(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	fix := filepath.Join(testbuild.RepoRoot(), "tests", "fixtures", "dgxh100-2cpu")
	if out, err := exec.Command("cp", "-a", filepath.Join(fix, "sys"), filepath.Join(fix, "proc"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy fixture: %v\n%s", err, out)
	}
	write(t, filepath.Join(root, "proc/self/mountinfo"),
		"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"+
			"34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"+
			"36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for m := 0; m < 8; m++ {
		mknod(t, filepath.Join(root, "dev", fmt.Sprintf("nvidia%d", m)), m)
	}
	etc := filepath.Join(root, "etc/slurm")
	write(t, filepath.Join(etc, "slurm.d", "gres.conf"), "GresTypes=gpu\n")
	write(t, filepath.Join(etc, "slurm.conf"), "ClusterName=fix\nInclude /etc/slurm/slurm.d/*.conf\nTaskPlugin=task/cgroup,task/affinity\n"+
		"PluginDir="+fixturePluginDir+"\nPlugStackConfig=/etc/slurm/plugstack.conf\n"+
		"NodeName=node1 CPUs=2 Gres=gpu:8\n")
	write(t, filepath.Join(etc, "cgroup.conf"), "ConstrainDevices=yes\n")
	write(t, filepath.Join(etc, "gres.conf"), "Name=gpu File=/dev/nvidia[0-3]\nInclude gres.d/*.conf\n")
	write(t, filepath.Join(etc, "gres.d/rest.conf"), "NodeName=node1 Name=gpu File=/dev/nvidia[4-7]\n")
	write(t, filepath.Join(etc, "plugstack.conf"), "include /etc/slurm/plugstack.conf.d/*.conf\n")
	setPlugstack(t, root, "required "+fixturePluginDir+"/spank_gpubind.so mode=enforce default=off cache_dir=/run/gpubind")
	for _, f := range []string{"spank_gpubind.so", "gpubind_engine.so"} {
		if out, err := exec.Command("install", "-D", "-m", "0755", filepath.Join(plug, f), filepath.Join(root, fixturePluginDir, f)).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// The launcher where the plugin was built to find it (testbuild: next to it).
	l := filepath.Join(plug, testbuild.LauncherName)
	if out, err := exec.Command("install", "-D", "-m", "0755", l, filepath.Join(root, l)).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := os.MkdirAll(filepath.Join(root, "run/gpubind"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &node{root: root, slurmd: slurmd}
}

func mknod(t *testing.T, path string, minor int) {
	t.Helper()
	if err := syscall.Mknod(path, syscall.S_IFCHR|0o666, 195<<8|minor); err != nil {
		t.Fatalf("mknod %s: %v", path, err)
	}
}

func setPlugstack(t *testing.T, root string, lines ...string) {
	t.Helper()
	write(t, filepath.Join(root, "etc/slurm/plugstack.conf.d/gpubind.conf"), "# gpubind\n"+strings.Join(lines, "\n")+"\n")
}

// check runs `gpubind check --json` on the tree and returns the exit status and the items.
func (n *node) check(t *testing.T, extra ...string) (int, map[string]checkItem) {
	t.Helper()
	rc, out, errOut := cli(append([]string{"check", "--json", "--root", n.root, "--node", "node1", "--slurmd", n.slurmd}, extra...)...)
	var res struct {
		Items  []checkItem `json:"items"`
		Failed []string    `json:"failed"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("check --json (rc %d): %v\n%s\n%s", rc, err, out, errOut)
	}
	items := map[string]checkItem{}
	for _, it := range res.Items {
		items[it.Name] = it
	}
	if rc != 0 && !strings.Contains(errOut, "failed: "+strings.Join(res.Failed, ", ")) {
		t.Errorf("rc %d, stderr does not name the failed items %v: %s", rc, res.Failed, errOut)
	}
	return rc, items
}

var checkNames = []string{"slurmd", "plugstack", "plugin", "engine", "launcher", "gres", "nvml", "fabric", "imex", "cache_dir", "cgroup", "slurm.conf"}

// expect checks that item want has status, with a reason matching re, and that every
// other item is ok: one fault, reported by its own name.
func expect(t *testing.T, rc int, items map[string]checkItem, want, status, re string) {
	t.Helper()
	for _, name := range checkNames {
		it, ok := items[name]
		if !ok {
			t.Errorf("no item %q in %v", name, items)
			continue
		}
		if name == want {
			if it.Status != status || !regexp.MustCompile(re).MatchString(it.Reason) {
				t.Errorf("%s: %s %q, want %s matching %q", name, it.Status, it.Reason, status, re)
			}
		} else if it.Status != statusOK {
			t.Errorf("%s: %s %q, want ok (the only fault is in %s)", name, it.Status, it.Reason, want)
		}
	}
	wantRC := 0
	if status == statusFail {
		wantRC = 1
	}
	if rc != wantRC {
		t.Errorf("exit status %d, want %d", rc, wantRC)
	}
}

func TestCheckHealthyNode(t *testing.T) {
	n := healthyNode(t)
	rc, items := n.check(t)
	expect(t, rc, items, "gres", statusOK, `gres.conf: 8 GPUs, minors 0,1,2,3,4,5,6,7 in GRES order`)
	if r := items["plugin"].Reason; !strings.Contains(r, "built for Slurm 22.05") {
		t.Errorf("plugin: %q does not name the Slurm release", r)
	}
	// The text form: one line per item, status first.
	rc, out, _ := cli("check", "--root", n.root, "--node", "node1", "--slurmd", n.slurmd)
	t.Logf("gpubind check on the healthy fixture:\n%s", out)
	if rc != 0 || len(strings.Split(strings.TrimSpace(out), "\n")) != len(checkNames) || !strings.HasPrefix(out, "ok ") {
		t.Errorf("text output (rc %d):\n%s", rc, out)
	}
}

func TestCheckPluginBuiltForAnotherSlurm(t *testing.T) {
	n := healthyNode(t)
	fake := filepath.Join(t.TempDir(), "slurmd")
	write(t, fake, "#!/bin/sh\necho slurm 23.02.7\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	n.slurmd = fake
	rc, items := n.check(t)
	// slurmd itself is fine; the plugin does not match it.
	expect(t, rc, items, "plugin", statusFail, `built for Slurm 22\.05\.\d+, slurmd runs 23\.02: .*rebuild`)
}

func TestCheckEngineMissing(t *testing.T) {
	n := healthyNode(t)
	if err := os.Remove(filepath.Join(n.root, fixturePluginDir, "gpubind_engine.so")); err != nil {
		t.Fatal(err)
	}
	rc, items := n.check(t)
	expect(t, rc, items, "engine", statusFail, `gpubind_engine\.so: no such file`)
}

// The launcher: found where the plugin was built to look, and refused, by name, when it is
// missing or others can write it or the engine.
func TestCheckLauncher(t *testing.T) {
	l := filepath.Join(builtPlugin(t), testbuild.LauncherName)
	t.Run("missing", func(t *testing.T) {
		n := healthyNode(t)
		if err := os.Remove(filepath.Join(n.root, l)); err != nil {
			t.Fatal(err)
		}
		rc, items := n.check(t)
		expect(t, rc, items, "launcher", statusFail, `launcher .*/gpubind-launcher: no such file .*/usr/libexec/gpubind`)
	})
	t.Run("world-writable", func(t *testing.T) {
		n := healthyNode(t)
		if err := os.Chmod(filepath.Join(n.root, l), 0o777); err != nil {
			t.Fatal(err)
		}
		rc, items := n.check(t)
		expect(t, rc, items, "launcher", statusFail, `launcher .*/gpubind-launcher is writable by group or others \(mode 0777\)`)
	})
	t.Run("group-writable engine", func(t *testing.T) {
		n := healthyNode(t)
		if err := os.Chmod(filepath.Join(n.root, fixturePluginDir, "gpubind_engine.so"), 0o775); err != nil {
			t.Fatal(err)
		}
		rc, items := n.check(t)
		expect(t, rc, items, "launcher", statusFail, `engine .*gpubind_engine\.so is writable by group or others \(mode 0775\)`)
	})
	// The walk from /, as slurmstepd's (spank/frontend/trust.c): a directory above the
	// launcher that another account owns is named (issue 34).
	t.Run("directory of another account above", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory to another account")
		}
		n := healthyNode(t)
		above := filepath.Dir(filepath.Dir(filepath.Join(n.root, l)))
		if err := os.Chown(above, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		rc, items := n.check(t)
		expect(t, rc, items, "launcher", statusFail, `the directory `+regexp.QuoteMeta(above)+` of launcher .*/gpubind-launcher is owned by uid 65534, not root`)
	})
	// Issue 33: a launcher that failed in slurmstepd is remembered for a minute, and
	// check names it and the cause.
	t.Run("remembered failure", func(t *testing.T) {
		n := healthyNode(t)
		memo := filepath.Join(n.root, "run/gpubind/launcher-failed")
		if err := os.WriteFile(memo, []byte("/usr/libexec/gpubind/gpubind-launcher\tengine did not finish within 500 ms\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		rc, items := n.check(t)
		expect(t, rc, items, "launcher", statusFail, `the launcher /usr/libexec/gpubind/gpubind-launcher failed .* ago on this node: engine did not finish within 500 ms; steps that only default= binds run as Slurm set them up`)
	})
	t.Run("launcher=", func(t *testing.T) {
		n := healthyNode(t)
		setPlugstack(t, n.root, "required "+fixturePluginDir+"/spank_gpubind.so mode=enforce default=off cache_dir=/run/gpubind launcher=/opt/gb/launcher")
		rc, items := n.check(t)
		expect(t, rc, items, "launcher", statusFail, `launcher .*/opt/gb/launcher: no such file`)
	})
}

func TestCheckBadPlugstackArgument(t *testing.T) {
	n := healthyNode(t)
	setPlugstack(t, n.root, "required "+fixturePluginDir+"/spank_gpubind.so mode=maybe")
	rc, items := n.check(t)
	// The plugin's own message, from its own parser.
	expect(t, rc, items, "plugstack", statusFail, `gpubind\.conf line 2: plugstack argument mode=maybe: expected enforce or optional`)
}

// Issue 23: Slurm ignores the failures of a plugin marked optional (spank.c), which voids
// mode=enforce and isolate=force: check says so.
func TestCheckOptionalVoidsEnforce(t *testing.T) {
	n := healthyNode(t)
	for _, c := range []struct{ args, status, re string }{
		{"", statusWarn, `marked optional.*mode=enforce \(the default\).*mark the line required`},
		{"mode=optional isolate=force", statusWarn, `marked optional.*: isolate=force cannot`},
		{"mode=optional", statusOK, `spank_gpubind\.so mode=optional`},
	} {
		setPlugstack(t, n.root, "optional "+fixturePluginDir+"/spank_gpubind.so "+c.args)
		rc, items := n.check(t)
		expect(t, rc, items, "plugstack", c.status, c.re)
	}
}

func TestCheckBadDefaultOption(t *testing.T) {
	n := healthyNode(t)
	setPlugstack(t, n.root, "required "+fixturePluginDir+"/spank_gpubind.so default=closets")
	rc, items := n.check(t)
	expect(t, rc, items, "plugstack", statusFail, `default=closets: .*closets`)
}

func TestCheckPluginLoadedTwice(t *testing.T) {
	n := healthyNode(t)
	write(t, filepath.Join(n.root, "etc/slurm/plugstack.conf"), "include /etc/slurm/plugstack.conf.d/*.conf\n"+
		"optional "+fixturePluginDir+"/spank_gpubind.so\n")
	rc, items := n.check(t)
	expect(t, rc, items, "plugstack", statusFail, `loaded 2 times`)
}

func TestCheckGresDeviceMissing(t *testing.T) {
	n := healthyNode(t)
	if err := os.Remove(filepath.Join(n.root, "dev/nvidia5")); err != nil {
		t.Fatal(err)
	}
	rc, items := n.check(t)
	expect(t, rc, items, "gres", statusFail, `GRES index 5: GPU device .*/dev/nvidia5: .*no such file`)
}

// A File= in an included file whose minor is not one of the driver's GPUs.
func TestCheckGresMinorNotADriverGPU(t *testing.T) {
	n := healthyNode(t)
	mknod(t, filepath.Join(n.root, "dev/nvidia9"), 9)
	write(t, filepath.Join(n.root, "etc/slurm/gres.d/rest.conf"), "NodeName=node1 Name=gpu File=/dev/nvidia[4-6],/dev/nvidia9\n")
	rc, items := n.check(t)
	expect(t, rc, items, "gres", statusFail, `GRES index 7: File=/dev/nvidia9 is minor 9, not a GPU of the driver \(minors 0,1,2,3,4,5,6,7\)`)
}

func TestCheckCacheDirWorldWritable(t *testing.T) {
	n := healthyNode(t)
	if err := os.Chmod(filepath.Join(n.root, "run/gpubind"), 0o777); err != nil {
		t.Fatal(err)
	}
	rc, items := n.check(t)
	expect(t, rc, items, "cache_dir", statusFail, `group or world writable \(mode -rwxrwxrwx\)`)
}

func TestCheckCacheDirNotRootOwned(t *testing.T) {
	n := healthyNode(t)
	if err := os.Chown(filepath.Join(n.root, "run/gpubind"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	rc, items := n.check(t)
	expect(t, rc, items, "cache_dir", statusFail, `owned by uid 65534, not root`)
}

func TestCheckIsolateForcedWithoutCgroups(t *testing.T) {
	n := healthyNode(t)
	write(t, filepath.Join(n.root, "proc/self/mountinfo"), "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n")
	setPlugstack(t, n.root, "required "+fixturePluginDir+"/spank_gpubind.so isolate=force cpus=never")
	rc, items := n.check(t)
	expect(t, rc, items, "cgroup", statusFail, `^isolate cannot work: cgroup: neither a cgroup v1 devices hierarchy nor cgroup2 is mounted \(.*/proc/self/mountinfo\)$`)
}

// The cgroup item asks the plugin's own probe (gpubind_check_cgroup), so it refuses where a
// step would: a v1 devices hierarchy co-mounted with freezer (proctrack/cgroup finds the
// step's tasks there) makes isolate refuse, which a mountinfo reader of its own called fine.
func TestCheckCgroupCoMountedRefused(t *testing.T) {
	n := healthyNode(t)
	write(t, filepath.Join(n.root, "proc/self/mountinfo"), "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"+
		"34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"+
		"36 31 0:33 / /sys/fs/cgroup/devices,freezer rw,relatime - cgroup cgroup rw,devices,freezer\n")
	rc, items := n.check(t)
	expect(t, rc, items, "cgroup", statusWarn, `isolate cannot work: isolate: the cgroup v1 devices hierarchy at /sys/fs/cgroup/devices,freezer is co-mounted with freezer`)
	// Forced, the step would fail: so does the check.
	setPlugstack(t, n.root, "required "+fixturePluginDir+"/spank_gpubind.so isolate=force")
	rc, items = n.check(t)
	expect(t, rc, items, "cgroup", statusFail, `isolate cannot work: .*co-mounted with freezer`)
}

// The plugin uses the first mount of a hierarchy in mountinfo, and per flag the version
// Slurm's cgroup/v1 would: isolate on cgroup v2 where only cpuset is a v1 hierarchy.
func TestCheckCgroupAsThePluginChooses(t *testing.T) {
	n := healthyNode(t)
	write(t, filepath.Join(n.root, "proc/self/mountinfo"), "31 23 0:28 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"+
		"32 23 0:29 / /mnt/other rw,relatime - cgroup2 cgroup2 rw\n")
	rc, items := n.check(t)
	expect(t, rc, items, "cgroup", statusOK, `^cgroup v2 at /sys/fs/cgroup \(BPF device programs\): isolate and cpus can work$`)
	write(t, filepath.Join(n.root, "proc/self/mountinfo"), "31 23 0:28 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"+
		"34 23 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n")
	rc, items = n.check(t)
	expect(t, rc, items, "cgroup", statusOK, `^isolate: cgroup v2 at /sys/fs/cgroup/unified \(BPF device programs\); cpus: cgroup v1 \(devices at -, cpuset at /sys/fs/cgroup/cpuset\): isolate and cpus can work$`)
}

func TestCheckNoGPUGresType(t *testing.T) {
	n := healthyNode(t)
	// In the file slurm.conf includes.
	write(t, filepath.Join(n.root, "etc/slurm/slurm.d/gres.conf"), "GresTypes=mps\n")
	rc, items := n.check(t)
	expect(t, rc, items, "slurm.conf", statusFail, `GresTypes="mps" has no gpu`)
}

// A warning alone does not fail the check.
func TestCheckConstrainDevicesWithoutTaskCgroup(t *testing.T) {
	n := healthyNode(t)
	conf := filepath.Join(n.root, "etc/slurm/slurm.conf")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	write(t, conf, strings.Replace(string(b), "TaskPlugin=task/cgroup,task/affinity", "TaskPlugin=task/affinity", 1))
	rc, items := n.check(t)
	expect(t, rc, items, "slurm.conf", statusWarn, `ConstrainDevices=yes but TaskPlugin="task/affinity" has no task/cgroup`)
}

func TestCheckBadCommandLine(t *testing.T) {
	if rc, _, errOut := cli("check", "--root", "/nonexistent/tree"); rc != 2 || !strings.Contains(errOut, `--root "/nonexistent/tree": not a directory`) {
		t.Errorf("rc %d, stderr %q", rc, errOut)
	}
	if rc, _, errOut := cli("check", "extra"); rc != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("rc %d, stderr %q", rc, errOut)
	}
}

// NVML and sysfs: a mock NVML of the fixture agrees; with two GPUs' minors swapped in NVML's
// view the item fails and names both.
func TestCheckNVMLDisagreesWithSysfs(t *testing.T) {
	n := healthyNode(t)
	snap, err := gpubind.LoadSnapshot(filepath.Join(testbuild.RepoRoot(), "tests", "fixtures", "dgxh100-2cpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { checkNVMLLib = nil })
	checkNVMLLib = nvmlmock.New(snap)
	rc, items := n.check(t)
	expect(t, rc, items, "nvml", statusOK, `NVML and sysfs agree on 8 GPUs`)

	snap.GPUs[0].Minor, snap.GPUs[1].Minor = snap.GPUs[1].Minor, snap.GPUs[0].Minor
	checkNVMLLib = nvmlmock.New(snap)
	rc, items = n.check(t)
	expect(t, rc, items, "nvml", statusFail, `0000:18:00\.0: minor 1 \(NVML\) vs 0 \(sysfs\); 0000:2a:00\.0: minor 0 \(NVML\) vs 1 \(sysfs\)`)
}
