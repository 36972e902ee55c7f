package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stop cancels the cluster's jobs, waits for their slurmstepd processes, ends the daemons it
// started (SIGTERM, then SIGKILL after a few seconds), removes the cgroups Slurm left and
// the cluster directory. It is safe to call more than once.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	daemons := append([]*daemon(nil), c.daemons...)
	c.mu.Unlock()

	var errs []error
	if c.daemonAlive(daemons, "slurmctld") {
		c.cancelJobs()
	}
	// slurmstepds and tasks end once their jobs are cancelled; give them time, then kill.
	if left := waitGone(c.strays(daemons), 20*time.Second); len(left) > 0 {
		killAll(left)
		if left := waitGone(left, 5*time.Second); len(left) > 0 {
			errs = append(errs, fmt.Errorf("cluster: processes %v of %s survive SIGKILL", left, c.Dir))
		}
	}
	// slurmd first (it ignores SIGTERM until registered, hence the SIGKILL), then
	// slurmctld, munged last: the others authenticate through it while shutting down.
	var groups [3][]*daemon
	for _, d := range daemons {
		switch {
		case strings.HasPrefix(d.Name, "slurmd"):
			groups[0] = append(groups[0], d)
		case d.Name == "slurmctld":
			groups[1] = append(groups[1], d)
		default:
			groups[2] = append(groups[2], d)
		}
	}
	for _, g := range groups {
		if err := stopDaemons(g, c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	// Anything still carrying the marker (a stepd started while we stopped, a stray srun).
	if left := c.strays(nil); len(left) > 0 {
		killAll(left)
		if left := waitGone(left, 5*time.Second); len(left) > 0 {
			errs = append(errs, fmt.Errorf("cluster: processes %v of %s survive SIGKILL", left, c.Dir))
		}
	}
	if c.cgroupLck {
		if err := removeSlurmCgroups(c.NodeNames); err != nil {
			errs = append(errs, err)
		}
		if err := releaseCgroupLock(c.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("cluster: remove %s: %w", c.Dir, err))
	}
	return errors.Join(errs...)
}

func (c *Cluster) daemonAlive(ds []*daemon, name string) bool {
	for _, d := range ds {
		if d.Name == name && d.alive() && c.isOurs(d.Pid) {
			return true
		}
	}
	return false
}

// cancelJobs scancels every job of this cluster and waits until squeue lists none.
func (c *Cluster) cancelJobs() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		out, _, err := c.Run(ctx, "squeue", "-h", "-o", "%A")
		if err != nil {
			return
		}
		ids := strings.Fields(out)
		if len(ids) == 0 {
			return
		}
		_, _, _ = c.Run(ctx, "scancel", ids...) // ids that ended meanwhile make scancel fail
		time.Sleep(200 * time.Millisecond)
	}
}

// strays lists processes carrying this cluster's marker, except the given daemons and us.
func (c *Cluster) strays(except []*daemon) []int {
	skip := map[int]bool{os.Getpid(): true}
	for _, d := range except {
		skip[d.Pid] = true
	}
	var pids []int
	for _, pid := range markedPids(c.Dir) {
		// Children of a daemon (slurmctld's slurmscriptd) end with it; slurmstepd
		// double-forks, so it is no daemon's child.
		if !skip[pid] && (len(except) == 0 || !skip[ppid(pid)]) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ppid is the parent of pid, 0 if unknown.
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// isOurs reports whether pid still carries this cluster's marker (pids are reused).
func (c *Cluster) isOurs(pid int) bool { return carriesMarker(pid, c.Dir) }

// carriesMarker reports whether pid belongs to the cluster in dir: its environment holds the
// marker, or, for slurmstepd, which in newer Slurm (26.05) starts with its own environment, one of its open
// files lies in dir (the slurmd log it writes to, its spool).
func carriesMarker(pid int, dir string) bool {
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return false
	}
	if hasMarker(env, dir) {
		return true
	}
	comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if strings.TrimSpace(string(comm)) != "slurmstepd" {
		return false
	}
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			return true
		}
	}
	return false
}

func hasMarker(environ []byte, dir string) bool {
	want := []byte(MarkerEnv + "=" + dir)
	for _, kv := range bytes.Split(environ, []byte{0}) {
		if bytes.Equal(kv, want) {
			return true
		}
	}
	return false
}

// markedPids scans /proc for live processes whose environment holds the marker of dir.
func markedPids(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if !pidAlive(pid) || !carriesMarker(pid, dir) {
			continue
		}
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	return pids
}

// pidAlive is true for an existing process that is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may itself hold ") ".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] != 'Z' && b[i+2] != 'X'
}

func killAll(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL) // it may have exited meanwhile
	}
}

