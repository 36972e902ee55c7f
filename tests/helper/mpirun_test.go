package helper

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func mpirun(t *testing.T, extraEnv []string, n int, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) not installed")
	}
	env := cleanEnv(os.Environ(), append([]string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"}, extraEnv...)...)
	return launch(t, env, 3*time.Minute, "mpirun", append([]string{"--oversubscribe", "-n", fmt.Sprint(n)}, args...)...)
}

func TestMpirunInfo(t *testing.T) {
	needSetup(t)
	for _, c := range []struct {
		n, nids int
		prog    string
		mode    string
	}{
		{1, 1, "ghtest", "direct"}, {4, 2, "ghtest_dl", "direct"}, {8, 3, "ghtest", "direct"}, {16, 3, "ghtest", "direct"},
		{8, 0, "ghtest", "fence"},
	} {
		t.Run(fmt.Sprintf("n=%d/%s/%s", c.n, c.prog, c.mode), func(t *testing.T) {
			log := stubLogPath(t)
			env := []string{"STUBNCCL_LOG=" + log, "GPUHELPER_EXCHANGE=" + c.mode, "GPUHELPER_TIMEOUT=60"}
			if c.prog == "ghtest_dl" {
				env = append(env, "GPUHELPER_NCCL_LIBRARY="+stubLib)
			}
			out, err := mpirun(t, env, c.n, bin(c.prog), "info", fmt.Sprint(c.nids))
			if err != nil {
				t.Fatal(err)
			}
			nids := c.nids
			if nids == 0 {
				nids = 1 // ceil(8/128)
			}
			checkInfo(t, out, c.n, 1, nids, log)
		})
	}
}

// TestMpirunErrors: rank 0 exits before it publishes; rank 0 publishes too late; init twice,
// from two threads, and around fork.
func TestMpirunErrors(t *testing.T) {
	needSetup(t)
	for _, c := range []struct {
		name string
		n    int
		env  []string
		args []string
		want string
	}{
		// mpirun ends the whole job when a rank exits without PMIx init after another rank
		// has called it ("exiting improperly", Open MPI's rule): whether ranks 1 and 2 get
		// there first is a race, lost under load. The parameter turns that rule off, so the
		// test sees what the library does: the others time out.
		{"rank 0 exits before Put", 3, []string{"GPUHELPER_TIMEOUT=3", "OMPI_MCA_orte_allowed_exit_without_sync=1"}, []string{"die0"}, "GPUHELPER_ETIMEOUT"},
		{"timeout", 3, []string{"GPUHELPER_TIMEOUT=2"}, []string{"late0", "6"}, "GPUHELPER_ETIMEOUT"},
		{"root's ncclGetUniqueId fails", 3, []string{"STUBNCCL_FAIL=3", "GPUHELPER_TIMEOUT=120"}, []string{"noid"}, "ncclResult_t 3"},
		{"NCCL_COMM_ID set", 3, []string{"NCCL_COMM_ID=127.0.0.1:29500"}, []string{"commid"}, "NCCL_COMM_ID=\"127.0.0.1:29500\" is set"},
		{"init after finalize", 2, nil, []string{"reinit", "-11"}, "GPUHELPER_EFINALIZED"},
		{"second init", 4, nil, []string{"twice"}, "twice"},
		{"two threads", 4, nil, []string{"threads"}, "threads"},
		{"fork", 2, nil, []string{"fork"}, "fork"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := mpirun(t, c.env, c.n, append([]string{bin("ghtest")}, c.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, out, c.n, c.args[0], c.want)
		})
	}
}

// checkOK wants an OK line mentioning want from every rank that should report (all but rank
// 0 for die0), and no FAIL line.
func checkOK(t *testing.T, out string, n int, mode, want string) {
	t.Helper()
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "FAIL":
			t.Errorf("%s", l)
		case "OK":
			if strings.Contains(l, want) || (mode == "late0" && f[1] == "0") {
				seen[f[1]] = true
			}
		}
	}
	first := 0
	if mode == "die0" {
		first = 1
	}
	for r := first; r < n; r++ {
		if !seen[fmt.Sprint(r)] {
			t.Errorf("rank %d: no OK line with %q", r, want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestNCCLOrigin: every rank learns which NCCL made the world ID on rank 0, found in the
// process (ghtest links the stub) or dlopen'ed (ghtest_dl).
func TestNCCLOrigin(t *testing.T) {
	needSetup(t)
	for _, prog := range []string{"ghtest", "ghtest_dl"} {
		t.Run(prog, func(t *testing.T) {
			out, err := mpirun(t, []string{"STUBNCCL_VERSION=22803", "GPUHELPER_NCCL_LIBRARY=" + stubLib}, 3, bin(prog), "origin")
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, out, 3, "origin", "origin 22803 "+stubLib)
		})
	}
}

// TestNCCLVersionMismatch: rank 0 has NCCL 2.28.3, ranks 1 and 2 have 2.18.5. They must fail
// with both versions named instead of hanging later in ncclCommInitRank. (MPMD: each app
// context gets its own STUBNCCL_VERSION.)
func TestNCCLVersionMismatch(t *testing.T) {
	needSetup(t)
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) not installed")
	}
	env := cleanEnv(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "GPUHELPER_TIMEOUT=3")
	out, err := launch(t, env, 3*time.Minute, "mpirun", "--oversubscribe",
		"-n", "1", "env", "STUBNCCL_VERSION=22803", bin("ghtest"), "vers", ":",
		"-n", "2", "env", "STUBNCCL_VERSION=21805", bin("ghtest"), "vers")
	if err != nil {
		t.Fatal(err)
	}
	checkOK(t, out, 1, "vers", "vers same")
	for _, r := range []string{"1", "2"} {
		want := regexp.MustCompile(`(?m)^OK ` + r + ` vers \| .*root rank 0 made the NCCL ID with NCCL 2\.28\.3 \(22803\) in .*libnccl\.so\.2, but rank ` + r + ` has NCCL 2\.18\.5 \(21805\) in .*libnccl\.so\.2`)
		if !want.MatchString(out) {
			t.Errorf("rank %s did not refuse the ID naming both versions:\n%s", r, out)
		}
	}
}

