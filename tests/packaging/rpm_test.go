package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// rpmPackages are the packages of packaging/gpubind.spec.
var rpmPackages = []string{"slurm-spank-gpubind", "gpubind", "libgpuhelper1", "libgpuhelper-devel", "python3-gpubind"}

// systemSlurm reads SLURM_VERSION_NUMBER of the system headers: the number and "22.05.8".
func systemSlurm(t *testing.T) (uint32, string) {
	t.Helper()
	b, err := os.ReadFile("/usr/include/slurm/slurm_version.h")
	if err != nil {
		t.Skip("no Slurm headers (libslurm-dev)")
	}
	m := regexp.MustCompile(`(?m)^#define SLURM_VERSION_NUMBER (0x[0-9a-fA-F]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("slurm_version.h has no SLURM_VERSION_NUMBER")
	}
	v, err := strconv.ParseUint(string(m[1]), 0, 32)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v), strconv.Itoa(int(v>>16&0xff)) + "." + pad2(int(v>>8&0xff)) + "." + strconv.Itoa(int(v&0xff))
}

func pad2(n int) string {
	if n < 10 {
		return "0" + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}

// `make rpm` against the system Slurm: each package's files, requirements and config files,
// and the payload extracted with rpm2cpio.
func TestRPM(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("rpmbuild"); err != nil {
		t.Skip("rpmbuild not installed (make deps installs rpm)")
	}
	slurmNum, slurmVer := systemSlurm(t)
	dir := t.TempDir()
	if err := testbuild.Run(testbuild.RepoRoot(), []string{"make", "-s", "rpm", "RPM_DIR=" + dir}); err != nil {
		t.Fatal(err)
	}
	rpms := map[string]string{}
	for _, p := range rpmPackages {
		m, _ := filepath.Glob(filepath.Join(dir, "RPMS", "*", p+"-1.0.0-*.rpm"))
		if len(m) != 1 {
			t.Fatalf("want one %s rpm, found %v", p, m)
		}
		rpms[p] = m[0]
	}
	libdir := strings.TrimSpace(run(t, "rpm", "--eval", "%{_libdir}"))
	plugdir := libdir + "/slurm"
	want := map[string][]string{
		"slurm-spank-gpubind": {plugdir + "/spank_gpubind.so", plugdir + "/gpubind_engine.so", "/usr/libexec/gpubind/gpubind-launcher",
			"/etc/slurm/plugstack.conf.d/gpubind.conf", "/usr/share/man/man8/spank-gpubind.8"},
		"gpubind":       {"/usr/bin/gpubind", "/usr/share/man/man1/gpubind.1"},
		"libgpuhelper1": {libdir + "/libgpuhelper.so.1"},
		"libgpuhelper-devel": {"/usr/include/gpuhelper.h", libdir + "/libgpuhelper.so", libdir + "/pkgconfig/gpuhelper.pc",
			libdir + "/cmake/gpuhelper/gpuhelperConfig.cmake", libdir + "/cmake/gpuhelper/gpuhelperConfigVersion.cmake",
			"/usr/share/man/man3/gpuhelper.3", "/usr/share/man/man3/gpuhelper_init.3"},
	}
	for p, files := range want {
		// Man pages may be compressed by the distribution's brp scripts.
		list := run(t, "rpm", "-qlp", rpms[p])
		got := strings.Split(regexp.MustCompile(`(?m)\.(gz|bz2|xz)$`).ReplaceAllString(list, ""), "\n")
		for _, f := range files {
			if !has(got, f) {
				t.Errorf("%s lacks %s; it has:\n%s", p, f, list)
			}
		}
		for other, ofiles := range want {
			for _, f := range ofiles {
				if other != p && has(got, f) {
					t.Errorf("%s holds %s, which belongs to %s", p, f, other)
				}
			}
		}
	}
	// python3-gpubind: the package in the distribution's python3 sitelib, noarch, needing its library.
	if list := run(t, "rpm", "-qlp", rpms["python3-gpubind"]); !regexp.MustCompile(`(?m)^/usr/lib/python3[.0-9]*/site-packages/gpubind/__init__\.py$`).MatchString(list) ||
		!strings.Contains(list, "/gpubind/torch.py") {
		t.Errorf("python3-gpubind lacks gpubind/__init__.py or torch.py in a python3 site-packages:\n%s", list)
	}
	if !strings.Contains(rpms["python3-gpubind"], "/noarch/") {
		t.Errorf("python3-gpubind is not noarch: %s", rpms["python3-gpubind"])
	}
	if req := run(t, "rpm", "-qRp", rpms["python3-gpubind"]); !strings.Contains(req, "libgpuhelper1 = 1.0.0-1") {
		t.Errorf("python3-gpubind does not require its library:\n%s", req)
	}
	req := run(t, "rpm", "-qRp", rpms["slurm-spank-gpubind"])
	if !regexp.MustCompile(`(?m)^slurm\(x86-64\) = ` + regexp.QuoteMeta(slurmVer) + `$`).MatchString(req) {
		t.Errorf("slurm-spank-gpubind does not require slurm(x86-64) = %s:\n%s", slurmVer, req)
	}
	if req := run(t, "rpm", "-qRp", rpms["libgpuhelper-devel"]); !strings.Contains(req, "libgpuhelper1(x86-64) = 1.0.0-1") {
		t.Errorf("libgpuhelper-devel does not require its library:\n%s", req)
	}
	// libpmix is dlopen'd (a singleton runs without it): recommended, not required.
	if rec := run(t, "rpm", "-qp", "--recommends", rpms["libgpuhelper1"]); !strings.Contains(rec, "libpmix.so.2()(64bit)") {
		t.Errorf("libgpuhelper1 does not recommend libpmix.so.2:\n%s", rec)
	}
	if conf := run(t, "rpm", "-qcp", rpms["slurm-spank-gpubind"]); strings.TrimSpace(conf) != "/etc/slurm/plugstack.conf.d/gpubind.conf" {
		t.Errorf("config files of slurm-spank-gpubind: %q", conf)
	}

	// The payload: the plugin carries the headers' release, the snippet names the plugin
	// where the package put it, the CMake config names the packaged library.
	x := t.TempDir()
	for _, p := range rpmPackages {
		cmd := exec.Command("sh", "-c", `rpm2cpio "$1" | cpio -idm --quiet`, "sh", rpms[p])
		cmd.Dir = x
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("rpm2cpio %s: %v\n%s", rpms[p], err, out)
		}
	}
	if v := pluginVersion(t, filepath.Join(x, plugdir, "spank_gpubind.so")); v != slurmNum {
		t.Errorf("plugin_version %#x, want %#x (%s)", v, slurmNum, slurmVer)
	}
	b, err := os.ReadFile(filepath.Join(x, "etc/slurm/plugstack.conf.d/gpubind.conf"))
	if err != nil || !strings.Contains(string(b), "# required "+plugdir+"/spank_gpubind.so") {
		t.Errorf("gpubind.conf (%v):\n%s", err, b)
	}
	// The CMake config names the library and the header relative to itself (a moved tree
	// still finds itself, TestCMakePackageMoved): from where the package puts it, those
	// paths must lead to the packaged library and header, and nothing may name the build root.
	cfgDir := filepath.Join(libdir, "cmake/gpuhelper")
	b, err = os.ReadFile(filepath.Join(x, cfgDir, "gpuhelperConfig.cmake"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, want string }{{"_gpuhelper_library", libdir + "/libgpuhelper.so.1"}, {"_gpuhelper_include", "/usr/include"}} {
		m := regexp.MustCompile(`get_filename_component\(` + c.name + ` "\$\{CMAKE_CURRENT_LIST_DIR\}/([^"$]*)" ABSOLUTE\)`).FindSubmatch(b)
		if m == nil {
			t.Errorf("gpuhelperConfig.cmake does not set %s relative to CMAKE_CURRENT_LIST_DIR:\n%s", c.name, b)
		} else if got := filepath.Join(cfgDir, string(m[1])); got != c.want {
			t.Errorf("gpuhelperConfig.cmake in %s: %s is %s/%s = %s, want %s", cfgDir, c.name, cfgDir, m[1], got, c.want)
		}
	}
	if strings.Contains(string(b), "BUILDROOT") || strings.Contains(string(b), "\"/usr/") {
		t.Errorf("gpuhelperConfig.cmake names an absolute or build-root path:\n%s", b)
	}
	// find_package against the extracted payload, as a user of the installed package would.
	t.Run("cmake", func(t *testing.T) {
		if _, err := exec.LookPath("cmake"); err != nil {
			t.Skip("cmake not installed (make deps installs it)")
		}
		src := t.TempDir()
		lists := "cmake_minimum_required(VERSION 3.16)\nproject(p C)\nfind_package(gpuhelper 1.0 REQUIRED)\n" +
			"get_target_property(loc gpuhelper::gpuhelper IMPORTED_LOCATION)\nmessage(STATUS \"gpuhelper-location=${loc}\")\n" +
			"message(STATUS \"gpuhelper-include=${gpuhelper_INCLUDE_DIRS}\")\n"
		if err := os.WriteFile(filepath.Join(src, "CMakeLists.txt"), []byte(lists), 0o644); err != nil {
			t.Fatal(err)
		}
		// gpuhelper_DIR: CMake's own search does not look in lib64 on Debian.
		out := run(t, "cmake", "-S", src, "-B", filepath.Join(src, "b"), "-Dgpuhelper_DIR="+filepath.Join(x, cfgDir))
		for _, w := range []string{"gpuhelper-location=" + filepath.Join(x, libdir, "libgpuhelper.so.1") + "\n",
			"gpuhelper-include=" + filepath.Join(x, "usr/include") + "\n"} {
			if !strings.Contains(out, w) {
				t.Errorf("cmake against the extracted rpm payload: no %q in:\n%s", strings.TrimSpace(w), out)
			}
		}
	})
	if fi, err := os.Lstat(filepath.Join(x, libdir, "libgpuhelper.so")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("libgpuhelper.so is not a symlink: %v", err)
	}
}

// With a private Slurm the rpmbuild line gets its headers and no Slurm requirement
// (make -n: the real build of this path is the same spec, tested above).
func TestRPMPrivateSlurmHasNoSlurmRequirement(t *testing.T) {
	prefix := t.TempDir()
	if err := os.MkdirAll(filepath.Join(prefix, "include", "slurm"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "sh", "-c", `cp /usr/include/slurm/*.h "$1"`, "sh", filepath.Join(prefix, "include", "slurm"))
	cmd := exec.Command("make", "-n", "rpm", "SLURM_PREFIX="+prefix, "RPM_DIR="+t.TempDir())
	cmd.Dir = testbuild.RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n rpm: %v\n%s", err, out)
	}
	s := string(out)
	if strings.Contains(s, "slurm_version") {
		t.Errorf("private Slurm: rpmbuild still defines slurm_version:\n%s", s)
	}
	for _, w := range []string{`slurm_cflags -I` + prefix + `/include`, `slurm_plugindir ` + prefix + `/lib/slurm`} {
		if !strings.Contains(s, w) {
			t.Errorf("private Slurm: rpmbuild line lacks %q:\n%s", w, s)
		}
	}
}
