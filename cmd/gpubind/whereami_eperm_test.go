package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpubind/gpubind/gpubind/cudavis"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// runTestChild is this test binary run as a child (TestMain, GPUBIND_TEST_RUN_MAIN=1):
// "scanamd ROOT DEV" prints libgpuhelper's AMD scan (cudavis.ScanAMD) as JSON; anything
// else is the gpubind command line.
func runTestChild(args []string) int {
	if len(args) == 3 && args[0] == "scanamd" {
		gpus, err := cudavis.ScanAMD(args[1], args[2], nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := json.NewEncoder(os.Stdout).Encode(gpus); err != nil {
			return 1
		}
		return 0
	}
	return run(args, os.Stdout, os.Stderr)
}

// deviceCgroup makes a v1 devices cgroup that denies the render minors, and returns a
// function running this test binary as a child inside it (the cgroup is removed after
// the test).
func deviceCgroup(t *testing.T, minors []int) func(env []string, args ...string) (string, string, error) {
	t.Helper()
	base := "/sys/fs/cgroup/devices"
	if _, err := os.Stat(filepath.Join(base, "devices.deny")); err != nil {
		t.Fatalf("no cgroup v1 devices hierarchy at %s (this machine has one: DESIGN section 5): %v", base, err)
	}
	cg := filepath.Join(base, fmt.Sprintf("gpubind-eperm-%d", os.Getpid()))
	require.NoError(t, os.Mkdir(cg, 0o755))
	t.Cleanup(func() { _ = os.Remove(cg) })
	for _, m := range minors {
		require.NoError(t, os.WriteFile(filepath.Join(cg, "devices.deny"), []byte(fmt.Sprintf("c 226:%d rwm", m)), 0o644))
	}
	return func(env []string, args ...string) (string, string, error) {
		cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(cg, "cgroup.procs")}, args...)...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "GPUBIND_TEST_RUN_MAIN=1"}, env...)
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
}

// TestWhereamiAMDEPERM: inside a task whose device cgroup denies the other GCDs (Slurm's
// ConstrainDevices, or isolate), KFD answers EPERM for the denied GCDs' topology files
// (issue 38: "a denied GPU's topology files return EPERM"). The fixture variant
// (fixtures.HideKFDNodes) makes that real: the denied GCDs' KFD files are device nodes of
// their render minors, and a real v1 device cgroup denies those. Like ROCr (libhsakmt:
// EPERM means "node not supported"), whereami and libgpuhelper's scan skip the hidden
// GCDs and keep the others' KFD indices; `gpubind topo`, which must describe the whole
// node, refuses with an error naming the hidden nodes and what to do.
func TestWhereamiAMDEPERM(t *testing.T) {
	// The task of a --gpus=2 step on GCDs 4 and 5 (KFD nodes 8, 9 after 4 CPU nodes).
	root, dev := amdWhereRoot(t, "0", 0, 1, 2, 3, 4, 5, 6, 7)
	denied := []int{0, 1, 2, 3, 6, 7}
	nodes := map[int]int{}
	var minors []int
	for _, g := range denied {
		nodes[4+g] = 128 + g
		minors = append(minors, 128+g)
	}
	require.NoError(t, fixtures.HideKFDNodes(root, nodes))
	inCgroup := deviceCgroup(t, minors)
	self, err := os.Executable()
	require.NoError(t, err)

	// The variant answers EPERM there, as KFD does: the test can fail.
	props := filepath.Join(root, "sys/devices/virtual/kfd/kfd/topology/nodes/4/properties")
	_, errOut, err := inCgroup(nil, "cat", props)
	require.Error(t, err)
	require.Contains(t, errOut, "Operation not permitted")

	// whereami in the task: GCD 4 (ROCr 0 of what the task can open), no warning.
	env := []string{"ROCR_VISIBLE_DEVICES=0", "HIP_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=0",
		"GPUBIND_PCI_BUS_IDS=0000:d1:00.0", "GPUBIND_CUDA_DEVICES=0"}
	out, errOut, err := inCgroup(env, self, "whereami", "--root", root, "--dev", dev, "--json")
	require.NoError(t, err, "whereami in the device cgroup: %s%s", out, errOut)
	var rep whereReport
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	assert.Empty(t, rep.Warnings)
	require.Len(t, rep.GPUs, 1, out)
	assert.Equal(t, 4, rep.GPUs[0].Index)
	assert.Equal(t, "0000:d1:00.0", rep.GPUs[0].BusID)
	assert.True(t, rep.GPUs[0].Openable)

	// libgpuhelper's scan: GCDs 4 and 5 only, in KFD order.
	out, errOut, err = inCgroup(nil, self, "scanamd", root, dev)
	require.NoError(t, err, "ScanAMD in the device cgroup: %s", errOut)
	var gpus []cudavis.GPU
	require.NoError(t, json.Unmarshal([]byte(out), &gpus), out)
	require.Len(t, gpus, 2, out)
	assert.Equal(t, "0000:d1:00.0", gpus[0].BusID)
	assert.Equal(t, "0000:d6:00.0", gpus[1].BusID)

	// gpubind topo describes the whole node: refused, naming the hidden KFD nodes.
	out, errOut, err = inCgroup(nil, self, "topo", "--source", "sysfs", "--root", root)
	require.Error(t, err, "topo with hidden GCDs printed:\n%s", out)
	assert.Contains(t, errOut, "KFD hides GPU nodes 4,5,6,7,10,11 from this process")
	assert.Contains(t, errOut, "device cgroup denies those GPUs")
}
