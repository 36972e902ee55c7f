package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/fixtures"
	"github.com/gpubind/gpubind/tests/tabletext"
)

func TestParseRequest(t *testing.T) {
	r, err := parseRequest("option=closest,verbose\nmode=optional\nlocal_tasks=2\nglobal_ids=4,5\nenv.SLURM_STEP_GPUS=0,1\nenv.HOME=/x\nfuture_key=1\nuid=1000\ngid=100\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.Option != "closest,verbose" || r.Mode != gpubind.ModeOptional || r.LocalTasks != 2 || len(r.GlobalIDs) != 2 || r.GlobalIDs[1] != 5 {
		t.Fatalf("bad parse: %+v", r)
	}
	if r.Env["SLURM_STEP_GPUS"] != "0,1" || r.Env["HOME"] != "" || r.UID != 1000 || r.GID != 100 {
		t.Fatalf("bad env/ids: %+v", r)
	}
	for _, bad := range []struct{ req, want string }{
		{"local_tasks=1\nlocal_tasks=2", "given twice"},
		{"local_tasks=x", `local_tasks="x"`},
		{"option=a", "no local_tasks"},
		{"local_tasks=2\nglobal_ids=1", "global_ids has 1 entries"},
		{"local_tasks=1\nuid=5", "uid without gid"},
		{"local_tasks=1\nmode=lax", `mode="lax"`},
		{"local_tasks=1\njunk", "want KEY=VALUE"},
		{"local_tasks=-3", "local_tasks"},
	} {
		if _, err := parseRequest(bad.req); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseRequest(%q) = %v, want error containing %q", bad.req, err, bad.want)
		}
	}
}

// setup copies a fixture tree into a temp dir and points the boot id at a temp file.
func setup(t *testing.T, fixture string) (root, cacheDir string) {
	t.Helper()
	dir := t.TempDir()
	gres := filepath.Join(dir, "gres.conf")
	if err := os.WriteFile(gres, []byte("AutoDetect=nvml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gresConf = gres
	root = filepath.Join(dir, "root")
	if out, err := exec.Command("cp", "-a", fixtures.Root(fixture), root).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	boot := filepath.Join(dir, "boot_id")
	if err := os.WriteFile(boot, []byte("11111111-2222-3333-4444-555555555555\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := bootIDPath
	bootIDPath = boot
	t.Cleanup(func() { bootIDPath = old })
	return root, filepath.Join(dir, "cache")
}

func run(t *testing.T, req string) (*gpubind.Table, error) {
	t.Helper()
	var buf bytes.Buffer
	err := handle(req, &buf)
	tab, perr := tabletext.Parse(&buf)
	if perr != nil {
		t.Fatalf("engine wrote a bad table (%v):\n%s", perr, buf.String())
	}
	return tab, err
}

func TestRunCacheWarmAndCold(t *testing.T) {
	root, cache := setup(t, "dgxh100")
	req := "option=closest\nsource=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\nlocal_tasks=2\nenv.SLURM_STEP_GPUS=0,5\n"
	tab, err := run(t, req)
	if err != nil || tab.Status != gpubind.StatusOK {
		t.Fatalf("cold run: %v %+v", err, tab)
	}
	if len(tab.GPUs) != 2 || tab.GPUs[0].BusID != "0000:18:00.0" || tab.GPUs[1].BusID != "0000:ab:00.0" {
		t.Fatalf("cold run GPUs: %+v", tab.GPUs)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "topo-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files: %v", files)
	}
	fi, _ := os.Stat(files[0])
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("cache file mode %v, want 0644", fi.Mode().Perm())
	}
	if di, _ := os.Stat(cache); di.Mode().Perm() != 0o755 {
		t.Errorf("cache dir mode %v, want 0755", di.Mode().Perm())
	}
	// Warm: the sysfs tree is gone, only the driver version stays; the cache answers.
	if err := os.RemoveAll(filepath.Join(root, "sys")); err != nil {
		t.Fatal(err)
	}
	tab2, err := run(t, req)
	if err != nil || tab2.String() != tab.String() {
		t.Fatalf("warm run differs: %v\n%s\nvs\n%s", err, tab2, tab)
	}
	// A new boot invalidates: discovery runs again and fails without sysfs.
	if err := os.WriteFile(bootIDPath, []byte("99999999-2222-3333-4444-555555555555\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tab3, err := run(t, req); err == nil || tab3.Status != gpubind.StatusError {
		t.Fatalf("after a reboot the stale cache was used: %v %s", err, tab3)
	}
}

// invalidatedBy warms the cache, removes the sysfs tree so that only the cache can answer,
// applies change to the fixture root, and requires the next run to discover again (and so
// fail without sysfs).
func invalidatedBy(t *testing.T, what string, change func(root string) error) {
	t.Helper()
	root, cache := setup(t, "pcie4")
	req := "source=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\nlocal_tasks=1\nenv.SLURM_STEP_GPUS=0\n"
	if _, err := run(t, req); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(root, "sys"))
	if _, err := run(t, req); err != nil {
		t.Fatalf("warm: %v", err)
	}
	if err := change(root); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, req); err == nil {
		t.Fatalf("%s did not invalidate the cache", what)
	}
}

func TestCacheInvalidatedByDriver(t *testing.T) {
	invalidatedBy(t, "a new driver version", func(root string) error {
		return os.WriteFile(filepath.Join(root, "proc/driver/nvidia/version"),
			[]byte("NVRM version: NVIDIA UNIX x86_64 Kernel Module  560.1.2  x\n"), 0o644)
	})
}

func TestCacheRefusesInsecureFiles(t *testing.T) {
	root, cache := setup(t, "vm1")
	req := "source=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\nlocal_tasks=1\n"
	if _, err := run(t, req); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "topo-*.json"))
	if len(files) != 1 {
		t.Fatalf("cache files %v", files)
	}
	// A group/world-writable cache file is not trusted: discovery runs again (and the
	// rewritten file is 0644 again).
	os.Chmod(files[0], 0o666)
	tab, err := run(t, req)
	if err != nil || !strings.Contains(strings.Join(tab.Messages, "|"), "writable by group or others") {
		t.Fatalf("insecure cache file accepted: %v %q", err, tab.Messages)
	}
	if fi, _ := os.Stat(files[0]); fi.Mode().Perm() != 0o644 {
		t.Errorf("cache file not rewritten: %v", fi.Mode().Perm())
	}
	// A tampered file with the right mode but a different key is stale.
	os.WriteFile(files[0], []byte(`{"key":"other","topology":{"version":1,"gpus":[],"numa":[]}}`), 0o644)
	tab, err = run(t, req)
	if err != nil || !strings.Contains(strings.Join(tab.Messages, "|"), "stale") || len(tab.GPUs) != 1 {
		t.Fatalf("stale cache accepted: %v %q", err, tab.Messages)
	}
	// A cache file owned by someone else is not trusted either (root only: chown).
	if os.Geteuid() == 0 {
		os.Chown(files[0], 65534, 65534)
		tab, err = run(t, req)
		if err != nil || !strings.Contains(strings.Join(tab.Messages, "|"), "owned by uid 65534") {
			t.Fatalf("foreign cache file accepted: %v %q", err, tab.Messages)
		}
		if fi, _ := os.Stat(files[0]); fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("cache file not replaced by a root-owned one")
		}
	}
	// A world-writable cache directory is not used at all.
	os.Chmod(cache, 0o777)
	tab, err = run(t, req)
	if err != nil || !strings.Contains(strings.Join(tab.Messages, "|"), "cache not used") {
		t.Fatalf("insecure cache dir used: %v %q", err, tab.Messages)
	}
}

