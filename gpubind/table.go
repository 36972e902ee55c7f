package gpubind

import (
	"bufio"
	"bytes"
	"errors"
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
	RuleTable       = "table"
	RuleNUMA        = "numa"
	StatusOK        = "ok"
	StatusWarn      = "warn"
	StatusError     = "error"
	ModeEnforce     = "enforce"
	ModeOptional    = "optional"
	maxMessageLines = 64
)

// Table is the decision table of protocol v1: everything a task needs to find its
// GPUs from its own CPU binding (see Resolve).
type Table struct {
	Status   string
	Messages []string
	Mode     string
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
}

// TableTask is a "task" line: the plan-time answer for one local task.
type TableTask struct {
	Local int
	GPUs  []int
	CPUs  CPUSet // empty: leave the CPUs alone
}

// ErrorTable returns a well-formed table with status error and the message.
func ErrorTable(mode string, err error) *Table {
	if mode != ModeOptional {
		mode = ModeEnforce
	}
	return &Table{Status: StatusError, Messages: []string{err.Error()}, Mode: mode}
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
	mode := t.Mode
	if mode == "" {
		mode = ModeEnforce
	}
	add("mode %s", mode)
	if t.Status != StatusError {
		add("flags %s", t.Flags.String())
		add("rule %s", t.Rule)
		add("share %d", t.Share)
		add("per_task %d", t.PerTask)
		add("ntasks %d", t.NTasks)
		for _, n := range t.NUMA {
			add("numa %d %s", n.ID, dash(n.CPUs.String()))
		}
		for _, g := range t.GPUs {
			add("gpu %d %s %d %d %s %s %d %s %s", g.ID, g.Visible, g.NVMLIndex, g.Minor, g.BusID, dash(g.UUID), g.NUMA, dash(g.NIC), dash(g.Dev))
		}
		for _, n := range sortedKeys(t.NUMAGPUs) {
			add("numagpus %d %s", n, dashList(t.NUMAGPUs[n]))
		}
		add("fallback %s", dashList(t.Fallback))
		for _, k := range t.Tasks {
			add("task %d %s %s", k.Local, dashList(k.GPUs), dash(k.CPUs.String()))
		}
	}
	var buf bytes.Buffer
	for _, l := range lines {
		if len(l) > MaxTableLine {
			return fmt.Errorf("table line longer than %d bytes: %q", MaxTableLine, trunc(l))
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
		_ = ErrorTable(t.Mode, err).Encode(&b)
	}
	return b.String()
}

// ParseTable parses and validates a protocol v1 table. A missing or wrong "end" line
// means the table was truncated.
func ParseTable(r io.Reader) (*Table, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxTableBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxTableBytes {
		return nil, fmt.Errorf("table: more than %d bytes", MaxTableBytes)
	}
	t := &Table{NUMAGPUs: map[int][]int{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, MaxTableLine+2), MaxTableLine+1)
	n, ended := 0, false
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		if ended {
			return nil, fmt.Errorf("table line %d: text after the end line", n+2)
		}
		if len(line) > MaxTableLine {
			return nil, fmt.Errorf("table line %d: longer than %d bytes", n+1, MaxTableLine)
		}
		if n == 0 {
			if line != TableMagic {
				return nil, fmt.Errorf("table line 1: %q, want %q", trunc(line), TableMagic)
			}
			n++
			continue
		}
		key, rest, _ := strings.Cut(line, " ")
		if key == "end" {
			c, err := strconv.Atoi(rest)
			if err != nil || c != n {
				return nil, fmt.Errorf("table truncated or corrupt: %q after %d lines", trunc(line), n)
			}
			ended = true
			continue
		}
		if err := t.parseLine(key, rest, seen); err != nil {
			return nil, fmt.Errorf("table line %d (%s): %w", n+1, key, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	if !ended {
		return nil, fmt.Errorf("table truncated: no end line after %d lines", n)
	}
	if err := t.validate(seen); err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	return t, nil
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func atoiRange(s string, lo, hi int) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		return 0, fmt.Errorf("%q: want an integer %d..%d", trunc(s), lo, hi)
	}
	return v, nil
}

func parseIDList(s string, limit int) ([]int, error) {
	if s == "-" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > limit {
		return nil, fmt.Errorf("list longer than %d", limit)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		v, err := atoiRange(p, 0, limit-1)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (t *Table) parseLine(key, rest string, seen map[string]bool) error {
	once := func() error {
		if seen[key] {
			return errors.New("given twice")
		}
		seen[key] = true
		return nil
	}
	f := strings.Split(rest, " ")
	want := func(n int) error {
		if len(f) != n || (n == 1 && f[0] == "") {
			return fmt.Errorf("%d fields, want %d", len(f), n)
		}
		for _, x := range f {
			if x == "" {
				return errors.New("empty field (double space)")
			}
		}
		return nil
	}
	var err error
	switch key {
	case "status":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Status = f[0]
				if t.Status != StatusOK && t.Status != StatusWarn && t.Status != StatusError {
					err = fmt.Errorf("%q: want ok, warn or error", trunc(f[0]))
				}
			}
		}
	case "message":
		if len(t.Messages) >= maxMessageLines+1 {
			return errors.New("too many message lines")
		}
		t.Messages = append(t.Messages, rest)
	case "mode":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Mode = f[0]
				if t.Mode != ModeEnforce && t.Mode != ModeOptional {
					err = fmt.Errorf("%q: want enforce or optional", trunc(f[0]))
				}
			}
		}
	case "flags":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Flags, err = ParseFlags("flags", f[0])
			}
		}
	case "rule":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Rule = f[0]
				if t.Rule != RuleTable && t.Rule != RuleNUMA {
					err = fmt.Errorf("%q: want table or numa", trunc(f[0]))
				}
			}
		}
	case "share", "per_task", "ntasks":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				var v int
				switch key {
				case "share":
					v, err = atoiRange(f[0], 1, MaxShare)
					t.Share = v
				case "per_task":
					v, err = atoiRange(f[0], 1, MaxPerTask)
					t.PerTask = v
				default:
					v, err = atoiRange(f[0], 0, MaxTableTasks)
					t.NTasks = v
				}
			}
		}
	case "numa":
		if err = want(2); err == nil {
			var n TableNUMA
			if n.ID, err = atoiRange(f[0], 0, MaxTableNUMA-1); err != nil {
				return err
			}
			if f[1] != "-" {
				if n.CPUs, err = ParseCPUList(f[1]); err != nil {
					return err
				}
			}
			for _, o := range t.NUMA {
				if o.ID == n.ID {
					return fmt.Errorf("node %d given twice", n.ID)
				}
			}
			t.NUMA = append(t.NUMA, n)
		}
	case "gpu":
		if len(f) == 8 { // written before the DEV field existed
			f = append(f, "-")
		}
		if err = want(9); err == nil {
			var g TableGPU
			if g.ID, err = atoiRange(f[0], len(t.GPUs), len(t.GPUs)); err != nil {
				return fmt.Errorf("id %w (ids run 0,1,2,... in order)", err)
			}
			g.Visible = f[1]
			if g.NVMLIndex, err = atoiRange(f[2], 0, 1<<16); err != nil {
				return err
			}
			if g.Minor, err = atoiRange(f[3], -1, 1<<20); err != nil {
				return err
			}
			if g.BusID, err = NormalizeBusID(f[4]); err != nil {
				return err
			}
			if f[5] != "-" {
				g.UUID = f[5]
			}
			if g.NUMA, err = atoiRange(f[6], -1, MaxTableNUMA-1); err != nil {
				return err
			}
			if f[7] != "-" {
				g.NIC = f[7]
			}
			if f[8] != "-" {
				g.Dev = f[8]
			}
			if len(t.GPUs) >= MaxTableGPUs {
				return errors.New("too many gpu lines")
			}
			t.GPUs = append(t.GPUs, g)
		}
	case "numagpus":
		if err = want(2); err == nil {
			var node int
			if node, err = atoiRange(f[0], 0, MaxTableNUMA-1); err != nil {
				return err
			}
			if _, dup := t.NUMAGPUs[node]; dup {
				return fmt.Errorf("node %d given twice", node)
			}
			var ids []int
			if ids, err = parseIDList(f[1], MaxTableGPUs); err != nil {
				return err
			}
			t.NUMAGPUs[node] = ids
		}
	case "fallback":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Fallback, err = parseIDList(f[0], MaxTableGPUs)
			}
		}
	case "task":
		if err = want(3); err == nil {
			var k TableTask
			if k.Local, err = atoiRange(f[0], len(t.Tasks), len(t.Tasks)); err != nil {
				return fmt.Errorf("local id %w (tasks run 0,1,2,... in order)", err)
			}
			if len(t.Tasks) >= MaxTableTasks {
				return errors.New("too many task lines")
			}
			if k.GPUs, err = parseIDList(f[1], MaxTableGPUs); err != nil {
				return err
			}
			if f[2] != "-" {
				if k.CPUs, err = ParseCPUList(f[2]); err != nil {
					return err
				}
			}
			t.Tasks = append(t.Tasks, k)
		}
	default:
		return errors.New("unknown line")
	}
	return err
}

