// Package cluster starts a private Slurm cluster for tests: munged (reused or its own),
// slurmctld and 1..256 slurmd nodes on loopback (multiple-slurmd), fake GPUs as GRES, mpi/pmix available.
// Everything lives in one temporary directory, and Stop removes it together with every
// process the cluster started. It needs root and the Debian packages from `make deps`.
//
//	c := cluster.StartT(t, cluster.Config{Nodes: 2})      // stopped in t.Cleanup
//	out, _, err := c.Srun(ctx, "-N2", "-n4", "--mpi=pmix", "--gpus-per-node=2", prog)
//
// Limits of Slurm 22.05 on a 2-CPU machine: -O (overcommit) works for steps without GPUs
// but not together with GRES; for 4-8 tasks with GPUs declare more CPUs (Config.CPUs), and
// with task/affinity bind explicitly (--cpu-bind=map_cpu:0,1,...) because implicit binding
// over CPUs that do not exist fails. Clusters that use cgroups (task/cgroup or
// proctrack/cgroup) run one at a time on a machine: Slurm names its cgroups slurm_<node>.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// Config describes a cluster. The zero value is one node, nproc CPUs, task/none and 8 GPUs.
type Config struct {
	Nodes            int      // 1..256 slurmd nodes on loopback (names node1..nodeN), default 1
	CPUs             int      // CPUs declared per node (config_overrides when > nproc), default nproc
	TaskPlugin       string   // "task/none" (default), "task/affinity", "task/cgroup,task/affinity"
	Proctrack        string   // default "proctrack/linuxproc"; "proctrack/cgroup" when TaskPlugin has task/cgroup
	GPUs             int      // fake GPUs per node, default 8 (mknod c 195 N in the cluster dir)
	GresOrder        []int    // minor number of each GRES index in gres.conf File= order; default 0..GPUs-1
	AMD              bool     // fake GPUs are render nodes renderD<128+N> (char 226:128+N), card nodes card<1+N> (226:1+N) and card0 (226:0, no GPU's), plus a fake kfd (char 241:0)
	ConstrainDevices bool     // cgroup.conf ConstrainDevices=yes (needs task/cgroup)
	PlugStack        []string // lines of plugstack.conf (e.g. "required /path/spank_gpubind.so root=...")
	GresConf         []string // gres.conf lines replacing the generated ones; @DEV@ stands for DevDir
	SlurmConf        []string // extra slurm.conf lines; a line replaces the harness's line with the same key
	TopologyConf     []string // lines of topology.conf beside slurm.conf (nil: none written)
	OCIConf          []string // lines of oci.conf beside slurm.conf (nil: none written, no OCI containers)

	// SlurmPrefix is the install prefix of the Slurm to run (bin/, sbin/ below it), for the
	// version matrix: tests/slurm/build.sh prints one. Default: $SLURM_PREFIX, and when that
	// is unset too, the Slurm found in PATH (Debian's package).
	SlurmPrefix string

	NoGPUs        bool          // no GRES at all (GPUs=0 means the default 8)
	OwnMunge      bool          // start a private munged even when a system munged answers
	AuthSlurm     bool          // auth/slurm, a generated slurm.key beside slurm.conf, no munge (Slurm 23.11+)
	Detached      bool          // daemons outlive the starting process (shell entry point); else they die with it
	StartTimeout  time.Duration // how long Start waits for every node to be idle, default 2 minutes + 2 s per node
	ParentTempDir string        // where the cluster directory is created, default a dev-capable temp dir
}

// Cluster is a running private Slurm cluster.
type Cluster struct {
	Dir           string   // the cluster's temporary directory; removed by Stop
	ConfPath      string   // slurm.conf
	GresConfPath  string   // gres.conf
	PlugStackPath string   // plugstack.conf
	DevDir        string   // holds the fake GPU nodes nvidia<minor> (char 195:minor)
	NodeNames     []string // node1..nodeN
	Name          string   // Slurm ClusterName, unique per cluster
	MungeSocket   string   // munged socket in use: the private one in Dir/munge, or a reused system one

	cfg       Config
	sanitize  []string // testbuild.SanitizeEnv: what Slurm's programs need for the sanitizer build
	mu        sync.Mutex
	daemons   []*daemon
	cgroupLck bool
	stopped   bool
}

type daemon struct {
	Name string        `json:"name"`
	Pid  int           `json:"pid"`
	done chan struct{} // closed when reaped; nil when this process is not the parent
}

