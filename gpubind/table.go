package gpubind

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Protocol v1 limits (spank/PROTOCOL.md section 2).
const (
	TableMagic      = "gpubind-plan 1"
	MaxTableLine    = 4096
	MaxTableBytes   = 1 << 20
	MaxTableTasks   = 4096
	MaxTableGPUs    = 1024
	MaxTableNUMA    = 1024
	maxTableDepends = 64
	RuleTable       = "table"
	RuleNUMA        = "numa"
	StatusOK        = "ok"
	StatusWarn      = "warn"
	StatusError     = "error"
	maxMessageLines = 64
)

// Table is the decision table of protocol v1: everything a task needs to find its
// GPUs from its own CPU binding (rule/parse.c reads it; spank/PROTOCOL.md gives its text form).
type Table struct {
	Status   string
	Messages []string
	Flags    Flags
	Rule     string
	Share    int
	PerTask  int
	NTasks   int
	NUMA     []TableNUMA
	GPUs     []TableGPU
	NUMAGPUs map[int][]int // NUMA node -> step GPU ids, best first
	Fallback []int
	Tasks    []TableTask
	// Depends are the files the plan was made from besides the topology: the plugin's
	// plan cache reuses the table only while none of them changed.
	Depends []string
	// Visible is the option's visible= ("" or VisibleOwn: no "visible" line).
	Visible string
	// NICs is the node's rail set, NAME:PORT in GPU order ("nics" line, written with the
	// nic flag): the NCCL_IB_HCA list of every task of the node.
	NICs []string
	// Near is, per step GPU id, the other step GPUs nearest first ("near" lines, written
	// with visible first|localid): the order a task sees the GPUs that are not its own.
	Near map[int][]int
	// Fabric are the "fabric" lines (step GPUs in a multi-node NVLink domain) and
	// IMEXDir the "imex" line (where a task looks for its IMEX channel); see fabric.go.
	Fabric  []TableFabric
	IMEXDir string
	// NoCache: the plan depends on state that changes without a file changing (the
	// NVLink fabric); a "depends ?" line keeps the plugin's plan cache from reusing it.
	NoCache bool
	// Vendor is VendorAMD for AMD GPUs ("vendor amd" line: the rule sets
	// ROCR_VISIBLE_DEVICES); "" for NVIDIA (no line).
	Vendor string
}

// TableNUMA is a "numa" line.
type TableNUMA struct {
	ID   int
	CPUs CPUSet
}

// TableGPU is a "gpu" line. Empty UUID/NIC are written as "-".
type TableGPU struct {
	ID        int
	Visible   string
	NVMLIndex int
	Minor     int
	BusID     string
	UUID      string
	NUMA      int
	NIC       string
	// Dev is the device node whose access(2) tells whether a task may open the GPU
	// ("-" unknown; an older 8-field line has none).
	Dev string
	// Card is an AMD GPU's /dev/dri/cardN minor, -1 unknown: a "card" line, written
	// only on AMD with isolate (its one reader; spank/PROTOCOL.md section 2).
	Card int
	// Part is an AMD MI300 compute partition's XCP id, nil for a whole GPU: a "part"
	// line, written only for partitions (spank/PROTOCOL.md section 2).
	Part *int
}

// TableTask is a "task" line: the plan-time answer for one local task.
type TableTask struct {
	Local int
	GPUs  []int
	CPUs  CPUSet // empty: leave the CPUs alone
}

// ErrorTable returns a well-formed table with status error and the message.
func ErrorTable(err error) *Table {
	return &Table{Status: StatusError, Messages: []string{err.Error()}}
}

func dashList(ids []int) string {
	if len(ids) == 0 {
		return "-"
	}
	s := make([]string, len(ids))
	for i, v := range ids {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// CleanMessage replaces control characters (and anything outside printable ASCII) by
// '?', as the protocol wants message text on one line.
func CleanMessage(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	if len(b) > MaxTableLine-16 {
		b = append(b[:MaxTableLine-19], "..."...)
	}
	return string(b)
}

// Encode writes the table in protocol v1, ending with "end N".
func (t *Table) Encode(w io.Writer) error {
	var lines []string
	add := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	add("%s", TableMagic)
	add("status %s", t.Status)
	for i, m := range t.Messages {
		if i == maxMessageLines {
			add("message (%d more messages dropped)", len(t.Messages)-i)
			break
		}
		add("message %s", CleanMessage(m))
	}
	if t.Status != StatusError {
		add("flags %s", t.Flags.String())
		add("rule %s", t.Rule)
		add("share %d", t.Share)
		add("per_task %d", t.PerTask)
		add("ntasks %d", t.NTasks)
		if t.Vendor != "" {
			add("vendor %s", t.Vendor)
		}
		if t.Visible != "" && t.Visible != VisibleOwn {
			add("visible %s", t.Visible)
		}
		if t.Flags.NIC && len(t.NICs) > 0 {
			add("nics %s", strings.Join(t.NICs, ","))
		}
		for _, n := range t.NUMA {
			add("numa %d %s", n.ID, dash(n.CPUs.String()))
		}
		for _, g := range t.GPUs {
			add("gpu %d %s %d %d %s %s %d %s %s", g.ID, g.Visible, g.NVMLIndex, g.Minor, g.BusID, dash(g.UUID), g.NUMA, dash(g.NIC), dash(g.Dev))
		}
		for _, g := range t.GPUs {
			if g.Part != nil {
				add("part %d %d", g.ID, *g.Part)
			}
		}
		if t.Vendor == VendorAMD && t.Flags.Isolate {
			for _, g := range t.GPUs {
				if g.Card >= 0 {
					add("card %d %d", g.ID, g.Card)
				}
			}
		}
		for _, g := range sortedKeys(t.Near) {
			add("near %d %s", g, dashList(t.Near[g]))
		}
		for _, n := range sortedKeys(t.NUMAGPUs) {
			add("numagpus %d %s", n, dashList(t.NUMAGPUs[n]))
		}
		add("fallback %s", dashList(t.Fallback))
		for _, k := range t.Tasks {
			add("task %d %s %s", k.Local, dashList(k.GPUs), dash(k.CPUs.String()))
		}
		uncacheable := t.NoCache
		for i, d := range t.Depends {
			if i == maxTableDepends || strings.ContainsFunc(d, func(r rune) bool { return r <= ' ' || r > '~' }) {
				uncacheable = true // a file the plan cache cannot name: never cache this plan
				break
			}
			add("depends %s", d)
		}
		if uncacheable {
			add("depends ?")
		}
		t.encodeFabric(add)
	}
	var buf bytes.Buffer
	for _, l := range lines {
		if len(l) > MaxTableLine {
			return fmt.Errorf("table line longer than %d bytes (it starts %.60q)", MaxTableLine, l)
		}
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	fmt.Fprintf(&buf, "end %d\n", len(lines))
	if buf.Len() > MaxTableBytes {
		return fmt.Errorf("table is %d bytes, more than %d", buf.Len(), MaxTableBytes)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// String encodes the table (errors are returned as an error table's text).
func (t *Table) String() string {
	var b strings.Builder
	if err := t.Encode(&b); err != nil {
		b.Reset()
		_ = ErrorTable(err).Encode(&b)
	}
	return b.String()
}
