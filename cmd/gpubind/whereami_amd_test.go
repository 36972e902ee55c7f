package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// amdWhereRoot is the frontier-2cpu tree with a process on cpus, and render nodes
// dev/dri/renderD<128+g> (char 226) for the GCDs in gcds only: the others are missing, as
// a device cgroup would deny them, and ROCr skips both alike.
func amdWhereRoot(t *testing.T, cpus string, gcds ...int) (root, dev string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mknod fake render nodes")
	}
	root = whereRootOf(t, "frontier-2cpu", cpus)
	dev = filepath.Join(t.TempDir(), "dev")
	require.NoError(t, os.MkdirAll(filepath.Join(dev, "dri"), 0o755))
	for _, g := range gcds {
		p := filepath.Join(dev, "dri", fmt.Sprintf("renderD%d", 128+g))
		require.NoError(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(226, uint32(128+g)))))
	}
	return root, dev
}

// What the plugin gives a task on CPU 0 of a Frontier node (GCD 4, 0000:d1:00.0, NUMA 0):
// whereami resolves ROCR_VISIBLE_DEVICES and HIP's variables relative to it, and finds
// nothing to warn about.
func TestWhereamiAMD(t *testing.T) {
	root, dev := amdWhereRoot(t, "0", 0, 1, 2, 3, 4, 5, 6, 7)
	env := map[string]string{"ROCR_VISIBLE_DEVICES": "4", "HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0",
		"GPUBIND_PCI_BUS_IDS": "0000:d1:00.0", "GPUBIND_CUDA_DEVICES": "0"}
	rep, err := whereami(root, dev, lookupOf(env), false, nil)
	require.NoError(t, err)
	assert.Empty(t, rep.Warnings)
	require.Len(t, rep.GPUs, 1)
	assert.Equal(t, whereGPU{VisibleIndex: 0, Index: 4, BusID: "0000:d1:00.0", UUID: rep.GPUs[0].UUID, NUMA: 0, Openable: true}, rep.GPUs[0])
	assert.True(t, rep.CPUsLocalToGPUs)
	assert.Equal(t, "4", rep.Env["ROCR_VISIBLE_DEVICES"])

	// By UUID (the uuid flag): the same GCD.
	env["ROCR_VISIBLE_DEVICES"] = rep.GPUs[0].UUID
	rep, err = whereami(root, dev, lookupOf(env), false, nil)
	require.NoError(t, err)
	assert.Empty(t, rep.Warnings)
	require.Len(t, rep.GPUs, 1)
	assert.Equal(t, "0000:d1:00.0", rep.GPUs[0].BusID)

	// Slurm's CUDA_VISIBLE_DEVICES=4,5 left beside a one-GPU ROCR_VISIBLE_DEVICES (the trap
	// issue 38 names): HIP sees nothing, and whereami says so.
	rep, err = whereami(root, dev, lookupOf(map[string]string{"ROCR_VISIBLE_DEVICES": "4", "CUDA_VISIBLE_DEVICES": "4,5"}), false, nil)
	require.NoError(t, err)
	assert.Empty(t, rep.GPUs)
	assert.Contains(t, fmt.Sprint(rep.Warnings), "no GPU is visible to HIP")
}

// Render nodes of GCDs 6 and 7 only (the others denied): ROCr numbers what the task can
// open, so ROCR_VISIBLE_DEVICES=1 is GCD 7; a plugin claim of GCD 6 at HIP device 0 is
// then wrong, and whereami says so.
func TestWhereamiAMDCompacted(t *testing.T) {
	root, dev := amdWhereRoot(t, "0", 6, 7)
	rep, err := whereami(root, dev, lookupOf(map[string]string{"ROCR_VISIBLE_DEVICES": "1",
		"GPUBIND_PCI_BUS_IDS": "0000:d9:00.0", "GPUBIND_CUDA_DEVICES": "0"}), false, nil)
	require.NoError(t, err)
	require.Len(t, rep.GPUs, 1)
	assert.Equal(t, 7, rep.GPUs[0].Index)
	assert.Equal(t, "0000:de:00.0", rep.GPUs[0].BusID)
	assert.Equal(t, []string{"the plugin says the task's GPU 0000:d9:00.0 is CUDA device 0, but CUDA device 0 is 0000:de:00.0"}, rep.Warnings)
	// With ROCR_VISIBLE_DEVICES=0 (ROCr's number for GCD 6 here) the claim holds.
	rep, err = whereami(root, dev, lookupOf(map[string]string{"ROCR_VISIBLE_DEVICES": "0",
		"GPUBIND_PCI_BUS_IDS": "0000:d9:00.0", "GPUBIND_CUDA_DEVICES": "0"}), false, nil)
	require.NoError(t, err)
	assert.Empty(t, rep.Warnings)
}

// MI300X in CPX mode: the 8 partitions of a device share its bus id, and only their render
// nodes tell them apart. ROCR_VISIBLE_DEVICES=9 is partition 1 of the second device
// (renderD137): whereami must name GPU 9, not another partition on the same bus.
func TestWhereamiAMDPartitions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mknod fake render nodes")
	}
	root := whereRootOf(t, "mi300x-cpx", "0")
	dev := filepath.Join(t.TempDir(), "dev")
	require.NoError(t, os.MkdirAll(filepath.Join(dev, "dri"), 0o755))
	for m := 128; m < 144; m++ {
		p := filepath.Join(dev, "dri", fmt.Sprintf("renderD%d", m))
		require.NoError(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(226, uint32(m)))))
	}
	for _, want := range []int{0, 1, 9, 15} {
		rep, err := whereami(root, dev, lookupOf(map[string]string{"ROCR_VISIBLE_DEVICES": fmt.Sprint(want)}), false, nil)
		require.NoError(t, err)
		require.Len(t, rep.GPUs, 1)
		assert.Equal(t, want, rep.GPUs[0].Index, "ROCR_VISIBLE_DEVICES=%d", want)
	}
}
