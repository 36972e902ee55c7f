// gpubind check: is this node ready for the plugin? Each item is ok, warn or fail with a
// reason; the exit status is 1 when any item fails.
//
//	gpubind check [--json] [--root DIR] [--slurm-conf F] [--plugstack F] [--gres-conf F]
//	              [--cgroup-conf F] [--plugin F] [--slurmd F] [--node NAME]

package main

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubind/gpubind/gpubind"
)

// Check results.
const (
	statusOK   = "ok"
	statusWarn = "warn"
	statusFail = "fail"
)

// checkItem is one line of `gpubind check`.
type checkItem struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// checker holds what the items read. Paths from configuration files are taken below root;
// paths given on the command line are used as given.
type checker struct {
	root       string // "" for the host
	slurmConf  string
	plugstack  string
	gresConf   string
	cgroupConf string
	plugin     string
	slurmd     string
	node       string

	conf          []gpubind.ConfLine     // slurm.conf, with its includes
	settings      *gpubind.SlurmSettings // from slurm.conf and cgroup.conf, as the engine reads them
	confErr       error
	args          map[string]string     // the plugin's plugstack arguments
	argsFrom      string                // the plugstack file and line they came from
	slurmdVersion *gpubind.SlurmVersion // what slurmd -V says; nil unknown
	sysRoot       string                // where the plugin reads sysfs ("" the host)
	topo          *gpubind.Topology     // the driver's GPUs as the plugin sees them
	topoErr       error
	nvTopo        *gpubind.Topology // what NVML said (checkNVML), nil when not loaded
	items         []checkItem
}

func (c *checker) add(name, status, format string, a ...any) {
	c.items = append(c.items, checkItem{Name: name, Status: status, Reason: fmt.Sprintf(format, a...)})
}

// under maps an absolute path read from a configuration file into the checked tree.
func (c *checker) under(p string) string {
	if c.root == "" || c.root == "/" || p == "" {
		return p
	}
	return filepath.Join(c.root, p)
}

