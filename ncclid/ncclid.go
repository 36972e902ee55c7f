// Package ncclid creates NCCL unique IDs with the application's own ncclGetUniqueId and hands
// them to every rank of a job over a pmixkv.KV.
//
// Distribution is a direct modex or a fence (Mode; Auto, the default, chooses per exchange): each
// root Puts and Commits its ID; direct, the other ranks Get it from that root with a timeout and
// nobody fences; fenced, every rank joins a collecting fence and the Gets are then local. Keys carry a sequence number so no
// key is ever reused (PMIx 4.2 can serve a stale cached value for a reused key). Every rank must
// therefore make the same calls in the same order, as with any collective.
//
// A collective that fails on this rank because another rank's data did not come in time (an
// error matching pmixkv.ErrTimeout from a Get) may be retried: the next call of the same kind
// with the same arguments is the same collective (same key; what this rank already published
// is not published again), so it still meets the other ranks. Any other call moves on, as the
// other ranks did. A fence that times out is not retryable (the ranks are no longer in step).
package ncclid

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpubind/gpubind/pmixkv"
)

// Bytes is the size of an ncclUniqueId.
const Bytes = 128

// ID is an ncclUniqueId: 128 opaque bytes.
type ID [Bytes]byte

// String shows the first bytes in hex, enough to compare IDs in logs.
func (id ID) String() string { return hex.EncodeToString(id[:8]) }

// Generator makes a new ID (ncclGetUniqueId). Only roots call it.
type Generator func() (ID, error)

// ranksPerRoot is the number of ranks per ID that DefaultRoots aims at, as frameworks do for
// ncclCommInitRankScalable.
const ranksPerRoot = 128

// DefaultRoots returns ceil(size/ranksPerRoot), at least 1.
func DefaultRoots(size int) int {
	if size < 1 {
		return 1
	}
	return (size + ranksPerRoot - 1) / ranksPerRoot
}

// rootRanks returns the ranks that create the n IDs of a scalable init over size ranks: where
// NCCL's documented rankHasRoot puts them. NCCL splits the ranks into n blocks, the first
// size%n of them one rank longer; each block's first rank is its root. So root i is
// i*(size/n) + min(i, size%n): 7 ranks and 3 IDs give 0, 3, 5; 300 and 3 give 0, 100, 200.
func rootRanks(size, n int) ([]int, error) {
	if size < 1 {
		return nil, fmt.Errorf("ncclid: job size %d, expected at least 1", size)
	}
	if n < 1 || n > size {
		return nil, fmt.Errorf("ncclid: %d IDs for %d ranks, expected 1..%d", n, size, size)
	}
	rpr, rmr := size/n, size%n
	roots := make([]int, n)
	for i := range roots {
		roots[i] = i*rpr + min(i, rmr)
	}
	return roots, nil
}

// Mode selects how IDs travel.
type Mode int

const (
	// Direct: roots Put+Commit, others Get with a timeout; no fence.
	Direct Mode = iota
	// Fenced: roots Put+Commit, everyone joins a collecting fence, then Gets locally.
	Fenced
	// Auto (the default) chooses per exchange, by measurement (bench/scale.sh, docs/scale.md):
	// under Slurm a Get of a key held on another node is one request to the root's node per
	// node, served one after another by that node's slurmstepd, and K roots cost K round trips
	// in a row; a collecting fence costs one pass over Slurm's ring or tree whatever K is.
	// So: Direct when every rank reads a root on its own node (node groups) or the job is on
	// one node; Fenced when the exchange has several roots (scalable IDs), or from
	// autoFenceNodes nodes on. Every rank sees the same counts, so all choose alike.
	Auto
)

// autoFenceNodes is the node count from which Auto fences for an exchange with one root (the
// world ID, a color group's ID). On the 2-core VM (bench/RESULTS.md, section 8) direct was the
// faster up to 32 simulated nodes and fence twice as fast at 64, where direct also tripled the
// CPU of the root node's slurmstepd.
const autoFenceNodes = 64

