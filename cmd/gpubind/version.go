package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gpubind/gpubind/gpubind"
)

// builtPluginDir is where `make` installs spank_gpubind.so (Slurm's PluginDir), set at build time
// with -ldflags -X; `gpubind version` looks there when --plugin is not given.
var builtPluginDir = ""

const pluginName = "spank_gpubind.so"

// cmdVersion prints gpubind's version and the Slurm version the SPANK plugin was built for.
// With --slurmd it also runs `slurmd -V` and fails, naming both versions, when that slurmd
// would refuse the plugin: `make install` uses this to refuse a mismatched install.
func cmdVersion(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	plugin := fs.String("plugin", "", "the SPANK plugin to inspect (default: next to this program, then Slurm's PluginDir)")
	slurmd := fs.String("slurmd", "", "check that this slurmd loads the plugin")
	if err := fs.Parse(args); err != nil {
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	fmt.Fprintf(stdout, "gpubind %s\n", gpubind.Version)
	path := *plugin
	if path == "" {
		path = findPlugin()
		if path == "" {
			if *slurmd != "" {
				return errors.New("no " + pluginName + " found next to this program or in " + pluginDirOrNone() + "; give --plugin FILE")
			}
			fmt.Fprintf(stdout, "plugin: no %s found next to this program or in %s\n", pluginName, pluginDirOrNone())
			return nil
		}
	}
	built, err := gpubind.PluginSlurmVersion(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "plugin %s: built for Slurm %d.%02d (headers %s); it loads only in slurmd %d.%02d.x\n",
		path, built.Major, built.Minor, built, built.Major, built.Minor)
	if *slurmd == "" {
		return nil
	}
	out, err := exec.Command(*slurmd, "-V").CombinedOutput()
	if err != nil {
		return fmt.Errorf("--slurmd %s: running `%s -V`: %v: %s", *slurmd, *slurmd, err, strings.TrimSpace(string(out)))
	}
	running, err := gpubind.ParseSlurmdVersion(string(out))
	if err != nil {
		return fmt.Errorf("--slurmd %s: %w", *slurmd, err)
	}
	if !running.LoadsSpank(built) {
		return fmt.Errorf("%s was built against Slurm %s but %s is Slurm %s: Slurm loads a SPANK plugin only "+
			"when major.minor match; rebuild with SLURM_PREFIX set to the prefix of Slurm %s (docs/admin.md)",
			path, built, *slurmd, running, running)
	}
	fmt.Fprintf(stdout, "slurmd %s: Slurm %s loads it\n", *slurmd, running)
	return nil
}

func findPlugin() string {
	var dirs []string
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	if builtPluginDir != "" {
		dirs = append(dirs, builtPluginDir)
	}
	for _, d := range dirs {
		p := filepath.Join(d, pluginName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func pluginDirOrNone() string {
	if builtPluginDir == "" {
		return "(no PluginDir known at build time)"
	}
	return builtPluginDir
}