func cmdCheck(args []string, stdout, stderr io.Writer) error {
	var c checker
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the items as JSON")
	fs.StringVar(&c.root, "root", "", "check the tree DIR (DIR/etc/slurm, DIR/sys, DIR/proc, DIR/dev, ...) instead of this node")
	fs.StringVar(&c.slurmConf, "slurm-conf", "", "slurm.conf (default $SLURM_CONF, else /etc/slurm/slurm.conf)")
	fs.StringVar(&c.plugstack, "plugstack", "", "plugstack.conf (default slurm.conf's PlugStackConfig, else next to slurm.conf)")
	fs.StringVar(&c.gresConf, "gres-conf", "", "gres.conf (default the plugin's gres_conf=, else next to slurm.conf)")
	fs.StringVar(&c.cgroupConf, "cgroup-conf", "", "cgroup.conf (default next to slurm.conf)")
	fs.StringVar(&c.plugin, "plugin", "", "spank_gpubind.so (default the one plugstack.conf names, else PluginDir's)")
	fs.StringVar(&c.slurmd, "slurmd", "", "slurmd binary whose version counts (default the running slurmd's, else slurmd in PATH)")
	fs.StringVar(&c.node, "node", "", "node name for gres.conf NodeName= (default the short host name)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.root != "" {
		fi, err := os.Stat(c.root)
		if err != nil || !fi.IsDir() {
			return usageError{fmt.Sprintf("--root %q: not a directory", c.root)}
		}
	}
	items := c.run()
	var failed []string
	for _, it := range items {
		if it.Status == statusFail {
			failed = append(failed, it.Name)
		}
	}
	if *asJSON {
		b, err := json.MarshalIndent(struct {
			Items  []checkItem `json:"items"`
			Failed []string    `json:"failed"`
		}{items, append([]string{}, failed...)}, "", "  ") // [] rather than null when none failed
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, it := range items {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", it.Status, it.Name, it.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("check: %d item(s) failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// run checks every item, in an order where later items use what earlier ones found.
func (c *checker) run() []checkItem {
	if c.node == "" {
		h, _ := os.Hostname()
		c.node, _, _ = strings.Cut(h, ".")
	}
	if c.slurmConf == "" {
		c.slurmConf = os.Getenv("SLURM_CONF")
		if c.slurmConf == "" || c.root != "" {
			c.slurmConf = c.under("/etc/slurm/slurm.conf")
		}
	}
	c.settings, c.conf, c.confErr = gpubind.ReadSlurmSettings(c.slurmConf, c.cgroupConf, c.under)

	c.checkSlurmd()
	c.checkPlugstack() // finds the plugin and its arguments
	c.driverTopology()
	c.checkPlugin()
	c.checkEngine()
	c.checkLauncher()
	c.checkGres()
	c.checkNVML()
	c.checkFabric() // check_fabric.go: multi-node NVLink and IMEX
	c.checkIMEX()
	c.checkCacheDir()
	c.checkCgroup()
	c.checkSlurmConf()
	return c.items
}

// driverTopology reads the driver's GPUs where the plugin will: the tree of its root=
// argument, or its snapshot with source=snapshot.
func (c *checker) driverTopology() {
	c.sysRoot = c.root
	if r, ok := c.args["root"]; ok {
		c.sysRoot = c.under(r)
	}
	if c.args["source"] == gpubind.SourceSnapshot {
		c.topo, c.topoErr = gpubind.LoadSnapshot(c.under(c.args["snapshot"]))
		c.sysRoot = "snapshot " + c.args["snapshot"]
		return
	}
	c.topo, c.topoErr = gpubind.DiscoverSysfs(c.sysRoot)
}

func (c *checker) confValue(key string) string { return gpubind.ConfValue(c.conf, key) }

// confDir is the directory of slurm.conf, where Slurm looks for its other files.
func (c *checker) confDir() string { return filepath.Dir(c.slurmConf) }

// checkSlurmd finds the Slurm release the node runs: the running slurmd's binary, else
// the one in PATH. Slurm loads SPANK plugins only of its own major.minor.
func (c *checker) checkSlurmd() {
	bin, how := c.slurmd, "given with --slurmd"
	if bin == "" {
		if pid, exe := runningSlurmd(c.under("/proc"), c.slurmConf, c.node); exe != "" {
			bin, how = exe, fmt.Sprintf("running as pid %d", pid)
		} else if p, err := exec.LookPath("slurmd"); err == nil && c.root == "" {
			bin, how = p, "not running; the binary in PATH"
		} else {
			where := "and no slurmd in PATH"
			if c.root != "" {
				where = "in " + c.under("/proc") + " (PATH is not searched with --root)"
			}
			c.add("slurmd", statusFail, "no running slurmd %s: cannot tell which Slurm the plugin must match (give --slurmd FILE)", where)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-V").CombinedOutput()
	if err != nil {
		c.add("slurmd", statusFail, "%s -V: %v, output %q: want \"slurm X.Y.Z\"", bin, err, strings.TrimSpace(string(out)))
		return
	}
	v, err := gpubind.ParseSlurmdVersion(string(out))
	if err != nil {
		c.add("slurmd", statusFail, "%s -V: %v", bin, err)
		return
	}
	c.slurmdVersion = &v
	status := statusOK
	if strings.HasPrefix(how, "not running") {
		status = statusWarn
	}
	c.add("slurmd", status, "Slurm %s (%s, %s)", v, bin, how)
}

// runningSlurmd returns the pid and binary (procDir/*/exe) of the running slurmd that serves
// slurmConf and node, else of any running slurmd.
func runningSlurmd(procDir, slurmConf, node string) (int, string) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return 0, ""
	}
	bestPid, bestExe, bestScore := 0, "", -1
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procDir, e.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "slurmd" {
			continue
		}
		exe, err := os.Readlink(filepath.Join(procDir, e.Name(), "exe"))
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(procDir, e.Name(), "cmdline"))
		if score := slurmdMatch(strings.Split(string(cmdline), "\x00"), slurmConf, node); score > bestScore {
			bestPid, bestExe, bestScore = pid, exe, score
		}
	}
	return bestPid, bestExe
}

// slurmdMatch scores how surely a slurmd with these arguments serves the checked node: a
// host may run several (Slurm's multiple-slurmd mode, a test cluster beside the real one),
// so the one started with the checked slurm.conf (-f) and node name (-N) wins.
func slurmdMatch(args []string, slurmConf, node string) int {
	score := 0
	for i := 0; i+1 < len(args); i++ {
		switch {
		case args[i] == "-f" && slurmConf != "" && args[i+1] == slurmConf:
			score += 2
		case args[i] == "-N" && node != "" && args[i+1] == node:
			score++
		}
	}
	return score
}

// plugstackLine is one active plugstack.conf line that loads spank_gpubind.so.
type plugstackLine struct {
	file     string
	line     int
	path     string
	args     []string
	optional bool // marked optional: Slurm ignores the plugin's failures
}

// readPlugstack returns the lines loading spank_gpubind.so, following include lines.
func (c *checker) readPlugstack(path string) ([]plugstackLine, error) {
	lines, err := gpubind.ReadConf(path, gpubind.ConfPlugstack, c.under)
	if err != nil {
		return nil, err
	}
	var out []plugstackLine
	for _, l := range lines {
		f := l.Fields
		if (f[0] == "required" || f[0] == "optional") && len(f) >= 2 && filepath.Base(f[1]) == "spank_gpubind.so" {
			out = append(out, plugstackLine{file: l.File, line: l.Line, path: f[1], args: f[2:], optional: f[0] == "optional"})
		}
	}
	return out, nil
}

func (c *checker) checkPlugstack() {
	ps := c.plugstack
	if ps == "" {
		if v := c.confValue("plugstackconfig"); v != "" {
			ps = c.under(v)
		} else {
			ps = filepath.Join(c.confDir(), "plugstack.conf")
		}
	}
	lines, err := c.readPlugstack(ps)
	if err != nil {
		c.add("plugstack", statusFail, "%v", err)
		return
	}
	switch len(lines) {
	case 0:
		c.add("plugstack", statusWarn, "%s (with its includes) has no active spank_gpubind.so line: the plugin is not enabled", ps)
		return
	case 1:
	default:
		c.add("plugstack", statusFail, "spank_gpubind.so is loaded %d times (%s line %d and %s line %d)", len(lines),
			lines[0].file, lines[0].line, lines[1].file, lines[1].line)
		return
	}
	l := lines[0]
	c.argsFrom = fmt.Sprintf("%s line %d", l.file, l.line)
	if c.plugin == "" {
		c.plugin = l.path
		if !filepath.IsAbs(l.path) {
			// A relative plugin path is looked up in PluginDir.
			c.plugin = filepath.Join(c.pluginDir(), l.path)
		}
		c.plugin = c.under(c.plugin)
	}
	// The plugin's own parser, from the installed plugin: exactly what Slurm will load.
	if err := checkPluginArgs(c.plugin, l.args); err != nil {
		c.add("plugstack", statusFail, "%s: %v", c.argsFrom, err)
		return
	}
	c.args = map[string]string{}
	for _, a := range l.args {
		k, v, _ := strings.Cut(a, "=")
		c.args[k] = v
	}
	// default= is an option text: the engine's parser judges it at every step.
	if d, ok := c.args["default"]; ok {
		if _, err := gpubind.ParseOption(d); err != nil {
			c.add("plugstack", statusFail, "%s: default=%s: %v", c.argsFrom, d, err)
			return
		}
	}
	for _, k := range []string{"snapshot", "root", "engine", "gres_conf"} {
		if v, ok := c.args[k]; ok {
			if _, err := os.Stat(c.under(v)); err != nil {
				c.add("plugstack", statusFail, "%s: %s=%s: %v", c.argsFrom, k, v, err)
				return
			}
		}
	}
	if v := optionalVoids(l, c.args); v != "" {
		c.add("plugstack", statusWarn, "%s: the line is marked optional, and Slurm ignores the failures of an optional SPANK plugin: %s cannot fail a step or guarantee what it forces; mark the line required", c.argsFrom, v)
		return
	}
	c.add("plugstack", statusOK, "%s: %s %s", c.argsFrom, l.path, strings.Join(l.args, " "))
}

// optionalVoids names the settings an optional plugstack line voids: mode=enforce (also the
// default), isolate=force, cpus=force; "" for none (issue 23).
func optionalVoids(l plugstackLine, args map[string]string) string {
	if !l.optional {
		return ""
	}
	var v []string
	switch args["mode"] {
	case "":
		v = append(v, "mode=enforce (the default)")
	case "enforce":
		v = append(v, "mode=enforce")
	}
	for _, k := range []string{"isolate", "cpus"} {
		if args[k] == "force" {
			v = append(v, k+"=force")
		}
	}
	return strings.Join(v, ", ")
}

// pluginDir is slurm.conf's PluginDir, else Debian's default.
func (c *checker) pluginDir() string {
	if v := c.confValue("plugindir"); v != "" {
		d, _, _ := strings.Cut(v, ":")
		return d
	}
	return "/usr/lib/x86_64-linux-gnu/slurm-wlm"
}

func (c *checker) checkPlugin() {
	if c.plugin == "" {
		c.plugin = c.under(filepath.Join(c.pluginDir(), "spank_gpubind.so"))
	}
	p, err := gpubind.ReadSlurmPlugin(c.plugin)
	if err != nil {
		c.add("plugin", statusFail, "%v", err)
		return
	}
	if p.Type != "spank" {
		c.add("plugin", statusFail, "%s: plugin_type %q, want \"spank\"", c.plugin, p.Type)
		return
	}
	switch {
	case c.slurmdVersion == nil:
		c.add("plugin", statusWarn, "%s built for Slurm %s; slurmd's release is unknown", c.plugin, p.Version)
	case !c.slurmdVersion.LoadsSpank(p.Version):
		c.add("plugin", statusFail, "%s built for Slurm %s, slurmd runs %d.%02d: Slurm refuses SPANK plugins of another major.minor; rebuild the plugin against this Slurm",
			c.plugin, p.Version, c.slurmdVersion.Major, c.slurmdVersion.Minor)
	default:
		c.add("plugin", statusOK, "%s built for Slurm %s, as slurmd", c.plugin, p.Version)
	}
}

func (c *checker) checkEngine() {
	eng := filepath.Join(filepath.Dir(c.plugin), "gpubind_engine.so")
	if v, ok := c.args["engine"]; ok {
		eng = c.under(v)
	}
	f, err := elf.Open(eng)
	if err != nil {
		c.add("engine", statusFail, "%v", err)
		return
	}
	defer f.Close()
	syms, _ := f.DynamicSymbols()
	if !slices.ContainsFunc(syms, func(s elf.Symbol) bool { return s.Name == "gpubind_engine_run" }) {
		c.add("engine", statusFail, "engine %s does not export gpubind_engine_run: not the gpubind engine", eng)
		return
	}
	c.add("engine", statusOK, "%s (does not link Slurm: any Slurm release)", eng)
}

func (c *checker) checkGres() {
	path := c.gresConf
	if path == "" {
		if v, ok := c.args["gres_conf"]; ok {
			path = c.under(v)
		} else {
			path = gpubind.GresConfPath("", c.slurmConf)
		}
	}
	// As gpubind.LoadNodeConf reads it, with absolute Include paths in the checked tree.
	lines, err := gpubind.ReadConf(path, gpubind.ConfSlurm, c.under)
	var gc *gpubind.GresConf
	if err != nil {
		err = fmt.Errorf("gres.conf: %w", err)
	} else {
		gc, err = gpubind.ParseGresLines(lines, c.node)
	}
	if err != nil {
		c.add("gres", statusFail, "%v: the plugin cannot map Slurm's GRES indices to GPUs", err)
		return
	}
	if len(gc.Files) == 0 {
		if gc.AutoDetect == "nvml" {
			c.add("gres", statusOK, "%s: AutoDetect=nvml, GRES indices in PCI order", path)
		} else {
			c.add("gres", statusWarn, "%s: no GPU File= for node %s and no AutoDetect=nvml: PCI order assumed", path, c.node)
		}
		return
	}
	if c.topoErr != nil {
		c.add("gres", statusFail, "the driver's GPUs (sysfs): %v", c.topoErr)
		return
	}
	var minors []string
	for idx, f := range gc.Files {
		minor, err := gpubind.DeviceMinor(c.under(f))
		if err != nil {
			c.add("gres", statusFail, "%s GRES index %d: %v", path, idx, err)
			return
		}
		if c.topo.GPUByMinor(minor) == nil {
			var known []string
			for _, g := range c.topo.GPUs {
				known = append(known, strconv.Itoa(g.Minor))
			}
			c.add("gres", statusFail, "%s GRES index %d: File=%s is minor %d, not a GPU of the driver (minors %s)",
				path, idx, f, minor, strings.Join(known, ","))
			return
		}
		minors = append(minors, strconv.Itoa(minor))
	}
	if len(gc.Files) != len(c.topo.GPUs) {
		c.add("gres", statusWarn, "%s lists %d GPUs for node %s, the driver has %d", path, len(gc.Files), c.node, len(c.topo.GPUs))
		return
	}
	c.add("gres", statusOK, "%s: %d GPUs, minors %s in GRES order", path, len(gc.Files), strings.Join(minors, ","))
}

// checkNVMLLib is the NVML that check compares with sysfs; nil is the real library, which
// describes the host (tests give a go-nvml mock of a fixture: no GPU here).
var checkNVMLLib nvml.Interface

// checkNVML compares what NVML and sysfs say about each GPU, where NVML loads.
func (c *checker) checkNVML() {
	lib := checkNVMLLib
	if lib == nil {
		if c.sysRoot != "" && c.sysRoot != "/" {
			c.add("nvml", statusOK, "not checked: NVML describes the host, the plugin reads %s", c.sysRoot)
			return
		}
		lib = gpubind.NewNVML()
	}
	nv, err := gpubind.DiscoverNVML(lib)
	if err != nil {
		c.add("nvml", statusWarn, "NVML does not load (%v): discovery uses sysfs only", err)
		return
	}
	c.nvTopo = nv
	if c.topoErr != nil {
		c.add("nvml", statusFail, "NVML loads but sysfs does not: %v", c.topoErr)
		return
	}
	var diffs []string
	for _, g := range nv.GPUs {
		s := c.topo.GPUByBusID(g.BusID)
		switch {
		case s == nil:
			diffs = append(diffs, fmt.Sprintf("%s: in NVML, not in sysfs", g.BusID))
		case g.Minor >= 0 && s.Minor >= 0 && g.Minor != s.Minor:
			diffs = append(diffs, fmt.Sprintf("%s: minor %d (NVML) vs %d (sysfs)", g.BusID, g.Minor, s.Minor))
		case g.UUID != "" && s.UUID != "" && g.UUID != s.UUID:
			diffs = append(diffs, fmt.Sprintf("%s: UUID %s (NVML) vs %s (sysfs)", g.BusID, g.UUID, s.UUID))
		}
	}
	for _, s := range c.topo.GPUs {
		if nv.GPUByBusID(s.BusID) == nil {
			diffs = append(diffs, fmt.Sprintf("%s: in sysfs, not in NVML", s.BusID))
		}
	}
	if len(diffs) > 0 {
		c.add("nvml", statusFail, "NVML and sysfs disagree: %s", strings.Join(diffs, "; "))
		return
	}
	c.add("nvml", statusOK, "NVML and sysfs agree on %d GPUs", len(nv.GPUs))
}

func (c *checker) checkCacheDir() {
	dir := gpubind.DefaultCacheDir
	if v, ok := c.args["cache_dir"]; ok {
		dir = v
	}
	p := c.under(dir)
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		c.add("cache_dir", statusOK, "%s does not exist yet: the engine creates it (root, 0755)", p)
		return
	case err != nil:
		c.add("cache_dir", statusFail, "%v", err)
		return
	case !fi.IsDir():
		c.add("cache_dir", statusFail, "%s is not a directory (mode %v): the engine ignores it and discovers at every step", p, fi.Mode())
		return
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		c.add("cache_dir", statusFail, "%s: no owner information", p)
		return
	}
	if st.Uid != 0 {
		c.add("cache_dir", statusFail, "%s is owned by uid %d, not root: the engine ignores it (a user could plant a topology)", p, st.Uid)
		return
	}
	if fi.Mode().Perm()&0o022 != 0 {
		c.add("cache_dir", statusFail, "%s is group or world writable (mode %v): the engine ignores it (a user could plant a topology)", p, fi.Mode().Perm())
		return
	}
	c.add("cache_dir", statusOK, "%s is root-owned, mode %v", p, fi.Mode().Perm())
	c.checkLauncherFailure(p)
}

