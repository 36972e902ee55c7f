package helper

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
)

// srun runs args under srun on c with extra environment (srun exports it to the tasks).
func srun(t testing.TB, c *cluster.Cluster, extraEnv []string, args ...string) (string, error) {
	t.Helper()
	if !strings.Contains(strings.Join(extraEnv, " "), "GPUHELPER_TIMEOUT=") {
		// A rank that waits for data that never comes ends with a timeout error, well
		// before the 3-minute limit of the step.
		extraEnv = append(extraEnv, "GPUHELPER_TIMEOUT=45")
	}
	out, err := launch(t, cleanEnv(c.Env(), extraEnv...), 3*time.Minute, c.Bin("srun"), args...)
	return out, err
}

// TestSrun runs the library under a real Slurm PMIx server (mpi/pmix) on a private cluster of
// two nodes: steps on one and on two nodes. -O (overcommit): the nodes have 2 CPUs each.
// It runs in parallel with TestSrunTimeouts, on a cluster of its own (the package's other tests
// are sequential and run first): the timeout cases spend most of a minute each waiting.
func TestSrun(t *testing.T) {
	t.Parallel()
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
	// "second init", "two threads" and "fork" end right after gpuhelper_init: on two nodes
	// they prove that gpuhelper_finalize keeps the root until the other node has its ID
	// (a non-collecting PMIx fence did not, under Slurm 22.05: it completes per node).
	for _, tc := range []struct {
		name     string
		nodes, n int
		env      []string
		args     []string
		want     string
	}{
		{"rank 0 exits before Put", 2, 4, []string{"GPUHELPER_TIMEOUT=3"}, []string{"die0"}, "GPUHELPER_ETIMEOUT"},
		{"NCCL_COMM_ID set", 2, 4, []string{"NCCL_COMM_ID=127.0.0.1:29500"}, []string{"commid"}, "NCCL_COMM_ID=\"127.0.0.1:29500\" is set"},
		{"init after finalize", 2, 4, nil, []string{"reinit", "-11"}, "GPUHELPER_EFINALIZED"},
		{"second init", 2, 4, nil, []string{"twice"}, "twice"},
		{"two threads", 2, 4, nil, []string{"threads"}, "threads"},
		{"fork", 2, 2, nil, []string{"fork"}, "fork"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := srun(t, c, tc.env, append([]string{"--mpi=pmix", "-O", fmt.Sprintf("-N%d", tc.nodes), fmt.Sprintf("-n%d", tc.n), bin("ghtest")}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, out, tc.n, tc.args[0], tc.want)
		})
	}
	t.Run("collectives/N=2/n=5", func(t *testing.T) {
		out, err := srun(t, c, nil, "--mpi=pmix", "-O", "-N2", "-n5", bin("ghtest"), "coll")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 5, "coll", "coll")
	})
	t.Run("abort/N=2/n=4", func(t *testing.T) {
		start := time.Now()
		out, err := srun(t, c, []string{"GPUHELPER_TIMEOUT=120"}, "--mpi=pmix", "-O", "-N2", "-n4", bin("ghtest"), "abort", "2")
		checkAbort(t, out, err, time.Since(start))
	})
	// Issue 26: PMIx_Abort got 256 itself, and the step ended with status 0.
	t.Run("abort code 256/N=2/n=4", func(t *testing.T) {
		start := time.Now()
		out, err := srun(t, c, []string{"GPUHELPER_TIMEOUT=120", "GHTEST_ABORT_CODE=256"}, "--mpi=pmix", "-O", "-N2", "-n4", bin("ghtest"), "abort", "2")
		checkAbortCode(t, out, err, time.Since(start), 256, 1)
	})
	// Issue 26: an abort while another thread is inside gpuhelper_init ended this process only.
	t.Run("abort in init/N=2/n=3", func(t *testing.T) {
		start := time.Now()
		out, err := srun(t, c, []string{"GPUHELPER_TIMEOUT=120"}, "--mpi=pmix", "-O", "-N2", "-n3", bin("ghtest"), "abortininit")
		checkAbort(t, out, err, time.Since(start))
	})
	// Issue 26: a server without pmix.local.size, pmix.nodeid or pmix.lrank (or, on one node,
	// pmix.lpeers) made init fail, though the other facts determine them.
	for _, tc := range []struct {
		nodes, n int
		hide     string
	}{
		{2, 4, "pmix.local.size,pmix.nodeid,pmix.lrank"},
		{1, 3, "pmix.local.size,pmix.nodeid,pmix.lrank,pmix.lpeers"},
	} {
		t.Run(fmt.Sprintf("missing facts/N=%d/n=%d", tc.nodes, tc.n), func(t *testing.T) {
			log := stubLogPath(t)
			out, err := srun(t, c, []string{"STUBNCCL_LOG=" + log, "GPUHELPER_PMIX_LIBRARY=" + bin("libpmixhide.so"), "PMIXHIDE_KEYS=" + tc.hide},
				"--mpi=pmix", "-O", fmt.Sprintf("-N%d", tc.nodes), fmt.Sprintf("-n%d", tc.n), bin("ghtest"), "info", "1")
			if err != nil {
				t.Fatal(err)
			}
			checkInfo(t, out, tc.n, tc.nodes, 1, log)
		})
	}
	// Issue 25: info.nvl_clique from the plugin's GPUBIND_NVL_CLIQUE, and the collective count
	// of cliques: ranks in 1 clique, in 2 (one per node), in none; a malformed value.
	const cluster = "6f1c0bd4-89f2-4f53-8b1a-5a47b0c3e0d1"
	for _, tc := range []struct {
		name, set string // set: the shell assignment run before ghtest in each task
		want      string // the CLIQUE lines' count and, for node 0 / node 1, the clique
	}{
		{"1 clique", "GPUBIND_NVL_CLIQUE=" + cluster + ".7", "1 " + cluster + ".7 " + cluster + ".7"},
		{"2 cliques", "GPUBIND_NVL_CLIQUE=" + cluster + ".$SLURM_NODEID", "2 " + cluster + ".0 " + cluster + ".1"},
		{"none", "unset GPUBIND_NVL_CLIQUE", "0 - -"},
		{"node 1 only", `[ "$SLURM_NODEID" = 1 ] && GPUBIND_NVL_CLIQUE=` + cluster + `.3`, "1 - " + cluster + ".3"},
	} {
		t.Run("nvl cliques/"+tc.name+"/N=2/n=4", func(t *testing.T) {
			out, err := srun(t, c, nil, "--mpi=pmix", "-O", "-N2", "-n4", "sh", "-c", tc.set+"; export GPUBIND_NVL_CLIQUE; exec "+bin("ghtest")+" clique")
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			want := strings.Fields(tc.want)
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) != 4 || f[0] != "CLIQUE" {
					continue
				}
				n++
				rank, _ := strconv.Atoi(f[1])
				node := rank * 2 / 4 // srun's block distribution: ranks 0,1 on node 0
				if f[2] != want[0] || f[3] != want[1+node] {
					t.Errorf("rank %d: count %s clique %s, want %s %s", rank, f[2], f[3], want[0], want[1+node])
				}
			}
			if n != 4 {
				t.Errorf("%d CLIQUE lines, want 4:\n%s", n, out)
			}
		})
	}
	t.Run("nvl cliques/malformed/n=2", func(t *testing.T) {
		out, err := srun(t, c, []string{"GPUBIND_NVL_CLIQUE=not a clique"}, "--mpi=pmix", "-O", "-N1", "-n2", bin("ghtest"), "expect", "-7")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 2, "expect", `GPUBIND_NVL_CLIQUE="not a clique", expected <cluster_uuid>.<clique_id>`)
	})
	t.Run("GPUHELPER_NCCL_ID=lazy/N=2/n=4", func(t *testing.T) {
		log := stubLogPath(t)
		out, err := srun(t, c, []string{"GPUHELPER_NCCL_ID=lazy", "STUBNCCL_LOG=" + log}, "--mpi=pmix", "-O", "-N2", "-n4", bin("ghtest"), "lazyid")
		if err != nil {
			t.Fatal(err)
		}
		checkLazy(t, out, 4, log)
	})
	// No libnccl reachable anywhere: hello (not linked with the stub) still gets every fact.
	t.Run("hello without NCCL/N=2/n=4", func(t *testing.T) {
		out, err := srun(t, c, []string{noNCCL}, "--mpi=pmix", "-O", "-N2", "-n4", bin("hello"))
		if err != nil {
			t.Fatal(err)
		}
		checkHelloNoNCCL(t, out, 4, 2)
	})
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

