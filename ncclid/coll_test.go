package ncclid

import (
	"sync"
	"sync/atomic"
	"time"

	"bytes"
	"errors"
	"fmt"
	"github.com/gpubind/gpubind/pmixkv"
	"strings"
	"testing"
)

func TestCollectives(t *testing.T) {
	out, job, _ := runJob(t, 5, func(r int) int { return r / 3 }, Direct, func(e *Exchanger) (any, error) {
		r := e.KV.Info().Rank
		if err := e.Barrier(); err != nil {
			return nil, err
		}
		var data []byte
		if r == 3 {
			data = []byte("from rank 3")
		}
		b, err := e.Bcast(3, data, 11)
		if err != nil {
			return nil, err
		}
		all, err := e.Allgather([]byte(fmt.Sprintf("r%d", r)))
		if err != nil {
			return nil, err
		}
		return fmt.Sprintf("%s|%s", b, bytes.Join(all, []byte(","))), nil
	})
	for r, o := range out {
		if o != "from rank 3|r0,r1,r2,r3,r4" {
			t.Errorf("rank %d: %v", r, o)
		}
	}
	if job.Fences() != 10 {
		t.Errorf("%d fences, want 10 (barrier and allgather on 5 ranks)", job.Fences())
	}
}

func TestCollectiveSizeErrors(t *testing.T) {
	_, err := newJobErrs(t, 3, func(e *Exchanger) error {
		r := e.KV.Info().Rank
		_, err := e.Bcast(0, []byte("abc"), 3+r) // ranks 1 and 2 expect more
		return err
	})
	if err[0] != nil || !errors.Is(err[1], ErrSize) || !strings.Contains(err[2].Error(), "root rank 0 sent 3 bytes, rank 2 expected 5") {
		t.Errorf("bcast size mismatch: %v", err)
	}
	_, err = newJobErrs(t, 2, func(e *Exchanger) error {
		_, err := e.Allgather(make([]byte, 1+e.KV.Info().Rank))
		return err
	})
	if !errors.Is(err[0], ErrSize) || !errors.Is(err[1], ErrSize) {
		t.Errorf("allgather size mismatch: %v", err)
	}
	_, err = newJobErrs(t, 2, func(e *Exchanger) error { _, err := e.Bcast(2, nil, 0); return err })
	if err[0] == nil || !strings.Contains(err[0].Error(), "bcast root 2, expected 0..1") {
		t.Errorf("bad root: %v", err)
	}
}

