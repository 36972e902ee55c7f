// Package containers holds the tests of the gpubind SPANK plugin with container runtimes on a
// private Slurm cluster (tests/cluster), fake GPUs and the fixture dgxh100-2cpu: pyxis and
// enroot built by tests/containers/build.sh (pyxis_test.go), Slurm's OCI support
// (oci*_test.go). Images are made here from a directory tree (no registry). They need root,
// and pyxis and enroot built by build.sh (cached, or CONTAINERS_SRC_DIR to build them from):
// without them the pyxis tests fail with build.sh's message, they do not skip.
//
// This file is the harness both sides share: what is built once per package run (the
// plugin, the runtimes, images), the cluster every test starts, and one step run with the
// line each task prints (everything a task has, in one srun).
package containers

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/testbuild"
)

// pkgDir holds what is built once per package run (plugin, images); anyone may enter it
// (srun as the job's user loads the plugin, enroot as that user reads the images). Removed by
// TestMain.
var pkgDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "gpubind-containers-")
	if err == nil {
		err = os.Chmod(d, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tests/containers:", err)
		os.Exit(1)
	}
	pkgDir = d
	// The fixture is copied where the job's user can read it: the checkout may sit in a
	// directory only root may enter (.ci/run's clone in a mktemp -d folder, a home directory),
	// and enroot, run as that user, mounts it into the container.
	fixture := filepath.Join(repo(), "tests/fixtures/dgxh100-2cpu")
	if out, err := exec.Command("cp", "-a", fixture, d).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "tests/containers: copying %s to %s: %v\n%s", fixture, d, err, out)
		os.RemoveAll(d)
		os.Exit(1)
	}
	if out, err := exec.Command("chmod", "-R", "a+rX", fixtureRoot()).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "tests/containers: chmod -R a+rX %s: %v\n%s", fixtureRoot(), err, out)
		os.RemoveAll(d)
		os.Exit(1)
	}
	rc := m.Run()
	os.RemoveAll(d)
	os.Exit(rc)
}

func repo() string { return testbuild.RepoRoot() }

// fixtureRoot is the machine the plugin sees (root= of its plugstack line): a DGX H100 with
// 2 CPUs, GPU minors 0..7, UUIDs in proc/driver/nvidia/gpus/*/information; TestMain's copy of
// tests/fixtures/dgxh100-2cpu that every user may read.
func fixtureRoot() string { return filepath.Join(pkgDir, "dgxh100-2cpu") }

// needRuntimes skips without root. Without the runtimes (no cached build, and no
// CONTAINERS_SRC_DIR to build from) runtimes fails with build.sh's message: never a skip.
func needRuntimes(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (private Slurm cluster)")
	}
}

// once keeps the result of a build made once per package run.
type once struct {
	sync.Once
	val string
	err error
}

func (o *once) get(t *testing.T, f func() (string, error)) string {
	t.Helper()
	o.Do(func() { o.val, o.err = f() })
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.val
}

var runtimesBuilt, pluginBuilt once

// runtimes builds (or finds in build.sh's cache) pyxis for the Slurm under test
// ($SLURM_PREFIX) and enroot, and returns the install prefix.
func runtimes(t *testing.T) string {
	t.Helper()
	needRuntimes(t)
	return runtimesBuilt.get(t, func() (string, error) {
		slurm := os.Getenv("SLURM_PREFIX")
		if slurm == "" || slurm == "/usr" {
			slurm = "system"
		}
		cmd := exec.Command(filepath.Join(repo(), "tests/containers/build.sh"), slurm)
		var errb strings.Builder
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("tests/containers/build.sh %s: %v\n%s", slurm, err, errb.String())
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1], nil
	})
}

// pluginDir builds spank_gpubind.so, the engine and the launcher once per package run into a
// root-owned directory anyone may read (the plugin's trust check wants root-owned, not
// writable by others).
func pluginDir(t *testing.T) string {
	t.Helper()
	return pluginBuilt.get(t, func() (string, error) {
		dir := filepath.Join(pkgDir, "plugin")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		return dir, testbuild.Plugin(dir)
	})
}

// gpubindLine is gpubind's plugstack.conf line on the fixture machine, with args added.
func gpubindLine(t *testing.T, args ...string) string {
	t.Helper()
	return strings.Join(append([]string{"required", filepath.Join(pluginDir(t), "spank_gpubind.so"),
		"cache_dir=" + t.TempDir(), "root=" + fixtureRoot(), "source=sysfs"}, args...), " ")
}

// imageFile is one file of a test image: its path below the root and its text.
type imageFile struct{ Path, Text string }

