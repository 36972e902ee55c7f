package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// whereRoot is a copy of the dgx4nic-2cpu tree (GPUs 2s, 2s+1 share mlx5_s; CPU 0 is NUMA 0
// with GPUs 0-3, CPU 1 NUMA 1 with GPUs 4-7) with a process in it: /proc/self -> 4242,
// running on cpus, in a Slurm task cgroup.
func whereRoot(t *testing.T, cpus string) string {
	t.Helper()
	return whereRootOf(t, "dgx4nic-2cpu", cpus)
}

// whereRootOf is whereRoot with another fixture's tree.
func whereRootOf(t *testing.T, fixture, cpus string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "node")
	out, err := exec.Command("cp", "-a", fixtures.Root(fixture), root).CombinedOutput()
	require.NoError(t, err, "%s", out)
	pd := filepath.Join(root, "proc", "4242")
	require.NoError(t, os.MkdirAll(pd, 0o755))
	require.NoError(t, os.Symlink("4242", filepath.Join(root, "proc", "self")))
	status := "Name:\tsh\nPid:\t4242\nCpus_allowed:\t3\nCpus_allowed_list:\t" + cpus + "\nMems_allowed_list:\t0\n"
	require.NoError(t, os.WriteFile(filepath.Join(pd, "status"), []byte(status), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(pd, "cgroup"), []byte("0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_1\n"), 0o644))
	return root
}

func lookupOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// A task bound as the plugin says: CUDA device 0 is its GPU 2 (0000:3a:00.0), its CPU is on
// that GPU's NUMA node, NCCL_IB_HCA holds the node's rails: no warning.
func TestWhereamiMatches(t *testing.T) {
	root := whereRoot(t, "0")
	rep, err := whereami(root, "", lookupOf(map[string]string{
		"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURMD_NODENAME": "node1",
		"CUDA_VISIBLE_DEVICES": "2,0,1,3", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"GPUBIND_PCI_BUS_IDS": "0000:3a:00.0", "GPUBIND_CUDA_DEVICES": "0",
		"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
	}), false, nvmlOf(t, root, ""))
	require.NoError(t, err)
	assert.Empty(t, rep.Warnings)
	assert.Equal(t, []string{"sysfs", "nvml"}, rep.Sources)
	assert.Equal(t, "node1", rep.Host)
	assert.Equal(t, 5, *rep.Rank)
	assert.Equal(t, 1, *rep.Local)
	assert.Equal(t, "0", rep.CPUs)
	assert.Equal(t, "0", rep.Mems)
	require.Len(t, rep.GPUs, 4)
	assert.Equal(t, whereGPU{VisibleIndex: 0, Index: 2, BusID: "0000:3a:00.0", UUID: rep.GPUs[0].UUID, NUMA: 0, Openable: true}, rep.GPUs[0])
	assert.True(t, strings.HasPrefix(rep.GPUs[0].UUID, "GPU-"))
	assert.True(t, rep.CPUsLocalToGPUs)
	assert.Equal(t, "mlx5_1:1", rep.NIC)
	assert.Equal(t, []string{"0:" + ":/system.slice/slurmstepd.scope/job_7/step_0/user/task_1"}, rep.Cgroup)

	// The JSON keys of the issue.
	var m map[string]any
	b, _ := json.Marshal(rep)
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"host", "rank", "local_id", "cpus", "mems", "gpus", "cpus_local_to_gpus", "nic", "env", "warnings"} {
		assert.Contains(t, m, k)
	}
	g := m["gpus"].([]any)[0].(map[string]any)
	for _, k := range []string{"visible_index", "index", "pci_bus_id", "uuid", "numa", "openable"} {
		assert.Contains(t, g, k)
	}
}

