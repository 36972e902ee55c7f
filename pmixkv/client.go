package pmixkv

// #cgo pkg-config: pmix
// #cgo LDFLAGS: -Wl,--as-needed
// #include <stdlib.h>
// #include "pmix_client.h"
import "C"

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// client is a PMIx client. PMIx_Init and PMIx_Finalize are reference-counted across all
// Clients of the process: the last Close finalizes.
type client struct {
	info   Info
	mu     sync.Mutex
	closed bool
}

var (
	initMu    sync.Mutex
	initCount int
	initInfo  Info
)

// statusError is a PMIx call that failed with a PMIx status code.
type statusError struct {
	Op   string // e.g. "PMIx_Get(rank 0, key gpubind.x)"
	Code int
}

func (e *statusError) Error() string {
	return fmt.Sprintf("pmixkv: %s: %s (%d)", e.Op, C.GoString(C.pk_strerror(C.int(e.Code))), e.Code)
}

// Is maps PMIx codes onto the package's sentinel errors.
func (e *statusError) Is(target error) bool {
	switch target {
	case ErrTimeout:
		return e.Code == int(C.pk_err_timeout())
	case errNotFound:
		return e.Code == int(C.pk_err_not_found())
	case errNoServer:
		return e.Code == int(C.pk_err_unreach())
	case ErrPeerDied:
		return e.Code == int(C.pk_err_proc_aborted())
	}
	return false
}

func status(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	se := &statusError{Op: op, Code: int(rc)}
	if rc == C.pk_err_proc_aborted() {
		if r, why, ok := deadPeer(); ok {
			return fmt.Errorf("%w: rank %d of the job ended (%s) while this rank waited: %w", se, r, why, ErrPeerDied)
		}
	}
	return se
}

// deadPeer says which other process of the job ended abnormally, as a PMIx event reported it
// (the first one), if any did.
func deadPeer() (rank int, why string, ok bool) {
	var buf [128]C.char
	var st C.int
	r := C.pk_dead(&st, &buf[0], C.size_t(len(buf)))
	if r < 0 {
		return 0, "", false
	}
	return int(r), C.GoString(&buf[0]), true
}

// Session is a PMIx session opened in C (pk_open, pmix_client.h) before Go ran: a *struct
// pk_session, owned by the caller. libgpuhelper opens it in its exported entry point, so that
// PMIx_Init and the job-fact Gets overlap the Go runtime's start.
type Session unsafe.Pointer

func newClient(sess Session) (*client, error) {
	initMu.Lock()
	defer initMu.Unlock()
	if initCount > 0 {
		initCount++
		return &client{info: initInfo}, nil
	}
	var own C.struct_pk_session
	s := (*C.struct_pk_session)(sess)
	if s == nil {
		s = &own
		if C.pk_open(s) == 0 {
			C.pk_watch() // best effort: without it deaths are noticed by timeouts only
		}
		defer freeSession(s)
	}
	if err := status("PMIx_Init", s.rc); err != nil {
		var se *statusError
		if lerr := C.GoString(C.pk_library_error()); lerr != "" && errors.As(err, &se) {
			se.Op = "PMIx_Init (no PMIx library: " + lerr + ")"
		}
		return nil, err
	}
	info, err := sessionInfo(s)
	if err != nil {
		C.pk_finalize()
		return nil, err
	}
	initCount = 1
	initInfo = info
	return &client{info: info}, nil
}

// freeSession frees the strings of a session opened here.
func freeSession(s *C.struct_pk_session) {
	for _, p := range []*C.char{s.hostname, s.lpeers, s.nlist} {
		C.free(unsafe.Pointer(p))
	}
	s.hostname, s.lpeers, s.nlist = nil, nil, nil
}

// facts are the job facts as the PMIx server gave them: a nil field is one it did not give
// (NOT-FOUND or another error, in Errs).
type facts struct {
	Namespace                      string
	Rank                           int
	Size, LocalSize, NumNodes      *int
	LocalRank, NodeID              *int
	Hostname, LocalPeers, NodeList *string
	Errs                           map[string]error
}