// MarkerEnv is put into the environment of every daemon and client command. slurmstepd
// inherits slurmd's environment and tasks inherit srun's, so Stop finds every process of
// this cluster (they daemonize, so they are not our children) by scanning /proc/*/environ.
const MarkerEnv = "GPUBIND_TEST_CLUSTER"

// systemMungeSocket is where a running munged is looked for (a variable for tests).
var systemMungeSocket = "/run/munge/munge.socket.2"

// state is what cluster.json holds, so that another process (the shell entry point) can stop it.
type state struct {
	Dir         string    `json:"dir"`
	Name        string    `json:"name"`
	NodeNames   []string  `json:"node_names"`
	MungeSocket string    `json:"munge_socket"`
	CgroupLock  bool      `json:"cgroup_lock"`
	Daemons     []*daemon `json:"daemons"`
	Config      Config    `json:"config"`
}

// Start creates and starts a cluster. It returns once every node is idle in sinfo. On failure
// it stops what it started and returns an error holding the daemons' last log lines.
func Start(cfg Config) (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("cluster: Start needs root (slurmd runs tasks as any user, munged key, mknod)")
	}
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	bins := []string{"slurmctld", "slurmd", "srun", "sinfo", "squeue", "scancel", "unshare"}
	if !cfg.AuthSlurm {
		bins = append(bins, "munge", "munged")
	}
	for _, bin := range bins {
		if _, err := exec.LookPath(slurmBin(cfg.SlurmPrefix, bin)); err != nil {
			return nil, fmt.Errorf("cluster: %s not found (SlurmPrefix %q; run `make deps`): %w", bin, cfg.SlurmPrefix, err)
		}
	}
	// Free ports are probed, then closed; another process may take one in between. Such a
	// start fails with "Address already in use" and is retried with new ports.
	for attempt := 1; ; attempt++ {
		c, err := start(cfg)
		if err == nil {
			return c, nil
		}
		if attempt == 3 || !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
	}
}

// StartT starts a cluster for a test and stops it in t.Cleanup. It skips the test when not
// root and fails it when the cluster does not come up.
func StartT(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cluster: needs root (CI runs as root)")
	}
	c, err := Start(cfg)
	if err != nil {
		t.Fatalf("start private Slurm cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster %s logs:\n%s", c.Dir, c.logTails(40))
		}
		if err := c.Stop(); err != nil {
			t.Errorf("stop private Slurm cluster: %v", err)
		}
	})
	return c
}

