package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gpubind/gpubind/tests/stubnccl"
	"github.com/gpubind/gpubind/tests/testbuild"
)

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// installTree runs `make install` once per test binary into a fresh prefix (with its own
// build directory, so it never races a developer's build/) and returns the prefix.
func installTree(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("cmake"); err != nil {
		t.Skip("cmake not installed (make deps installs it)")
	}
	installOnce.Do(func() {
		if installDir, installErr = os.MkdirTemp("", "gpubind-install-"); installErr != nil {
			return
		}
		prefix := filepath.Join(installDir, "prefix")
		installErr = testbuild.Run(testbuild.RepoRoot(), []string{"make", "-s", "install", "BUILD=" + filepath.Join(installDir, "build"),
			"PREFIX=" + prefix, "SLURM_PLUGINDIR=" + filepath.Join(prefix, "lib", "slurm")})
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return filepath.Join(installDir, "prefix")
}

// cmakeConfigure configures a project and returns its output and error.
func cmakeConfigure(t *testing.T, src, bin, prefix string) (string, error) {
	t.Helper()
	out, err := exec.Command("cmake", "-S", src, "-B", bin, "-DCMAKE_PREFIX_PATH="+prefix).CombinedOutput()
	return string(out), err
}

// examples/CMakeLists.txt builds hello.c with find_package(gpuhelper 1.0 REQUIRED) against
// an installed tree, and hello runs with the installed library.
func TestCMakePackage(t *testing.T) {
	prefix := installTree(t)
	for _, f := range []string{"lib/cmake/gpuhelper/gpuhelperConfig.cmake", "lib/cmake/gpuhelper/gpuhelperConfigVersion.cmake",
		"share/man/man1/gpubind.1", "share/man/man8/spank-gpubind.8", "share/man/man3/gpuhelper.3", "share/man/man3/gpuhelper_init.3"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("make install did not install %s: %v", f, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "hello-build")
	if out, err := cmakeConfigure(t, filepath.Join(testbuild.RepoRoot(), "examples"), bin, prefix); err != nil {
		t.Fatalf("cmake configure: %v\n%s", err, out)
	}
	if out, err := exec.Command("cmake", "--build", bin).CombinedOutput(); err != nil {
		t.Fatalf("cmake --build: %v\n%s", err, out)
	}
	lib := filepath.Join(prefix, "lib", "libgpuhelper.so.1")
	ldd, err := exec.Command("ldd", filepath.Join(bin, "hello")).CombinedOutput()
	if err != nil || !strings.Contains(string(ldd), "libgpuhelper.so.1 => "+lib) {
		t.Errorf("hello does not load %s (%v):\n%s", lib, err, ldd)
	}
	// One process without a launcher is rank 0 of 1; the stub NCCL makes the ID.
	nccl, err := stubnccl.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "hello"))
	cmd.Env = append(os.Environ(), "GPUHELPER_NCCL_LIBRARY="+nccl)
	out, err := cmd.CombinedOutput()
	major, minor, patch := headerVersion(t)
	version := major + "." + minor + "." + patch
	if err != nil || !strings.Contains(string(out), "hello: rank 0/1") || !strings.Contains(string(out), "(libgpuhelper "+version+")") {
		t.Errorf("hello: %v\n%s", err, out)
	}

	// The version file (the header's version): 1.x satisfies "1.0" and "1"; a newer minor,
	// a 2.0 or a 0.9 request is refused with the version found.
	next, _ := strconv.Atoi(minor)
	for _, tc := range []struct {
		ask string
		ok  bool
	}{{"1.0", true}, {"1", true}, {major + "." + minor, true}, {"0.9", false}, {"2.0", false},
		{major + "." + strconv.Itoa(next+1), false}} {
		src := t.TempDir()
		lists := "cmake_minimum_required(VERSION 3.16)\nproject(v C)\nfind_package(gpuhelper " + tc.ask + " REQUIRED)\n"
		if err := os.WriteFile(filepath.Join(src, "CMakeLists.txt"), []byte(lists), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := cmakeConfigure(t, src, filepath.Join(src, "b"), prefix)
		if (err == nil) != tc.ok {
			t.Errorf("find_package(gpuhelper %s) succeeded=%v, want %v:\n%s", tc.ask, err == nil, tc.ok, out)
		}
		if !tc.ok && !strings.Contains(out, version) {
			t.Errorf("find_package(gpuhelper %s) fails without naming the version found:\n%s", tc.ask, out)
		}
	}
}

// Issue 26: the config named absolute paths, so a tree installed with DESTDIR or moved was
// refused ("/usr/lib/libgpuhelper.so.1 is missing"). A copy of the installed tree elsewhere
// builds and runs hello against its own library.
func TestCMakePackageMoved(t *testing.T) {
	prefix := installTree(t)
	moved := filepath.Join(t.TempDir(), "elsewhere")
	if out, err := exec.Command("cp", "-a", prefix, moved).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	// The original must not be what is found: hide it.
	if err := os.Rename(prefix, prefix+".away"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Rename(prefix+".away", prefix); err != nil {
			t.Error(err)
		}
	})
	bin := filepath.Join(t.TempDir(), "hello-build")
	if out, err := cmakeConfigure(t, filepath.Join(testbuild.RepoRoot(), "examples"), bin, moved); err != nil {
		t.Fatalf("cmake configure against the moved tree: %v\n%s", err, out)
	}
	if out, err := exec.Command("cmake", "--build", bin).CombinedOutput(); err != nil {
		t.Fatalf("cmake --build: %v\n%s", err, out)
	}
	lib := filepath.Join(moved, "lib", "libgpuhelper.so.1")
	ldd, err := exec.Command("ldd", filepath.Join(bin, "hello")).CombinedOutput()
	if err != nil || !strings.Contains(string(ldd), "libgpuhelper.so.1 => "+lib) {
		t.Errorf("hello does not load %s (%v):\n%s", lib, err, ldd)
	}
}

// A config whose library was removed reports the missing file instead of giving a target.
func TestCMakePackageMissingLibrary(t *testing.T) {
	prefix := installTree(t)
	lib := filepath.Join(prefix, "lib", "libgpuhelper.so.1")
	if err := os.Rename(lib, lib+".away"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.Rename(lib+".away", lib); err != nil {
			t.Error(err)
		}
	})
	out, err := cmakeConfigure(t, filepath.Join(testbuild.RepoRoot(), "examples"), filepath.Join(t.TempDir(), "b"), prefix)
	// CMake wraps the message, so look for its words, not the whole line.
	if err == nil || !strings.Contains(out, "libgpuhelper.so.1") || !strings.Contains(out, "is missing") {
		t.Errorf("cmake with %s removed: err=%v\n%s", lib, err, out)
	}
}

// headerVersion is GPUHELPER_VERSION_MAJOR/MINOR/PATCH of lib/gpuhelper.h, the library's
// one version number (the CMake version file is made from it).
func headerVersion(t *testing.T) (major, minor, patch string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testbuild.RepoRoot(), "lib", "gpuhelper.h"))
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^#define GPUHELPER_VERSION_(MAJOR|MINOR|PATCH) (\d+)`).FindAllStringSubmatch(string(b), -1) {
		v[m[1]] = m[2]
	}
	if len(v) != 3 {
		t.Fatalf("lib/gpuhelper.h: want GPUHELPER_VERSION_MAJOR/MINOR/PATCH, found %v", v)
	}
	return v["MAJOR"], v["MINOR"], v["PATCH"]
}
