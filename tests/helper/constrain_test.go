package helper

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// fixtureMinors maps each GPU of a fixture tree to its device minor ("Device Minor" in the
// driver's information file), by bus id.
func fixtureMinors(t *testing.T, root string) map[int]string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "proc/driver/nvidia/gpus/*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no GPUs in %s: %v", root, err)
	}
	out := map[int]string{}
	for _, d := range dirs {
		f, err := os.Open(filepath.Join(d, "information"))
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			k, v, _ := strings.Cut(s.Text(), ":")
			if strings.TrimSpace(k) == "Device Minor" {
				out[atoi(t, strings.TrimSpace(v))] = filepath.Base(d)
			}
		}
		f.Close()
	}
	return out
}

// sysroot makes a GPUHELPER_SYSROOT for tasks of c: the fixture's sys and proc, and dev -> the
// cluster's fake device nodes (which the tasks' device cgroup governs).
func sysroot(t *testing.T, c *cluster.Cluster, fixture string) string {
	t.Helper()
	root := filepath.Join(c.Dir, "sysroot-"+fixture)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"sys": filepath.Join(fixtures.Root(fixture), "sys"), "proc": filepath.Join(fixtures.Root(fixture), "proc"), "dev": c.DevDir,
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	return root
}

var accessRe = regexp.MustCompile(`(?m)^ACCESS (\d+) (\S+) (\S+)$`)

// TestConstrainDevices: under Slurm with task/cgroup and ConstrainDevices (cgroup v1 here),
// without the gpubind plugin, a task can open only its step's GPUs and Slurm numbers them
// 0..k-1 in CUDA_VISIBLE_DEVICES. The misordered fixture's GRES order (minors 3,1,0,2) gives a
// step of 2 GPUs the minors 3 and 1 (buses 8a and b1), not the first ones in PCI order (1b,
// 3d). Each task prints the minors it can open, then runs ghtest: the bus id the library
// reports must be the one CUDA gives cuda_device among the GPUs the task can open, in PCI
// order (before the fix the library said 1b and 3d).
func TestConstrainDevices(t *testing.T) {
	needSetup(t)
	if _, err := exec.LookPath("srun"); err != nil {
		t.Skip("Slurm not installed (make deps)")
	}
	c := cluster.StartT(t, cluster.Config{CPUs: 4, TaskPlugin: "task/cgroup,task/affinity", Proctrack: "proctrack/cgroup",
		ConstrainDevices: true, GresOrder: []int{3, 1, 0, 2}})
	const fix = "misordered-2cpu"
	root := sysroot(t, c, fix)
	busOf := fixtureMinors(t, fixtures.Root(fix))
	script := `a=; for f in ` + c.DevDir + `/nvidia[0-9]*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}${f##*nvidia}"; done; ` +
		`echo "ACCESS $SLURM_PROCID ${CUDA_VISIBLE_DEVICES:--} ${a:--}"; exec ` + bin("ghtest") + ` info 1`
	for _, tc := range []struct {
		name  string
		args  []string
		tasks int
	}{
		{"gres=gpu:2/n=2", []string{"-n2", "--gres=gpu:2"}, 2},
		{"gres=gpu:1/n=1", []string{"-n1", "--gres=gpu:1"}, 1},
		{"gres=gpu:3/n=3", []string{"-n3", "--gres=gpu:3"}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"--mpi=pmix", "-O"}, tc.args...), "sh", "-c", script)
			out, err := srun(t, c, []string{"GPUHELPER_SYSROOT=" + root, "GPUHELPER_NCCL_LIBRARY=" + stubLib}, args...)
			if err != nil {
				t.Fatal(err)
			}
			acc := accessRe.FindAllStringSubmatch(out, -1)
			infos := parse(t, out)
			if len(acc) != tc.tasks || len(infos) != tc.tasks {
				t.Fatalf("%d ACCESS and %d INFO lines, want %d each:\n%s", len(acc), len(infos), tc.tasks, out)
			}
			for _, m := range acc {
				rank := atoi(t, m[1])
				var open []string // the buses CUDA enumerates in the task: openable, PCI order
				for _, s := range strings.Split(m[3], ",") {
					if b, ok := busOf[atoi(t, s)]; ok {
						open = append(open, b)
					}
				}
				sort.Strings(open)
				if len(open) == 4 || len(open) == 0 {
					t.Fatalf("rank %d can open minors %s: the device cgroup does not constrain the task", rank, m[3])
				}
				// CUDA_VISIBLE_DEVICES indexes the openable set.
				var vis []string
				for _, s := range strings.Split(m[2], ",") {
					if i, err := strconv.Atoi(s); err == nil && i >= 0 && i < len(open) {
						vis = append(vis, open[i])
					}
				}
				r := infos[rank]
				if r == nil {
					t.Fatalf("no INFO line for rank %d:\n%s", rank, out)
				}
				want := vis[r.lrank%len(vis)]
				if r.cuda < 0 || r.cuda >= len(vis) || vis[r.cuda] != r.bus || r.bus != want {
					t.Errorf("rank %d (local %d): cuda_device %d, pci_bus_id %s; the task can open %v, CUDA_VISIBLE_DEVICES=%s, so CUDA device %d is %s",
						rank, r.lrank, r.cuda, r.bus, open, m[2], slices.Index(vis, want), want)
				}
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}
