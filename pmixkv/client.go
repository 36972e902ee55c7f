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

// Client is a PMIx client. PMIx_Init and PMIx_Finalize are reference-counted across all
// Clients of the process: the last Close finalizes.
type Client struct {
	info   Info
	mu     sync.Mutex
	closed bool
}

var (
	initMu    sync.Mutex
	initCount int
	initInfo  Info
)

// StatusError is a PMIx call that failed with a PMIx status code.
type StatusError struct {
	Op   string // e.g. "PMIx_Get(rank 0, key gpubind.x)"
	Code int
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("pmixkv: %s: %s (%d)", e.Op, C.GoString(C.pk_strerror(C.int(e.Code))), e.Code)
}

// Is maps PMIx codes onto the package's sentinel errors.
func (e *StatusError) Is(target error) bool {
	switch target {
	case ErrTimeout:
		return e.Code == int(C.pk_err_timeout())
	case ErrNotFound:
		return e.Code == int(C.pk_err_not_found())
	case ErrNoServer:
		return e.Code == int(C.pk_err_unreach())
	}
	return false
}

func status(op string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	return &StatusError{Op: op, Code: int(rc)}
}

// NewClient initialises PMIx (once per process) and reads the job facts. Without a server the
// error matches ErrNoServer.
func NewClient() (*Client, error) {
	initMu.Lock()
	defer initMu.Unlock()
	if initCount > 0 {
		initCount++
		return &Client{info: initInfo}, nil
	}
	var ns [C.size_t(256)]C.char
	var rank C.uint32_t
	if err := status("PMIx_Init", C.pk_init(&ns[0], C.size_t(len(ns)), &rank)); err != nil {
		if lerr := C.GoString(C.pk_library_error()); lerr != "" {
			err.(*StatusError).Op = "PMIx_Init (no PMIx library: " + lerr + ")"
		}
		return nil, err
	}
	info, err := queryInfo(C.GoString(&ns[0]), int(rank))
	if err != nil {
		C.pk_finalize()
		return nil, err
	}
	initCount = 1
	initInfo = info
	return &Client{info: info}, nil
}

