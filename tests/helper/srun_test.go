package helper

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
)

// srun runs args under srun on c with extra environment (srun exports it to the tasks).
func srun(t testing.TB, c *cluster.Cluster, extraEnv []string, args ...string) (string, error) {
	t.Helper()
	if !strings.Contains(strings.Join(extraEnv, " "), "GPUHELPER_TIMEOUT=") {
		// Bound a lost message (below) to a timeout error instead of the 3-minute hang.
		extraEnv = append(extraEnv, "GPUHELPER_TIMEOUT=45")
	}
	out, err := launch(t, cleanEnv(c.Env(), extraEnv...), 3*time.Minute, "srun", args...)
	// Slurm 22.05's mpi/pmix with several slurmd on one host now and then loses the first
	// stepd-to-stepd message of a 2-node step: the sender's retries (about 30 s) all get
	// ENOENT and the step hangs or fails with "Cannot send message to .../stepd.slurm.pmix".
	// It hit the hand-written raw PMIx baseline as often as the library, so it is the test
	// cluster, not the code under test: run such a step once more, and say so.
	if err != nil && strings.Contains(err.Error(), "Cannot send message to") && strings.Contains(err.Error(), "stepd.slurm.pmix") {
		t.Logf("Slurm's mpi/pmix lost a stepd message (multiple-slurmd on one host); running the step again:\n%v", err)
		out, err = launch(t, cleanEnv(c.Env(), extraEnv...), 3*time.Minute, "srun", args...)
	}
	return out, err
}

// TestSrun runs the library under a real Slurm PMIx server (mpi/pmix) on a private cluster of
// two nodes: steps on one and on two nodes. -O (overcommit): the nodes have 2 CPUs each.
func TestSrun(t *testing.T) {
	needSetup(t)
	if _, err := exec.LookPath("srun"); err != nil {
		t.Skip("Slurm not installed (make deps)")
	}
	c := cluster.StartT(t, cluster.Config{Nodes: 2})
	for _, tc := range []struct{ nodes, n, nids int }{
		{1, 1, 1}, {1, 4, 2}, {1, 8, 0}, {1, 16, 3},
		{2, 2, 2}, {2, 4, 2}, {2, 8, 0}, {2, 16, 3},
	} {
		t.Run(fmt.Sprintf("info/N=%d/n=%d", tc.nodes, tc.n), func(t *testing.T) {
			log := stubLogPath(t)
			out, err := srun(t, c, []string{"STUBNCCL_LOG=" + log, "GPUHELPER_TIMEOUT=60"},
				"--mpi=pmix", "-O", fmt.Sprintf("-N%d", tc.nodes), fmt.Sprintf("-n%d", tc.n), bin("ghtest"), "info", fmt.Sprint(tc.nids))
			if err != nil {
				t.Fatal(err)
			}
			nids := tc.nids
			if nids == 0 {
				nids = 1
			}
			checkInfo(t, out, tc.n, tc.nodes, nids, log)
		})
	}
	t.Run("fence mode/N=2/n=8", func(t *testing.T) {
		log := stubLogPath(t)
		out, err := srun(t, c, []string{"STUBNCCL_LOG=" + log, "GPUHELPER_EXCHANGE=fence", "GPUHELPER_NCCL_LIBRARY=" + stubLib},
			"--mpi=pmix", "-O", "-N2", "-n8", bin("ghtest_dl"), "info", "2")
		if err != nil {
			t.Fatal(err)
		}
		checkInfo(t, out, 8, 2, 2, log)
	})
	// The steps that end right after gpuhelper_init run on one node. On this test cluster
	// (several slurmd on one host, Slurm 22.05.8, PMIx 4.2.2) a 2-node PMIx_Fence sometimes
	// completes on rank 0 before rank 1 has even entered it: reproduced with raw PMIx calls
	// alone (Put/Commit on rank 0, Get then Fence on rank 1: rank 0's Fence returned at 11 ms,
	// rank 1's Get at 24 ms, and in 2 of 6 runs rank 1 never got the key because rank 0 had
	// left). gpuhelper_finalize's barrier is that fence, so a root that finalizes at once can
	// leave early there. Steps with more collectives after init (the info runs above) do not
	// race. The cross-node timeout cases stay on two nodes: they need no fence.
	for _, tc := range []struct {
		name     string
		nodes, n int
		env      []string
		args     []string
		want     string
	}{
		{"rank 0 exits before Put", 2, 4, []string{"GPUHELPER_TIMEOUT=3"}, []string{"die0"}, "GPUHELPER_ETIMEOUT"},
		{"timeout", 2, 3, []string{"GPUHELPER_TIMEOUT=2"}, []string{"late0", "6"}, "GPUHELPER_ETIMEOUT"},
		{"second init", 1, 4, nil, []string{"twice"}, "twice"},
		{"two threads", 1, 4, nil, []string{"threads"}, "threads"},
		{"fork", 1, 2, nil, []string{"fork"}, "fork"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := srun(t, c, tc.env, append([]string{"--mpi=pmix", "-O", fmt.Sprintf("-N%d", tc.nodes), fmt.Sprintf("-n%d", tc.n), bin("ghtest")}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, out, tc.n, tc.args[0], tc.want)
		})
	}
	// srun without PMIx: a step of several tasks cannot exchange the ID; each task must say so.
	t.Run("no PMIx server/n=2", func(t *testing.T) {
		out, err := srun(t, c, nil, "--mpi=none", "-O", "-N2", "-n2", bin("ghtest"), "expect", "-2")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 2, "expect", "srun --mpi=pmix")
	})
	t.Run("no PMIx server/n=1", func(t *testing.T) {
		out, err := srun(t, c, nil, "--mpi=none", "-n1", bin("ghtest"), "expect", "0")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 1, "expect", "GPUHELPER_SUCCESS")
	})
}
