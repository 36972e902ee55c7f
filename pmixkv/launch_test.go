package pmixkv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The launcher tests re-run this test binary as the ranks of a real PMIx job.
const childEnv = "GPUBIND_PMIXKV_CHILD"

// TestChild is the body of one rank; it only runs inside a launched job.
func TestChild(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("runs only as a rank launched by the other tests")
	}
	out, err := child(mode)
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(3)
	}
	fmt.Println(out)
}

func child(mode string) (string, error) {
	kv, err := Open(Options{})
	if mode == "open" {
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("OPEN %s %d", kv.Info().Source, kv.Info().Size), kv.Close()
	}
	if err != nil {
		return "", err
	}
	defer kv.Close()
	// A second, nested client shares the same PMIx initialisation (reference count).
	kv2, err := newClient(nil)
	if err != nil {
		return "", fmt.Errorf("second client: %w", err)
	}
	if err := kv2.Close(); err != nil {
		return "", err
	}
	in := kv.Info()
	key := "gpubind.test.1"
	if err := kv.Put(key, []byte(fmt.Sprintf("v%d", in.Rank))); err != nil {
		return "", err
	}
	if err := kv.Commit(); err != nil {
		return "", err
	}
	// Direct modex: no fence, Get with a timeout from every rank.
	var got []string
	for r := 0; r < in.Size; r++ {
		v, err := kv.Get(r, key, 30*time.Second)
		if err != nil {
			return "", err
		}
		got = append(got, string(v))
	}
	if err := kv.Fence(true, 30*time.Second); err != nil {
		return "", err
	}
	// A key nobody puts: Get must give up after its timeout.
	_, err = kv.Get((in.Rank+1)%in.Size, "gpubind.test.never", time.Second)
	missing := "ok"
	if err == nil {
		missing = "found"
	} else if !errors.Is(err, ErrTimeout) && !errors.Is(err, errNotFound) {
		missing = "err:" + strings.ReplaceAll(err.Error(), " ", "_")
	}
	peers := fmt.Sprint(in.LocalPeers)
	return fmt.Sprintf("RANK %d %d %d %d %d %d %s %s %s", in.Rank, in.Size, in.LocalRank, in.LocalSize,
		in.NodeID, in.NumNodes, strings.ReplaceAll(peers, " ", ","), strings.Join(got, ","), missing), nil
}

func launch(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestMpirun(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not installed")
	}
	const n = 4
	out := launch(t, []string{childEnv + "=kv"}, "mpirun", "--allow-run-as-root", "--oversubscribe", "-n", fmt.Sprint(n),
		os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	seen := map[int]bool{}
	var want []string
	for r := 0; r < n; r++ {
		want = append(want, fmt.Sprintf("v%d", r))
	}
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "RANK ") {
			continue
		}
		var r, size, lr, ls, node, nn int
		var peers, got, missing string
		if _, err := fmt.Sscanf(line, "RANK %d %d %d %d %d %d %s %s %s", &r, &size, &lr, &ls, &node, &nn, &peers, &got, &missing); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		// mpirun runs all ranks on this one host, in rank order.
		if size != n || lr != r || ls != n || node != 0 || nn != 1 || peers != "[0,1,2,3]" {
			t.Errorf("rank %d facts wrong: %q", r, line)
		}
		if got != strings.Join(want, ",") {
			t.Errorf("rank %d got %s, want %s", r, got, strings.Join(want, ","))
		}
		if missing != "ok" {
			t.Errorf("rank %d: Get of a missing key: %s", r, missing)
		}
		seen[r] = true
	}
	if len(seen) != n {
		t.Fatalf("saw ranks %v, want %d\n%s", seen, n, out)
	}
}

// TestNoServer runs without a PMIx server: a singleton works, a job of several processes
// must be refused with advice to use srun --mpi=pmix.
func TestNoServer(t *testing.T) {
	clean := []string{childEnv + "=open"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PMIX_") || strings.HasPrefix(kv, "OMPI_") || strings.HasPrefix(kv, "SLURM_") {
			clean = append(clean, strings.SplitN(kv, "=", 2)[0]+"=")
		}
	}
	out := launch(t, clean, os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	if !strings.Contains(out, "OPEN singleton 1") {
		t.Errorf("singleton: %s", out)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(clean, "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=4")...)
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "srun --mpi=pmix") {
		t.Errorf("4 tasks without a server: err %v, output %s", err, b)
	}
}