// TestSrunTimeouts: ranks whose root comes too late end with GPUHELPER_ETIMEOUT under a real
// Slurm PMIx server, on a two-node cluster of its own, the cases side by side and in parallel
// with TestSrun. Each takes most of a minute: the late rank 0 then waits in Slurm's mpi/pmix,
// whose messages to the other node's slurmstepd (gone with its timed-out ranks) are retried
// for 31.5 s (500 ms doubling, 7 tries, fixed in pmixp_server.c; no mpi.conf setting or
// SLURM_PMIX_* variable changes it: SLURM_PMIX_DIRECT_CONN_EARLY=true and
// SLURM_PMIX_DIRECT_CONN=false were measured, 40.8 s and 41.0 s against 40.7 s).
func TestSrunTimeouts(t *testing.T) {
	t.Parallel()
	needSetup(t)
	if _, err := exec.LookPath("srun"); err != nil {
		t.Skip("Slurm not installed (make deps)")
	}
	c := cluster.StartT(t, cluster.Config{Nodes: 2})
	for _, tc := range []struct {
		name     string
		nodes, n int
		env      []string
		args     []string
		want     string
	}{
		{"timeout", 2, 3, []string{"GPUHELPER_TIMEOUT=2"}, []string{"late0", "6"}, "GPUHELPER_ETIMEOUT"},
		// Slurm gives up on a remote Get after its own PMIxTimeout (here 2 s) with an error that
		// is not NOT-FOUND; the library keeps asking until its own deadline.
		{"Slurm PMIxTimeout before ours", 2, 3, []string{"GPUHELPER_TIMEOUT=9", "SLURM_PMIX_TIMEOUT=2"}, []string{"late0", "14"}, "GPUHELPER_ETIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := srun(t, c, tc.env, append([]string{"--mpi=pmix", "-O", fmt.Sprintf("-N%d", tc.nodes), fmt.Sprintf("-n%d", tc.n), bin("ghtest")}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, out, tc.n, tc.args[0], tc.want)
		})
	}
}