func start(cfg Config) (_ *Cluster, err error) {
	sanitize, err := testbuild.SanitizeEnv()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	parent := cfg.ParentTempDir
	if parent == "" {
		parent = devTempDir()
	}
	if parent, err = filepath.Abs(parent); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	dir, err := os.MkdirTemp(parent, "gpubind-cluster-")
	if err != nil {
		return nil, fmt.Errorf("cluster: create temp dir in %s: %w", parent, err)
	}
	// munged demands search permission for all on its socket's directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cluster: chmod %s: %w", dir, err)
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("cluster: random cluster name: %w", err)
	}
	c := &Cluster{
		Dir:           dir,
		ConfPath:      filepath.Join(dir, "slurm.conf"),
		GresConfPath:  filepath.Join(dir, "gres.conf"),
		PlugStackPath: filepath.Join(dir, "plugstack.conf"),
		DevDir:        filepath.Join(dir, "dev"),
		Name:          "gpb" + hex.EncodeToString(suffix),
		cfg:           cfg,
		sanitize:      sanitize,
	}
	for i := 1; i <= cfg.Nodes; i++ {
		c.NodeNames = append(c.NodeNames, fmt.Sprintf("node%d", i))
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.logTails(20))
			if serr := c.Stop(); serr != nil {
				err = fmt.Errorf("%w\n(cleanup after failed start: %v)", err, serr)
			}
		}
	}()
	for _, sub := range []string{"state", "spool", "tmp", "run", "log", "dev", "munge"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return c, fmt.Errorf("cluster: %w", err)
		}
	}
	for _, n := range c.NodeNames {
		for _, sub := range []string{"spool", "tmp"} {
			if err := os.MkdirAll(filepath.Join(dir, sub, n), 0o755); err != nil {
				return c, fmt.Errorf("cluster: %w", err)
			}
		}
	}
	for _, m := range cfg.GresOrder {
		if err := mknodGPU(c.DevDir, m, cfg.AMD); err != nil {
			return c, err
		}
	}
	if cfg.AMD && len(cfg.GresOrder) > 0 {
		// The real /dev/kfd's major is dynamic; 241 is a local/experimental one.
		if err := mknodChar(filepath.Join(c.DevDir, "kfd"), 241, 0); err != nil {
			return c, err
		}
		// DRM card nodes as the frontier fixtures name them: card0 is no GPU's (a
		// BMC's VGA registers first), GPU N's is card<1+N> (char 226:1+N).
		if err := mknodChar(filepath.Join(c.DevDir, "card0"), 226, 0); err != nil {
			return c, err
		}
		for _, m := range cfg.GresOrder {
			if err := mknodChar(filepath.Join(c.DevDir, fmt.Sprintf("card%d", 1+m)), 226, 1+m); err != nil {
				return c, err
			}
		}
	}
	if cfg.usesCgroups() {
		// Slurm names its cgroups slurm_<node>: two clusters with node1 would share them.
		// `make test` runs the passes of its Slurm matrix side by side, so waiting here is
		// normal; the wait ends within go test's -timeout (20m) in make test.
		if err := acquireCgroupLock(dir, 20*time.Minute); err != nil {
			return c, err
		}
		c.cgroupLck = true
		// Leftovers of a cluster that was killed; what cannot go now is reported by Stop.
		_ = removeSlurmCgroups(c.NodeNames)
	}
	ports, err := freePorts(1 + cfg.Nodes)
	if err != nil {
		return c, err
	}
	if cfg.AuthSlurm {
		key := make([]byte, 1024)
		if _, err := rand.Read(key); err != nil {
			return c, fmt.Errorf("cluster: slurm.key: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "slurm.key"), key, 0o600); err != nil {
			return c, fmt.Errorf("cluster: %w", err)
		}
	} else if !cfg.OwnMunge && mungeWorks(systemMungeSocket) {
		c.MungeSocket = systemMungeSocket
	} else if err := c.startMunge(); err != nil {
		return c, err
	}
	if err := c.writeConfigs(ports[0], ports[1:], c.MungeSocket); err != nil {
		return c, err
	}
	if err := c.startDaemon("slurmctld", c.bin("slurmctld"), "-D", "-i", "-f", c.ConfPath); err != nil {
		return c, err
	}
	// A slurmd that finds no slurmctld retries its registration a second later; waiting
	// for slurmctld first saves that second.
	if err := c.waitCtld(30 * time.Second); err != nil {
		return c, err
	}
	for _, n := range c.NodeNames {
		// Own UTS namespace, so `hostname` in a task names its node (multiple-slurmd).
		if err := c.startDaemon("slurmd-"+n, "unshare", "--uts", "--", "sh", "-c",
			`hostname "$1" && exec "$3" -D -f "$2" -N "$1"`, "sh", n, c.ConfPath, c.bin("slurmd")); err != nil {
			return c, err
		}
	}
	if err := c.saveState(); err != nil {
		return c, err
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		// Many simulated nodes register with one slurmctld at once on a small machine.
		timeout = 2*time.Minute + time.Duration(cfg.Nodes)*2*time.Second
	}
	return c, c.waitIdle(timeout)
}

// devTempDir is os.TempDir unless that is mounted nodev (then the fake GPU nodes would not
// open), in which case /var/tmp.
func devTempDir() string {
	d := os.TempDir()
	var st syscall.Statfs_t
	const stNodev = 0x4 // ST_NODEV
	if syscall.Statfs(d, &st) == nil && st.Flags&stNodev != 0 {
		return "/var/tmp"
	}
	return d
}

// gpuDevice is the name of fake GPU n in DevDir: nvidia<n>, or renderD<128+n> (AMD).
func gpuDevice(n int, amd bool) string {
	if amd {
		return fmt.Sprintf("renderD%d", 128+n)
	}
	return fmt.Sprintf("nvidia%d", n)
}

func mknodGPU(devDir string, minor int, amd bool) error {
	const nvidiaMajor, drmMajor = 195, 226
	if amd {
		return mknodChar(filepath.Join(devDir, gpuDevice(minor, true)), drmMajor, 128+minor)
	}
	return mknodChar(filepath.Join(devDir, gpuDevice(minor, false)), nvidiaMajor, minor)
}