// rootTree makes a small root tree in dir: dash as /bin/sh with the libraries it needs, the
// directories a runtime mounts over, /etc/passwd and /etc/group with root and nobody, the
// marker /etc/gpubind-test-image, and files (e.g. etc/environment).
func rootTree(dir string, files ...imageFile) error {
	for _, d := range []string{"bin", "etc", "dev", "proc", "sys", "tmp", "run", "root", "lib64", "lib/x86_64-linux-gnu", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		return err
	}
	out, err := exec.Command("ldd", "/bin/dash").Output()
	if err != nil {
		return fmt.Errorf("ldd /bin/dash: %v", err)
	}
	libs := regexp.MustCompile(`(/\S+\.so[.0-9]*)`).FindAllString(string(out), -1)
	for _, f := range append([]string{"/bin/dash"}, libs...) {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, f)
		if f == "/bin/dash" {
			dst = filepath.Join(dir, "bin/sh")
		}
		if out, err := exec.Command("cp", real, dst).CombinedOutput(); err != nil {
			return fmt.Errorf("cp %s: %v: %s", real, err, out)
		}
	}
	base := []imageFile{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n"},
		{"etc/group", "root:x:0:\nnogroup:x:65534:\n"},
		{"etc/gpubind-test-image", ""},
	}
	for _, f := range append(base, files...) {
		p := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.Text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

var (
	imagesMu sync.Mutex
	images   = map[string]string{}
)

// squashImage is a squashfs image (mksquashfs, files owned by root) of rootTree with files,
// made once per package run for the same files, readable by anyone.
func squashImage(t *testing.T, files ...imageFile) string {
	t.Helper()
	key := fmt.Sprint(files)
	imagesMu.Lock()
	defer imagesMu.Unlock()
	if img, ok := images[key]; ok {
		return img
	}
	dir, err := os.MkdirTemp(pkgDir, "image-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := rootTree(root, files...); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "image.sqsh")
	if out, err := exec.Command("mksquashfs", root, img, "-quiet", "-noappend", "-all-root").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v: %s", err, out)
	}
	if err := os.Chmod(img, 0o644); err != nil {
		t.Fatal(err)
	}
	images[key] = img
	return img
}

// sharedDir is a new directory anyone may enter (t.TempDir's parents are root's only), owned
// by uid, removed at the end of the test.
func sharedDir(t *testing.T, uid int) string {
	t.Helper()
	d, err := os.MkdirTemp(pkgDir, "shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, uid, -1); err != nil {
		t.Fatal(err)
	}
	return d
}

// startCluster starts the cluster of these tests, configured as sites configure GPU nodes:
// task/cgroup + task/affinity, ConstrainDevices, 8 fake GPUs, 8 CPUs declared. The
// daemons inherit the test's environment at start (PATH: where pyxis finds enroot). Tests
// change plugstack.conf between steps (setPlugStack): srun and slurmstepd read it per step.
func startCluster(t *testing.T, cfg cluster.Config) *cluster.Cluster {
	t.Helper()
	cfg.CPUs, cfg.GPUs = 8, 8
	cfg.TaskPlugin, cfg.ConstrainDevices = "task/cgroup,task/affinity", true
	return cluster.StartT(t, cfg)
}

// setPlugStack rewrites plugstack.conf; srun and slurmstepd read it anew at every step.
func setPlugStack(t *testing.T, c *cluster.Cluster, lines ...string) {
	t.Helper()
	if err := os.WriteFile(c.PlugStackPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// taskScript prints one line per task with everything the tests compare, so that one srun
// tells all: ids, CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, the plugin's bus ids, which of
// the device nodes given as arguments it can open for reading and writing, whether it runs in
// a test image, its real uid (/proc: images need no id), and its devices cgroup (v1 "devices" line, else the v2 "0::" line).
// Then, when $GPUBIND_WHEREAMI holds a command (whereamiCmd), its output on one line prefixed
// "W rank " (shell only: images have no tr).
const taskScript = `for d in "$@"; do if [ -r "$d" ] && [ -w "$d" ]; then o="$o${o:+,}${d##*/}"; fi; done
dcg= ucg=; while IFS= read -r l; do case $l in *:devices:*) dcg=${l#*:devices:};; 0::*) ucg=${l#0::};; esac; done </proc/self/cgroup
uid=-; while read -r k v _; do if [ "$k" = Uid: ]; then uid=$v; fi; done </proc/self/status
echo "T $SLURM_LOCALID $SLURM_PROCID ${CUDA_VISIBLE_DEVICES:--} ${NVIDIA_VISIBLE_DEVICES:--} ${GPUBIND_PCI_BUS_IDS:--} ${o:--} $(test -e /etc/gpubind-test-image && echo inside || echo outside) $uid ${dcg:-${ucg:--}}"
if [ -n "$GPUBIND_WHEREAMI" ]; then set -f; w=$($GPUBIND_WHEREAMI 2>&1); echo "W $SLURM_PROCID" $w; fi`

var (
	taskRe  = regexp.MustCompile(`^T (\d+) (\d+) (\S+) (\S+) (\S+) (\S+) (inside|outside) (\S+) (\S+)$`)
	whereRe = regexp.MustCompile(`^W (\d+)(.*)$`)
)

// task is what one task printed (taskScript).
type task struct {
	Local, Rank int
	Visible     string // CUDA_VISIBLE_DEVICES, "-" unset
	NVVisible   string // NVIDIA_VISIBLE_DEVICES, "-" unset
	Bus         string // GPUBIND_PCI_BUS_IDS
	Openable    string // device nodes it may open ("nvidia0,nvidia3"), "-" none
	Where       string // inside or outside a test image
	UID         string // real uid
	Cgroup      string // devices cgroup path (v1) or the cgroup (v2)
	CUDA        string // the bus ids of the GPUs CUDA would use (whereami), when asked
	Whereami    string // whereami's output
}

func (k task) String() string {
	return fmt.Sprintf("task %d (local %d, %s, uid %s): CUDA_VISIBLE_DEVICES=%s NVIDIA_VISIBLE_DEVICES=%s bus %s opens %s cgroup %s CUDA uses %s",
		k.Rank, k.Local, k.Where, k.UID, k.Visible, k.NVVisible, k.Bus, k.Openable, k.Cgroup, k.CUDA)
}

// step is one srun: its options (before the command), the user it is submitted as ("" root)
// and environment variables added to srun's (the job's) environment.
type step struct {
	Args []string
	User string
	Env  []string
}

// devNodes is the cluster's fake GPU nodes nvidia0..7, the nodes taskScript tries.
func devNodes(c *cluster.Cluster) []string {
	var devs []string
	for i := 0; i < 8; i++ {
		devs = append(devs, filepath.Join(c.DevDir, "nvidia"+strconv.Itoa(i)))
	}
	return devs
}

// runTasks runs s with taskScript and returns the tasks' lines by rank, srun's stderr, and an
// error holding both outputs when srun fails.
func runTasks(t *testing.T, c *cluster.Cluster, s step) ([]task, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(append(append([]string{}, s.Args...), "sh", "-c", taskScript, "sh"), devNodes(c)...)
	out, errOut, err := srun(ctx, c, s.User, s.Env, args)
	var tasks []task
	where := map[int]string{}
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if m := whereRe.FindStringSubmatch(l); m != nil {
			r, _ := strconv.Atoi(m[1])
			where[r] = strings.TrimSpace(m[2])
			continue
		}
		m := taskRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		local, _ := strconv.Atoi(m[1])
		rank, _ := strconv.Atoi(m[2])
		tasks = append(tasks, task{Local: local, Rank: rank, Visible: m[3], NVVisible: m[4], Bus: m[5],
			Openable: m[6], Where: m[7], UID: m[8], Cgroup: m[9]})
	}
	for i := range tasks {
		if w, ok := where[tasks[i].Rank]; ok {
			tasks[i].Whereami = w
			tasks[i].CUDA = cudaBus(w)
		}
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Rank < tasks[j].Rank })
	if err != nil {
		err = fmt.Errorf("srun %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(s.Args, " "), err, out, errOut)
	}
	return tasks, errOut, err
}

// srun runs srun against c with args, as user ("" the caller: root; else through setpriv with
// the user's own groups, from /tmp), with env added to its environment.
func srun(ctx context.Context, c *cluster.Cluster, user string, env, args []string) (string, string, error) {
	var cmd *exec.Cmd
	if user == "" {
		cmd = exec.CommandContext(ctx, c.Bin("srun"), args...)
	} else {
		u, err := osuser.Lookup(user)
		if err != nil {
			return "", "", err
		}
		cmd = exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups",
			c.Bin("srun"), "--chdir=/tmp"}, args...)...)
		cmd.Dir = "/tmp"
	}
	cmd.Env = append(c.Env(), env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return o.String(), e.String(), err
}