func sessionInfo(s *C.struct_pk_session) (Info, error) {
	f := facts{Namespace: C.GoString(&s.nspace[0]), Rank: int(s.rank), Errs: map[string]error{}}
	num := func(key string, rc C.int, v C.uint64_t) *int {
		if err := status("PMIx_Get("+key+")", rc); err != nil {
			f.Errs[key] = err
			return nil
		}
		n := int(min(uint64(v), 1<<62))
		return &n
	}
	str := func(key string, rc C.int, p *C.char) *string {
		if err := status("PMIx_Get("+key+")", rc); err != nil || p == nil {
			f.Errs[key] = err
			return nil
		}
		v := C.GoString(p)
		return &v
	}
	f.Size = num("pmix.job.size", s.size_rc, s.size)
	f.LocalSize = num("pmix.local.size", s.local_size_rc, s.local_size)
	f.NumNodes = num("pmix.num.nodes", s.num_nodes_rc, s.num_nodes)
	f.LocalRank = num("pmix.lrank", s.local_rank_rc, s.local_rank)
	f.NodeID = num("pmix.nodeid", s.node_id_rc, s.node_id)
	f.Hostname = str("pmix.hname", s.hostname_rc, s.hostname)
	f.LocalPeers = str("pmix.lpeers", s.lpeers_rc, s.lpeers)
	f.NodeList = str("pmix.nlist", s.nlist_rc, s.nlist)
	return factsInfo(f)
}

// factsInfo turns the server's facts into an Info, deriving what it did not give where the
// other facts determine it:
//   - the local size: the number of local peers (PMIX_LOCAL_PEERS);
//   - the local rank: this rank's place among the local peers;
//   - the local peers on a job of one node: every rank;
//   - the number of nodes and this node's index: from the node list (PMIX_NODE_LIST) and this
//     proc's host name (PMIX_HOSTNAME), which are preferred anyway (see below).
//
// The job size is required. A fact that can be derived neither way is an error naming it.
func factsInfo(f facts) (Info, error) {
	in := Info{Namespace: f.Namespace, Rank: f.Rank, Source: "pmix"}
	missing := func(key, what string) error {
		return fmt.Errorf("pmixkv: the PMIx server gave no %s (%v), and it cannot be derived %s", key, f.Errs[key], what)
	}
	if f.Size == nil {
		return in, missing("pmix.job.size", "")
	}
	if *f.Size > 1<<31-1 {
		return in, fmt.Errorf("pmixkv: pmix.job.size is %d, expected a value below 2^31", *f.Size)
	}
	in.Size = *f.Size
	if f.Hostname != nil {
		in.Hostname = *f.Hostname // informative; some servers do not give it for every proc
	}
	// The node: PMIX_NODEID is the launcher's own number for the node: Slurm's is the node's
	// index in the step, but Open MPI's ORTE and PRRTE give the index in their node pool, where
	// 0 is mpirun's node even when it runs no rank (ranks on 2 nodes get ids 1 and 2). Other
	// ranks' node ids are not held by the client (Slurm and ORTE answer NOT-FOUND), but the
	// job's node list (in the launcher's order) and this proc's host name are: the node's place
	// in that list is a dense index in the launcher's order.
	listed := false
	if f.NodeList != nil && in.Hostname != "" {
		if idx, n, ok := nodeIndex(*f.NodeList, in.Hostname); ok {
			in.NodeID, in.NumNodes, listed = idx, n, true
		}
	}
	if !listed {
		switch {
		case f.NumNodes == nil:
			return in, missing("pmix.num.nodes", "(no node list PMIX_NODE_LIST naming this proc's host PMIX_HOSTNAME)")
		case f.NodeID == nil && *f.NumNodes == 1:
			in.NumNodes, in.NodeID = 1, 0
		case f.NodeID == nil:
			return in, missing("pmix.nodeid", "(no node list PMIX_NODE_LIST naming this proc's host PMIX_HOSTNAME)")
		default:
			in.NumNodes, in.NodeID = *f.NumNodes, *f.NodeID
			if in.NodeID >= in.NumNodes {
				return in, fmt.Errorf("pmixkv: this rank's PMIX_NODEID is %d but the job has %d nodes (PMIX_NUM_NODES), "+
					"and its host name %q is not once in the job's node list PMIX_NODE_LIST (%s), so the nodes cannot "+
					"be numbered 0..%d", in.NodeID, in.NumNodes, in.Hostname, describe(f.NodeList, f.Errs["pmix.nlist"]), in.NumNodes-1)
			}
		}
	}
	// The node's ranks.
	switch {
	case f.LocalPeers != nil:
		peers, err := parseRanks(*f.LocalPeers)
		if err != nil {
			return in, fmt.Errorf("pmixkv: PMIX_LOCAL_PEERS %q: %w", *f.LocalPeers, err)
		}
		in.LocalPeers = peers
	case in.NumNodes == 1:
		for r := 0; r < in.Size; r++ {
			in.LocalPeers = append(in.LocalPeers, r)
		}
	}
	switch {
	case f.LocalSize != nil:
		in.LocalSize = *f.LocalSize
	case in.LocalPeers != nil:
		in.LocalSize = len(in.LocalPeers)
	default:
		return in, missing("pmix.local.size", "(no local peers PMIX_LOCAL_PEERS either)")
	}
	switch {
	case f.LocalRank != nil:
		in.LocalRank = *f.LocalRank
	case in.LocalPeers != nil:
		in.LocalRank = sort.SearchInts(in.LocalPeers, in.Rank)
		if in.LocalRank >= len(in.LocalPeers) || in.LocalPeers[in.LocalRank] != in.Rank {
			return in, fmt.Errorf("pmixkv: the PMIx server gave no pmix.lrank, and rank %d is not among "+
				"the local peers %v", in.Rank, in.LocalPeers)
		}
	default:
		return in, missing("pmix.lrank", "(no local peers PMIX_LOCAL_PEERS either)")
	}
	return in, checkInfo(in)
}

