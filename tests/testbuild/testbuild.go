// Package testbuild builds the SPANK plugin for integration tests: the C front end
// (spank_gpubind.so), the Go engine (gpubind_engine.so) beside it, where srun finds it, and
// the launcher (gpubind-launcher), whose path in the same directory is built into the front
// end as its default. Each test binary builds into its own directory, so tests that
// run in parallel never race on build/.
package testbuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// RepoRoot is the top of the source tree.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Plugin builds spank_gpubind.so, gpubind_engine.so and gpubind-launcher into dir, the front
// end against the Slurm under test (slurmPrefix).
func Plugin(dir string) error {
	root := RepoRoot()
	return Run(root,
		FrontendMake(dir),
		[]string{"go", "build", "-trimpath", "-buildmode=c-shared", "-o", filepath.Join(dir, "gpubind_engine.so"), "./spank/engine"},
		LauncherBuild(dir),
	)
}

// LauncherName is the launcher program's file name.
const LauncherName = "gpubind-launcher"

// LauncherBuild is the command that builds the launcher (the engine package with the tag
// gpubind_launcher) into dir.
func LauncherBuild(dir string) []string {
	return []string{"go", "build", "-trimpath", "-tags", "gpubind_launcher", "-o", filepath.Join(dir, LauncherName), "./spank/engine"}
}

// slurmPrefix is the install prefix of the Slurm the integration tests run against: the
// SLURM_PREFIX environment variable (set by `make test` for each version of the matrix), or
// /usr, the system's Slurm.
func slurmPrefix() string {
	if p := os.Getenv("SLURM_PREFIX"); p != "" {
		return p
	}
	return "/usr"
}

// FrontendMake is the command that builds spank_gpubind.so into dir for slurmPrefix's Slurm,
// its default launcher dir/gpubind-launcher (LauncherBuild); with ASan and UBSan when Sanitize.
func FrontendMake(dir string) []string {
	root := RepoRoot()
	cmd := []string{"make", "-s", "-C", filepath.Join(root, "spank", "frontend"), "BUILD=" + dir,
		"SLURM_PREFIX=" + slurmPrefix(), "GB_LAUNCHER=" + filepath.Join(dir, LauncherName)}
	if Sanitize() {
		cmd = append(cmd, "SANITIZE=1")
	}
	return cmd
}

// sanitizeVar is the environment variable that turns on the sanitizer build of the tests
// (`make test SANITIZE=1` sets it; docs/security.md).
const sanitizeVar = "GPUBIND_SANITIZE"

// Sanitize reports whether the C front end and the test programs that load it are built with
// AddressSanitizer and UndefinedBehaviorSanitizer (sanitizeVar=1).
func Sanitize() bool { return os.Getenv(sanitizeVar) == "1" }

// SanitizeCFlags are gcc's flags for a C test program or library of the sanitizer build
// (none without Sanitize): the same sanitizers as the front end's SANITIZE=1, so that a
// program built with them loads the plugin with the ASan runtime first.
func SanitizeCFlags() []string {
	if !Sanitize() {
		return nil
	}
	return []string{"-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"}
}

// SanitizeEnv is what the Slurm programs of a test cluster (slurmd, slurmstepd, srun) need
// in their environment to load the sanitizer build of the plugin (none without Sanitize).
// They are not built with ASan, and ASan must be the first library of a process: a plugin
// that brings it in by dlopen aborts ("ASan runtime does not come first"). So gcc's libasan
// is preloaded. Leak checking is off in them: Slurm's own programs do not free all they
// allocate before they exit, and that is not this project's to report (the spankhost, built
// with ASan, checks the plugin for leaks). Reports go where ASAN_OPTIONS's log_path says
// (`make test SANITIZE=1` sets it), since slurmstepd's stderr goes nowhere.
func SanitizeEnv() ([]string, error) {
	if !Sanitize() {
		return nil, nil
	}
	out, err := exec.Command("gcc", "-print-file-name=libasan.so").Output()
	lib := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(lib) {
		return nil, fmt.Errorf("sanitizer build: gcc -print-file-name=libasan.so: %q, %v (make deps installs gcc)", lib, err)
	}
	if lib, err = filepath.EvalSymlinks(lib); err != nil {
		return nil, fmt.Errorf("sanitizer build: the ASan runtime: %w", err)
	}
	opts := "detect_leaks=0"
	if o := os.Getenv("ASAN_OPTIONS"); o != "" {
		opts = o + ":" + opts
	}
	return []string{"LD_PRELOAD=" + lib, "ASAN_OPTIONS=" + opts}, nil
}

// Run runs each command in dir and stops at the first failure, whose error holds the
// command and its output.
func Run(dir string, cmds ...[]string) error {
	for _, c := range cmds {
		cmd := exec.Command(c[0], c[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
		}
	}
	return nil
}
