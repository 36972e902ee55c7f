// Package plugin holds the integration tests of the gpubind SPANK plugin on
// a private Slurm cluster (tests/cluster) with fixture topologies
// (tests/fixtures) and fake GPU device nodes. They need root.
package plugin

import (
	"context"
	"os"
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

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func repoRoot() string { return testbuild.RepoRoot() }

func fixture(name string) string { return filepath.Join(repoRoot(), "tests/fixtures", name) }

// pluginDir builds spank_gpubind.so (its own Makefile) and the engine next
// to it, where the plugin finds it by default.
func pluginDir(t *testing.T) string {
	t.Helper()
	return pluginDirB(t)
}

func pluginDirB(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (private Slurm cluster)")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "gpubind-plugin-")
		if buildErr != nil {
			return
		}
		// 0755 so that slurmstepd (root) and the job user can read it.
		if buildErr = os.Chmod(buildDir, 0o755); buildErr != nil {
			return
		}
		buildErr = testbuild.Plugin(buildDir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// plugLine is a plugstack.conf line for the plugin with the given args; the
// discovery cache goes to a test directory.
func plugLine(t *testing.T, args ...string) string {
	dir := pluginDir(t)
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	return strings.Join(append([]string{"required", filepath.Join(dir, "spank_gpubind.so"), "cache_dir=" + cache}, args...), " ")
}

func cacheDirB(t testing.TB) string {
	cache := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	return cache
}

func writePlugStack(t testing.TB, c *cluster.Cluster, lines []string) {
	t.Helper()
	if err := os.WriteFile(c.PlugStackPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// setPlugStack rewrites plugstack.conf; srun and slurmstepd read it anew
// at every step.
func setPlugStack(t *testing.T, c *cluster.Cluster, lines ...string) {
	t.Helper()
	if err := os.WriteFile(c.PlugStackPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// taskScript prints one line per task: what it was given and where it runs.
const taskScript = `echo "T $SLURMD_NODENAME $SLURM_LOCALID $SLURM_PROCID ${CUDA_VISIBLE_DEVICES:--} ${GPUBIND_PCI_BUS_IDS:--} ${GPUBIND_NUMA:--} ${SLURM_STEP_GPUS:--} $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status) ${NCCL_IB_HCA:--}"`

type task struct {
	Node                  string
	Local, Rank           int
	Visible, BusIDs, NUMA string
	StepGPUs, CPUs, HCA   string
}

var taskRe = regexp.MustCompile(`^T (\S+) (\d+) (\d+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$`)

// srunTasks runs taskScript under srun and returns the tasks by rank.
func srunTasks(t *testing.T, c *cluster.Cluster, args ...string) ([]task, string) {
	t.Helper()
	out, errOut, err := c.Srun(ctx(t), append(args, "sh", "-c", taskScript)...)
	if err != nil {
		t.Fatalf("srun %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return parseTasks(t, out), errOut
}

// matchLines is re's submatches on each line of out that it matches.
func matchLines(re *regexp.Regexp, out string) [][]string {
	var ms [][]string
	for _, l := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			ms = append(ms, m)
		}
	}
	return ms
}

func parseTasks(t *testing.T, out string) []task {
	t.Helper()
	var tasks []task
	for _, m := range matchLines(taskRe, out) {
		local, _ := strconv.Atoi(m[2])
		rank, _ := strconv.Atoi(m[3])
		tasks = append(tasks, task{m[1], local, rank, m[4], m[5], m[6], m[7], m[8], m[9]})
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Rank < tasks[j].Rank })
	if len(tasks) == 0 {
		t.Fatalf("no task lines in:\n%s", out)
	}
	return tasks
}

// Fixture facts (tests/fixtures/README.md): bus ids by GRES index (= minor =
// PCI order for dgxh100-2cpu) and the NUMA node of each bus id.
var dgxBus = []string{"0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
	"0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"}

func dgxNUMA(bus string) int {
	for i, b := range dgxBus {
		if b == bus {
			return i / 4
		}
	}
	return -1
}

// misordered-2cpu: GRES 0 = 8a, 1 = b1, 2 = 3d, 3 = 1b; 1b,3d on NUMA 0.
var misBus = []string{"0000:8a:00.0", "0000:b1:00.0", "0000:3d:00.0", "0000:1b:00.0"}

func misNUMA(bus string) int {
	switch bus {
	case "0000:1b:00.0", "0000:3d:00.0":
		return 0
	case "0000:8a:00.0", "0000:b1:00.0":
		return 1
	}
	return -1
}

func splitList(s string) []string {
	if s == "-" || s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func cpuNUMA(cpus string) int {
	switch cpus {
	case "0":
		return 0
	case "1":
		return 1
	}
	return -1
}
