package ncclid

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpubind/gpubind/pmixkv"
	"github.com/gpubind/gpubind/tests/stubnccl"
)

func TestRootRanks(t *testing.T) {
	for _, c := range []struct {
		size, n int
		want    string
	}{
		{300, 3, "[0 100 200]"}, {7, 3, "[0 3 5]"}, {1, 1, "[0]"}, {16, 16, "[0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15]"},
		{10, 4, "[0 3 6 8]"}, {257, 3, "[0 86 172]"},
	} {
		got, err := rootRanks(c.size, c.n)
		if err != nil || fmt.Sprint(got) != c.want {
			t.Errorf("rootRanks(%d, %d) = %v, %v; want %s", c.size, c.n, got, err, c.want)
		}
		// Cross-check against NCCL's documented rankHasRoot.
		var ref []int
		for r := 0; r < c.size; r++ {
			if rankHasRoot(r, c.size, c.n) {
				ref = append(ref, r)
			}
		}
		if fmt.Sprint(ref) != fmt.Sprint(got) {
			t.Errorf("size %d n %d: rankHasRoot gives %v, rootRanks %v", c.size, c.n, ref, got)
		}
	}
	for _, c := range [][2]int{{0, 1}, {4, 0}, {4, 5}} {
		if _, err := rootRanks(c[0], c[1]); err == nil {
			t.Errorf("rootRanks(%d, %d) accepted", c[0], c[1])
		}
	}
	for size, want := range map[int]int{1: 1, 128: 1, 129: 2, 300: 3, 1024: 8} {
		if got := DefaultRoots(size); got != want {
			t.Errorf("DefaultRoots(%d) = %d, want %d", size, got, want)
		}
	}
}

// rankHasRoot is the function in NCCL's documentation of ncclCommInitRankScalable.
func rankHasRoot(rank, nRanks, nIds int) bool {
	rmr, rpr := nRanks%nIds, nRanks/nIds
	rlim := rmr * (rpr + 1)
	if rank < rlim {
		return rank%(rpr+1) == 0
	}
	return (rank-rlim)%rpr == 0
}

func TestParseMode(t *testing.T) {
	if m, err := ParseMode("fence"); err != nil || m != Fenced {
		t.Fatal(m, err)
	}
	if m, err := ParseMode(""); err != nil || m != Auto {
		t.Fatal(m, err)
	}
	if m, err := ParseMode(" Direct "); err != nil || m != Direct {
		t.Fatal(m, err)
	}
	if m, err := ParseMode("auto"); err != nil || m != Auto {
		t.Fatal(m, err)
	}
	if _, err := ParseMode("bcast"); err == nil || !strings.Contains(err.Error(), `"bcast", expected "auto" (the default), "direct" or "fence"`) {
		t.Fatalf("bcast: %v", err)
	}
	for _, tc := range []struct {
		m            Mode
		nodes, roots int
		local        bool
		want         bool
	}{
		{Auto, 1, 8, false, false},                  // one node: every Get is local
		{Auto, 2, 1, false, false},                  // world ID on few nodes: direct
		{Auto, autoFenceNodes - 1, 1, false, false}, // ... up to the threshold
		{Auto, autoFenceNodes, 1, false, true},      // from it on: fence
		{Auto, 2, 2, false, true},                   // several roots: one fence, not K Gets in a row
		{Auto, 1000, 1, true, false},                // node groups: the root is on the node
		{Direct, 1000, 8, false, false}, {Fenced, 1, 1, true, true},
	} {
		if got := tc.m.fences(tc.nodes, tc.roots, tc.local); got != tc.want {
			t.Errorf("%v.Fences(nodes %d, roots %d, local %v) = %v, want %v", tc.m, tc.nodes, tc.roots, tc.local, got, tc.want)
		}
	}
}

