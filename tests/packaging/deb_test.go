// Package packaging tests the packages `make deb` and `make rpm` build, the man pages and
// the CMake package, with the real tools: dpkg, rpm, man, cmake and a private Slurm
// cluster. The package tests need root (dpkg -i on this machine).
package packaging

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/testbuild"
)

// debPackages are the binary packages of debian/control.
var debPackages = []string{"slurm-spank-gpubind", "gpubind", "libgpuhelper1", "libgpuhelper-dev", "python3-gpubind"}

var (
	debOnce sync.Once
	debDir  string
	debErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range []string{debDir, installDir} {
		if d != "" {
			os.RemoveAll(d)
		}
	}
	os.Exit(code)
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (dpkg -i, private Slurm cluster)")
	}
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// buildDebs runs `make deb` once per test binary, against the system Slurm.
func buildDebs(t *testing.T) map[string]string {
	t.Helper()
	needRoot(t)
	debOnce.Do(func() {
		if debDir, debErr = os.MkdirTemp("", "gpubind-deb-"); debErr != nil {
			return
		}
		debErr = testbuild.Run(testbuild.RepoRoot(), []string{"make", "-s", "deb", "DEB_DIR=" + debDir})
	})
	if debErr != nil {
		t.Fatal(debErr)
	}
	return debFiles(t, debDir)
}

// debFiles maps each package of debPackages to its .deb in dir.
func debFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	for _, p := range debPackages {
		m, _ := filepath.Glob(filepath.Join(dir, p+"_*.deb"))
		if len(m) != 1 {
			t.Fatalf("want one %s_*.deb in %s, found %v", p, dir, m)
		}
		files[p] = m[0]
	}
	return files
}

func debField(t *testing.T, deb, field string) string {
	return strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, field))
}

// debContents lists the paths in a .deb, without the leading ".".
func debContents(t *testing.T, deb string) []string {
	var paths []string
	out := run(t, "sh", "-c", "dpkg-deb --fsys-tarfile \"$1\" | tar -t", "sh", deb)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		p := strings.TrimSuffix(strings.TrimPrefix(l, "."), "/")
		if p != "" {
			paths = append(paths, p)
		}
	}
	return paths
}

// dpkgLocked runs dpkg, waiting up to two minutes while another dpkg or apt holds its lock
// (the machine is shared; dpkg itself does not wait).
func dpkgLocked(args ...string) ([]byte, error) {
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Second) {
		out, err := exec.Command("dpkg", args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "lock") || time.Now().After(deadline) {
			return out, err
		}
	}
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// slurmDebVersion is the Debian version of the package that owns the system spank.h.
func slurmDebVersion(t *testing.T) string {
	owner := run(t, "dpkg-query", "-S", "/usr/include/slurm/spank.h")
	pkg, _, _ := strings.Cut(strings.TrimSpace(owner), ":")
	return strings.TrimSpace(run(t, "dpkg-query", "-W", "-f=${Version}", pkg))
}

