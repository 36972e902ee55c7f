package ncclid

import (
	"bytes"
	"errors"
	"fmt"
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