func mknodChar(p string, major, minor int) error {
	if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, major<<8|minor); err != nil {
		return fmt.Errorf("cluster: mknod %s c %d %d: %w", p, major, minor, err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		return fmt.Errorf("cluster: chmod %s: %w", p, err)
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("cluster: find a free TCP port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// mungeWorks reports whether a munged answers on socket.
func mungeWorks(socket string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "munge", "-n", "-S", socket).Run() == nil
}

// startMunge runs a private munged with its own key and socket in the cluster directory,
// so a system munged's key is never read or replaced.
func (c *Cluster) startMunge() error {
	md := filepath.Join(c.Dir, "munge")
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("cluster: munge key: %w", err)
	}
	keyPath := filepath.Join(md, "munge.key")
	if err := os.WriteFile(keyPath, key, 0o600); err != nil {
		return fmt.Errorf("cluster: write %s: %w", keyPath, err)
	}
	c.MungeSocket = filepath.Join(md, "munge.socket")
	if err := c.startDaemon("munged", "munged", "-F", "--socket="+c.MungeSocket, "--key-file="+keyPath,
		"--pid-file="+filepath.Join(md, "munged.pid"), "--log-file="+filepath.Join(c.Dir, "log", "munged.log"),
		"--seed-file="+filepath.Join(md, "munged.seed"), "--num-threads=2"); err != nil {
		return err
	}
	d := c.daemons[len(c.daemons)-1]
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !d.alive() {
			return errors.New("cluster: munged exited at start")
		}
		if mungeWorks(c.MungeSocket) {
			return nil
		}
	}
	return fmt.Errorf("cluster: munged does not answer on %s after 30s", c.MungeSocket)
}

// daemonEnv is the environment of the daemons: the caller's without SLURM_* variables
// (a caller inside a job of another cluster would leak its ids), plus SLURM_CONF and the marker,
// and for the sanitizer build the ASan runtime (testbuild.SanitizeEnv; tasks inherit it from srun).
func (c *Cluster) daemonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLURM_") || strings.HasPrefix(kv, MarkerEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "SLURM_CONF="+c.ConfPath, MarkerEnv+"="+c.Dir)
	env = append(env, c.sanitize...)
	if p := c.cfg.SlurmPrefix; p != "" {
		// Scripts run by sbatch and tasks that call srun/scontrol must find this Slurm.
		for i, kv := range env {
			if strings.HasPrefix(kv, "PATH=") {
				env[i] = "PATH=" + filepath.Join(p, "bin") + ":" + filepath.Join(p, "sbin") + ":" + kv[len("PATH="):]
			}
		}
	}
	return env
}

// slurmBin is the path of a Slurm program under prefix, or name itself (found in PATH) when
// prefix is empty or does not hold it (munged, unshare).
func slurmBin(prefix, name string) string {
	if prefix == "" {
		return name
	}
	for _, dir := range []string{"bin", "sbin"} {
		p := filepath.Join(prefix, dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return name
}

// Bin is the path of a Slurm program of this cluster's Slurm (srun, sbatch, ...), for tests
// that run it themselves rather than through Run.
func (c *Cluster) Bin(name string) string { return slurmBin(c.cfg.SlurmPrefix, name) }

func (c *Cluster) bin(name string) string { return c.Bin(name) }

// SlurmPrefix is the install prefix of the Slurm this cluster runs ("" for the one in PATH).
func (c *Cluster) SlurmPrefix() string { return c.cfg.SlurmPrefix }

// startDaemon starts a foreground daemon with stdout/stderr in log/<name>.out.
func (c *Cluster) startDaemon(name, bin string, args ...string) error {
	outPath := filepath.Join(c.Dir, "log", name+".out")
	out, err := os.OpenFile(outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env = c.daemonEnv()
	if name == "slurmctld" || name == "munged" {
		// They load no SPANK plugin, so the sanitizer build's runtime stays out of them:
		// what they do wrong is Slurm's and munge's, not this project's (docs/security.md).
		cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return slices.Contains(c.sanitize, kv) })
	}
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = out, out
	// Own session: a Ctrl-C in the caller's terminal must not reach the daemons.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !c.cfg.Detached {
		// A killed test binary must not leave daemons behind (slurmstepds may remain; their
		// jobs end when srun dies).
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", name, err)
	}
	d := &daemon{Name: name, Pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the exit is reported through the logs
		close(d.done)
	}()
	c.mu.Lock()
	c.daemons = append(c.daemons, d)
	c.mu.Unlock()
	return nil
}

// LiveDaemons counts the cluster's daemons that still run.
func (c *Cluster) LiveDaemons() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, d := range c.daemons {
		if d.alive() && c.isOurs(d.Pid) {
			n++
		}
	}
	return n
}

