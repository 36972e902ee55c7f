// Package pmixkv is a small key-value view of a parallel job: who am I (rank, local rank,
// node), and Put/Commit/Fence/Get to exchange a few bytes between ranks.
//
// The PMIx client (client.go) talks to a real PMIx server (srun --mpi=pmix, mpirun). Mem is an in-memory job for
// unit tests. Open picks the PMIx client and falls back to launcher variables only for a job
// of one process, where no exchange is needed.
package pmixkv

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Info describes this process's place in its job.
type Info struct {
	Namespace  string // PMIx namespace ("" without a server)
	Rank       int    // global rank, 0..Size-1
	Size       int    // number of processes in the job
	LocalRank  int    // rank among the job's processes on this node
	LocalSize  int    // the job's processes on this node
	NodeID     int    // 0..NumNodes-1: this node's place among the job's nodes, in the launcher's order
	NumNodes   int    // nodes hosting the job's processes
	Hostname   string // this node's name, "" if unknown
	LocalPeers []int  // global ranks on this node, ascending
	Source     string // where the facts came from: "pmix", "slurm-env", "ompi-env" or "singleton"
}

// KV is what ID distribution needs from a job: a put/commit/fence/get store shared by its ranks.
// Implementations must be safe for concurrent use.
type KV interface {
	Info() Info
	// Put stages a value under key for this rank; others see it after Commit.
	Put(key string, value []byte) error
	// Commit publishes the staged values.
	Commit() error
	// Fence waits for every rank of the job; collect asks to bring all committed data local.
	Fence(collect bool, timeout time.Duration) error
	// Get returns the value rank committed under key, waiting up to timeout for it.
	Get(rank int, key string, timeout time.Duration) ([]byte, error)
	// Close releases the store (for the PMIx client: the last Close finalizes PMIx).
	Close() error
}

// Both stores are KVs, and the PMIx client can abort the job: checked when compiling.
var (
	_ KV      = (*client)(nil)
	_ KV      = (*Mem)(nil)
	_ aborter = (*client)(nil)
)

// aborter is a KV that can end the whole job (client: PMIx_Abort).
type aborter interface {
	Abort(code int, msg string) error
}

// Errors that callers may test with errors.Is.
var (
	ErrTimeout  = errors.New("timed out")
	errNotFound = errors.New("key not found")
	// errNoServer means PMIx_Init found no server (PMIX_ERR_UNREACH).
	errNoServer = errors.New("no PMIx server")
	// ErrNeedServer is returned by Open when the job has more than one process but no
	// PMIx server to exchange data through.
	ErrNeedServer = errors.New("a job of several processes needs a PMIx server")
	// ErrPeerDied means another process of the job ended abnormally (a PMIx event said so)
	// while this one waited: the data it waited for may never come.
	ErrPeerDied = errors.New("another process of the job ended")
)

// nodeIndex finds host in nodeList, a job's comma-separated node list (PMIX_NODE_LIST), and
// returns its position and the number of nodes: a dense node index in the launcher's order,
// where launchers that number nodes from a pool (ORTE, PRRTE: 0 is mpirun's node even when it
// runs no rank) give sparse PMIX_NODEIDs such as {1, 2}. ok is false unless host is in the list
// exactly once.
func nodeIndex(nodeList, host string) (index, count int, ok bool) {
	index = -1
	for _, n := range strings.Split(nodeList, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if n == host {
			if index >= 0 {
				return 0, 0, false
			}
			index = count
		}
		count++
	}
	return index, count, index >= 0
}

// validKey reports whether key may be used with Put/Get: non-empty, printable ASCII without
// spaces, at most 500 bytes (PMIX_MAX_KEYLEN is 511), and not starting with "pmix", which PMIx
// reserves.
func validKey(key string) error {
	if key == "" {
		return errors.New("pmixkv: empty key")
	}
	if len(key) > 500 {
		return fmt.Errorf("pmixkv: key %.20q... is %d bytes, expected at most 500", key, len(key))
	}
	if strings.HasPrefix(strings.ToLower(key), "pmix") {
		return fmt.Errorf("pmixkv: key %q starts with \"pmix\", which PMIx reserves", key)
	}
	for _, r := range key {
		if r <= ' ' || r > '~' {
			return fmt.Errorf("pmixkv: key %q holds %q, expected printable ASCII without spaces", key, r)
		}
	}
	return nil
}

// timeoutMillis converts a timeout for the C side, which counts milliseconds (0 = wait
// forever): round up so a short positive timeout never becomes "forever".
func timeoutMillis(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<30 {
		ms = 1 << 30
	}
	return int(ms)
}