// validate checks cross-line consistency after parsing.
func (t *Table) validate(seen map[string]bool) error {
	if !seen["status"] || !seen["mode"] {
		return errors.New("status or mode line missing")
	}
	if t.Status == StatusError {
		return nil
	}
	for _, k := range []string{"flags", "rule", "share", "per_task", "ntasks", "fallback"} {
		if !seen[k] {
			return fmt.Errorf("%s line missing", k)
		}
	}
	if len(t.Tasks) != t.NTasks {
		return fmt.Errorf("ntasks %d but %d task lines", t.NTasks, len(t.Tasks))
	}
	check := func(what string, ids []int) error {
		for _, id := range ids {
			if id >= len(t.GPUs) {
				return fmt.Errorf("%s names gpu %d, but there are %d gpu lines", what, id, len(t.GPUs))
			}
		}
		return nil
	}
	for n, ids := range t.NUMAGPUs {
		if err := check("numagpus "+strconv.Itoa(n), ids); err != nil {
			return err
		}
		listed := false
		for _, nn := range t.NUMA {
			listed = listed || nn.ID == n
		}
		if !listed {
			return fmt.Errorf("numagpus %d has no numa line", n)
		}
	}
	if err := check("fallback", t.Fallback); err != nil {
		return err
	}
	for _, k := range t.Tasks {
		if err := check("task "+strconv.Itoa(k.Local), k.GPUs); err != nil {
			return err
		}
	}
	return nil
}

