// Package helper tests libgpuhelper as a user program sees it: C programs linked against the
// built library, run under real PMIx servers (srun --mpi=pmix on a private Slurm cluster, and
// Open MPI's mpirun), with a stub libnccl that records which process created each ID.
package helper

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/stubnccl"
)

var (
	repoRoot string // the repository
	libBuild string // holds libgpuhelper.so.1, include/, pkgconfig/
	binDir   string // test programs and the stub libnccl.so.2
	stubLib  string // binDir/libnccl.so.2
	setupErr error  // why the programs could not be built
)

func TestMain(m *testing.M) {
	code := 1
	func() {
		dir, err := os.MkdirTemp("", "gpuhelper-test-")
		if err != nil {
			setupErr = err
			return
		}
		// Readable by slurmstepd's tasks.
		_ = os.Chmod(dir, 0o755)
		defer os.RemoveAll(dir)
		binDir = dir
		setupErr = setup()
		code = m.Run()
	}()
	os.Exit(code)
}

func sh(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v\n%s", cmd, err, out)
	}
	return nil
}

// setup builds the library through its makefile (as `make helper` does, but into the test's
// own directory, so concurrent builds in build/ cannot race with it; Go's build cache keeps
// this fast), the stub libnccl and the C programs.
func setup() error {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Clean(filepath.Join(filepath.Dir(file), "../.."))
	libBuild = filepath.Join(binDir, "lib")
	if err := sh(repoRoot, "make", "-s", "-f", "lib/Makefile.inc", "BUILD="+libBuild); err != nil {
		return err
	}
	var err error
	if stubLib, err = stubnccl.Build(binDir); err != nil {
		return err
	}
	here := filepath.Join(repoRoot, "tests/helper/csrc") // C sources live apart: Go rejects .c files in a non-cgo package
	gh := []string{"-I" + filepath.Join(libBuild, "include"), "-L" + libBuild, "-Wl,-rpath," + libBuild, "-lgpuhelper"}
	// ghtest10 is ghtest built against the frozen 1.0 header: a 1.0 binary run with this library.
	h10 := filepath.Join(binDir, "include-1.0")
	if err := os.MkdirAll(h10, 0o755); err != nil {
		return err
	}
	frozen, err := os.ReadFile(filepath.Join(repoRoot, "tests/helper/gpuhelper-1.0.h"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(h10, "gpuhelper.h"), frozen, 0o644); err != nil {
		return err
	}
	gh10 := append([]string{"-I" + h10}, gh[1:]...)
	// ghtest12 likewise against the frozen 1.2 header (its info struct ends at flags).
	h12 := filepath.Join(binDir, "include-1.2")
	if err := os.MkdirAll(h12, 0o755); err != nil {
		return err
	}
	frozen12, err := os.ReadFile(filepath.Join(repoRoot, "tests/helper/gpuhelper-1.2.h"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(h12, "gpuhelper.h"), frozen12, 0o644); err != nil {
		return err
	}
	gh12 := append([]string{"-I" + h12}, gh[1:]...)
	// ghtest is linked against the stub, so the library finds ncclGetUniqueId in the process
	// (dlsym RTLD_DEFAULT); ghtest_dl is not, so the library must dlopen it.
	progs := [][]string{
		append([]string{"-std=c11", "-o", "ghtest", here + "/ghtest.c"}, append(gh, "-Wl,--no-as-needed", stubLib, "-Wl,-rpath,"+binDir, "-lpthread")...),
		append([]string{"-std=c11", "-o", "ghtest_dl", here + "/ghtest.c"}, append(gh, "-lpthread")...),
		append([]string{"-std=c11", "-o", "ghtest10", here + "/ghtest.c"}, append(gh10, "-Wl,--no-as-needed", stubLib, "-Wl,-rpath,"+binDir, "-lpthread")...),
		append([]string{"-std=c11", "-o", "ghtest12", here + "/ghtest.c"}, append(gh12, "-Wl,--no-as-needed", stubLib, "-Wl,-rpath,"+binDir, "-lpthread")...),
		append([]string{"-std=c99", "-pedantic", "-o", "hello", repoRoot + "/examples/hello.c"}, gh...),
	}
	pmix, err := exec.Command("pkg-config", "--cflags", "--libs", "pmix").Output()
	if err != nil {
		return fmt.Errorf("pkg-config pmix: %v", err)
	}
	progs = append(progs, append([]string{"-std=gnu11", "-o", "nodeid", here + "/nodeid.c"}, strings.Fields(string(pmix))...))
	// A libpmix that hides job facts (PMIXHIDE_KEYS), for GPUHELPER_PMIX_LIBRARY.
	progs = append(progs, append([]string{"-std=gnu11", "-shared", "-fPIC", "-o", "libpmixhide.so", here + "/pmixhide.c", "-Wl,--no-as-needed"},
		append(strings.Fields(string(pmix)), "-ldl")...))
	for _, p := range progs {
		if err := sh(binDir, "cc", append([]string{"-Wall", "-Wextra", "-Werror", "-O2", "-g"}, p...)...); err != nil {
			return err
		}
	}
	return nil
}

func needSetup(t testing.TB) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("building the library and test programs: %v", setupErr)
	}
}

func bin(name string) string { return filepath.Join(binDir, name) }
