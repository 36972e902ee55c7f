package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// The table slurmstepd parses comes from the launcher, which writes it after dropping to the
// job's user; slurmstepd must refuse one that would make the rule write out of bounds. The fuzz
// target found one (ASan, heap overflow in the numa rule): a "fallback" line naming a GPU twice
// made the rule count more GPU units than the table has GPUs. Here a launcher writes such a
// table under a real slurmstepd (task/cgroup, task/affinity, ConstrainDevices), for a step
// whose tasks are bound to CPUs of one NUMA node, so the numa rule runs: the step must fail
// (mode=enforce) naming the line, where it used to run with the rule past its array.
func TestTableFallbackNamingAGPUTwiceRefused(t *testing.T) {
	dir := t.TempDir()
	launcher := filepath.Join(dir, "launcher_table")
	root := repoRoot()
	out, err := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-DGB_TEST_LAUNCHER", "-DMODE_TABLE",
		"-o", launcher, filepath.Join(root, "tests/spankhost/csrc/testengine.c"),
		filepath.Join(root, "spank/engine/launcher.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("build the table launcher: %v\n%s", err, out)
	}
	plan := func(fallback string) string {
		lines := []string{"gpubind-plan 1", "status ok", "flags -", "rule numa", "share 1", "per_task 1",
			"ntasks 2", "numa 0 0-3", "numa 1 4-7",
			"gpu 0 0 0 0 0000:1b:00.0 GPU-aaaa 0 -", "gpu 1 1 1 1 0000:9b:00.0 GPU-bbbb 1 -",
			"numagpus 0 0", "numagpus 1 1", "fallback " + fallback, "task 0 0 -", "task 1 1 -"}
		p := filepath.Join(dir, "plan-"+strings.ReplaceAll(fallback, ",", "_"))
		text := strings.Join(lines, "\n") + fmt.Sprintf("\nend %d\n", len(lines))
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity", ConstrainDevices: true, GPUs: 2})
	step := func(fallback string) (string, error) {
		writePlugStack(t, c, []string{plugLine(t, "launcher="+launcher, "snapshot="+plan(fallback), "plan_cache=0")})
		o, e, err := c.Srun(ctx(t), "-N1", "-n2", "--gpus=2", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest", "true")
		return o + e, err
	}
	if out, err := step("0,1"); err != nil {
		t.Fatalf("fallback 0,1 (each GPU once): %v\n%s", err, out)
	}
	bad, err := step("0,0,0,0,0,0,0,0")
	if err == nil || !strings.Contains(bad, "fallback names GPU 0 twice") {
		t.Errorf("fallback naming GPU 0 eight times: srun err %v, want the step refused naming the line:\n%s", err, bad)
	}
}