func TestErrorTables(t *testing.T) {
	root, cache := setup(t, "dgxh100")
	base := "source=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\n"
	for _, c := range []struct{ req, want string }{
		{base + "option=closest,bogus\nlocal_tasks=1", `"bogus"`},
		{base + "option=map:0,9\nlocal_tasks=2\nenv.SLURM_STEP_GPUS=0,1", `map entry "9"`},
		{base + "option=per-task:2\nlocal_tasks=2\nenv.SLURM_STEP_GPUS=0,1", "needs 4 GPUs"},
		{base + "local_tasks=1\nenv.SLURM_STEP_GPUS=0,x", `"x" is not a GPU index`},
		{base + "local_tasks=1\nenv.SLURM_STEP_GPUS=12", "GPU 12"},
		{base + "local_tasks=1\nenv.CUDA_VISIBLE_DEVICES=GPU-nope", "GPU-nope"},
		{base + "local_tasks=1\nforce=turbo", `"turbo" is not a flag`},
		{"source=nope\nlocal_tasks=1\ncache_dir=" + cache, `source "nope"`},
		{"source=snapshot\nsnapshot=/nonexistent.json\nlocal_tasks=1", "nonexistent"},
		{"local_tasks=1\nmode=optional\nlocal_tasks=1", "given twice"},
	} {
		tab, err := run(t, c.req)
		if err == nil || tab.Status != gpubind.StatusError || !strings.Contains(strings.Join(tab.Messages, "|"), c.want) {
			t.Errorf("request %q: err %v, table %q, want an error table naming %q", c.req, err, tab.Messages, c.want)
		}
	}
	// The table has no mode line: the plugstack's mode alone decides (issue 35), for error
	// tables too.
	for _, req := range []string{base + "option=zzz\nmode=optional\nlocal_tasks=1", "local_tasks=x\nmode=optional", base + "option=closest\nlocal_tasks=1"} {
		var buf bytes.Buffer
		_ = handle(req, &buf)
		if strings.Contains(buf.String(), "\nmode ") {
			t.Errorf("request %q: the table has a mode line:\n%s", req, buf.String())
		}
	}
}