// The packages split the files as debian/control says, and the plugin depends on the
// exact Slurm it was built against.
func TestDebContents(t *testing.T) {
	debs := buildDebs(t)
	plugdir := "/usr/lib/x86_64-linux-gnu/slurm-wlm"
	want := map[string][]string{
		"slurm-spank-gpubind": {plugdir + "/spank_gpubind.so", plugdir + "/gpubind_engine.so", "/usr/libexec/gpubind/gpubind-launcher",
			"/etc/slurm/plugstack.conf.d/gpubind.conf", "/usr/share/man/man8/spank-gpubind.8.gz"},
		"gpubind":       {"/usr/bin/gpubind", "/usr/share/man/man1/gpubind.1.gz"},
		"libgpuhelper1": {"/usr/lib/x86_64-linux-gnu/libgpuhelper.so.1"},
		"libgpuhelper-dev": {"/usr/include/gpuhelper.h", "/usr/lib/x86_64-linux-gnu/libgpuhelper.so",
			"/usr/lib/x86_64-linux-gnu/pkgconfig/gpuhelper.pc",
			"/usr/share/man/man3/gpuhelper.3.gz", "/usr/share/man/man3/gpuhelper_init.3.gz",
			"/usr/lib/x86_64-linux-gnu/cmake/gpuhelper/gpuhelperConfig.cmake",
			"/usr/lib/x86_64-linux-gnu/cmake/gpuhelper/gpuhelperConfigVersion.cmake"},
		"python3-gpubind": {"/usr/lib/python3/dist-packages/gpubind/__init__.py", "/usr/lib/python3/dist-packages/gpubind/torch.py",
			"/usr/lib/python3/dist-packages/gpubind/_lib.py", "/usr/lib/python3/dist-packages/gpubind/_netif.py"},
	}
	for pkg, files := range want {
		got := debContents(t, debs[pkg])
		for _, f := range files {
			if !has(got, f) {
				t.Errorf("%s lacks %s; it has:\n%s", pkg, f, strings.Join(got, "\n"))
			}
		}
		// No file in two packages, and nothing of the plugin outside its package.
		for other, ofiles := range want {
			if other == pkg {
				continue
			}
			for _, f := range ofiles {
				if has(got, f) {
					t.Errorf("%s holds %s, which belongs to %s", pkg, f, other)
				}
			}
		}
	}
	dep := debField(t, debs["slurm-spank-gpubind"], "Depends")
	wantDep := "slurm-wlm-basic-plugins (= " + slurmDebVersion(t) + ")"
	if !strings.Contains(dep, wantDep) {
		t.Errorf("slurm-spank-gpubind Depends: %s; want %s", dep, wantDep)
	}
	if rec := debField(t, debs["libgpuhelper1"], "Recommends"); !strings.Contains(rec, "libpmix2") {
		t.Errorf("libgpuhelper1 Recommends: %q; want libpmix2 (dlopen'd at gpuhelper_init)", rec)
	}
	if dep := debField(t, debs["libgpuhelper-dev"], "Depends"); !strings.Contains(dep, "libgpuhelper1 (= ") {
		t.Errorf("libgpuhelper-dev Depends: %s; want libgpuhelper1 (= version)", dep)
	}
	// The snippet is a commented plugin line: installing the package enables nothing.
	conf := run(t, "sh", "-c", "dpkg-deb --fsys-tarfile \"$1\" | tar -xO ./etc/slurm/plugstack.conf.d/gpubind.conf", "sh", debs["slurm-spank-gpubind"])
	if !strings.Contains(conf, "# required "+plugdir+"/spank_gpubind.so") {
		t.Errorf("gpubind.conf lacks the commented plugin line:\n%s", conf)
	}
	for _, l := range strings.Split(conf, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			t.Errorf("gpubind.conf has an active line %q", l)
		}
	}
}