// TestAutoFencesOnManyNodes: under Auto, the world ID fences only from autoFenceNodes nodes on,
// scalable IDs with several roots always across nodes, node groups never.
func TestAutoFencesOnManyNodes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  int
		fn     func(e *Exchanger) (any, error)
		fences int // Fence calls, all ranks together (2 ranks per node)
	}{
		{"world, 2 nodes", 2, func(e *Exchanger) (any, error) { return e.world() }, 0},
		{"world, many nodes", autoFenceNodes, func(e *Exchanger) (any, error) { return e.world() }, 2 * autoFenceNodes},
		{"2 scalable IDs, 2 nodes", 2, func(e *Exchanger) (any, error) { return e.Scalable(2) }, 4},
		{"node groups, many nodes", autoFenceNodes, func(e *Exchanger) (any, error) { return e.Group(NodeColor) }, 0},
		{"bcast, 2 nodes", 2, func(e *Exchanger) (any, error) { return e.Bcast(0, []byte("x"), 1) }, 0},
		{"bcast, many nodes", autoFenceNodes, func(e *Exchanger) (any, error) { return e.Bcast(1, []byte("x"), 1) }, 2 * autoFenceNodes},
	} {
		out, job, _ := runJob(t, tc.nodes*2, func(r int) int { return r / 2 }, Auto, tc.fn)
		if job.Fences() != tc.fences || job.CollectingFences() != tc.fences {
			t.Errorf("%s: %d fences (%d collecting), want %d", tc.name, job.Fences(), job.CollectingFences(), tc.fences)
		}
		if len(out) != tc.nodes*2 {
			t.Errorf("%s: %d results", tc.name, len(out))
		}
	}
}

// job runs fn on every rank of an in-memory job, each with its own Exchanger.
type callLog struct {
	mu    sync.Mutex
	ranks []int
}

func runJob(t *testing.T, size int, nodeOf func(int) int, mode Mode, fn func(e *Exchanger) (any, error)) ([]any, *pmixkv.MemJob, *callLog) {
	t.Helper()
	job, err := pmixkv.NewMemJob(size, nodeOf)
	if err != nil {
		t.Fatal(err)
	}
	calls := &callLog{}
	out := make([]any, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	var ctr atomic.Uint64
	for r := 0; r < size; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			e := &Exchanger{KV: job.Rank(r), Mode: mode, Timeout: 20 * time.Second, NewID: func() (ID, error) {
				calls.mu.Lock()
				calls.ranks = append(calls.ranks, r)
				calls.mu.Unlock()
				var id ID
				copy(id[:], fmt.Sprintf("id-%d-%d", r, ctr.Add(1)))
				return id, nil
			}}
			out[r], errs[r] = fn(e)
		}(r)
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return out, job, calls
}

// newJobErrs runs fn on every rank of an in-memory job and returns each rank's error.
func newJobErrs(t *testing.T, size int, fn func(e *Exchanger) error) (*pmixkv.MemJob, []error) {
	t.Helper()
	job, err := pmixkv.NewMemJob(size, nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := 0; r < size; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = fn(&Exchanger{KV: job.Rank(r), Timeout: 10 * time.Second})
		}(r)
	}
	wg.Wait()
	return job, errs
}

func TestWorldDirectAndFenced(t *testing.T) {
	for _, mode := range []Mode{Direct, Fenced} {
		out, job, calls := runJob(t, 8, func(r int) int { return r / 4 }, mode, func(e *Exchanger) (any, error) {
			a, err := e.world()
			if err != nil {
				return nil, err
			}
			b, err := e.world() // a second collective gets a fresh ID under a fresh key
			return [2]ID{a, b}, err
		})
		first := out[0].([2]ID)
		if first[0] == first[1] {
			t.Errorf("%v: two World calls gave the same ID", mode)
		}
		for r, o := range out {
			if o.([2]ID) != first {
				t.Errorf("%v: rank %d IDs differ from rank 0", mode, r)
			}
		}
		if fmt.Sprint(calls.ranks) != "[0 0]" {
			t.Errorf("%v: generator called by ranks %v, want [0 0]", mode, calls.ranks)
		}
		wantFences := 0
		if mode == Fenced {
			wantFences = 16
		}
		if job.Fences() != wantFences {
			t.Errorf("%v: %d fences, want %d", mode, job.Fences(), wantFences)
		}
	}
}

func TestScalable(t *testing.T) {
	out, _, calls := runJob(t, 7, nil, Direct, func(e *Exchanger) (any, error) { return e.Scalable(3) })
	ids := out[0].([]ID)
	if len(ids) != 3 {
		t.Fatalf("%d IDs", len(ids))
	}
	for r, o := range out {
		if fmt.Sprint(o) != fmt.Sprint(ids) {
			t.Errorf("rank %d IDs differ", r)
		}
	}
	for i, root := range []int{0, 3, 5} {
		if !strings.HasPrefix(string(ids[i][:]), fmt.Sprintf("id-%d-", root)) {
			t.Errorf("ID %d made by %q, want root %d", i, ids[i][:8], root)
		}
	}
	if len(calls.ranks) != 3 {
		t.Errorf("generator calls %v", calls.ranks)
	}
	// Default count: one ID for up to 128 ranks.
	out, _, _ = runJob(t, 3, nil, Direct, func(e *Exchanger) (any, error) { return e.Scalable(0) })
	if len(out[2].([]ID)) != 1 {
		t.Errorf("default count gave %d IDs", len(out[2].([]ID)))
	}
}