// fences says whether an exchange under mode m fences before its Gets: nodes is the job's node
// count, roots the number of roots of the whole exchange, local whether every rank reads a
// root on its own node.
func (m Mode) fences(nodes, roots int, local bool) bool {
	switch m {
	case Fenced:
		return true
	case Direct:
		return false
	}
	if local || nodes < 2 {
		return false
	}
	return roots >= 2 || nodes >= autoFenceNodes
}

func (m Mode) String() string {
	switch m {
	case Fenced:
		return "fence"
	case Auto:
		return "auto"
	}
	return "direct"
}

// ParseMode parses "auto" (or "", the default), "direct" and "fence".
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return Auto, nil
	case "direct":
		return Direct, nil
	case "fence":
		return Fenced, nil
	}
	return Auto, fmt.Errorf("ncclid: exchange mode %q, expected \"auto\" (the default), \"direct\" or \"fence\"", s)
}

// ErrRoot marks an error reported by a root that could not create its ID.
var ErrRoot = errors.New("root failed to create the NCCL ID")

// ErrCommID marks IDs refused because they would collide: with NCCL_COMM_ID set, NCCL's
// ncclGetUniqueId returns that fixed address every time, so the IDs of different communicators
// are the same bytes and their ranks would all meet at one address.
var ErrCommID = errors.New("NCCL IDs would collide (NCCL_COMM_ID)")

// ErrVersion marks an ID made by a root whose NCCL version differs from this rank's: the ranks
// could not form a communicator with it (ncclCommInitRank fails or hangs).
var ErrVersion = errors.New("NCCL versions differ between ranks")

// Exchanger distributes IDs over KV. Its methods are collective: every rank of the job calls
// them in the same order. It is safe for concurrent use, but concurrent collectives would be
// ordered differently on different ranks, so callers serialise them.
type Exchanger struct {
	KV      pmixkv.KV
	NewID   Generator
	Mode    Mode
	Timeout time.Duration // for each Get and Fence; <= 0 means wait forever
	// Getenv reads this process's environment (nil: os.Getenv); a root looks at NCCL_COMM_ID
	// before it creates an ID that is not the world ID.
	Getenv func(string) string
	// Local describes this process's NCCL without loading one (nil: unknown). A root publishes
	// it with each ID; other ranks compare it with theirs and refuse an ID from another version.
	Local func() Origin

	// BarrierCollect makes Barrier fence with PMIX_COLLECT_DATA. Needed under Slurm, whose
	// mpi/pmix completes a fence without it on each node by itself (unless PMIxFenceBarrier
	// is set); libgpuhelper sets it for jobs of more than one node. Elsewhere a plain fence
	// is a barrier, and collecting would copy all committed data (an MPI library's modex
	// too) to every node for nothing.
	BarrierCollect bool

	// GatherFrom overrides the job size from which Allgather gathers at rank 0 (0: the
	// package's gatherFrom).
	GatherFrom int

	mu    sync.Mutex
	seq   uint64
	made  map[ID]bool // every ID this process created: a repeat means NCCL_COMM_ID is in force
	retry *coll       // the collective that timed out here, for a retry to resume
}

// coll is one collective in progress on this rank: its kind and arguments, its key sequence
// number, and how far it got, so that a retry after a timeout resumes it instead of
// publishing again under a new key.
type coll struct {
	kind string
	seq  uint64
	// the color exchange of Group
	colorPut, colorFenced bool
	members               []int
	// the ID exchange
	published bool
	own       ID
	ownOrigin Origin
	fenced    bool
	// Allgather from gatherFrom ranks on: rank 0 gathered (its value in own2), the second fence
	gathered, fenced2 bool
	own2              []byte
}

// begin starts the collective kind (its name and arguments): the one that timed out last, if
// this is its retry, else the next in the sequence.
func (e *Exchanger) begin(kind string) *coll {
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.retry; r != nil {
		e.retry = nil
		if r.kind == kind {
			return r
		}
	}
	e.seq++
	return &coll{kind: kind, seq: e.seq}
}

// end records how c ended: a Get that timed out leaves it open for a retry.
func (e *Exchanger) end(c *coll, err error) {
	var fe *fenceError
	if err != nil && errors.Is(err, pmixkv.ErrTimeout) && !errors.As(err, &fe) {
		e.mu.Lock()
		e.retry = c
		e.mu.Unlock()
	}
}