// queryInfo reads the job keys with the wildcard rank and the proc keys with our own rank.
func queryInfo(ns string, rank int) (Info, error) {
	in := Info{Namespace: ns, Rank: rank, Source: "pmix"}
	cns := C.CString(ns)
	defer C.free(unsafe.Pointer(cns))
	wild := C.pk_rank_wildcard()
	me := C.uint32_t(rank)
	num := func(r C.uint32_t, key string) (int, error) {
		ck := C.CString(key)
		defer C.free(unsafe.Pointer(ck))
		var v C.uint64_t
		if err := status("PMIx_Get("+key+")", C.pk_get_number(cns, r, ck, 0, &v)); err != nil {
			return 0, err
		}
		if uint64(v) > 1<<31-1 {
			return 0, fmt.Errorf("pmixkv: %s is %d, expected a value below 2^31", key, uint64(v))
		}
		return int(v), nil
	}
	str := func(r C.uint32_t, key string) (string, error) {
		ck := C.CString(key)
		defer C.free(unsafe.Pointer(ck))
		var p *C.char
		if err := status("PMIx_Get("+key+")", C.pk_get_string(cns, r, ck, 0, &p)); err != nil {
			return "", err
		}
		defer C.free(unsafe.Pointer(p))
		return C.GoString(p), nil
	}
	var err error
	if in.Size, err = num(wild, "pmix.job.size"); err != nil {
		return in, err
	}
	if in.LocalSize, err = num(wild, "pmix.local.size"); err != nil {
		return in, err
	}
	if in.NumNodes, err = num(wild, "pmix.num.nodes"); err != nil {
		return in, err
	}
	if in.LocalRank, err = num(me, "pmix.lrank"); err != nil {
		return in, err
	}
	if in.NodeID, err = num(me, "pmix.nodeid"); err != nil {
		return in, err
	}
	// The hostname is informative only; some servers do not provide it for every proc.
	if h, err := str(me, "pmix.hname"); err == nil {
		in.Hostname = h
	}
	peers, err := str(wild, "pmix.lpeers")
	if err != nil {
		return in, err
	}
	if in.LocalPeers, err = parseRanks(peers); err != nil {
		return in, fmt.Errorf("pmixkv: PMIX_LOCAL_PEERS %q: %w", peers, err)
	}
	// PMIX_NODEID is the launcher's own number for the node: Slurm's is the node's index in
	// the step, but Open MPI's ORTE and PRRTE give the index in their node pool, where 0 is
	// mpirun's node even when it runs no rank (ranks on 2 nodes get ids 1 and 2). Other ranks'
	// node ids are not held by the client (Slurm and ORTE answer NOT-FOUND), but the job's node
	// list (PMIX_NODE_LIST, in the launcher's order) and this proc's host name are: the node's
	// place in that list is a dense index in the launcher's order.
	if nlist, err := str(wild, "pmix.nlist"); err == nil && in.Hostname != "" {
		if idx, n, ok := NodeIndex(nlist, in.Hostname); ok {
			in.NodeID, in.NumNodes = idx, n
			return in, checkInfo(in)
		}
		if in.NodeID >= in.NumNodes {
			return in, fmt.Errorf("pmixkv: this rank's PMIX_NODEID is %d but the job has %d nodes (PMIX_NUM_NODES), "+
				"and its host name %q is not once in the job's node list PMIX_NODE_LIST %q, so the nodes cannot "+
				"be numbered 0..%d", in.NodeID, in.NumNodes, in.Hostname, nlist, in.NumNodes-1)
		}
	} else if in.NodeID >= in.NumNodes {
		return in, fmt.Errorf("pmixkv: this rank's PMIX_NODEID is %d but the job has %d nodes (PMIX_NUM_NODES), "+
			"and without the job's node list (PMIX_NODE_LIST: %v) and this proc's host name (PMIX_HOSTNAME: %q) "+
			"the nodes cannot be numbered 0..%d", in.NodeID, in.NumNodes, err, in.Hostname, in.NumNodes-1)
	}
	// No list to go by, but the launcher's numbering fits: keep it.
	return in, checkInfo(in)
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
func (c *Client) Info() Info { return c.info }

func (c *Client) check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pmixkv: client used after Close")
	}
	return nil
}

// Put stages value under key (global scope).
func (c *Client) Put(key string, value []byte) error {
	if err := ValidKey(key); err != nil {
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
func (c *Client) Commit() error {
	if err := c.check(); err != nil {
		return err
	}
	return status("PMIx_Commit", C.pk_commit())
}

// Fence waits for all ranks of the namespace.
func (c *Client) Fence(collect bool, timeout time.Duration) error {
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
func (c *Client) Get(rank int, key string, timeout time.Duration) ([]byte, error) {
	if err := ValidKey(key); err != nil {
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
		if !errors.Is(err, ErrNotFound) && time.Until(deadline) <= 0 {
			return nil, fmt.Errorf("%s: not answered within %v (last: %v): %w", op, timeout, err, ErrTimeout)
		}
		time.Sleep(min(backoff, max(time.Until(deadline), 0)))
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// retryable reports whether a Get that failed with err may succeed later: the key is not there
// yet (NOT-FOUND), or the server gave up by its own clock (PMIX_ERROR from Slurm after its
// PMIxTimeout, TIMEOUT).
func retryable(err error) bool {
	var se *StatusError
	if !errors.As(err, &se) {
		return false
	}
	return se.Code == int(C.pk_err_not_found()) || se.Code == int(C.pk_err_error()) || se.Code == int(C.pk_err_timeout())
}

// Abort asks the server to end every process of the job, with code as the job's exit status
// and msg for the launcher to show (PMIx_Abort). The caller should exit whatever it returns:
// servers differ in whether the call returns before the process is killed.
func (c *Client) Abort(code int, msg string) error {
	if err := c.check(); err != nil {
		return err
	}
	cm := C.CString(msg)
	defer C.free(unsafe.Pointer(cm))
	return status("PMIx_Abort", C.pk_abort(C.int(code), cm))
}

// Close drops this Client's reference; the last one calls PMIx_Finalize. Closing twice is a
// no-op.
func (c *Client) Close() error {
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