func TestGroups(t *testing.T) {
	nodeOf := func(r int) int { return r / 3 }
	for _, mode := range []Mode{Direct, Fenced} {
		out, _, calls := runJob(t, 6, nodeOf, mode, func(e *Exchanger) (any, error) {
			n, err := e.Group(NodeColor)
			if err != nil {
				return nil, err
			}
			c, err := e.Group(e.KV.Info().Rank % 2)
			return [2]Group{n, c}, err
		})
		for r, o := range out {
			g := o.([2]Group)
			node, col := g[0], g[1]
			wantRoot := r / 3 * 3
			if node.Root != wantRoot || node.Size != 3 || node.Rank != r%3 || node.ID != out[wantRoot].([2]Group)[0].ID {
				t.Errorf("%v rank %d node group %+v", mode, r, node)
			}
			if col.Root != r%2 || col.Size != 3 || col.Rank != r/2 || col.ID != out[r%2].([2]Group)[1].ID || col.Color != r%2 {
				t.Errorf("%v rank %d color group %+v", mode, r, col)
			}
		}
		if out[0].([2]Group)[0].ID == out[3].([2]Group)[0].ID || out[0].([2]Group)[1].ID == out[1].([2]Group)[1].ID {
			t.Errorf("%v: different groups share an ID", mode)
		}
		if len(calls.ranks) != 4 {
			t.Errorf("%v: generator calls %v, want 4 (2 nodes + 2 colors)", mode, calls.ranks)
		}
	}
	job, _ := pmixkv.NewMemJob(1, nil)
	e := &Exchanger{KV: job.Rank(0)}
	if _, err := e.Group(-5); err == nil {
		t.Error("color -5 accepted")
	}
}

func TestRootFailureReachesOthers(t *testing.T) {
	job, _ := pmixkv.NewMemJob(3, nil)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			e := &Exchanger{KV: job.Rank(r), Timeout: time.Minute, NewID: func() (ID, error) {
				return ID{}, errors.New("no NCCL here")
			}}
			_, errs[r] = e.world()
		}(r)
	}
	wg.Wait()
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "no NCCL here") {
		t.Errorf("root: %v", errs[0])
	}
	for r := 1; r < 3; r++ {
		if !errors.Is(errs[r], ErrRoot) || !strings.Contains(errs[r].Error(), "no NCCL here") {
			t.Errorf("rank %d: %v", r, errs[r])
		}
	}
}

// TestCommIDRefused: with NCCL_COMM_ID set, every ncclGetUniqueId returns the same bytes, so
// scalable and group IDs would collide; the roots refuse them and every rank hears why. The world
// ID alone is fine.
func TestCommIDRefused(t *testing.T) {
	const size = 4
	job, err := pmixkv.NewMemJob(size, func(r int) int { return r / 2 })
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([][3]error, size)
	for r := 0; r < size; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			e := &Exchanger{KV: job.Rank(r), Timeout: time.Minute,
				Getenv: func(k string) string {
					if k == "NCCL_COMM_ID" {
						return "10.1.2.3:29500"
					}
					return ""
				},
				NewID: func() (ID, error) { var id ID; copy(id[:], "10.1.2.3:29500"); return id, nil }}
			_, errs[r][0] = e.world()
			_, errs[r][1] = e.Scalable(2)
			_, errs[r][2] = e.Group(NodeColor)
		}(r)
	}
	wg.Wait()
	for r, e := range errs {
		if e[0] != nil {
			t.Errorf("rank %d: world ID refused: %v", r, e[0])
		}
		for i, what := range []string{"scalable", "node group"} {
			err := e[i+1]
			if err == nil || !strings.Contains(err.Error(), `NCCL_COMM_ID="10.1.2.3:29500"`) {
				t.Errorf("rank %d: %s IDs: %v, want a refusal naming NCCL_COMM_ID", r, what, err)
			}
		}
	}
}

