package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

var planLine = regexp.MustCompile(`gpubind: step plan took [0-9.]+ ms \((\d+) tasks[^)]*?(, plan cache hit)?\)`)

// planLines returns, for each "step plan took" line that slurmd logged
// after offset, whether it was a plan cache hit.
func planLines(c *cluster.Cluster, node string, offset int) (hits []bool, log string) {
	log = c.SlurmdLog(node)
	if offset > len(log) {
		offset = len(log)
	}
	for _, m := range planLine.FindAllStringSubmatch(log[offset:], -1) {
		hits = append(hits, m[2] != "")
	}
	return hits, log
}

// The plan cache (spank/frontend/plancache.c) under a real slurmstepd: the second step of a
// shape is a hit and binds exactly as the first; a plugstack setting change
// is a miss; with a cache_dir the front end may not use, steps still bind.
func TestPlanCacheSlurm(t *testing.T) {
	dir := pluginDir(t)
	cache := cacheDirB(t)
	line := func(cacheDir string, extra ...string) string {
		return strings.Join(append([]string{"required", filepath.Join(dir, "spank_gpubind.so"), "cache_dir=" + cacheDir,
			"root=" + fixture("dgxh100-2cpu"), "source=sysfs"}, extra...), " ")
	}
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8,
		PlugStack: []string{line(cache)}, SlurmConf: []string{"SlurmdDebug=verbose"}})
	node := c.NodeNames[0]
	args := []string{"-N1", "-n4", "--gpus=4", "--gpu-bind-topo"}
	key := func(ts []task) string {
		var s []string
		for _, k := range ts {
			s = append(s, fmt.Sprintf("%d:%s:%s", k.Rank, k.Visible, k.BusIDs))
		}
		return strings.Join(s, " ")
	}
	steps := func(n int) (hits []bool, bound []string) {
		t.Helper()
		off := len(c.SlurmdLog(node))
		for i := 0; i < n; i++ {
			tasks, _ := srunTasks(t, c, args...)
			if len(tasks) != 4 {
				t.Fatalf("%d tasks", len(tasks))
			}
			for _, k := range tasks {
				if k.BusIDs == "-" {
					t.Fatalf("task %d not bound: %+v", k.Rank, k)
				}
			}
			bound = append(bound, key(tasks))
		}
		hits, log := planLines(c, node, off)
		if len(hits) != n {
			t.Fatalf("%d 'step plan took' lines for %d steps:\n%s", len(hits), n, log[off:])
		}
		return hits, bound
	}

	hits, bound := steps(3)
	if hits[0] || !hits[1] || !hits[2] {
		t.Errorf("hits %v, want a miss then two hits", hits)
	}
	if bound[1] != bound[0] || bound[2] != bound[0] {
		t.Errorf("cached plan binds differently:\n%s", strings.Join(bound, "\n"))
	}
	if e, _ := filepath.Glob(filepath.Join(cache, "plans", "p-*")); len(e) != 1 {
		t.Errorf("plan cache entries %v, want one", e)
	}

	// An admin setting change (plugstack.conf) invalidates it.
	setPlugStack(t, c, line(cache, "cpus=never"))
	if hits, _ := steps(2); hits[0] || !hits[1] {
		t.Errorf("after cpus=never: hits %v, want a miss then a hit", hits)
	}

	// A cache_dir that is not root's: no cache, steps still bound.
	bad := cacheDirB(t)
	if err := os.Chown(bad, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	setPlugStack(t, c, line(bad))
	off := len(c.SlurmdLog(node))
	if hits, bound2 := steps(2); hits[0] || hits[1] || bound2[0] != bound[0] {
		t.Errorf("unusable cache_dir: hits %v, bound %v", hits, bound2)
	}
	if log := c.SlurmdLog(node)[off:]; !strings.Contains(log, "gpubind: plan cache not used: "+bad+" is owned by uid 65534") {
		t.Errorf("the slurmd log does not say why the plan cache is not used:\n%s", log)
	}
}

// Issue 35: a NIC port going down invalidates only the cached plans of options with the nic
// flag (the only output that names a port), under a real slurmstepd configured as sites do
// (task/cgroup, task/affinity, ConstrainDevices). The node's sysfs is a copy of the fixture,
// so that the test can flip a port's state file.
func TestPlanCacheNICPortsSlurm(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", fixture("dgxh100-2cpu"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy the fixture: %v\n%s", err, out)
	}
	ports, err := filepath.Glob(filepath.Join(root, "sys/class/infiniband/*/ports/*/state"))
	if err != nil || len(ports) == 0 {
		t.Fatalf("no port state file in the fixture copy (%v)", err)
	}
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity", ConstrainDevices: true,
		GPUs: 8, PlugStack: []string{plugLine(t, "root="+root, "source=sysfs")}, SlurmConf: []string{"SlurmdDebug=verbose"}})
	node := c.NodeNames[0]
	step := func(option string) bool { // whether the step's plan came from the cache
		t.Helper()
		off := len(c.SlurmdLog(node))
		if tasks, _ := srunTasks(t, c, "-N1", "-n2", "--gpus=2", "--gpu-bind-topo="+option); len(tasks) != 2 {
			t.Fatalf("%s: %d tasks, want 2", option, len(tasks))
		}
		hits, log := planLines(c, node, off)
		if len(hits) != 1 {
			t.Fatalf("%s: %d 'step plan took' lines for one step:\n%s", option, len(hits), log[off:])
		}
		return hits[0]
	}
	options := []string{"closest", "closest,nic"}
	for _, o := range options {
		step(o)
		if !step(o) {
			t.Fatalf("%s: the repeated step missed the plan cache", o)
		}
	}
	if err := os.WriteFile(ports[0], []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !step("closest") {
		t.Error("closest: a port going down invalidated a plan that names no port")
	}
	if step("closest,nic") {
		t.Error("closest,nic: the cached plan was used after a port went down")
	}
}