// CUDA_VISIBLE_DEVICES by UUID (the uuid flag; Slurm 26.05's gres.conf Flags=env_uuid), in an
// order of its own: whereami resolves it as CUDA does, and the plugin's claim agrees with it.
func TestWhereamiUUIDList(t *testing.T) {
	root := whereRoot(t, "0")
	topo, err := gpubind.LoadSnapshot(fixtures.Snapshot("dgx4nic-2cpu"))
	require.NoError(t, err)
	u := func(i int) string { return topo.GPUs[i].UUID }
	for _, c := range []struct {
		cvd, dev string
		warn     bool
	}{
		{u(2), "0", false},
		{u(0) + "," + u(2) + "," + u(1), "1", false}, // visible=localid: its own at entry 1
		{u(0) + "," + u(2), "0", true},               // the claim names the wrong entry
	} {
		rep, err := whereami(root, "", lookupOf(map[string]string{
			"CUDA_VISIBLE_DEVICES": c.cvd, "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
			"GPUBIND_PCI_BUS_IDS": "0000:3a:00.0", "GPUBIND_CUDA_DEVICES": c.dev, "GPUBIND_UUIDS": u(2),
		}), false, nvmlOf(t, root, ""))
		require.NoError(t, err)
		require.Len(t, rep.GPUs, len(strings.Split(c.cvd, ",")), c.cvd)
		for k, g := range rep.GPUs {
			assert.Equal(t, strings.Split(c.cvd, ",")[k], g.UUID, "CUDA device %d", k)
		}
		if c.warn {
			assert.NotEmpty(t, rep.Warnings, c.cvd)
		} else {
			assert.Empty(t, rep.Warnings, c.cvd)
		}
	}
}

// A task whose binding is not what the plugin claims: each problem is a plain sentence, and
// --strict exits 1.
func TestWhereamiWarns(t *testing.T) {
	root := whereRoot(t, "0-1")
	rep, err := whereami(root, "", lookupOf(map[string]string{
		"CUDA_VISIBLE_DEVICES": "4,5", // no CUDA_DEVICE_ORDER
		"GPUBIND_PCI_BUS_IDS":  "0000:ab:00.0", "GPUBIND_CUDA_DEVICES": "0",
		"NCCL_IB_HCA": "=mlx5_4:1",
	}), false, nvmlOf(t, root, "0000:9a:00.0"))
	require.NoError(t, err)
	all := strings.Join(rep.Warnings, "\n")
	for _, want := range []string{
		"CUDA_DEVICE_ORDER is not PCI_BUS_ID",
		"span NUMA nodes 0, 1",
		"are not all local to CUDA device 0 (0000:9a:00.0, NUMA 1",
		"the plugin says the task's GPU 0000:ab:00.0 is CUDA device 0, but CUDA device 0 is 0000:9a:00.0",
		"NCCL_IB_HCA names mlx5_4, which is nearest to none of this node's GPUs",
		"leaves out mlx5_2, the NIC nearest this task's GPU",
		"CUDA device 0 (0000:9a:00.0) is not among the GPUs NVML lists in this task",
	} {
		assert.Contains(t, all, want)
	}
	assert.False(t, rep.CPUsLocalToGPUs)

	t.Setenv("CUDA_VISIBLE_DEVICES", "4,5")
	t.Setenv("GPUBIND_PCI_BUS_IDS", "0000:ab:00.0")
	var out, errb bytes.Buffer
	assert.Equal(t, 1, run([]string{"whereami", "--strict", "--root", root}, &out, &errb), "%s%s", &out, &errb)
	assert.Contains(t, out.String(), "warning: the plugin says")
	assert.Equal(t, 0, run([]string{"whereami", "--json", "--root", root}, &out, &errb), "%s", &errb)
}

// nvmlOf is an NVML view of the fixture: its GPUs (their sysfs facts), but the one with bus
// id hide, as NVML in a task whose device cgroup denies it.
func nvmlOf(t *testing.T, root, hide string) func() (*gpubind.Topology, error) {
	return func() (*gpubind.Topology, error) {
		topo, err := gpubind.DiscoverSysfs(root)
		require.NoError(t, err)
		var keep []gpubind.GPU
		for _, g := range topo.GPUs {
			if g.BusID != hide {
				keep = append(keep, g)
			}
		}
		topo.GPUs = keep
		return topo, nil
	}
}