// Install the packages, run a bound step with the plugin from Slurm's own PluginDir, then
// purge them and check that nothing is left.
func TestDebInstallRunPurge(t *testing.T) {
	debs := buildDebs(t)
	args := []string{"-i"}
	for _, p := range debPackages {
		args = append(args, debs[p])
	}
	purged := false
	purge := func() {
		purged = true
		out, err := dpkgLocked(append([]string{"--purge"}, debPackages...)...)
		if err != nil {
			t.Errorf("dpkg --purge: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() {
		if !purged {
			purge()
		}
	})
	if out, err := dpkgLocked(args...); err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}

	files := map[string][]string{}
	for _, p := range debPackages {
		files[p] = strings.Split(strings.TrimSpace(run(t, "dpkg", "-L", p)), "\n")
	}
	var plugin string
	for _, f := range files["slurm-spank-gpubind"] {
		if filepath.Base(f) == "spank_gpubind.so" {
			plugin = f
		}
	}
	if plugin == "" {
		t.Fatalf("dpkg -L slurm-spank-gpubind lists no spank_gpubind.so:\n%s", strings.Join(files["slurm-spank-gpubind"], "\n"))
	}

	// The fixture topology stands in for GPUs; the cluster's fake device nodes for /dev.
	root := filepath.Join(testbuild.RepoRoot(), "tests/fixtures/dgxh100-2cpu")
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	c := cluster.StartT(t, cluster.Config{PlugStack: []string{
		fmt.Sprintf("required %s source=sysfs root=%s cache_dir=%s", plugin, root, cache)}})
	conf, _, err := c.Run(ctx(t, time.Minute), "scontrol", "show", "config")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PluginDir\s*=\s*(\S+)`).FindStringSubmatch(conf)
	if m == nil || m[1] != filepath.Dir(plugin) {
		t.Fatalf("the package put the plugin in %s; Slurm's PluginDir is %v", filepath.Dir(plugin), m)
	}
	out, errOut, err := c.Srun(ctx(t, time.Minute), "-n1", "--gpus=1", "--gpu-bind-topo=verbose", "env")
	if err != nil {
		t.Fatalf("srun: %v\n%s\n%s", err, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^CUDA_VISIBLE_DEVICES=0$`).MatchString(out) {
		t.Errorf("no CUDA_VISIBLE_DEVICES=0 in the task's environment:\n%s", out)
	}
	// GRES 0 is minor 0, the fixture's first GPU in PCI order.
	mapping := regexp.MustCompile(`gpubind: task 0 \(rank 0\): CUDA_VISIBLE_DEVICES=0 -> GPU 0 0000:18:00\.0 GPU-\S+ NUMA 0`)
	if !mapping.MatchString(errOut) {
		t.Errorf("no mapping line for task 0 on srun's stderr:\n%s", errOut)
	}

	// The packaged CLI checks this node as the cluster configures it: the running slurmd,
	// the plugstack line above, gres.conf's fake devices against the fixture's GPUs.
	chk := exec.Command("/usr/bin/gpubind", "check", "--slurm-conf", c.ConfPath, "--node", c.NodeNames[0])
	chk.Env = c.Env()
	out2, err := chk.CombinedOutput()
	t.Logf("gpubind check on the private cluster's node:\n%s", out2)
	if err != nil {
		t.Errorf("gpubind check: %v", err)
	}
	for _, item := range []string{"slurmd", "plugstack", "plugin", "engine", "gres", "cache_dir", "slurm.conf"} {
		if !regexp.MustCompile(`(?m)^ok\s+` + regexp.QuoteMeta(item) + `\s`).Match(out2) {
			t.Errorf("gpubind check: %s is not ok", item)
		}
	}

	// python3-gpubind: Debian's python3 imports it with no PYTHONPATH, it loads the packaged
	// library, and gpubind.init() answers as a singleton outside any launcher.
	t.Run("python", func(t *testing.T) {
		py := exec.Command("/usr/bin/python3", "-c", "import gpubind; i = gpubind.init(); "+
			"print(gpubind.library_version(), i.rank, i.size, gpubind.__file__); "+
			"print([l.split()[-1] for l in open('/proc/self/maps') if 'libgpuhelper' in l][0])")
		py.Env = []string{"PATH=/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE=1"}
		out, err := py.CombinedOutput()
		if err != nil {
			t.Fatalf("python3 -c 'import gpubind; gpubind.init()': %v\n%s", err, out)
		}
		f := strings.Fields(string(out))
		lib, _ := filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libgpuhelper.so.1")
		var got string
		if len(f) == 5 {
			got, _ = filepath.EvalSymlinks(f[4])
		}
		if len(f) != 5 || f[1] != "0" || f[2] != "1" || f[3] != "/usr/lib/python3/dist-packages/gpubind/__init__.py" || got != lib {
			t.Errorf("packaged gpubind: %q; want rank 0 of 1 from /usr/lib/python3/dist-packages with %s", out, lib)
		}
	})

	// libgpuhelper-dev's CMake package, found in the system prefix without any hint.
	t.Run("cmake", func(t *testing.T) {
		if _, err := exec.LookPath("cmake"); err != nil {
			t.Skip("cmake not installed (make deps installs it)")
		}
		bin := filepath.Join(t.TempDir(), "hello")
		run(t, "cmake", "-S", filepath.Join(testbuild.RepoRoot(), "examples"), "-B", bin)
		run(t, "cmake", "--build", bin)
		ldd := run(t, "ldd", filepath.Join(bin, "hello"))
		m := regexp.MustCompile(`libgpuhelper\.so\.1 => (\S+)`).FindStringSubmatch(ldd)
		// /lib is /usr/lib on a merged-/usr system: compare real paths.
		want, _ := filepath.EvalSymlinks("/usr/lib/x86_64-linux-gnu/libgpuhelper.so.1")
		var got string
		if m != nil {
			got, _ = filepath.EvalSymlinks(m[1])
		}
		if want == "" || got != want {
			t.Errorf("hello built with the packaged CMake config loads %q, want the packaged %s:\n%s", got, want, ldd)
		}
	})

	purge()
	for _, p := range debPackages {
		if out, err := exec.Command("dpkg", "-L", p).CombinedOutput(); err == nil {
			t.Errorf("dpkg -L %s still lists files after --purge:\n%s", p, out)
		}
		for _, f := range files[p] {
			if f == "/." { // dpkg's name for the root of each package
				continue
			}
			fi, err := os.Lstat(f)
			if err != nil {
				continue
			}
			// Shared directories (/usr, /etc/slurm/plugstack.conf.d, ...) stay when another
			// package owns them; anything else is a leftover.
			if fi.IsDir() && exec.Command("dpkg-query", "-S", f).Run() == nil {
				continue
			}
			t.Errorf("%s of %s is still there after dpkg --purge", f, p)
		}
	}
}