// TestRepeatedIDRefused: NCCL_COMM_ID from nccl.conf is out of the environment's sight; an ID
// that repeats one the process made before gives it away.
func TestRepeatedIDRefused(t *testing.T) {
	job, _ := pmixkv.NewMemJob(1, nil)
	e := &Exchanger{KV: job.Rank(0), Getenv: func(string) string { return "" },
		NewID: func() (ID, error) { return ID{1, 2, 3}, nil }}
	if _, err := e.world(); err != nil {
		t.Fatal(err)
	}
	_, err := e.Group(NodeColor)
	if !errors.Is(err, ErrCommID) || !strings.Contains(err.Error(), "NCCL_COMM_ID") {
		t.Fatalf("repeated ID: %v, want ErrCommID naming NCCL_COMM_ID", err)
	}
}

func TestDeadRootTimesOut(t *testing.T) {
	job, _ := pmixkv.NewMemJob(2, nil)
	e := &Exchanger{KV: job.Rank(1), Timeout: 50 * time.Millisecond}
	_, err := e.world()
	if !errors.Is(err, pmixkv.ErrTimeout) || !strings.Contains(err.Error(), "root rank 0") {
		t.Fatalf("err = %v, want a timeout naming root rank 0", err)
	}
}

func TestLibWithStub(t *testing.T) {
	dir := t.TempDir()
	lib, err := stubnccl.Build(dir)
	if err != nil {
		t.Skip(err) // no C compiler
	}
	if InProcess() != nil {
		t.Fatal("the test process has an ncclGetUniqueId of its own")
	}
	if _, err := Lib(filepath.Join(dir, "nope.so")).NewID(); err == nil || !strings.Contains(err.Error(), "nope.so") {
		t.Errorf("missing library: %v", err)
	}
	logf := filepath.Join(dir, "calls")
	t.Setenv("STUBNCCL_LOG", logf)
	t.Setenv("PMIX_RANK", "7")
	t.Setenv("STUBNCCL_VERSION", "22803")
	l := Lib(lib)
	if l.Resolved() != nil {
		t.Fatal("resolved before first use")
	}
	a, err := l.NewID()
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if a == b || a == (ID{}) {
		t.Fatalf("stub IDs not distinct random: %v %v", a, b)
	}
	data, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d 7 %x\n%d 7 %x\n", os.Getpid(), a[:], os.Getpid(), b[:])
	if !bytes.Equal(data, []byte(want)) {
		t.Errorf("log %q, want %q", data, want)
	}
	// dlopen'ed RTLD_LOCAL: the stub's symbols did not become the process's.
	if InProcess() != nil {
		t.Error("after the dlopen, ncclGetUniqueId is visible process-wide (RTLD_GLOBAL?)")
	}
	if o := Describe(l.Resolved()); o.Library != lib || o.Version != 22803 || o.String() != "NCCL 2.28.3 (22803) in "+lib {
		t.Errorf("Describe = %+v (%v), want %s version 22803", o, o, lib)
	}
	t.Setenv("STUBNCCL_FAIL", "3")
	if _, err := l.NewID(); err == nil || !strings.Contains(err.Error(), "ncclResult_t 3") {
		t.Errorf("failing ncclGetUniqueId: %v", err)
	}
}