func describe(s *string, err error) string {
	if s == nil {
		return fmt.Sprintf("not given: %v", err)
	}
	return fmt.Sprintf("%q", *s)
}

// parseRanks parses a comma list of ranks ("0,1,2"; Slurm and Open MPI both use plain lists).
func parseRanks(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("entry %q is not a rank (expected a non-negative integer)", f)
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return out, nil
}

// checkInfo rejects inconsistent job facts instead of letting callers compute with them.
func checkInfo(in Info) error {
	switch {
	case in.Size < 1:
		return fmt.Errorf("pmixkv: job size %d, expected at least 1", in.Size)
	case in.Rank < 0 || in.Rank >= in.Size:
		return fmt.Errorf("pmixkv: rank %d outside job of size %d", in.Rank, in.Size)
	case in.LocalSize < 1 || in.LocalRank < 0 || in.LocalRank >= in.LocalSize:
		return fmt.Errorf("pmixkv: local rank %d with local size %d", in.LocalRank, in.LocalSize)
	case in.NumNodes < 1 || in.NodeID < 0 || in.NodeID >= in.NumNodes:
		return fmt.Errorf("pmixkv: node id %d with %d nodes", in.NodeID, in.NumNodes)
	case in.LocalPeers != nil && len(in.LocalPeers) != in.LocalSize:
		return fmt.Errorf("pmixkv: %d local peers %v but local size %d", len(in.LocalPeers), in.LocalPeers, in.LocalSize)
	}
	return nil
}

// Info returns the job facts read at initialisation.
func (c *client) Info() Info { return c.info }

func (c *client) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pmixkv: client used after Close")
	}
	return nil
}

// Put stages value under key (global scope).
func (c *client) Put(key string, value []byte) error {
	if err := validKey(key); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var p unsafe.Pointer
	if len(value) > 0 {
		p = C.CBytes(value)
		defer C.free(p)
	}
	return status("PMIx_Put("+key+")", C.pk_put_bytes(ck, p, C.size_t(len(value))))
}

// Commit publishes staged values.
func (c *client) Commit() error {
	if err := c.check(); err != nil {
		return err
	}
	return status("PMIx_Commit", C.pk_commit())
}

