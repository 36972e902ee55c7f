package pmixkv

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// MemJob is an in-memory job of Size ranks for unit tests: each rank gets a Mem (a KV), and
// they share one store. Values become visible to others on Commit; Fence is a barrier.
type MemJob struct {
	mu        sync.Mutex
	size      int
	nodes     []int
	staged    []map[string][]byte
	committed []map[string][]byte
	changed   chan struct{} // closed and replaced on every commit and fence arrival
	fenceGen  int
	fenceIn   int
	fences    int
	collects  int
	gets      int
}

// NewMemJob makes a job of size ranks; nodeOf(rank) gives each rank's node id (nil: one node).
// Node ids must be 0..N-1 and every node must hold a rank.
func NewMemJob(size int, nodeOf func(rank int) int) (*MemJob, error) {
	if size < 1 {
		return nil, fmt.Errorf("pmixkv: job size %d, expected at least 1", size)
	}
	j := &MemJob{size: size, changed: make(chan struct{})}
	seen := map[int]bool{}
	for r := 0; r < size; r++ {
		n := 0
		if nodeOf != nil {
			n = nodeOf(r)
		}
		if n < 0 {
			return nil, fmt.Errorf("pmixkv: rank %d on node %d, expected a node id >= 0", r, n)
		}
		j.nodes = append(j.nodes, n)
		seen[n] = true
		j.staged = append(j.staged, map[string][]byte{})
		j.committed = append(j.committed, map[string][]byte{})
	}
	for n := range seen {
		if n >= len(seen) {
			return nil, fmt.Errorf("pmixkv: node ids are not 0..%d (saw %d)", len(seen)-1, n)
		}
	}
	return j, nil
}

// Rank returns the KV of rank r.
func (j *MemJob) Rank(r int) *Mem {
	var peers []int
	for q, n := range j.nodes {
		if n == j.nodes[r] {
			peers = append(peers, q)
		}
	}
	sort.Ints(peers)
	lr := sort.SearchInts(peers, r)
	nn := 0
	for _, n := range j.nodes {
		if n+1 > nn {
			nn = n + 1
		}
	}
	return &Mem{job: j, info: Info{
		Namespace: "mem", Rank: r, Size: j.size, LocalRank: lr, LocalSize: len(peers),
		NodeID: j.nodes[r], NumNodes: nn, Hostname: fmt.Sprintf("node%d", j.nodes[r]),
		LocalPeers: peers, Source: "mem",
	}}
}

// Fences returns how many Fence calls (all ranks together) the job has seen.
func (j *MemJob) Fences() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.fences
}

// Gets returns how many Get calls (all ranks together) the job has seen.
func (j *MemJob) Gets() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.gets
}

// CollectingFences returns how many of the Fence calls asked to collect data.
func (j *MemJob) CollectingFences() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.collects
}

func (j *MemJob) notify() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// Mem is one rank of a MemJob.
type Mem struct {
	job  *MemJob
	info Info
}

// Info returns the rank's facts.
func (m *Mem) Info() Info { return m.info }

// Put stages a value.
func (m *Mem) Put(key string, value []byte) error {
	if err := validKey(key); err != nil {
		return err
	}
	j := m.job
	j.mu.Lock()
	defer j.mu.Unlock()
	j.staged[m.info.Rank][key] = append([]byte(nil), value...)
	return nil
}

// Commit publishes staged values.
func (m *Mem) Commit() error {
	j := m.job
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, v := range j.staged[m.info.Rank] {
		j.committed[m.info.Rank][k] = v
	}
	j.staged[m.info.Rank] = map[string][]byte{}
	j.notify()
	return nil
}

// Fence waits until every rank has entered the same fence.
func (m *Mem) Fence(collect bool, timeout time.Duration) error {
	j := m.job
	j.mu.Lock()
	j.fences++
	if collect {
		j.collects++
	}
	gen := j.fenceGen
	j.fenceIn++
	if j.fenceIn == j.size {
		j.fenceIn = 0
		j.fenceGen++
		j.notify()
		j.mu.Unlock()
		return nil
	}
	j.mu.Unlock()
	return m.wait(timeout, "fence", func() bool { return j.fenceGen != gen })
}

// Get waits up to timeout for rank's committed key (timeout <= 0: do not wait).
func (m *Mem) Get(rank int, key string, timeout time.Duration) ([]byte, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	j := m.job
	if rank < 0 || rank >= j.size {
		return nil, fmt.Errorf("pmixkv: Get from rank %d, expected 0..%d", rank, j.size-1)
	}
	j.mu.Lock()
	j.gets++
	j.mu.Unlock()
	var out []byte
	err := m.wait(timeout, fmt.Sprintf("Get(rank %d, key %s)", rank, key), func() bool {
		v, ok := j.committed[rank][key]
		if ok {
			out = append([]byte(nil), v...)
		}
		return ok
	})
	return out, err
}

// wait calls done under the job lock until it returns true or timeout passes.
func (m *Mem) wait(timeout time.Duration, what string, done func() bool) error {
	j := m.job
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		j.mu.Lock()
		if done() {
			j.mu.Unlock()
			return nil
		}
		ch := j.changed
		j.mu.Unlock()
		if timeout <= 0 && what != "fence" {
			return fmt.Errorf("pmixkv: mem %s: %w", what, errNotFound)
		}
		select {
		case <-ch:
		case <-deadline:
			return fmt.Errorf("pmixkv: mem %s after %v: %w", what, timeout, ErrTimeout)
		}
	}
}

// Close does nothing; it makes Mem a KV.
func (m *Mem) Close() error { return nil }
