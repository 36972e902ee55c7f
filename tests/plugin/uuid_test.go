package plugin

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/cluster"
)

// uuidScript prints what a task got: CUDA_VISIBLE_DEVICES and the plugin's description of its
// own GPUs.
const uuidScript = `echo "U $SLURM_LOCALID $SLURM_PROCID ${CUDA_VISIBLE_DEVICES:--} ${GPUBIND_UUIDS:--} ${GPUBIND_PCI_BUS_IDS:--} ${GPUBIND_GPUS:--} ${GPUBIND_CUDA_DEVICES:--}"`

var uuidRe = regexp.MustCompile(`^U (\d+) (\d+) (\S+) (\S+) (\S+) (\S+) (\S+)$`)

type uuidTask struct {
	Local, Rank                       int
	Visible, UUIDs, Buses, GPUs, CUDA string
}

func srunUUID(t *testing.T, c *cluster.Cluster, args ...string) ([]uuidTask, string) {
	t.Helper()
	out, errOut, err := c.Srun(ctx(t), append(args, "sh", "-c", uuidScript)...)
	if err != nil {
		t.Fatalf("srun %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	var tasks []uuidTask
	for _, m := range matchLines(uuidRe, out) {
		local, _ := strconv.Atoi(m[1])
		rank, _ := strconv.Atoi(m[2])
		tasks = append(tasks, uuidTask{local, rank, m[3], m[4], m[5], m[6], m[7]})
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Rank < tasks[j].Rank })
	return tasks, errOut
}

// fixtureUUIDs maps the fixture's bus ids to its GPU UUIDs, as the driver's
// /proc/driver/nvidia/gpus/BUS/information in the fixture tree says.
func fixtureUUIDs(t *testing.T, name string) map[string]string {
	t.Helper()
	topo, err := gpubind.DiscoverSysfs(fixture(name))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, g := range topo.GPUs {
		if !strings.HasPrefix(g.UUID, "GPU-") {
			t.Fatalf("fixture %s: GPU %s has UUID %q", name, g.BusID, g.UUID)
		}
		m[g.BusID] = g.UUID
	}
	return m
}

// checkUUIDTasks: every task's CUDA_VISIBLE_DEVICES lists UUIDs of the step only; entry
// GPUBIND_CUDA_DEVICES (0 without it) is its own GPU, the one GPUBIND_UUIDS and
// GPUBIND_PCI_BUS_IDS name; no two tasks share a GPU; the mapping line in slurmd's log (and on
// stderr with verbose) shows the same list.
func checkUUIDTasks(t *testing.T, c *cluster.Cluster, tasks []uuidTask, n, entries int, byBus map[string]string, stderr string) {
	t.Helper()
	if len(tasks) != n {
		t.Fatalf("%d tasks, want %d", len(tasks), n)
	}
	seen := map[string]bool{}
	log := c.SlurmdLog(c.NodeNames[0])
	for _, k := range tasks {
		vis := strings.Split(k.Visible, ",")
		if len(vis) != entries {
			t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s, want %d entries", k.Rank, k.Visible, entries)
			continue
		}
		for _, v := range vis {
			if !strings.HasPrefix(v, "GPU-") {
				t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s holds %q, not a UUID", k.Rank, k.Visible, v)
			}
		}
		cd := 0
		if k.CUDA != "-" {
			cd, _ = strconv.Atoi(strings.Split(k.CUDA, ",")[0])
		}
		if cd >= len(vis) || vis[cd] != k.UUIDs || byBus[k.Buses] != k.UUIDs {
			t.Errorf("task %d: CUDA_VISIBLE_DEVICES=%s entry %d, GPUBIND_UUIDS=%s, GPUBIND_PCI_BUS_IDS=%s (UUID %s) disagree",
				k.Rank, k.Visible, cd, k.UUIDs, k.Buses, byBus[k.Buses])
		}
		if seen[k.UUIDs] {
			t.Errorf("GPU %s given twice: %+v", k.UUIDs, tasks)
		}
		seen[k.UUIDs] = true
		line := fmt.Sprintf("gpubind: task %d (rank %d): CUDA_VISIBLE_DEVICES=%s ", k.Local, k.Rank, k.Visible)
		if !strings.Contains(log, line) {
			t.Errorf("slurmd's log lacks %q", line)
		}
		own := fmt.Sprintf("GPU %s %s %s NUMA", k.GPUs, k.Buses, k.UUIDs)
		if i := strings.Index(log, line); i >= 0 && !strings.Contains(strings.SplitN(log[i:], "\n", 2)[0], own) {
			t.Errorf("task %d: the mapping line does not name %q:\n%s", k.Rank, own, strings.SplitN(log[i:], "\n", 2)[0])
		}
		if stderr != "" && !strings.Contains(stderr, line) {
			t.Errorf("stderr (verbose) lacks %q:\n%s", line, stderr)
		}
	}
}

// Issue 36 item 3: --gpu-bind-topo=...,uuid lists each task's GPUs by UUID on a real Slurm
// configured as sites do (task/cgroup, task/affinity, ConstrainDevices, so Slurm's own
// CUDA_VISIBLE_DEVICES counts from 0), with isolate, and through the admin's default=.
func TestUUIDFlagSlurm(t *testing.T) {
	byBus := fixtureUUIDs(t, "dgxh100-2cpu")
	line := plugLine(t, "root="+fixture("dgxh100-2cpu"), "source=sysfs")
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity", ConstrainDevices: true,
		GPUs: 8, PlugStack: []string{line}})

	t.Run("closest,uuid", func(t *testing.T) {
		tasks, stderr := srunUUID(t, c, "-n4", "--gpus=6", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest,uuid,verbose")
		checkUUIDTasks(t, c, tasks, 4, 1, byBus, stderr)
		// The same GPUs as without the flag.
		plain, _ := srunUUID(t, c, "-n4", "--gpus=6", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest")
		for i := range plain {
			if i < len(tasks) && plain[i].Buses != tasks[i].Buses {
				t.Errorf("task %d: GPU %s without uuid, %s with it", i, plain[i].Buses, tasks[i].Buses)
			}
			if strings.HasPrefix(plain[i].Visible, "GPU-") {
				t.Errorf("task %d without uuid: CUDA_VISIBLE_DEVICES=%s", i, plain[i].Visible)
			}
		}
	})
	t.Run("isolate", func(t *testing.T) {
		tasks, _ := srunUUID(t, c, "-n4", "--gpus=4", "--gpu-bind-topo=closest,uuid,isolate")
		checkUUIDTasks(t, c, tasks, 4, 1, byBus, "")
	})
	t.Run("visible=localid", func(t *testing.T) {
		tasks, _ := srunUUID(t, c, "-n4", "--gpus=4", "--gpu-bind-topo=closest,uuid,visible=localid")
		checkUUIDTasks(t, c, tasks, 4, 4, byBus, "")
		for _, k := range tasks {
			if k.CUDA != strconv.Itoa(k.Local) {
				t.Errorf("task %d: GPUBIND_CUDA_DEVICES=%s, want its local id %d", k.Rank, k.CUDA, k.Local)
			}
		}
	})
	t.Run("default=closest,uuid", func(t *testing.T) {
		setPlugStack(t, c, line+" default=closest,uuid")
		tasks, _ := srunUUID(t, c, "-n4", "--gpus=4")
		// default= keeps every step GPU visible, the task's own at entry SLURM_LOCALID.
		checkUUIDTasks(t, c, tasks, 4, 4, byBus, "")
	})
}