// A private Slurm (SLURM_PREFIX not owned by a Debian package): the plugin is compiled with
// its headers, lands in its PluginDir, and the package has no Slurm dependency.
func TestDebPrivateSlurm(t *testing.T) {
	needRoot(t)
	prefix := t.TempDir()
	inc := filepath.Join(prefix, "include", "slurm")
	if err := os.MkdirAll(inc, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "sh", "-c", `cp /usr/include/slurm/*.h "$1"`, "sh", inc)
	// A different release number proves which headers the plugin was built with.
	const fake = 0x170b03 // 23.11.3
	run(t, "sed", "-i", fmt.Sprintf(`s/^#define SLURM_VERSION_NUMBER .*/#define SLURM_VERSION_NUMBER 0x%06x/`, fake),
		filepath.Join(inc, "slurm_version.h"))
	out := t.TempDir()
	if err := testbuild.Run(testbuild.RepoRoot(), []string{"make", "-s", "deb", "SLURM_PREFIX=" + prefix, "DEB_DIR=" + out}); err != nil {
		t.Fatal(err)
	}
	debs := debFiles(t, out)
	deb := debs["slurm-spank-gpubind"]
	if dep := debField(t, deb, "Depends"); strings.Contains(dep, "slurm") {
		t.Errorf("built against a private Slurm, Depends: %s names a Slurm package", dep)
	}
	so := filepath.Join(prefix, "lib", "slurm", "spank_gpubind.so")
	if got := debContents(t, deb); !has(got, so) {
		t.Fatalf("plugin not in the private Slurm's PluginDir %s:\n%s", filepath.Dir(so), strings.Join(got, "\n"))
	}
	x := t.TempDir()
	run(t, "dpkg-deb", "-x", deb, x)
	if v := pluginVersion(t, filepath.Join(x, so)); v != fake {
		t.Errorf("plugin_version = %#x, want %#x from %s", v, fake, inc)
	}
}

// pluginVersion reads the plugin_version symbol (SLURM_VERSION_NUMBER) of a SPANK plugin.
func pluginVersion(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	for _, s := range syms {
		if s.Name != "plugin_version" {
			continue
		}
		for _, sec := range f.Sections {
			if sec.Type == elf.SHT_NOBITS || s.Value < sec.Addr || s.Value+4 > sec.Addr+sec.Size {
				continue
			}
			b := make([]byte, 4)
			if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return binary.LittleEndian.Uint32(b)
		}
	}
	t.Fatalf("%s has no plugin_version symbol", path)
	return 0
}