// Issue 15 LOW: fences collect data only where the data is needed. Barrier collects only when
// BarrierCollect says the server needs it (Slurm); allgather's fence always collects.
func TestBarrierCollect(t *testing.T) {
	for _, collect := range []bool{false, true} {
		job, err := pmixkv.NewMemJob(2, nil)
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for r := 0; r < 2; r++ {
			e := &Exchanger{KV: job.Rank(r), Timeout: 5 * time.Second, BarrierCollect: collect}
			go func() { errs <- e.Barrier() }()
		}
		for i := 0; i < 2; i++ {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		want := 0
		if collect {
			want = 2
		}
		if job.Fences() != 2 || job.CollectingFences() != want {
			t.Errorf("BarrierCollect %v: %d fences, %d collecting; want 2, %d", collect, job.Fences(), job.CollectingFences(), want)
		}
	}
}

// Issue 15 LOW: a collective that timed out on one rank can be retried and still meets the
// others (same key, nothing published twice); any other call moves on in step with them.
func TestRetryAfterTimeout(t *testing.T) {
	job, err := pmixkv.NewMemJob(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	var made [2]atomic.Int32
	ex := make([]*Exchanger, 2)
	for r := range ex {
		r := r
		ex[r] = &Exchanger{KV: job.Rank(r), Timeout: 100 * time.Millisecond, NewID: func() (ID, error) {
			var id ID
			id[0], id[1] = byte(r), byte(made[r].Add(1))
			return id, nil
		}}
	}
	both := func(f0, f1 func() error) (error, error) {
		var e0, e1 error
		done := make(chan bool)
		go func() { e0 = f0(); done <- true }()
		e1 = f1()
		<-done
		return e0, e1
	}
	// The world ID: rank 1 gives up before rank 0 publishes, then retries.
	if _, err := ex[1].world(); !errors.Is(err, pmixkv.ErrTimeout) {
		t.Fatalf("rank 1 alone: %v, want a timeout", err)
	}
	id0, err := ex[0].world()
	if err != nil {
		t.Fatal(err)
	}
	id1, err := ex[1].world()
	if err != nil || id1 != id0 {
		t.Fatalf("retry: %v, %v; want rank 0's ID %v", id1, err, id0)
	}
	// Scalable with both ranks roots: rank 1 publishes, times out on rank 0's, retries without
	// making a second ID.
	if _, err := ex[1].Scalable(2); !errors.Is(err, pmixkv.ErrTimeout) {
		t.Fatalf("scalable, rank 1 alone: %v", err)
	}
	var s0, s1 []ID
	e0, e1 := both(func() (err error) { s0, err = ex[0].Scalable(2); return }, func() (err error) { s1, err = ex[1].Scalable(2); return })
	if e0 != nil || e1 != nil || len(s0) != 2 || s0[0] != s1[0] || s0[1] != s1[1] || made[1].Load() != 1 {
		t.Fatalf("scalable retry: %v %v, %v %v, rank 1 made %d IDs (want 1)", s0, e0, s1, e1, made[1].Load())
	}
	// Bcast: rank 1 times out; instead of retrying it moves on to a barrier, as rank 0 does
	// after its bcast: the sequence stays in step, and the next bcast matches.
	if _, err := ex[1].Bcast(0, nil, 3); !errors.Is(err, pmixkv.ErrTimeout) {
		t.Fatalf("bcast, rank 1 alone: %v", err)
	}
	if _, err := ex[0].Bcast(0, []byte("one"), 3); err != nil {
		t.Fatal(err)
	}
	ex[0].Timeout, ex[1].Timeout = 5*time.Second, 5*time.Second
	if e0, e1 := both(ex[0].Barrier, ex[1].Barrier); e0 != nil || e1 != nil {
		t.Fatal(e0, e1)
	}
	var b []byte
	e0, e1 = both(func() error { _, err := ex[0].Bcast(0, []byte("two"), 3); return err }, func() (err error) { b, err = ex[1].Bcast(0, nil, 3); return })
	if e0 != nil || e1 != nil || string(b) != "two" {
		t.Fatalf("bcast after moving on: %q, %v %v; want \"two\"", b, e0, e1)
	}
	// Allgather: rank 0 published and fenced, rank 1's Get... both fence; a retry after a Get
	// timeout would not fence again. Here: all in step.
	var g0, g1 [][]byte
	e0, e1 = both(func() (err error) { g0, err = ex[0].Allgather([]byte{0}); return }, func() (err error) { g1, err = ex[1].Allgather([]byte{1}); return })
	if e0 != nil || e1 != nil || len(g0) != 2 || g1[0][0] != 0 || g0[1][0] != 1 {
		t.Fatalf("allgather: %v %v %v %v", g0, e0, g1, e1)
	}
}

// TestAllgatherScales: from gatherFrom ranks on, Allgather costs O(n) Gets in all (rank 0
// reads every value, the others one gathered value), not n(n-1): 9.5 s for 8 bytes at 1,024
// ranks when every rank read every other rank's value.
func TestAllgatherScales(t *testing.T) {
	const n = 40
	out, job, _ := runJob(t, n, func(r int) int { return r / 8 }, Auto, func(e *Exchanger) (any, error) {
		all, err := e.Allgather([]byte(fmt.Sprintf("r%02d", e.KV.Info().Rank)))
		return string(bytes.Join(all, nil)), err
	})
	var want strings.Builder
	for r := 0; r < n; r++ {
		fmt.Fprintf(&want, "r%02d", r)
	}
	for r, o := range out {
		if o != want.String() {
			t.Errorf("rank %d: %v", r, o)
		}
	}
	if g := job.Gets(); g > 2*(n-1) {
		t.Errorf("%d Gets for an allgather on %d ranks, want at most %d (O(n), not n(n-1) = %d)", g, n, 2*(n-1), n*(n-1))
	}
	if f := job.CollectingFences(); f != 2*n {
		t.Errorf("%d collecting fences, want %d (two per rank)", f, 2*n)
	}
}

// TestAllgatherGatheredSizeError: gathered at rank 0, a rank whose data has another size makes
// every rank fail with ErrSize (rank 0 publishes the failure), none hangs.
func TestAllgatherGatheredSizeError(t *testing.T) {
	_, errs := newJobErrs(t, 20, func(e *Exchanger) error {
		e.GatherFrom = 2
		n := 4
		if e.KV.Info().Rank == 7 {
			n = 5
		}
		_, err := e.Allgather(make([]byte, n))
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, ErrSize) || !strings.Contains(err.Error(), "rank 7 sent 5 bytes, rank 0 sent 4") {
			t.Errorf("rank %d: %v, want ErrSize naming rank 7", r, err)
		}
	}
}

// failGet makes this rank's Gets from rank bad fail with a non-timeout error.
type failGet struct {
	pmixkv.KV
	bad int
}

func (f failGet) Get(rank int, key string, timeout time.Duration) ([]byte, error) {
	if rank == f.bad {
		return nil, errors.New("injected failure")
	}
	return f.KV.Get(rank, key, timeout)
}

// TestAllgatherGatherFails: when rank 0 cannot read a rank's data (not a timeout), it publishes
// the failure, so every rank fails at once with it instead of waiting out its timeout in the
// second fence.
func TestAllgatherGatherFails(t *testing.T) {
	job, err := pmixkv.NewMemJob(20, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 20)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range errs {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			var kv pmixkv.KV = job.Rank(r)
			if r == 0 {
				kv = failGet{kv, 11}
			}
			e := &Exchanger{KV: kv, Timeout: 20 * time.Second, GatherFrom: 2}
			_, errs[r] = e.Allgather([]byte{byte(r)})
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 11") || !strings.Contains(err.Error(), "injected failure") {
			t.Errorf("rank %d: %v, want the failure to read rank 11", r, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the ranks took %v: they waited for the timeout", d)
	}
}