// TestSearchLoaded: the default search takes an RCCL (or NCCL) that the process loaded in a
// scope of its own (RTLD_LOCAL: invisible to dlsym(RTLD_DEFAULT)) before any library by
// name, and a library whose name shares the prefix but lacks ncclGetUniqueId (NCCL's net
// plugins, libnccl-net*.so) does not count.
func TestSearchLoaded(t *testing.T) {
	dir := t.TempDir()
	lib, err := stubnccl.BuildRCCL(dir)
	if err != nil {
		t.Skip(err) // no C compiler
	}
	plugin := filepath.Join(dir, "librccl-net.so")
	src := filepath.Join(dir, "net.c")
	if err := os.WriteFile(src, []byte("int ncclNetPlugin_v8 = 1;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cc", "-shared", "-fPIC", "-o", plugin, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
	// The plugin first: loaded, but it has no ncclGetUniqueId; the search must not stop there.
	if _, err := Lib(plugin).NewID(); err == nil || !strings.Contains(err.Error(), "has no ncclGetUniqueId") {
		t.Fatalf("plugin: %v", err)
	}
	if _, err := Lib(lib).NewID(); err != nil { // loads the stand-in librccl.so.1, RTLD_LOCAL
		t.Fatal(err)
	}
	if InProcess() != nil {
		t.Fatal("ncclGetUniqueId visible process-wide")
	}
	// libnccl.so.2 first by name, but the loaded RCCL wins; its IDs begin "RCCL".
	s := Search(true)
	id, err := s.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if o := Describe(s.Resolved()); o.Library != lib || fmt.Sprintf("%x", id[:4]) != stubnccl.RCCLPrefix || o.String() != "RCCL 2.22.3 (22203) in "+lib {
		t.Errorf("Search(true) used %v, ID %x..., want the loaded %s", o, id[:4], lib)
	}
}

func TestVersionString(t *testing.T) {
	for v, want := range map[int]string{22803: "2.28.3", 21805: "2.18.5", 2804: "2.8.4", 0: "unknown"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %s, want %s", v, got, want)
		}
	}
}

// TestVersionMismatch: a root publishes its NCCL version with the ID; a rank with another
// version refuses the ID naming both, a rank with the same or an unknown one takes it.
func TestVersionMismatch(t *testing.T) {
	job, _ := pmixkv.NewMemJob(4, nil)
	versions := []int{22803, 22803, 21805, 0}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	origins := make([]Origin, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			e := &Exchanger{KV: job.Rank(r), Timeout: time.Minute,
				NewID: func() (ID, error) { return ID{byte(r + 1)}, nil },
				Local: func() Origin { return Origin{Library: fmt.Sprintf("/nccl%d/libnccl.so.2", r), Version: versions[r]} }}
			_, origins[r], errs[r] = e.WorldOrigin()
		}(r)
	}
	wg.Wait()
	for _, r := range []int{0, 1, 3} {
		if errs[r] != nil || origins[r] != (Origin{Library: "/nccl0/libnccl.so.2", Version: 22803}) {
			t.Errorf("rank %d: %v, origin %+v", r, errs[r], origins[r])
		}
	}
	if err := errs[2]; !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "NCCL 2.28.3 (22803) in /nccl0/libnccl.so.2") ||
		!strings.Contains(err.Error(), "rank 2 has NCCL 2.18.5 (21805) in /nccl2/libnccl.so.2") {
		t.Errorf("rank 2: %v, want ErrVersion naming both", err)
	}
}

// TestReadsVersion1Value: a root running libgpuhelper 1.0 publishes the ID alone.
func TestReadsVersion1Value(t *testing.T) {
	job, _ := pmixkv.NewMemJob(2, nil)
	id := ID{9, 8, 7}
	if err := job.Rank(0).Put("gpubind.ncclid.1", append([]byte{1}, id[:]...)); err != nil {
		t.Fatal(err)
	}
	if err := job.Rank(0).Commit(); err != nil {
		t.Fatal(err)
	}
	e := &Exchanger{KV: job.Rank(1), Timeout: time.Minute, Local: func() Origin { return Origin{Version: 22803} }}
	got, o, err := e.WorldOrigin()
	if err != nil || got != id || o != (Origin{}) {
		t.Fatalf("got %v %+v %v", got, o, err)
	}
}

// Issue 26: ranks that make the ID exchanges in different orders, with the same root, read
// each other's values under one key. Rank 1 took rank 0's scalable ID as the world ID and went
// on (to hang later in ncclCommInitRank); the kind in the value makes it fail naming both.
func TestOrderMismatch(t *testing.T) {
	_, errs := newJobErrs(t, 2, func(e *Exchanger) error {
		e.NewID = func() (ID, error) { return ID{1}, nil }
		if e.KV.Info().Rank == 0 {
			_, err := e.Scalable(1)
			return err
		}
		_, err := e.world()
		return err
	})
	if errs[0] != nil {
		t.Errorf("rank 0 (the root): %v", errs[0])
	}
	if !errors.Is(errs[1], ErrOrder) || !strings.Contains(fmt.Sprint(errs[1]), `rank 0 made "scalable 1", this rank (1) "world"`) {
		t.Errorf("rank 1: %v, want ErrOrder naming both calls", errs[1])
	}
	// Groups of different colors are one collective: no mismatch.
	_, errs = newJobErrs(t, 3, func(e *Exchanger) error {
		e.NewID = func() (ID, error) { return ID{byte(e.KV.Info().Rank + 1)}, nil }
		_, err := e.Group(e.KV.Info().Rank % 2)
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("group, rank %d: %v", r, err)
		}
	}
}
