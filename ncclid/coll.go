package ncclid

import (
	"errors"
	"fmt"

	"github.com/gpubind/gpubind/pmixkv"
)

// The small collectives of libgpuhelper 1.1 (barrier, broadcast, allgather). They share the
// Exchanger's sequence with the ID exchanges, so their keys never repeat, and like them must be
// called by every rank in the same order. They move small data through the PMIx server, which
// keeps every published value until the job's PMIx session ends.

// MaxCollBytes bounds one rank's contribution to Bcast and Allgather: PMIx servers hold the
// values in memory and ship them in single messages.
const MaxCollBytes = 16 << 20

// ErrSize marks a collective whose ranks disagree on the data's size.
var ErrSize = errors.New("ranks disagree on the data size")

// Barrier returns when every rank has entered it: a fence, collecting data only where the
// server needs that for a fence to wait for the other nodes (BarrierCollect).
func (e *Exchanger) Barrier() error {
	e.end(e.begin("barrier"), nil)
	return e.fence(e.BarrierCollect, "barrier")
}

// Bcast returns root's data on every rank; each rank passes the size it expects (n), and root
// its data. A size that differs from root's is an error matching ErrSize on that rank.
func (e *Exchanger) Bcast(root int, data []byte, n int) ([]byte, error) {
	c := e.begin(fmt.Sprintf("bcast %d %d", root, n))
	v, err := e.bcast(c, root, data, n)
	e.end(c, err)
	return v, err
}

func (e *Exchanger) bcast(c *coll, root int, data []byte, n int) ([]byte, error) {
	in := e.KV.Info()
	seq := c.seq
	if root < 0 || root >= in.Size {
		return nil, fmt.Errorf("ncclid: bcast root %d, expected 0..%d", root, in.Size-1)
	}
	if n < 0 || n > MaxCollBytes {
		return nil, fmt.Errorf("ncclid: bcast of %d bytes, expected 0..%d", n, MaxCollBytes)
	}
	key := fmt.Sprintf("gpubind.bcast.%d", seq)
	if in.Rank == root && !c.published {
		if len(data) != n {
			return nil, fmt.Errorf("ncclid: bcast root has %d bytes but says %d", len(data), n)
		}
		if err := e.KV.Put(key, data); err != nil {
			return nil, err
		}
		if err := e.KV.Commit(); err != nil {
			return nil, err
		}
		c.published = true
	}
	// Like the world ID: under Auto, every rank reading one root is a fence from
	// autoFenceNodes nodes on (Mode.fences), else a direct Get.
	if e.Mode.fences(in.NumNodes, 1, false) && !c.fenced {
		if err := e.fence(true, "bcast: fence"); err != nil {
			return nil, err
		}
		c.fenced = true
	}
	if in.Rank == root {
		return append([]byte(nil), data...), nil
	}
	v, err := e.KV.Get(root, key, e.Timeout)
	if err != nil {
		return nil, fmt.Errorf("ncclid: bcast from root rank %d: %w", root, err)
	}
	if len(v) != n {
		return nil, fmt.Errorf("ncclid: bcast: root rank %d sent %d bytes, rank %d expected %d: %w", root, len(v), in.Rank, n, ErrSize)
	}
	return v, nil
}

// gatherFrom is the job size from which Allgather gathers at rank 0 (when the whole result
// fits in MaxCollBytes) instead of every rank reading every other rank's value. Read one by
// one, the values cost n-1 Gets on every rank: O(n^2) requests to the PMIx servers, 9.5 s for
// 8 bytes at 1,024 ranks on the GPU machine. Gathered, rank 0 makes n-1 Gets and publishes the
// result under one key, which the others read with one Get after a second fence: O(n) in all.
// Below this size the one-by-one reads save the second fence and rank 0's serial Gets.
const gatherFrom = 16

// Allgather returns every rank's data, in rank order; all ranks pass the same size. A rank
// whose data has another size makes the ranks that read it fail with ErrSize (every rank,
// where rank 0 gathers).
func (e *Exchanger) Allgather(data []byte) ([][]byte, error) {
	c := e.begin(fmt.Sprintf("allgather %d", len(data)))
	v, err := e.allgather(c, data)
	e.end(c, err)
	return v, err
}

func (e *Exchanger) gatherFrom() int {
	if e.GatherFrom > 0 {
		return e.GatherFrom
	}
	return gatherFrom
}

