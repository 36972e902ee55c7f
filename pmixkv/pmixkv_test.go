package pmixkv

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestValidKey(t *testing.T) {
	for _, k := range []string{"gpubind.ncclid.1", "a", "x-y_z.0"} {
		if err := validKey(k); err != nil {
			t.Errorf("validKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", "pmix.foo", "PMIX_x", "a b", "ü", strings.Repeat("k", 501)} {
		if err := validKey(k); err == nil {
			t.Errorf("validKey(%q) = nil, want error", k)
		}
	}
}

func TestTimeoutMillis(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 0, -time.Second: 0, time.Microsecond: 1, time.Second: 1000, 1500 * time.Microsecond: 2} {
		if got := timeoutMillis(d); got != want {
			t.Errorf("timeoutMillis(%v) = %d, want %d", d, got, want)
		}
	}
}

func TestParseRanks(t *testing.T) {
	got, err := parseRanks("3,1, 2")
	if err != nil || len(got) != 3 || got[0] != 1 || got[2] != 3 {
		t.Fatalf("parseRanks = %v, %v", got, err)
	}
	if _, err := parseRanks("0,x"); err == nil {
		t.Fatal("parseRanks(0,x) = nil error")
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnvInfo(t *testing.T) {
	in, err := envInfo(env(nil))
	if err != nil || in.Source != "singleton" || in.Size != 1 || in.Rank != 0 {
		t.Fatalf("empty env: %+v, %v", in, err)
	}
	in, err = envInfo(env(map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}))
	if err != nil || in.Source != "slurm-env" || in.Size != 1 || in.LocalSize != 1 {
		t.Fatalf("slurm size 1: %+v, %v", in, err)
	}
	in, err = envInfo(env(map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "2", "SLURM_NTASKS": "4"}))
	if err != nil || in.Size != 4 || in.Rank != 2 {
		t.Fatalf("slurm size 4: %+v, %v", in, err)
	}
	if _, err := envInfo(env(map[string]string{"SLURM_STEP_ID": "0", "SLURM_PROCID": "x", "SLURM_NTASKS": "4"})); err == nil || !strings.Contains(err.Error(), "SLURM_PROCID") {
		t.Fatalf("bad SLURM_PROCID: %v", err)
	}
	in, err = envInfo(env(map[string]string{"OMPI_COMM_WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "0"}))
	if err != nil || in.Source != "ompi-env" || in.Size != 1 {
		t.Fatalf("ompi: %+v, %v", in, err)
	}
}

func TestMemJob(t *testing.T) {
	job, err := NewMemJob(4, func(r int) int { return r / 2 })
	if err != nil {
		t.Fatal(err)
	}
	in := job.Rank(3).Info()
	if in.LocalRank != 1 || in.LocalSize != 2 || in.NodeID != 1 || in.NumNodes != 2 || len(in.LocalPeers) != 2 || in.LocalPeers[0] != 2 {
		t.Fatalf("rank 3 info %+v", in)
	}
	if _, err := NewMemJob(2, func(r int) int { return 2 * r }); err == nil {
		t.Fatal("gap in node ids accepted")
	}
	// Values are invisible before Commit, visible after.
	r0, r1 := job.Rank(0), job.Rank(1)
	if err := r0.Put("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := r1.Get(0, "k", 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Get before commit: %v, want timeout", err)
	}
	if err := r0.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, err := r1.Get(0, "k", time.Second); err != nil || string(v) != "v" {
		t.Fatalf("Get after commit: %q, %v", v, err)
	}
	// A Get waits for a later commit.
	done := make(chan error)
	go func() {
		v, err := r1.Get(0, "late", 10*time.Second)
		if err == nil && string(v) != "x" {
			err = errors.New("wrong value " + string(v))
		}
		done <- err
	}()
	_ = r0.Put("late", []byte("x"))
	_ = r0.Commit()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Fence is a barrier of all four ranks.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = job.Rank(r).Fence(true, 10*time.Second)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d fence: %v", r, err)
		}
	}
	if err := job.Rank(0).Fence(false, 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("lone fence: %v, want timeout", err)
	}
}

func TestNodeIndex(t *testing.T) {
	for _, c := range []struct {
		list, host string
		idx, n     int
		ok         bool
	}{
		{"node1,node2", "node1", 0, 2, true},
		{"node1,node2", "node2", 1, 2, true},
		{"192.0.2.77,192.0.2.78", "192.0.2.78", 1, 2, true}, // ORTE: PMIX_NODEID 2 of 2 nodes
		{"a", "a", 0, 1, true},
		{" a , b ,", "b", 1, 2, true},
		{"a,b", "c", 0, 0, false},
		{"a,a", "a", 0, 0, false},
		{"", "a", 0, 0, false},
	} {
		idx, n, ok := nodeIndex(c.list, c.host)
		if ok != c.ok || (ok && (idx != c.idx || n != c.n)) {
			t.Errorf("NodeIndex(%q, %q) = %d, %d, %v; want %d, %d, %v", c.list, c.host, idx, n, ok, c.idx, c.n, c.ok)
		}
	}
}

// Issue 26: facts a PMIx server does not give are derived from the others; what cannot be
// derived is an error naming the key.
func TestFactsInfoDerives(t *testing.T) {
	n := func(v int) *int { return &v }
	s := func(v string) *string { return &v }
	full := facts{Namespace: "ns", Rank: 3, Size: n(4), LocalSize: n(2), NumNodes: n(2), LocalRank: n(1), NodeID: n(7),
		Hostname: s("b"), LocalPeers: s("2,3"), NodeList: s("a,b")}
	want, err := factsInfo(full)
	if err != nil || want.NodeID != 1 || want.NumNodes != 2 || want.LocalRank != 1 || want.LocalSize != 2 {
		t.Fatalf("full facts: %+v, %v", want, err)
	}
	lacking := full
	lacking.LocalSize, lacking.LocalRank, lacking.NodeID, lacking.NumNodes = nil, nil, nil, nil
	if got, err := factsInfo(lacking); err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("without local size, local rank, node id, node count: %+v, %v; want %+v", got, err, want)
	}
	// One node, no peer list: every rank is local.
	one := facts{Namespace: "ns", Rank: 2, Size: n(3), NumNodes: n(1), Errs: map[string]error{}}
	if got, err := factsInfo(one); err != nil || got.LocalRank != 2 || got.LocalSize != 3 || got.NodeID != 0 || fmt.Sprint(got.LocalPeers) != "[0 1 2]" {
		t.Errorf("one node without peers: %+v, %v", got, err)
	}
	// Two nodes, no peer list and no local rank: cannot be derived.
	two := facts{Namespace: "ns", Rank: 2, Size: n(4), NumNodes: n(2), NodeID: n(1), LocalSize: n(2), Errs: map[string]error{}}
	if _, err := factsInfo(two); err == nil || !strings.Contains(err.Error(), "pmix.lrank") {
		t.Errorf("two nodes without peers or local rank: %v, want an error naming pmix.lrank", err)
	}
	if _, err := factsInfo(facts{Errs: map[string]error{}}); err == nil || !strings.Contains(err.Error(), "pmix.job.size") {
		t.Errorf("no job size: %v", err)
	}
}