// fenceError marks a failed fence: never retried.
type fenceError struct{ err error }

func (f *fenceError) Error() string { return f.err.Error() }
func (f *fenceError) Unwrap() error { return f.err }

func (e *Exchanger) fence(collect bool, what string) error {
	if err := e.KV.Fence(collect, e.Timeout); err != nil {
		return &fenceError{fmt.Errorf("ncclid: %s: %w", what, err)}
	}
	return nil
}

// world returns one ID created by rank 0. It is the one ID that NCCL_COMM_ID allows.
func (e *Exchanger) world() (ID, error) {
	id, _, err := e.WorldOrigin()
	return id, err
}

// WorldOrigin is world, and also says which NCCL made the ID on rank 0.
func (e *Exchanger) WorldOrigin() (ID, Origin, error) {
	c := e.begin("world")
	ids, origins, err := e.exchange(c, e.KV.Info().Rank == 0, []int{0}, false, false)
	e.end(c, err)
	if err != nil {
		return ID{}, Origin{}, err
	}
	return ids[0], origins[0], nil
}

// Scalable returns n IDs for ncclCommInitRankScalable, created by the ranks rootRanks names;
// n <= 0 means DefaultRoots(size).
func (e *Exchanger) Scalable(n int) ([]ID, error) {
	in := e.KV.Info()
	if n <= 0 {
		n = DefaultRoots(in.Size)
	}
	roots, err := rootRanks(in.Size, n)
	if err != nil {
		return nil, err
	}
	isRoot := false
	for _, r := range roots {
		isRoot = isRoot || r == in.Rank
	}
	c := e.begin(fmt.Sprintf("scalable %d", n))
	ids, _, err := e.exchange(c, isRoot, roots, true, false)
	e.end(c, err)
	return ids, err
}

// Group is a sub-communicator's view from one rank.
type Group struct {
	Color   int   // the color passed, or NodeColor
	Rank    int   // rank inside the group: position of the global rank among Members
	Size    int   // number of members
	Root    int   // global rank that created the ID (the lowest member)
	Members []int // global ranks of the group, ascending
	ID      ID
}

// NodeColor asks Group for one group per node.
const NodeColor = -1

// Group splits the job by color (>= 0) like MPI_Comm_split with the global rank as key, and
// gives each group its own ID, created by its lowest rank. NodeColor makes one group per node
// without exchanging colors.
func (e *Exchanger) Group(color int) (Group, error) {
	c := e.begin(fmt.Sprintf("group %d", color))
	g, err := e.group(c, color)
	e.end(c, err)
	return g, err
}

func (e *Exchanger) group(c *coll, color int) (Group, error) {
	in := e.KV.Info()
	var members []int
	switch {
	case color == NodeColor:
		members = append(members, in.LocalPeers...)
		if len(members) == 0 {
			return Group{}, errors.New("ncclid: the job facts list no local peers, so no node group can be formed")
		}
	case color < 0:
		return Group{}, fmt.Errorf("ncclid: color %d, expected >= 0 or NodeColor (%d)", color, NodeColor)
	default:
		var err error
		if members, err = e.colorMembers(c, color); err != nil {
			return Group{}, err
		}
	}
	g := Group{Color: color, Size: len(members), Root: members[0], Members: members, Rank: -1}
	for i, r := range members {
		if r == in.Rank {
			g.Rank = i
		}
	}
	if g.Rank < 0 {
		return Group{}, fmt.Errorf("ncclid: rank %d is not among its group's members %v", in.Rank, members)
	}
	// A node group's root is on every member's node: nothing to gain from a fence.
	ids, _, err := e.exchange(c, g.Rank == 0, []int{g.Root}, true, color == NodeColor)
	if err != nil {
		return Group{}, err
	}
	g.ID = ids[0]
	return g, nil
}