// waitGone waits until none of pids is alive and returns those still alive at the timeout.
func waitGone(pids []int, timeout time.Duration) []int {
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if pidAlive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopDaemons sends SIGTERM to each daemon still ours, SIGKILL after 5 s.
func stopDaemons(ds []*daemon, dir string) error {
	c := &Cluster{Dir: dir}
	var live []*daemon
	for _, d := range ds {
		if d.alive() && c.isOurs(d.Pid) {
			live = append(live, d)
			_ = syscall.Kill(d.Pid, syscall.SIGTERM)
		}
	}
	wait := func(timeout time.Duration) []*daemon {
		deadline := time.Now().Add(timeout)
		for {
			var left []*daemon
			for _, d := range live {
				if d.alive() {
					left = append(left, d)
				}
			}
			if len(left) == 0 || time.Now().After(deadline) {
				return left
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	left := wait(5 * time.Second)
	for _, d := range left {
		_ = syscall.Kill(d.Pid, syscall.SIGKILL)
	}
	live = left
	if left := wait(5 * time.Second); len(left) > 0 {
		var names []string
		for _, d := range left {
			names = append(names, fmt.Sprintf("%s(%d)", d.Name, d.Pid))
		}
		return fmt.Errorf("cluster: daemons %s survive SIGKILL", strings.Join(names, ", "))
	}
	return nil
}

// cgroupRoot holds the cgroup v1 controller mounts where Slurm's cgroup/v1 plugin works.
const cgroupRoot = "/sys/fs/cgroup"

// removeSlurmCgroups removes the slurm_<node> cgroup trees that Slurm leaves behind, deepest
// first (a cgroup directory is removed with rmdir, never recursively).
func removeSlurmCgroups(nodes []string) error {
	ctrls, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil // no cgroup fs: nothing was created
	}
	var errs []error
	for _, ctrl := range ctrls {
		for _, n := range nodes {
			top := filepath.Join(cgroupRoot, ctrl.Name(), "slurm_"+n)
			if _, err := os.Stat(top); err != nil {
				continue
			}
			var dirs []string
			_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				if err := rmdirRetry(dirs[i]); err != nil {
					errs = append(errs, fmt.Errorf("cluster: remove cgroup %s: %w", dirs[i], err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry retries EBUSY for a moment: the kernel frees a cgroup shortly after its last task.
func rmdirRetry(p string) error {
	var err error
	for range 40 {
		err = syscall.Rmdir(p)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// The cgroup lock serialises clusters that use cgroups: Slurm's cgroup/v1 plugin names its
// trees slurm_<node>, identical across clusters, and Stop removes them.
func cgroupLockPath() string {
	if st, err := os.Stat("/run"); err == nil && st.IsDir() {
		return "/run/gpubind-test-cluster-cgroup.lock"
	}
	return filepath.Join(os.TempDir(), "gpubind-test-cluster-cgroup.lock")
}

// acquireCgroupLock records dir (and our pid) as the owner, waiting while a live owner holds it.
func acquireCgroupLock(dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		owner, err := withLockFile(func(f *os.File) (string, error) {
			b, err := readAll(f)
			if err != nil {
				return "", err
			}
			if o := strings.Fields(string(b)); len(o) == 2 && ownerAlive(o[0], o[1]) {
				return o[0], nil
			}
			return "", rewrite(f, fmt.Sprintf("%s %d\n", dir, os.Getpid()))
		})
		if err != nil {
			return err
		}
		if owner == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: another cgroup cluster (%s) still runs after %v; stop it first", owner, timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ownerAlive: the owner's directory exists and its starter or one of its daemons still runs.
func ownerAlive(dir, pid string) bool {
	if _, err := os.Stat(dir); err != nil {
		return false
	}
	if p, err := strconv.Atoi(pid); err == nil && pidAlive(p) {
		return true
	}
	return len(markedPids(dir)) > 0
}

func releaseCgroupLock(dir string) error {
	_, err := withLockFile(func(f *os.File) (string, error) {
		b, err := readAll(f)
		if err != nil {
			return "", err
		}
		if o := strings.Fields(string(b)); len(o) == 2 && o[0] == dir {
			return "", rewrite(f, "")
		}
		return "", nil
	})
	return err
}

func withLockFile(fn func(*os.File) (string, error)) (string, error) {
	p := cgroupLockPath()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", fmt.Errorf("cluster: open %s: %w", p, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("cluster: flock %s: %w", p, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return fn(f)
}

func readAll(f *os.File) ([]byte, error) {
	if _, err := f.Seek(0, 0); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var b bytes.Buffer
	if _, err := b.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("cluster: read %s: %w", f.Name(), err)
	}
	return b.Bytes(), nil
}

func rewrite(f *os.File, s string) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if _, err := f.WriteAt([]byte(s), 0); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}