// fakeSSH is an rsh agent for Open MPI's mpirun that starts the "remote" daemon (orted) on this
// machine: mpirun then runs one orted, with its own PMIx server, per host of --host, as it
// would on a cluster. It drops ssh's options; each host gets its own TMPDIR under
// $FAKESSH_TMP, as it would have its own /tmp: two daemons creating their session directories
// in one /tmp at once sometimes collide (mkdir: File exists), and a daemonized orted then dies
// unseen while mpirun waits for it forever (2 runs in 25 on the loaded VM; none in 100 apart).
const fakeSSH = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	-x | -T | -n) shift ;;
	-o | -l | -p) shift 2 ;;
	*) break ;;
	esac
done
dir="$FAKESSH_TMP/$1"
shift
mkdir -p "$dir" || exit 1
TMPDIR=$dir
export TMPDIR
exec /bin/sh -c "$*"
`

// TestSparseNodeIDs runs a job on two "remote" hosts (TEST-NET-2 addresses; the fake agent
// starts their daemons here). Open MPI's ORTE numbers nodes by their place in its pool, where
// 0 is mpirun's own node: the ranks get PMIX_NODEID 1 and 2 with PMIX_NUM_NODES 2. The library
// must report node ids 0 and 1.
func TestSparseNodeIDs(t *testing.T) {
	needSetup(t)
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun (Open MPI) not installed")
	}
	dir := t.TempDir()
	agent := filepath.Join(dir, "ssh")
	if err := os.WriteFile(agent, []byte(fakeSSH), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(env []string, args ...string) string {
		t.Helper()
		env = cleanEnv(os.Environ(), append([]string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
			"FAKESSH_TMP=" + dir}, env...)...)
		// --leave-session-attached: the daemons stay children of the agent, so that a daemon
		// that fails is seen to fail (daemonized, its errors go nowhere and mpirun hangs).
		out, err := launch(t, env, 3*time.Minute, "mpirun", append([]string{"--leave-session-attached", "--mca", "plm_rsh_agent", agent,
			"--mca", "plm_rsh_no_tree_spawn", "1", "--host", "198.51.100.7:2,198.51.100.8:2", "-n", "4"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The launcher's own numbers: sparse, or this test proves nothing.
	raw := map[string]bool{}
	for _, l := range strings.Split(run(nil, bin("nodeid")), "\n") {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "NODEID" {
			raw[f[2]+"/"+f[3]] = true
		}
	}
	if len(raw) != 2 || !raw["1/2"] || !raw["2/2"] {
		t.Fatalf("PMIX_NODEID/PMIX_NUM_NODES seen %v, want 1/2 and 2/2 (ORTE's node pool numbering)", raw)
	}
	log := stubLogPath(t)
	out := run([]string{"STUBNCCL_LOG=" + log, "GPUHELPER_TIMEOUT=60"}, bin("ghtest"), "info", "2")
	checkInfo(t, out, 4, 2, 2, log)
}

// TestCollectives: gpuhelper_barrier, _bcast and _allgather, with their bad inputs, alone and
// under mpirun (srun: TestSrun).
func TestCollectives(t *testing.T) {
	needSetup(t)
	stub := "GPUHELPER_NCCL_LIBRARY=" + stubLib
	t.Run("singleton", func(t *testing.T) {
		out, err := launch(t, cleanEnv(os.Environ(), stub), time.Minute, bin("ghtest"), "coll")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 1, "coll", "coll")
	})
	t.Run("mpirun n=5", func(t *testing.T) {
		out, err := mpirun(t, []string{stub, "GPUHELPER_TIMEOUT=60"}, 5, bin("ghtest"), "coll")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 5, "coll", "coll")
	})
	// examples/collectives.c without NCCL: rank 0 prints every rank.
	t.Run("examples/collectives mpirun n=3", func(t *testing.T) {
		exe := filepath.Join(t.TempDir(), "collectives")
		args := []string{filepath.Join(repoRoot, "examples/collectives.c"), "-o", exe, "-Wall", "-Wextra", "-Werror",
			"-I" + filepath.Join(libBuild, "include"), "-L" + libBuild, "-Wl,-rpath," + libBuild, "-lgpuhelper"}
		if o, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
			t.Fatalf("cc: %v\n%s", err, o)
		}
		out, err := mpirun(t, []string{noNCCL, "GPUHELPER_TIMEOUT=60"}, 3, exe)
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`(?m)^collectives: run-\d+: rank (\d) node 0 host \S+ cuda_device -1 bus -$`)
		if m := re.FindAllStringSubmatch(out, -1); len(m) != 3 || m[0][1] != "0" || m[2][1] != "2" {
			t.Errorf("collectives printed:\n%s", out)
		}
	})
}

// checkAbort: a job where one rank called gpuhelper_abort(7, "ghtest gives up") must end at
// once with exit status 7 and the message. The other ranks wait in a barrier and then sleep
// 100 s (GPUHELPER_TIMEOUT is 120 s), so only the launcher's kill ends the job in time.
//
// One launcher bug is let through: Open MPI 4.1.4's mpirun (with OpenPMIx 4.2.2) sometimes
// crashes in its own PMIx_server_finalize while it winds the aborted job down (3 runs in 30 on
// the loaded 2-CPU VM, none in 30 unloaded; also with processes that wait to be killed instead
// of exiting). The job has ended by then; the other checks still apply.
func checkAbort(t *testing.T, out string, err error, took time.Duration) {
	t.Helper()
	checkAbortCode(t, out, err, took, 7, 7)
}

// checkAbortCode: gpuhelper_abort(code) ended the job with exit status want, within a minute.
func checkAbortCode(t *testing.T, out string, err error, took time.Duration, code, want int) {
	t.Helper()
	var ee *exec.ExitError
	launcherCrash := errors.As(err, &ee) && ee.ExitCode() == -1 && strings.Contains(fmt.Sprint(err), "signal: segmentation fault") &&
		strings.Contains(fmt.Sprint(err), "PMIx_server_finalize")
	switch {
	case launcherCrash:
		t.Logf("mpirun crashed in PMIx_server_finalize after the abort (an Open MPI bug, let through):\n%v", err)
	case !errors.As(err, &ee) || ee.ExitCode() != want:
		t.Errorf("exit: %v, want exit status %d", err, want)
	}
	if !strings.Contains(fmt.Sprint(err), fmt.Sprintf("gpuhelper_abort(%d) in pid", code)) || !strings.Contains(fmt.Sprint(err), "ghtest gives up") {
		t.Errorf("no abort message on stderr: %v", err)
	}
	if strings.Contains(out, "FAIL") {
		t.Errorf("a rank failed:\n%s", out)
	}
	if took > 60*time.Second {
		t.Errorf("the job took %v to end", took)
	}
}

// TestAbort: gpuhelper_abort on one rank ends the whole job.
func TestAbort(t *testing.T) {
	needSetup(t)
	env := []string{"GPUHELPER_NCCL_LIBRARY=" + stubLib, "GPUHELPER_TIMEOUT=120"}
	t.Run("singleton", func(t *testing.T) {
		start := time.Now()
		out, err := launch(t, cleanEnv(os.Environ(), env...), time.Minute, bin("ghtest"), "abort", "0")
		checkAbort(t, out, err, time.Since(start))
		if !strings.Contains(fmt.Sprint(err), "ending this process only") {
			t.Errorf("no word that only this process ends: %v", err)
		}
	})
	t.Run("mpirun n=3", func(t *testing.T) {
		start := time.Now()
		out, err := mpirun(t, env, 3, bin("ghtest"), "abort", "1")
		checkAbort(t, out, err, time.Since(start))
	})
	// The abort must not wait for the library's lock, held by a collective in another thread.
	t.Run("while another thread waits/mpirun n=2", func(t *testing.T) {
		start := time.Now()
		out, err := mpirun(t, env, 2, bin("ghtest"), "abortwait")
		checkAbort(t, out, err, time.Since(start))
	})
	// Issue 26: 256 ended the job with status 0 (PMIx_Abort got the code itself).
	t.Run("code 256/mpirun n=3", func(t *testing.T) {
		start := time.Now()
		out, err := mpirun(t, append(env, "GHTEST_ABORT_CODE=256"), 3, bin("ghtest"), "abort", "1")
		checkAbortCode(t, out, err, time.Since(start), 256, 1)
	})
	// Issue 26: while another thread is inside gpuhelper_init (connected, waiting for rank
	// 0's ID), the abort found "no PMIx session" and ended its own process only.
	t.Run("while another thread is in init/mpirun n=2", func(t *testing.T) {
		start := time.Now()
		out, err := mpirun(t, env, 2, bin("ghtest"), "abortininit")
		checkAbort(t, out, err, time.Since(start))
	})
}
