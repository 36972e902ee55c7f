package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Task and proctrack plugins the harness knows how to configure.
var (
	taskPlugins = map[string]bool{
		"task/none":                 true,
		"task/affinity":             true,
		"task/cgroup":               true,
		"task/cgroup,task/affinity": true,
		"task/affinity,task/cgroup": true,
	}
	proctrackPlugins = map[string]bool{
		"proctrack/linuxproc": true,
		"proctrack/cgroup":    true,
		"proctrack/pgid":      true,
	}
)

// maxNodes is the most slurmd daemons one cluster runs. Slurm's multiple-slurmd mode runs them
// all on this host; each idle slurmd holds a few MB and no CPU, so 256 simulated nodes fit a
// small machine (bench/scale.sh runs up to 128). Ordinary tests use 1..4.
const maxNodes = 256

// normalize fills in defaults and rejects values the harness cannot honour.
func (cfg Config) normalize() (Config, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.SlurmPrefix == "" {
		cfg.SlurmPrefix = os.Getenv("SLURM_PREFIX")
	}
	if cfg.SlurmPrefix == "/usr" {
		cfg.SlurmPrefix = "" // the system's Slurm, found in PATH
	}
	if cfg.SlurmPrefix != "" {
		if !filepath.IsAbs(cfg.SlurmPrefix) {
			return cfg, fmt.Errorf("cluster: Config.SlurmPrefix=%q: expected an absolute path", cfg.SlurmPrefix)
		}
		if _, err := os.Stat(filepath.Join(cfg.SlurmPrefix, "sbin", "slurmd")); err != nil {
			return cfg, fmt.Errorf("cluster: Config.SlurmPrefix=%q: expected a Slurm install prefix with sbin/slurmd: %w", cfg.SlurmPrefix, err)
		}
	}
	if cfg.Nodes < 1 || cfg.Nodes > maxNodes {
		return cfg, fmt.Errorf("cluster: Config.Nodes=%d: expected 1..%d", cfg.Nodes, maxNodes)
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = runtime.NumCPU()
	}
	if cfg.CPUs < 1 || cfg.CPUs > 1024 {
		return cfg, fmt.Errorf("cluster: Config.CPUs=%d: expected 1..1024", cfg.CPUs)
	}
	if cfg.TaskPlugin == "" {
		cfg.TaskPlugin = "task/none"
	}
	if !taskPlugins[cfg.TaskPlugin] {
		return cfg, fmt.Errorf("cluster: Config.TaskPlugin=%q: expected task/none, task/affinity, task/cgroup or task/cgroup,task/affinity", cfg.TaskPlugin)
	}
	if cfg.Proctrack == "" {
		// task/cgroup is normally paired with proctrack/cgroup.
		cfg.Proctrack = "proctrack/linuxproc"
		if cfg.usesTaskCgroup() {
			cfg.Proctrack = "proctrack/cgroup"
		}
	}
	if !proctrackPlugins[cfg.Proctrack] {
		return cfg, fmt.Errorf("cluster: Config.Proctrack=%q: expected proctrack/linuxproc, proctrack/cgroup or proctrack/pgid", cfg.Proctrack)
	}
	if cfg.GPUs == 0 {
		cfg.GPUs = 8
		if cfg.GresOrder != nil {
			cfg.GPUs = len(cfg.GresOrder)
		}
	}
	if cfg.GPUs < 0 || cfg.GPUs > 64 {
		return cfg, fmt.Errorf("cluster: Config.GPUs=%d: expected 0..64 (0 means the default 8; use NoGPUs for none)", cfg.GPUs)
	}
	if cfg.NoGPUs {
		cfg.GPUs = 0
		cfg.GresOrder = nil
	}
	if cfg.GresOrder == nil {
		cfg.GresOrder = make([]int, cfg.GPUs)
		for i := range cfg.GresOrder {
			cfg.GresOrder[i] = i
		}
	} else {
		cfg.GresOrder = append([]int(nil), cfg.GresOrder...)
	}
	if len(cfg.GresOrder) != cfg.GPUs {
		return cfg, fmt.Errorf("cluster: Config.GresOrder has %d entries, expected one minor number per GPU (GPUs=%d)", len(cfg.GresOrder), cfg.GPUs)
	}
	seen := map[int]bool{}
	for i, m := range cfg.GresOrder {
		if m < 0 || m > 255 {
			return cfg, fmt.Errorf("cluster: Config.GresOrder[%d]=%d: expected a minor number 0..255", i, m)
		}
		if seen[m] {
			return cfg, fmt.Errorf("cluster: Config.GresOrder[%d]=%d: minor number listed twice", i, m)
		}
		seen[m] = true
	}
	if cfg.ConstrainDevices && !cfg.usesTaskCgroup() {
		return cfg, fmt.Errorf("cluster: Config.ConstrainDevices needs TaskPlugin with task/cgroup, got %q", cfg.TaskPlugin)
	}
	for i, l := range append(append(append(append([]string(nil), cfg.PlugStack...), cfg.SlurmConf...), cfg.GresConf...), cfg.OCIConf...) {
		if strings.ContainsAny(l, "\n\r") {
			return cfg, fmt.Errorf("cluster: config line %d %q: expected a single line without newlines", i, l)
		}
	}
	return cfg, nil
}