func (d *daemon) alive() bool {
	if d.done != nil {
		select {
		case <-d.done:
			return false
		default:
			return true
		}
	}
	return pidAlive(d.Pid)
}

func (c *Cluster) saveState() error {
	c.mu.Lock()
	st := state{Dir: c.Dir, Name: c.Name, NodeNames: c.NodeNames, MungeSocket: c.MungeSocket,
		CgroupLock: c.cgroupLck, Daemons: c.daemons, Config: c.cfg}
	b, err := json.MarshalIndent(st, "", "  ")
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cluster: encode state: %w", err)
	}
	p := filepath.Join(c.Dir, "cluster.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return fmt.Errorf("cluster: write %s: %w", p, err)
	}
	return nil
}

// Load attaches to a cluster that another process started (with Detached), from its directory.
func Load(dir string) (*Cluster, error) {
	p := filepath.Join(dir, "cluster.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s is not a running cluster's directory: %w", dir, err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("cluster: parse %s: %w", p, err)
	}
	if abs, err := filepath.Abs(dir); err != nil || abs != st.Dir {
		return nil, fmt.Errorf("cluster: %s describes %s, not %s", p, st.Dir, dir)
	}
	sanitize, err := testbuild.SanitizeEnv()
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &Cluster{
		sanitize:      sanitize,
		Dir:           st.Dir,
		ConfPath:      filepath.Join(st.Dir, "slurm.conf"),
		GresConfPath:  filepath.Join(st.Dir, "gres.conf"),
		PlugStackPath: filepath.Join(st.Dir, "plugstack.conf"),
		DevDir:        filepath.Join(st.Dir, "dev"),
		NodeNames:     st.NodeNames,
		Name:          st.Name,
		MungeSocket:   st.MungeSocket,
		cfg:           st.Config,
		daemons:       st.Daemons,
		cgroupLck:     st.CgroupLock,
	}, nil
}

// waitCtld polls until slurmctld answers.
func (c *Cluster) waitCtld(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if !c.daemons[len(c.daemons)-1].alive() {
			return errors.New("cluster: slurmctld exited during start")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, _, err := c.Run(ctx, "scontrol", "ping")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: slurmctld does not answer after %v: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitIdle polls sinfo until every node is idle.
func (c *Cluster) waitIdle(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		c.mu.Lock()
		for _, d := range c.daemons {
			if !d.alive() {
				c.mu.Unlock()
				return fmt.Errorf("cluster: %s exited during start", d.Name)
			}
		}
		c.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, _, err := c.Run(ctx, "sinfo", "-h", "-N", "-o", "%N %T")
		cancel()
		if err == nil {
			last = strings.TrimSpace(out)
			idle := 0
			for _, l := range strings.Split(last, "\n") {
				f := strings.Fields(l)
				if len(f) == 2 && f[1] == "idle" {
					idle++
				}
			}
			if idle == len(c.NodeNames) {
				return nil
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: nodes not idle after %v; last sinfo: %s", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Env is os.Environ() without SLURM_* variables, plus SLURM_CONF of this cluster and a marker
// variable that lets Stop find the commands and tasks of this cluster.
func (c *Cluster) Env() []string { return c.daemonEnv() }

// Run runs a client command (sinfo, scontrol, sbatch, ...) against this cluster.
func (c *Cluster) Run(ctx context.Context, name string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, c.bin(name), args...)
	cmd.Env = c.Env()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second // a task that keeps srun's pipes open must not hang the test
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w; stderr: %s", name, strings.Join(args, " "), err, strings.TrimSpace(tail(e.String(), 20)))
	}
	return o.String(), e.String(), err
}

// Srun runs srun with args against this cluster.
func (c *Cluster) Srun(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	return c.Run(ctx, "srun", args...)
}

// SlurmdLog returns the contents of that node's slurmd log ("" if it has none yet).
func (c *Cluster) SlurmdLog(node string) string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "log", "slurmd-"+node+".log"))
	return string(b)
}

// slurmctldLog returns the contents of slurmctld's log.
func (c *Cluster) slurmctldLog() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "log", "slurmctld.log"))
	return string(b)
}

// logTails gives the last n lines of every log of the cluster.
func (c *Cluster) logTails(n int) string {
	files, _ := filepath.Glob(filepath.Join(c.Dir, "log", "*"))
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(bytes.TrimSpace(data)) == 0 {
			continue
		}
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, strings.TrimRight(tail(string(data), n), "\n"))
	}
	return b.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
