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
// its default launcher dir/gpubind-launcher (LauncherBuild).
func FrontendMake(dir string) []string {
	root := RepoRoot()
	return []string{"make", "-s", "-C", filepath.Join(root, "spank", "frontend"), "BUILD=" + dir,
		"SLURM_PREFIX=" + slurmPrefix(), "GB_LAUNCHER=" + filepath.Join(dir, LauncherName)}
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