// sameTasks fails t unless inside holds, task by task, what outside holds, apart from where
// they ran (outside must be outside the image, inside inside it) and the fields ignore names
// ("UID", "Cgroup", "NVVisible", "CUDA").
func sameTasks(t *testing.T, n int, outside, inside []task, ignore ...string) {
	t.Helper()
	if len(outside) != n || len(inside) != n {
		t.Fatalf("%d tasks outside, %d inside, want %d:\n%v\n%v", len(outside), len(inside), n, outside, inside)
	}
	stepCgroups(t, outside, inside)
	for i := range outside {
		o, in := outside[i], inside[i]
		if o.Where != "outside" || in.Where != "inside" {
			t.Fatalf("task %d ran %s and %s, want outside and inside the image", i, o.Where, in.Where)
		}
		o.Where, in.Where = "", ""
		o.Whereami, in.Whereami = "", "" // compared through CUDA
		for _, f := range ignore {
			switch f {
			case "UID":
				o.UID, in.UID = "", ""
			case "Cgroup":
				o.Cgroup, in.Cgroup = "", ""
			case "NVVisible":
				o.NVVisible, in.NVVisible = "", ""
			case "CUDA":
				o.CUDA, in.CUDA = "", ""
			default:
				t.Fatalf("sameTasks: no field %q to ignore", f)
			}
		}
		if o != in {
			t.Errorf("task %d differs:\noutside %v\ninside  %v", i, outside[i], inside[i])
		}
	}
}