func (e *Exchanger) allgather(c *coll, data []byte) ([][]byte, error) {
	in := e.KV.Info()
	if len(data) > MaxCollBytes {
		return nil, fmt.Errorf("ncclid: allgather of %d bytes per rank, expected at most %d", len(data), MaxCollBytes)
	}
	key := fmt.Sprintf("gpubind.allgather.%d", c.seq)
	if !c.published {
		if err := e.KV.Put(key, data); err != nil {
			return nil, err
		}
		if err := e.KV.Commit(); err != nil {
			return nil, err
		}
		c.published = true
	}
	if !c.fenced {
		if err := e.fence(true, "allgather: fence"); err != nil {
			return nil, err
		}
		c.fenced = true
	}
	if in.Size >= e.gatherFrom() && in.Size*len(data) <= MaxCollBytes {
		return e.gathered(c, key, data)
	}
	out := make([][]byte, in.Size)
	for r := range out {
		if r == in.Rank {
			out[r] = append([]byte(nil), data...)
			continue
		}
		v, err := e.KV.Get(r, key, e.Timeout)
		if err != nil {
			return nil, fmt.Errorf("ncclid: allgather: data of rank %d: %w", r, err)
		}
		if len(v) != len(data) {
			return nil, fmt.Errorf("ncclid: allgather: rank %d sent %d bytes, rank %d sent %d: %w", r, len(v), in.Rank, len(data), ErrSize)
		}
		out[r] = v
	}
	return out, nil
}

// The value rank 0 publishes after gathering: tagID and the n values end to end, tagFailed and
// the message (a rank's data of another size), or tagGatherFailed and the message (rank 0 could
// not read a rank's data).
const tagGatherFailed = 4

// gathered is Allgather's second half from gatherFrom ranks on: rank 0 reads every value
// (local Gets after the collecting fence) and publishes them under key.all; a second
// collecting fence; every other rank reads that one value.
func (e *Exchanger) gathered(c *coll, key string, data []byte) ([][]byte, error) {
	in := e.KV.Info()
	all := key + ".all"
	var gatherErr error
	if in.Rank == 0 && !c.gathered {
		val := append(make([]byte, 0, 1+in.Size*len(data)), tagID)
		val = append(val, data...)
		for r := 1; r < in.Size; r++ {
			v, err := e.KV.Get(r, key, e.Timeout)
			if err != nil && errors.Is(err, pmixkv.ErrTimeout) {
				// Retryable: the retry gathers again; nothing is published meanwhile.
				return nil, fmt.Errorf("ncclid: allgather: data of rank %d: %w", r, err)
			}
			if err != nil {
				// Any other failure is published, so the other ranks fail at once instead of
				// waiting in the second fence until their timeout.
				gatherErr = fmt.Errorf("ncclid: allgather: data of rank %d: %w", r, err)
				val = append([]byte{tagGatherFailed}, fmt.Sprintf("rank 0 could not read the data of rank %d: %v", r, err)...)
				break
			}
			if len(v) != len(data) {
				val = append([]byte{tagFailed}, fmt.Sprintf("rank %d sent %d bytes, rank 0 sent %d", r, len(v), len(data))...)
				break
			}
			val = append(val, v...)
		}
		if err := e.KV.Put(all, val); err != nil {
			return nil, err
		}
		if err := e.KV.Commit(); err != nil {
			return nil, err
		}
		c.gathered, c.own2 = true, val
	}
	if !c.fenced2 {
		if err := e.fence(true, "allgather: fence after gathering"); err != nil {
			return nil, err
		}
		c.fenced2 = true
	}
	if gatherErr != nil {
		return nil, gatherErr
	}
	v := c.own2
	if in.Rank != 0 {
		var err error
		if v, err = e.KV.Get(0, all, e.Timeout); err != nil {
			return nil, fmt.Errorf("ncclid: allgather: data gathered by rank 0: %w", err)
		}
	}
	switch {
	case len(v) >= 1 && v[0] == tagFailed:
		return nil, fmt.Errorf("ncclid: allgather: %s (rank %d sent %d): %w", v[1:], in.Rank, len(data), ErrSize)
	case len(v) >= 1 && v[0] == tagGatherFailed:
		return nil, fmt.Errorf("ncclid: allgather: %s", v[1:])
	case len(v) == 1+in.Size*len(data) && v[0] == tagID:
	case len(v) >= 1 && v[0] == tagID && (len(v)-1)%in.Size == 0:
		return nil, fmt.Errorf("ncclid: allgather: rank 0 gathered %d bytes per rank, rank %d sent %d: %w", (len(v)-1)/in.Size, in.Rank, len(data), ErrSize)
	default:
		return nil, fmt.Errorf("ncclid: allgather: value of %s from rank 0 is %d bytes, expected tag %d and %d", all, len(v), tagID, in.Size*len(data))
	}
	out := make([][]byte, in.Size)
	for r := range out {
		out[r] = append([]byte(nil), v[1+r*len(data):1+(r+1)*len(data)]...)
	}
	return out, nil
}