func (cfg Config) usesTaskCgroup() bool { return strings.Contains(cfg.TaskPlugin, "task/cgroup") }

// usesCgroups reports whether slurmd will create slurm_<node> cgroup directories.
func (cfg Config) usesCgroups() bool {
	return cfg.usesTaskCgroup() || cfg.Proctrack == "proctrack/cgroup"
}

// confKey is the parameter name of a slurm.conf line ("" for comments and blank lines).
func confKey(line string) string {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return ""
	}
	k, _, _ := strings.Cut(line, "=")
	return strings.ToLower(strings.TrimSpace(k))
}

// writeConfigs writes slurm.conf, gres.conf, cgroup.conf and plugstack.conf into c.Dir.
func (c *Cluster) writeConfigs(ctldPort int, nodePorts []int, mungeSocket string) error {
	cfg := c.cfg
	d := c.Dir
	lines := []string{
		"ClusterName=" + c.Name,
		"SlurmctldHost=localhost",
		fmt.Sprintf("SlurmctldPort=%d", ctldPort),
		"SlurmUser=root",
		"SlurmdUser=root",
	}
	if cfg.AuthSlurm {
		// The key is slurm.key beside slurm.conf, where auth/slurm looks by default.
		lines = append(lines, "AuthType=auth/slurm", "CredType=auth/slurm")
	} else {
		// Always explicit, so the daemons, srun and slurmstepd use the munged chosen at start.
		lines = append(lines, "AuthType=auth/munge", "CredType=cred/munge", "AuthInfo=socket="+mungeSocket)
	}
	lines = append(lines,
		"StateSaveLocation="+filepath.Join(d, "state"),
		// %n gives every slurmd its own spool and TmpFS: the PMIx server files collide otherwise.
		"SlurmdSpoolDir="+filepath.Join(d, "spool", "%n"),
		"TmpFS="+filepath.Join(d, "tmp", "%n"),
		"SlurmctldPidFile="+filepath.Join(d, "run", "slurmctld.pid"),
		"SlurmdPidFile="+filepath.Join(d, "run", "slurmd-%n.pid"),
		"SlurmctldLogFile="+filepath.Join(d, "log", "slurmctld.log"),
		"SlurmdLogFile="+filepath.Join(d, "log", "slurmd-%n.log"),
		"SlurmctldDebug=info",
		"SlurmdDebug=info",
		"PlugStackConfig="+c.PlugStackPath,
		"ProctrackType="+cfg.Proctrack,
		"TaskPlugin="+cfg.TaskPlugin,
		"MpiDefault=none",
		"JobAcctGatherType=jobacct_gather/none",
		"AccountingStorageType=accounting_storage/none",
		"JobCompType=jobcomp/none",
		"MailProg=/bin/true",
		"SchedulerType=sched/backfill",
		"SelectType=select/cons_tres",
		"SelectTypeParameters=CR_CPU",
		"ReturnToService=2",
		"KillWait=2",
		"InactiveLimit=0",
		"MinJobAge=10",
		"SlurmdTimeout=60",
		"GresTypes=gpu",
	)
	if cfg.CPUs > runtime.NumCPU() {
		// Declare more CPUs than the machine has: the tests run 4-8 tasks with GPUs.
		lines = append(lines, "SlurmdParameters=config_overrides")
	}
	// Extra lines replace a default line with the same key; NodeName/PartitionName lines add.
	replaced := map[string]bool{}
	for _, l := range cfg.SlurmConf {
		if k := confKey(l); k != "" && k != "nodename" && k != "partitionname" {
			replaced[k] = true
		}
	}
	var out []string
	for _, l := range lines {
		if !replaced[confKey(l)] {
			out = append(out, l)
		}
	}
	out = append(out, cfg.SlurmConf...)
	for i, n := range c.NodeNames {
		gres := ""
		if cfg.GPUs > 0 {
			gres = fmt.Sprintf(" Gres=gpu:%d", cfg.GPUs)
		}
		out = append(out, fmt.Sprintf("NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d%s State=UNKNOWN",
			n, nodePorts[i], cfg.CPUs, gres))
	}
	out = append(out, "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
	if err := writeLines(c.ConfPath, out); err != nil {
		return err
	}

	var gres []string
	for _, m := range cfg.GresOrder {
		gres = append(gres, fmt.Sprintf("Name=gpu File=%s", filepath.Join(c.DevDir, gpuDevice(m, cfg.AMD))))
	}
	if cfg.GresConf != nil {
		gres = nil
		for _, l := range cfg.GresConf {
			gres = append(gres, strings.ReplaceAll(l, "@DEV@", c.DevDir))
		}
	}
	if err := writeLines(c.GresConfPath, gres); err != nil {
		return err
	}
	if cfg.usesCgroups() {
		cg := []string{
			// No CgroupAutomount: its default (no) is what we want, and 24.11+ call the key defunct.
			"CgroupPlugin=cgroup/v1",
			"ConstrainCores=yes",
			fmt.Sprintf("ConstrainDevices=%s", yesNo(cfg.ConstrainDevices)),
			"ConstrainRAMSpace=no",
		}
		if err := writeLines(filepath.Join(d, "cgroup.conf"), cg); err != nil {
			return err
		}
	} else if unifiedCgroupOnly() {
		// On a pure cgroup v2 host Slurm autodetects cgroup/v2 even for a cluster without
		// cgroup plugins, and its slurmstepd then asks systemd (dbus) for a scope: fatal
		// where, as on the GPU machine, no dbus runs. Such a cluster uses no cgroups at all.
		// (CgroupPlugin=disabled is Slurm 23.02+; Debian 12's 22.05 runs on the CI VM,
		// whose cgroup mount is not pure v2.)
		if err := writeLines(filepath.Join(d, "cgroup.conf"), []string{"CgroupPlugin=disabled"}); err != nil {
			return err
		}
	}
	if cfg.TopologyConf != nil {
		// Slurm reads topology.conf beside slurm.conf (TopologyPlugin=topology/block, tree).
		if err := writeLines(filepath.Join(d, "topology.conf"), cfg.TopologyConf); err != nil {
			return err
		}
	}
	if cfg.OCIConf != nil {
		// slurmstepd reads oci.conf beside slurm.conf at each step's start (Slurm's OCI
		// containers, srun --container); without the file --container is only advisory.
		if err := writeLines(filepath.Join(d, "oci.conf"), cfg.OCIConf); err != nil {
			return err
		}
	}
	// Always written, even empty: Slurm would otherwise read plugstack.conf next to slurm.conf
	// or the system's file.
	return writeLines(c.PlugStackPath, cfg.PlugStack)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func writeLines(path string, lines []string) error {
	text := strings.Join(lines, "\n")
	if len(lines) > 0 {
		text += "\n"
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return fmt.Errorf("cluster: write %s: %w", path, err)
	}
	return nil
}

// unifiedCgroupOnly says whether /sys/fs/cgroup is a cgroup v2 mount (no v1 hierarchies).
func unifiedCgroupOnly() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}
