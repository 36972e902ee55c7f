package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// cliqueScript prints one line per task: its rank, GPU and clique variable.
const cliqueScript = `echo "C $SLURM_PROCID ${GPUBIND_PCI_BUS_IDS:--} ${GPUBIND_NVL_CLIQUE:--}"`

// TestNVLCliqueUnderSlurm: on a GB200 tray (the gb200 fixture) under real Slurm, every
// task gets GPUBIND_NVL_CLIQUE=<cluster_uuid>.<clique_id>, and the user's terminal says
// when no IMEX channel can be opened; with the fabric still in progress no task gets
// the variable and each says why; with a channel device in place, no warning.
func TestNVLCliqueUnderSlurm(t *testing.T) {
	dir := t.TempDir()
	snap := func(state string) string {
		p := filepath.Join(dir, state+".json")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := gpubind.WriteSnapshot(f, fixtures.GB200Tray("node1", 1, state)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	completed, pending := snap(gpubind.FabricCompleted), snap(gpubind.FabricInProgress)
	c := cluster.StartT(t, cluster.Config{CPUs: 4, GPUs: 4,
		PlugStack: []string{plugLine(t, "snapshot="+completed, "source=snapshot")}})
	clique := fixtures.GB200Cluster + ".1"
	run := func(t *testing.T) (map[string]string, string) {
		t.Helper()
		out, errOut, err := c.Srun(ctx(t), "-n4", "--gpus=4", "--gpu-bind-topo=closest", "sh", "-c", cliqueScript)
		if err != nil {
			t.Fatalf("srun: %v\n%s\n%s", err, out, errOut)
		}
		got := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 4 && f[0] == "C" {
				got[f[2]] = f[3]
			}
		}
		if len(got) != 4 {
			t.Fatalf("want 4 tasks on 4 GPUs:\n%s", out)
		}
		return got, errOut
	}

	t.Run("completed, no IMEX channel", func(t *testing.T) {
		got, errOut := run(t)
		for bus, v := range got {
			if v != clique {
				t.Errorf("GPU %s: GPUBIND_NVL_CLIQUE=%s, want %s", bus, v, clique)
			}
		}
		if n := strings.Count(errOut, "but there is no IMEX channel device (/dev/nvidia-caps-imex-channels/channelN)"); n != 4 {
			t.Errorf("%d IMEX warnings on the terminal, want one per task:\n%s", n, errOut)
		}
	})

	t.Run("in progress", func(t *testing.T) {
		setPlugStack(t, c, plugLine(t, "snapshot="+pending, "source=snapshot"))
		got, errOut := run(t)
		for bus, v := range got {
			if v != "-" {
				t.Errorf("GPU %s: GPUBIND_NVL_CLIQUE=%s with the fabric in progress", bus, v)
			}
		}
		if n := strings.Count(errOut, "gpubind: warning: task "); n != 4 || !strings.Contains(errOut, "the NVLink fabric is in_progress, not completed") {
			t.Errorf("want 4 warnings naming in_progress:\n%s", errOut)
		}
	})

	t.Run("completed, with a channel", func(t *testing.T) {
		// The gb200 tree paired with its snapshot; the channel lives below root=.
		root := filepath.Join(dir, "gb200")
		if out, err := exec.Command("cp", "-a", fixtures.Root("gb200"), root).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		ch := filepath.Join(root, "dev/nvidia-caps-imex-channels")
		if err := os.MkdirAll(ch, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mknod(filepath.Join(ch, "channel0"), syscall.S_IFCHR|0o666, 242<<8); err != nil {
			t.Fatal(err)
		}
		setPlugStack(t, c, plugLine(t, "root="+root, "source=sysfs", "snapshot="+completed))
		got, errOut := run(t)
		for bus, v := range got {
			if v != clique {
				t.Errorf("GPU %s: GPUBIND_NVL_CLIQUE=%s, want %s", bus, v, clique)
			}
		}
		if strings.Contains(errOut, "gpubind: warning") {
			t.Errorf("warnings with a channel in place:\n%s", errOut)
		}
	})
}