// colorMembers publishes this rank's color, fences with collection, and reads every rank's color.
func (e *Exchanger) colorMembers(c *coll, color int) ([]int, error) {
	in := e.KV.Info()
	if c.members != nil {
		return c.members, nil
	}
	key := fmt.Sprintf("gpubind.color.%d", c.seq)
	if !c.colorPut {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(color))
		if err := e.KV.Put(key, b[:]); err != nil {
			return nil, err
		}
		if err := e.KV.Commit(); err != nil {
			return nil, err
		}
		c.colorPut = true
	}
	if !c.colorFenced {
		if err := e.fence(true, "fence to exchange group colors"); err != nil {
			return nil, err
		}
		c.colorFenced = true
	}
	var members []int
	for r := 0; r < in.Size; r++ {
		if r == in.Rank {
			members = append(members, r)
			continue
		}
		v, err := e.KV.Get(r, key, e.Timeout)
		if err != nil {
			return nil, fmt.Errorf("ncclid: color of rank %d: %w", r, err)
		}
		if len(v) != 8 {
			return nil, fmt.Errorf("ncclid: color of rank %d is %d bytes, expected 8", r, len(v))
		}
		if int(binary.BigEndian.Uint64(v)) == color {
			members = append(members, r)
		}
	}
	c.members = members
	return members, nil
}