// Binding is what the rule gives one task.
type Binding struct {
	GPUs []int  // step GPU ids, in the task's visible order
	CPUs CPUSet // CPU list to set (empty: leave as is)
	// NUMA is the NUMA node the rule used (-1 when the task line was taken).
	NUMA int
}

// numaOf returns the NUMA node holding most of mask's CPUs (ties: lowest id), or -1
// when no node holds any.
func (t *Table) numaOf(mask CPUSet) int {
	best, bestN := -1, 0
	for _, n := range t.NUMA {
		c := mask.IntersectCount(n.CPUs)
		if c > bestN || (c == bestN && c > 0 && n.ID < best) {
			best, bestN = n.ID, c
		}
	}
	return best
}

// Resolve applies the per-task rule of protocol v1 section 3 for local task localID.
// bindList is SLURM_CPU_BIND_LIST parsed with ParseCPUBindList (nil when unset);
// ownMask is the task's sched_getaffinity mask (empty when unknown).
func (t *Table) Resolve(localID int, bindList []CPUSet, ownMask CPUSet) Binding {
	taskLine := func() Binding {
		if localID >= 0 && localID < len(t.Tasks) {
			k := t.Tasks[localID]
			return Binding{GPUs: k.GPUs, CPUs: k.CPUs, NUMA: -1}
		}
		return Binding{NUMA: -1}
	}
	if t.Rule != RuleNUMA {
		return taskLine()
	}
	var mask CPUSet
	fromList := localID >= 0 && localID < len(bindList) && !bindList[localID].IsEmpty()
	switch {
	case fromList:
		mask = bindList[localID]
	case !ownMask.IsEmpty():
		var all CPUSet
		for _, n := range t.NUMA {
			all = all.Union(n.CPUs)
		}
		if ownMask.Contains(all) {
			return taskLine() // bound to every CPU of the node: no binding
		}
		mask = ownMask
	default:
		return taskLine()
	}
	n := t.numaOf(mask)
	if n < 0 {
		return taskLine()
	}
	k := localID
	if fromList {
		k = 0
		for j := 0; j < localID; j++ {
			if j < len(bindList) && !bindList[j].IsEmpty() && t.numaOf(bindList[j]) == n {
				k++
			}
		}
	}
	cands := t.NUMAGPUs[n]
	if len(cands) == 0 {
		cands = t.Fallback
	}
	if len(cands) == 0 {
		return Binding{NUMA: n}
	}
	share, per := max(t.Share, 1), max(t.PerTask, 1)
	s := (k / share) * per
	var ids []int
	for i := 0; i < per; i++ {
		id := cands[(s+i)%len(cands)]
		dup := false
		for _, x := range ids {
			if x == id {
				dup = true
			}
		}
		if !dup {
			ids = append(ids, id)
		}
	}
	return Binding{GPUs: ids, NUMA: n}
}