// Fence waits for all ranks of the namespace.
func (c *client) Fence(collect bool, timeout time.Duration) error {
	if err := c.check(); err != nil {
		return err
	}
	cns := C.CString(c.info.Namespace)
	defer C.free(unsafe.Pointer(cns))
	var col C.int
	if collect {
		col = 1
	}
	return status(fmt.Sprintf("PMIx_Fence(collect=%v, timeout %v)", collect, timeout),
		C.pk_fence(cns, col, C.int(timeoutMillis(timeout))))
}

// Get returns what rank committed under key, waiting up to timeout (PMIX_TIMEOUT).
//
// Some servers answer NOT-FOUND at once, PMIX_TIMEOUT notwithstanding, when the target is a
// local process that has not committed yet (seen with Open MPI 4.1's mpirun). Slurm's mpi/pmix
// answers a Get for another node's key with PMIX_ERROR once its own PMIxTimeout (default 300 s,
// SLURM_PMIX_TIMEOUT) passes, and a server may answer TIMEOUT by its own clock. Get therefore
// retries those with a short backoff until its own timeout has passed, then returns an error
// matching ErrTimeout.
func (c *client) Get(rank int, key string, timeout time.Duration) ([]byte, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	if rank < 0 || rank >= c.info.Size {
		return nil, fmt.Errorf("pmixkv: Get from rank %d, expected 0..%d", rank, c.info.Size-1)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	cns := C.CString(c.info.Namespace)
	defer C.free(unsafe.Pointer(cns))
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	op := fmt.Sprintf("PMIx_Get(rank %d, key %s, timeout %v)", rank, key, timeout)
	deadline := time.Now().Add(timeout)
	backoff := time.Millisecond
	for {
		ms := 0 // no timeout: a blocking Get
		if timeout > 0 {
			if ms = timeoutMillis(time.Until(deadline)); ms == 0 {
				return nil, fmt.Errorf("%s: still not found after %v: %w", op, timeout, ErrTimeout)
			}
		}
		var p unsafe.Pointer
		var n C.size_t
		err := status(op, C.pk_get_bytes(cns, C.uint32_t(rank), ck, C.int(ms), &p, &n))
		if err == nil {
			defer C.free(p)
			return C.GoBytes(p, C.int(n)), nil
		}
		if !retryable(err) || timeout <= 0 {
			return nil, err
		}
		if !errors.Is(err, errNotFound) && time.Until(deadline) <= 0 {
			return nil, fmt.Errorf("%s: not answered within %v (last: %v): %w", op, timeout, err, ErrTimeout)
		}
		time.Sleep(min(backoff, max(time.Until(deadline), 0)))
		// Short steps, as a hand-written client's 1 ms: the value usually comes within
		// milliseconds, and every step of waiting too long is added to the rank's start.
		backoff = min(2*backoff, maxBackoff)
	}
}

// maxBackoff caps the pause between two Gets of a value that is not there yet.
const maxBackoff = 2 * time.Millisecond

// retryable reports whether a Get that failed with err may succeed later: the key is not there
// yet (NOT-FOUND), or the server gave up by its own clock (PMIX_ERROR from Slurm after its
// PMIxTimeout, TIMEOUT).
func retryable(err error) bool {
	var se *statusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == int(C.pk_err_not_found()) || se.Code == int(C.pk_err_error()) || se.Code == int(C.pk_err_timeout())
}

// Abort asks the server to end every process of the job, with code as the job's exit status
// and msg for the launcher to show (PMIx_Abort). The caller should exit whatever it returns:
// servers differ in whether the call returns before the process is killed.
func (c *client) Abort(code int, msg string) error {
	if err := c.check(); err != nil {
		return err
	}
	cm := C.CString(msg)
	defer C.free(unsafe.Pointer(cm))
	return status("PMIx_Abort", C.pk_abort(C.int(code), cm))
}

// Close drops this client's reference; the last one calls PMIx_Finalize. Closing twice is a
// no-op.
func (c *client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	initMu.Lock()
	defer initMu.Unlock()
	initCount--
	if initCount > 0 {
		return nil
	}
	return status("PMIx_Finalize", C.pk_finalize())
}