// launcherFailMemo is where slurmstepd remembers a launcher that timed out, crashed or gave
// no table (spank/frontend/failmemo.c: GB_FAILMEMO_NAME, GB_FAILMEMO_S): "PATH\tCAUSE".
const (
	launcherFailMemo    = "launcher-failed"
	launcherFailMemoFor = 60 * time.Second
)

// checkLauncherFailure reports a launcher failure slurmstepd remembers: for its time, steps
// that only default= binds run unbound without starting the launcher.
func (c *checker) checkLauncherFailure(cacheDir string) {
	p := filepath.Join(cacheDir, launcherFailMemo)
	fi, err := os.Lstat(p)
	if err != nil {
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		c.add("launcher", statusWarn, "%v", err)
		return
	}
	path, cause, _ := strings.Cut(strings.TrimSpace(string(b)), "\t")
	age := time.Since(fi.ModTime()).Round(time.Second)
	if age < launcherFailMemoFor {
		c.add("launcher", statusFail, "the launcher %s failed %v ago on this node: %s; steps that only default= binds run as Slurm set them up until %v have passed (%s)",
			path, age, cause, launcherFailMemoFor, p)
		return
	}
	c.add("launcher", statusWarn, "the launcher %s failed %v ago on this node: %s (%s)", path, age, cause, p)
}

