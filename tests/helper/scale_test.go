package helper

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
)

// TestScaleSmall is the small size of the scale harness (bench/scale.sh runs the large ones):
// 16 simulated nodes (16 slurmd on this host, Slurm's multiple-slurmd mode), 4 ranks each (srun -O
// spreads 64 tasks evenly over 16 nodes of 2 CPUs; --ntasks-per-node would be refused), under
// Slurm's PMIx server, in every exchange mode. Every rank must get the same world ID, the same
// scalable IDs and its node and color group IDs, and the stub libnccl's log must show each ID
// created exactly once, by the expected root (checkInfo).
func TestScaleSmall(t *testing.T) {
	needSetup(t)
	if _, err := exec.LookPath("srun"); err != nil {
		t.Skip("Slurm not installed (make deps)")
	}
	const nodes, perNode = 16, 4
	c := cluster.StartT(t, cluster.Config{Nodes: nodes, NoGPUs: true})
	for _, mode := range []string{"direct", "fence", "auto"} {
		t.Run(fmt.Sprintf("%s/N=%d/n=%d", mode, nodes, nodes*perNode), func(t *testing.T) {
			log := stubLogPath(t)
			start := time.Now()
			out, err := srun(t, c, []string{"STUBNCCL_LOG=" + log, "GPUHELPER_EXCHANGE=" + mode, "GPUHELPER_TIMEOUT=120"},
				"--mpi=pmix", "-O", fmt.Sprintf("-N%d", nodes), fmt.Sprintf("-n%d", nodes*perNode),
				bin("ghtest"), "info", "2")
			if err != nil {
				t.Fatal(err)
			}
			checkInfo(t, out, nodes*perNode, nodes, 2, log)
			t.Logf("%s: %d ranks on %d nodes in %v (whole step)", mode, nodes*perNode, nodes, time.Since(start).Round(time.Millisecond))
		})
	}
	// The collectives at this size: from ncclid's gatherFrom ranks on, allgather gathers at rank 0
	// and every rank reads one value (O(n) Gets, not n(n-1)).
	t.Run(fmt.Sprintf("coll/N=%d/n=%d", nodes, nodes*perNode), func(t *testing.T) {
		out, err := srun(t, c, []string{"GPUHELPER_NCCL_LIBRARY=" + stubLib, "GPUHELPER_TIMEOUT=120"},
			"--mpi=pmix", "-O", fmt.Sprintf("-N%d", nodes), fmt.Sprintf("-n%d", nodes*perNode), bin("ghtest"), "coll")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, nodes*perNode, "coll", "coll")
	})
}