// Env returns the variables the front end sets for a task bound to GPU ids (section 3
// of the protocol). It is nil when ids is empty.
func (t *Table) Env(ids []int) map[string]string {
	if len(ids) == 0 {
		return nil
	}
	var vis, idx, bus, uuid, numa []string
	for _, id := range ids {
		g := t.GPUs[id]
		vis = append(vis, g.Visible)
		idx = append(idx, strconv.Itoa(g.NVMLIndex))
		bus = append(bus, g.BusID)
		uuid = append(uuid, g.UUID)
		numa = append(numa, strconv.Itoa(g.NUMA))
	}
	env := map[string]string{
		"CUDA_VISIBLE_DEVICES": strings.Join(vis, ","),
		"CUDA_DEVICE_ORDER":    "PCI_BUS_ID",
		"GPUBIND_GPUS":         strings.Join(idx, ","),
		"GPUBIND_PCI_BUS_IDS":  strings.Join(bus, ","),
		"GPUBIND_UUIDS":        strings.Join(uuid, ","),
		"GPUBIND_NUMA":         strings.Join(numa, ","),
	}
	if nic := t.GPUs[ids[0]].NIC; t.Flags.NIC && nic != "" {
		env["NCCL_IB_HCA"] = "=" + nic + ":1"
		env["UCX_NET_DEVICES"] = nic + ":1"
	}
	return env
}

// LogLine is the task's mapping line:
// "gpubind: task L (rank R): CUDA_VISIBLE_DEVICES=V -> GPU i BUSID UUID NUMA n[ nic NIC]; ...".
func (t *Table) LogLine(localID, rank int, ids []int) string {
	if len(ids) == 0 {
		return fmt.Sprintf("gpubind: task %d (rank %d): no GPU", localID, rank)
	}
	var vis, groups []string
	for _, id := range ids {
		g := t.GPUs[id]
		vis = append(vis, g.Visible)
		s := fmt.Sprintf("GPU %d %s %s NUMA %d", g.NVMLIndex, g.BusID, dash(g.UUID), g.NUMA)
		if t.Flags.NIC && g.NIC != "" {
			s += " nic " + g.NIC
		}
		groups = append(groups, s)
	}
	return fmt.Sprintf("gpubind: task %d (rank %d): CUDA_VISIBLE_DEVICES=%s -> %s", localID, rank, strings.Join(vis, ","), strings.Join(groups, "; "))
}