// checkCgroup says whether the isolate and cpus flags can work, asking the plugin's own probe
// (gpubind_check_cgroup): the same mountinfo parser, per flag the same choice of cgroup version
// and the same refusals (a v1 hierarchy co-mounted with a controller Slurm finds tasks by) as a
// step. What depends on the step (MIG, Slurm's task cgroups) is decided only when one runs.
func (c *checker) checkCgroup() {
	mi := c.under("/proc/self/mountinfo")
	flags := []struct {
		key string
		bit uint
	}{{"isolate", cgroupIsolate}, {"cpus", cgroupCpus}}
	var keys, used, problems []string
	status := statusOK
	for _, f := range flags {
		if c.args[f.key] == "never" {
			continue
		}
		ok, text, err := probePluginCgroup(c.plugin, mi, f.bit)
		if err != nil {
			c.add("cgroup", statusWarn, "%v: cannot tell whether isolate and cpus can work", err)
			return
		}
		if ok {
			keys = append(keys, f.key)
			used = append(used, text)
			continue
		}
		problems = append(problems, f.key+" cannot work: "+text)
		if c.args[f.key] == "force" {
			status = statusFail
		} else if status == statusOK {
			status = statusWarn
		}
	}
	if len(problems) > 0 {
		c.add("cgroup", status, "%s", strings.Join(problems, "; "))
		return
	}
	switch {
	case len(used) == 0:
		c.add("cgroup", statusOK, "isolate=never and cpus=never: no cgroup is used")
	case len(used) == 1 || used[0] == used[1]:
		// One hierarchy for both (the usual case) is named once.
		c.add("cgroup", statusOK, "%s: %s can work", used[0], strings.Join(keys, " and "))
	default:
		c.add("cgroup", statusOK, "isolate: %s; cpus: %s: isolate and cpus can work", used[0], used[1])
	}
}