func TestGresMappingNeedsConf(t *testing.T) {
	root, cache := setup(t, "dgxh100")
	req := "source=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\nlocal_tasks=1\nenv.SLURM_STEP_GPUS=3\nenv.SLURM_CONF=/nonexistent/slurm.conf\n"
	if tab, err := run(t, req); err == nil || !strings.Contains(tab.Messages[0], "no gres.conf") {
		t.Fatalf("enforce mode guessed the GRES map: %v %q", err, tab.Messages)
	}
	tab, err := run(t, req+"mode=optional\n")
	if err != nil || tab.Status != gpubind.StatusWarn || tab.GPUs[0].NVMLIndex != 3 {
		t.Fatalf("optional mode: %v %+v", err, tab)
	}
}

func TestRunToFDAndCheck(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rc := runToFD("local_tasks=oops", fdWriter(w.Fd()))
	w.Close()
	tab, perr := tabletext.Parse(r)
	if rc != -1 || perr != nil || tab.Status != gpubind.StatusError {
		t.Fatalf("rc %d parse %v tab %+v", rc, perr, tab)
	}
	if err := checkOption("map:0,1*3,nic"); err != nil {
		t.Error(err)
	}
	if err := checkOption("spread,pack"); err == nil || !strings.Contains(err.Error(), `"pack"`) {
		t.Errorf("CheckOption accepted two policies: %v", err)
	}
}

// gresConf is the AutoDetect=nvml gres.conf written by the last setup.
var gresConf string

// TestNVMLOncePerBoot: with the NVML mock as the library, the first run discovers
// (NVML Init called) and later runs of the same boot read only the cache.
func TestNVMLOncePerBoot(t *testing.T) {
	_, cache := setup(t, "vm1")
	snap, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgxh100"))
	if err != nil {
		t.Fatal(err)
	}
	lib := nvmlmock.New(snap)
	inits := 0
	lib.InitFunc = func() nvml.Return { inits++; return nvml.SUCCESS }
	nvmlLib = lib
	defer func() { nvmlLib = nil }()
	req := "source=nvml\ncache_dir=" + cache + "\ngres_conf=" + gresConf + "\nlocal_tasks=2\nenv.SLURM_STEP_GPUS=1,6\noption=pack\n"
	for i := 0; i < 3; i++ {
		tab, err := run(t, req)
		if err != nil || len(tab.GPUs) != 2 || tab.GPUs[1].BusID != "0000:ba:00.0" || tab.GPUs[0].UUID != snap.GPUs[1].UUID {
			t.Fatalf("run %d: %v %+v", i, err, tab)
		}
	}
	if inits != 1 {
		t.Errorf("NVML Init called %d times over 3 runs, want 1", inits)
	}
}

// MIG repartitioning without a reboot changes the instances the driver lists under
// /proc/driver/nvidia/capabilities; a cached topology from before must not be used.
func TestCacheInvalidatedByMIGLayout(t *testing.T) {
	invalidatedBy(t, "a new MIG layout", func(root string) error {
		return os.MkdirAll(filepath.Join(root, "proc/driver/nvidia/capabilities/gpu0/mig/gi1/ci0"), 0o755)
	})
}

// TestPlanAsNode: with the step's SLURM_CONF the engine reads slurm.conf (with its
// includes), cgroup.conf and the node's gres.conf lines through gpubind.LoadNodeConf and
// writes the table that `gpubind plan --slurm-conf` prints for the same node
// (gpubind/testdata/nodeconf/table.golden, compared by cmd/gpubind's TestPlanAsNode too).
// TaskPlugin sits in an included file: relative numbering (CUDA_VISIBLE_DEVICES 0,1).
func TestPlanAsNode(t *testing.T) {
	root, cache := setup(t, "dgxh100")
	conf, err := filepath.Abs("../../gpubind/testdata/nodeconf")
	if err != nil {
		t.Fatal(err)
	}
	req := "source=sysfs\nroot=" + root + "\ncache_dir=" + cache + "\noption=closest\nnode_name=node1\n" +
		"local_tasks=2\nenv.SLURM_STEP_GPUS=3,6\nenv.SLURM_CONF=" + filepath.Join(conf, "slurm.conf") + "\n"
	var got bytes.Buffer
	if err := handle(req, &got); err != nil {
		t.Fatalf("%v\n%s", err, got.String())
	}
	want, err := os.ReadFile(filepath.Join(conf, "table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	// The engine also names the files it read, for the plan cache; gpubind plan does not.
	var lines, deps []string
	for _, l := range strings.Split(strings.TrimSuffix(got.String(), "\n"), "\n") {
		if d, ok := strings.CutPrefix(l, "depends "); ok {
			deps = append(deps, strings.TrimPrefix(d, conf+"/"))
		} else if !strings.HasPrefix(l, "end ") {
			lines = append(lines, l)
		}
	}
	plan := strings.Join(lines, "\n") + fmt.Sprintf("\nend %d\n", len(lines))
	if plan != string(want) {
		t.Errorf("engine table differs from gpubind plan's (%s):\n--- want\n%s--- got\n%s", "table.golden", want, got.String())
	}
	if wantDeps := []string{"slurm.conf", "cgroup.conf", "slurm.d/task.conf", "gres.conf", "gres.d/node1.conf"}; !slices.Equal(deps, wantDeps) {
		t.Errorf("depends %q, want %q", deps, wantDeps)
	}
}