// create makes this root's ID. distinct says the ID must differ from the world ID and from
// every other (scalable and group IDs): refused while NCCL_COMM_ID is set. Any ID that repeats
// one this process made before is refused too (NCCL_COMM_ID may come from nccl.conf, out of
// sight of the environment).
func (e *Exchanger) create(distinct bool) (ID, error) {
	getenv := e.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv("NCCL_COMM_ID"); distinct && v != "" {
		return ID{}, fmt.Errorf("ncclid: NCCL_COMM_ID=%q is set, so ncclGetUniqueId returns that one address "+
			"for every ID and the scalable and group IDs would all be the same; unset NCCL_COMM_ID "+
			"(it serves one communicator only): %w", v, ErrCommID)
	}
	if e.NewID == nil {
		return ID{}, errors.New("ncclid: no ID generator configured")
	}
	id, err := e.NewID()
	if err != nil {
		return ID{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.made[id] {
		return ID{}, fmt.Errorf("ncclid: ncclGetUniqueId returned an ID it had returned before (%v...): "+
			"NCCL_COMM_ID is in force (environment or nccl.conf), which makes every ID the same; "+
			"unset it to create more than one ID: %w", id, ErrCommID)
	}
	if e.made == nil {
		e.made = map[ID]bool{}
	}
	e.made[id] = true
	return id, nil
}

// The value a root publishes: a tag byte, then
//
//	tagFailed: the root's error message
//	tagID:     the ID (libgpuhelper 1.0)
//	tagOrigin: the ID, its NCCL version (4 bytes, big endian, 0 = unknown), the library's path
//	tagKind:   (libgpuhelper 1.3) the length of the collective's kind (1 byte), the kind
//	           ("world", "scalable N", "group"), then one of the values above
//
// The world, scalable and group exchanges share the key sequence: a rank that makes them in
// another order than the root reads the root's value of another kind under its key, and the
// kind tells it so (ErrOrder) instead of it taking the wrong ID.
const (
	tagFailed = 0
	tagID     = 1
	tagOrigin = 2
	tagKind   = 3
)

// ErrOrder marks collective calls made in a different order on different ranks.
var ErrOrder = errors.New("ranks made collective calls in different orders")

// valueKind is the kind a root records with its value: the collective and what every rank
// passes alike (a group's color differs from rank to rank).
func valueKind(c *coll) string {
	if strings.HasPrefix(c.kind, "group ") {
		return "group"
	}
	return c.kind
}

func withKind(kind string, v []byte) []byte {
	return append(append([]byte{tagKind, byte(len(kind))}, kind...), v...)
}

func encode(id ID, o Origin) []byte {
	v := append([]byte{tagOrigin}, id[:]...)
	v = binary.BigEndian.AppendUint32(v, uint32(max(o.Version, 0)))
	return append(v, o.Library...)
}

// exchange: if isRoot, create an ID (distinct: see create) and publish it (or the failure)
// under this collective's key; then read the ID of every rank in roots, with the NCCL that
// made it. nodeLocal: every rank's roots are on its own node (node groups), for Mode.fences.
func (e *Exchanger) exchange(c *coll, isRoot bool, roots []int, distinct, nodeLocal bool) ([]ID, []Origin, error) {
	in := e.KV.Info()
	key := fmt.Sprintf("gpubind.ncclid.%d", c.seq)
	var own ID
	var ownOrigin Origin
	var ownErr error
	// This rank's NCCL, looked at once, after a root has created its ID (and so resolved it).
	var mine *Origin
	local := func() Origin {
		if mine == nil {
			mine = &Origin{}
			if e.Local != nil {
				*mine = e.Local()
			}
		}
		return *mine
	}
	if isRoot && c.published {
		own, ownOrigin = c.own, c.ownOrigin // a retry: published already
	} else if isRoot {
		own, ownErr = e.create(distinct)
		// Publish the failure too, so the other ranks fail at once instead of timing out.
		var val []byte
		if ownErr != nil {
			val = append([]byte{tagFailed}, ownErr.Error()...)
		} else {
			ownOrigin = local()
			val = encode(own, ownOrigin)
		}
		val = withKind(valueKind(c), val)
		if err := e.KV.Put(key, val); err != nil {
			return nil, nil, err
		}
		if err := e.KV.Commit(); err != nil {
			return nil, nil, err
		}
		c.published, c.own, c.ownOrigin = ownErr == nil, own, ownOrigin
	}
	if e.Mode.fences(in.NumNodes, len(roots), nodeLocal) && !c.fenced {
		if err := e.fence(true, "fence after publishing NCCL IDs"); err != nil {
			return nil, nil, err
		}
		c.fenced = true
	}
	if ownErr != nil {
		return nil, nil, ownErr
	}
	ids := make([]ID, len(roots))
	origins := make([]Origin, len(roots))
	for i, r := range roots {
		if r == in.Rank && isRoot {
			ids[i], origins[i] = own, ownOrigin
			continue
		}
		v, err := e.KV.Get(r, key, e.Timeout)
		if err != nil {
			if errors.Is(err, pmixkv.ErrTimeout) {
				return nil, nil, fmt.Errorf("ncclid: no NCCL ID from root rank %d within %v (key %s); "+
					"did it exit or never call the library? %w", r, e.Timeout, key, err)
			}
			return nil, nil, fmt.Errorf("ncclid: NCCL ID from root rank %d: %w", r, err)
		}
		if len(v) >= 2 && v[0] == tagKind && len(v) >= 2+int(v[1]) {
			if kind := string(v[2 : 2+int(v[1])]); kind != valueKind(c) {
				return nil, nil, fmt.Errorf("ncclid: collective call %d: rank %d made %q, this rank (%d) %q: every rank "+
					"must make the collective calls in the same order (and pass the same counts): %w",
					c.seq, r, kind, in.Rank, valueKind(c), ErrOrder)
			}
			v = v[2+int(v[1]):]
		}
		switch {
		case len(v) == 1+Bytes && v[0] == tagID:
			copy(ids[i][:], v[1:])
		case len(v) >= 1+Bytes+4 && v[0] == tagOrigin:
			copy(ids[i][:], v[1:])
			origins[i] = Origin{Version: int(binary.BigEndian.Uint32(v[1+Bytes:])), Library: string(v[1+Bytes+4:])}
		case len(v) >= 1 && v[0] == tagFailed:
			return nil, nil, fmt.Errorf("ncclid: root rank %d: %s: %w", r, v[1:], ErrRoot)
		default:
			return nil, nil, fmt.Errorf("ncclid: value of %s from rank %d is %d bytes %.1x..., expected "+
				"tag 1 and %d bytes, or tag 2 and at least %d", key, r, len(v), v, 1+Bytes, 1+Bytes+4)
		}
		theirs := origins[i]
		if m := local(); theirs.Version != 0 && m.Version != 0 && theirs.Version != m.Version {
			return nil, nil, fmt.Errorf("ncclid: root rank %d made the NCCL ID with %v, but rank %d has %v: "+
				"every rank must run the same NCCL version (with different ones ncclCommInitRank fails "+
				"or hangs): %w", r, theirs, in.Rank, m, ErrVersion)
		}
	}
	return ids, origins, nil
}
