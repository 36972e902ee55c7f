package gpubind

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// MaxSnapshotBytes bounds a snapshot file; real nodes need a few KiB.
const MaxSnapshotBytes = 4 << 20

// ParseSnapshot decodes a JSON snapshot (as written by WriteSnapshot) and checks it.
// Unknown fields are errors, so a typo in a hand-written snapshot is not ignored.
func ParseSnapshot(data []byte) (*Topology, error) {
	if len(data) > MaxSnapshotBytes {
		return nil, fmt.Errorf("snapshot is %d bytes, more than the limit %d", len(data), MaxSnapshotBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Topology
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("snapshot: trailing data after the JSON object")
	}
	if err := t.Normalize(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return &t, nil
}

// LoadSnapshot reads and parses a snapshot file and marks every fact as coming from it
// (the sources the snapshot recorded are kept under "captured.<fact>").
func LoadSnapshot(path string) (*Topology, error) {
	data, err := readSmallFile(path, MaxSnapshotBytes)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	t, err := ParseSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// WriteSnapshot writes t as indented JSON.
func WriteSnapshot(w io.Writer, t *Topology) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
