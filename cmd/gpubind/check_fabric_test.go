package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/tests/testbuild"
)

const procDevicesIMEX = "Character devices:\n  1 mem\n195 nvidia\n242 nvidia-caps-imex-channels\n509 nvidia-caps\n\nBlock devices:\n  8 sd\n242 notimex\n"

// TestCheckFabricAndIMEX: the fabric item from NVML (a mock of the fixture) for each
// state, and the imex item from ROOT/proc/devices and ROOT/dev/nvidia-caps-imex-channels.
func TestCheckFabricAndIMEX(t *testing.T) {
	n := healthyNode(t)
	snap, err := gpubind.LoadSnapshot(filepath.Join(testbuild.RepoRoot(), "tests", "fixtures", "dgxh100-2cpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	setFabric := func(f gpubind.Fabric) {
		for i := range snap.GPUs {
			c := f
			snap.GPUs[i].Fabric = &c
		}
		checkNVMLLib = nvmlmock.New(snap)
	}
	t.Cleanup(func() { checkNVMLLib = nil })
	const cluster = "2f6b2b6e-6d8a-4c1e-9a55-0b7b1c2d3e4f"

	// The H200's answer: not supported. No /proc/devices in the tree: no major.
	setFabric(gpubind.Fabric{State: "not_supported"})
	rc, items := n.check(t)
	expect(t, rc, items, "fabric", statusOK, `8 GPUs, none in a multi-node NVLink domain`)
	expect(t, rc, items, "imex", statusOK, `registers no nvidia-caps-imex-channels device`)
	// The H200's /proc/devices lists the major, without channel nodes: fine there.
	write(t, filepath.Join(n.root, "proc/devices"), procDevicesIMEX)
	rc, items = n.check(t)
	expect(t, rc, items, "imex", statusOK, `major 242, no channel device in .*/dev/nvidia-caps-imex-channels \(none needed`)

	// Completed and healthy: ok, naming the clique; the missing channel is a warning.
	setFabric(gpubind.Fabric{ClusterUUID: cluster, CliqueID: 3, State: "completed", Health: "healthy"})
	rc, items = n.check(t)
	expect(t, rc, items, "imex", statusWarn, `no channel device in .*CUDA_ERROR_NOT_PERMITTED.*mknod /dev/nvidia-caps-imex-channels/channel0 c 242 0`)
	if it := items["fabric"]; it.Status != statusOK || it.Reason != "NVLink fabric completed and healthy: clique "+cluster+".3 (8 GPUs)" {
		t.Errorf("fabric: %+v", it)
	}
	dir := filepath.Join(n.root, "dev/nvidia-caps-imex-channels")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "channel0"), syscall.S_IFCHR|0o666, 242<<8 /* major 242, minor 0 */); err != nil {
		t.Fatal(err)
	}
	rc, items = n.check(t)
	expect(t, rc, items, "imex", statusOK, `major 242, channel devices in .*: channel0$`)
	if err := syscall.Mknod(filepath.Join(dir, "channel1"), syscall.S_IFCHR|0o666, 195<<8|1); err != nil {
		t.Fatal(err)
	}
	rc, items = n.check(t)
	expect(t, rc, items, "imex", statusWarn, `bad channel devices: .*channel1: major 195, not nvidia-caps-imex-channels's 242`)
	os.Remove(filepath.Join(dir, "channel1"))

	// Not ready: a warning naming the state.
	for _, f := range []gpubind.Fabric{
		{ClusterUUID: cluster, State: "in_progress"},
		{ClusterUUID: cluster, CliqueID: 3, State: "completed", Health: "unhealthy"},
	} {
		setFabric(f)
		rc, items = n.check(t)
		expect(t, rc, items, "fabric", statusWarn, `NVLink fabric not ready: GPU 0 0000:18:00\.0: `+f.State+`.*no GPUBIND_NVL_CLIQUE`)
	}
}