var (
	jobCgroupRe     = regexp.MustCompile(`^.*/job_\d+/`)
	gpubindCgroupRe = regexp.MustCompile(`gpubind_j\d+_s\d+_p\d+_t(\d+)`)
)

// stepCgroups rewrites each task's cgroup in outside and inside (two steps of two jobs) to
// its path below the job's, with the job id and pid taken out of the names of gpubind's
// per-task cgroups (isolate), so that they compare. A runtime that gives the container a
// cgroup namespace (enroot does) shows each task its cgroup relative to the namespace's
// root, the cgroup of the task that created the container then: "/" for that task,
// "/../task_1" for another. Such a path is resolved against the creating task's cgroup as
// the same task has it outside (the container's tasks stay where Slurm put them, or the
// comparison fails).
func stepCgroups(t *testing.T, outside, inside []task) {
	t.Helper()
	for i := range outside {
		outside[i].Cgroup = jobCgroupRe.ReplaceAllString(outside[i].Cgroup, "")
	}
	root := ""
	for i, k := range inside {
		if k.Cgroup == "/" && i < len(outside) {
			root = outside[i].Cgroup
		}
	}
	for i, k := range inside {
		switch {
		case jobCgroupRe.MatchString(k.Cgroup):
			inside[i].Cgroup = jobCgroupRe.ReplaceAllString(k.Cgroup, "")
		case root != "":
			inside[i].Cgroup = path.Join(root, k.Cgroup)
		}
	}
	for _, ks := range [][]task{outside, inside} {
		for i := range ks {
			ks[i].Cgroup = gpubindCgroupRe.ReplaceAllString(ks[i].Cgroup, "gpubind_t$1")
		}
	}
}

// whereamiCmd is the value of GPUBIND_WHEREAMI that makes taskScript run `gpubind whereami
// --json` on the fixture machine with the cluster's fake nodes: which GPUs CUDA would use,
// numbering CUDA_VISIBLE_DEVICES by the nodes the task can open where it runs (inside a
// container: those in its mount namespace). bin is where gpubindBinary put gpubind.
func whereamiCmd(bin string, c *cluster.Cluster) string {
	return filepath.Join(bin, "gpubind") + " whereami --json --root " + fixtureRoot() + " --dev " + c.DevDir
}

var gpubindBuilt once

// gpubindBinary builds cmd/gpubind once per package run into a directory anyone may read
// and returns that directory (a container mounts it at the same path).
func gpubindBinary(t *testing.T) string {
	t.Helper()
	return gpubindBuilt.get(t, func() (string, error) {
		dir := filepath.Join(pkgDir, "bin")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", err
		}
		return dir, testbuild.Run(repo(), []string{"go", "build", "-trimpath", "-o", filepath.Join(dir, "gpubind"), "./cmd/gpubind"})
	})
}

// cudaBus is the comma-separated bus ids of the GPUs whereami's JSON lists ("-" none), or
// "?" and the output when it is no such JSON.
func cudaBus(out string) string {
	var w struct {
		GPUs []struct {
			Bus string `json:"pci_bus_id"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		return "?(" + out + ")"
	}
	var b []string
	for _, g := range w.GPUs {
		b = append(b, g.Bus)
	}
	if len(b) == 0 {
		return "-"
	}
	return strings.Join(b, ",")
}