// checkSlurmConf checks the Slurm settings the plugin relies on: GPUs as GRES, and the
// ConstrainDevices setting that decides the task's GPU numbering.
func (c *checker) checkSlurmConf() {
	if c.confErr != nil {
		c.add("slurm.conf", statusFail, "%v", c.confErr)
		return
	}
	if !slices.ContainsFunc(strings.Split(c.confValue("grestypes"), ","), func(s string) bool { return strings.EqualFold(s, "gpu") }) {
		c.add("slurm.conf", statusFail, "%s: GresTypes=%q has no gpu: Slurm gives jobs no GPUs to bind", c.slurmConf, c.confValue("grestypes"))
		return
	}
	taskCgroup, constrain := c.settings.TaskCgroup, c.settings.ConstrainDevices
	cg := c.cgroupConf
	if cg == "" {
		cg = filepath.Join(c.confDir(), "cgroup.conf")
	}
	switch {
	case constrain && !taskCgroup:
		c.add("slurm.conf", statusWarn, "%s ConstrainDevices=yes but TaskPlugin=%q has no task/cgroup: devices are not constrained, tasks see all GPUs (global numbering)",
			cg, c.confValue("taskplugin"))
	case constrain:
		c.add("slurm.conf", statusOK, "GresTypes has gpu; task/cgroup with ConstrainDevices=yes: tasks see only their step's GPUs (relative numbering)")
	default:
		c.add("slurm.conf", statusOK, "GresTypes has gpu; no ConstrainDevices: tasks see all GPUs (global numbering)")
	}
}
