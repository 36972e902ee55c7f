// Package tabletext reads a decision table back into gpubind.Table, so that tests can
// inspect what the engine wrote field by field. Production code never parses a table in
// Go: the plugin's C parser (rule/parse.c, run from Go by package rule) is the one that
// counts, and the tests check that it accepts every table the engine writes.
package tabletext

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpubind/gpubind/gpubind"
)

// maxMessages is the engine's limit on message lines (gpubind.ErrorTable and Plan).
const maxMessages = 64

// Parse parses and validates a protocol v1 table. A missing or wrong "end" line
// means the table was truncated.
func Parse(r io.Reader) (*gpubind.Table, error) {
	data, err := io.ReadAll(io.LimitReader(r, gpubind.MaxTableBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > gpubind.MaxTableBytes {
		return nil, fmt.Errorf("table: more than %d bytes", gpubind.MaxTableBytes)
	}
	t := &gpubind.Table{NUMAGPUs: map[int][]int{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, gpubind.MaxTableLine+2), gpubind.MaxTableLine+1)
	n, ended := 0, false
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Text()
		if ended {
			return nil, fmt.Errorf("table line %d: text after the end line", n+2)
		}
		if len(line) > gpubind.MaxTableLine {
			return nil, fmt.Errorf("table line %d: longer than %d bytes", n+1, gpubind.MaxTableLine)
		}
		if n == 0 {
			if line != gpubind.TableMagic {
				return nil, fmt.Errorf("table line 1: %q, want %q", trunc(line), gpubind.TableMagic)
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
		if err := parseLine(t, key, rest, seen); err != nil {
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
	if err := validate(t, seen); err != nil {
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

func parseLine(t *gpubind.Table, key, rest string, seen map[string]bool) error {
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
				if t.Status != gpubind.StatusOK && t.Status != gpubind.StatusWarn && t.Status != gpubind.StatusError {
					err = fmt.Errorf("%q: want ok, warn or error", trunc(f[0]))
				}
			}
		}
	case "message":
		if len(t.Messages) >= maxMessages+1 {
			return errors.New("too many message lines")
		}
		t.Messages = append(t.Messages, rest)
	case "mode":
		// Written by engines before the line was dropped; checked and ignored, as the
		// plugin does (rule/parse.c line_mode).
		if err = once(); err == nil {
			if err = want(1); err == nil {
				if _, err = gpubind.ParseMode(f[0]); err != nil {
					err = fmt.Errorf("%q: want enforce or optional", trunc(f[0]))
				}
			}
		}
	case "flags":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Flags, err = gpubind.ParseFlags("flags", f[0])
			}
		}
	case "rule":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Rule = f[0]
				if t.Rule != gpubind.RuleTable && t.Rule != gpubind.RuleNUMA {
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
					v, err = atoiRange(f[0], 1, gpubind.MaxShare)
					t.Share = v
				case "per_task":
					v, err = atoiRange(f[0], 1, gpubind.MaxPerTask)
					t.PerTask = v
				default:
					v, err = atoiRange(f[0], 0, gpubind.MaxTableTasks)
					t.NTasks = v
				}
			}
		}
	case "numa":
		if err = want(2); err == nil {
			var n gpubind.TableNUMA
			if n.ID, err = atoiRange(f[0], 0, gpubind.MaxTableNUMA-1); err != nil {
				return err
			}
			if f[1] != "-" {
				if n.CPUs, err = gpubind.ParseCPUList(f[1]); err != nil {
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
			var g gpubind.TableGPU
			g.Card = -1
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
			if g.BusID, err = gpubind.NormalizeBusID(f[4]); err != nil {
				return err
			}
			if f[5] != "-" {
				g.UUID = f[5]
			}
			if g.NUMA, err = atoiRange(f[6], -1, gpubind.MaxTableNUMA-1); err != nil {
				return err
			}
			if f[7] != "-" {
				g.NIC = f[7]
			}
			if f[8] != "-" {
				g.Dev = f[8]
			}
			if len(t.GPUs) >= gpubind.MaxTableGPUs {
				return errors.New("too many gpu lines")
			}
			t.GPUs = append(t.GPUs, g)
		}
	case "numagpus":
		if err = want(2); err == nil {
			var node int
			if node, err = atoiRange(f[0], 0, gpubind.MaxTableNUMA-1); err != nil {
				return err
			}
			if _, dup := t.NUMAGPUs[node]; dup {
				return fmt.Errorf("node %d given twice", node)
			}
			var ids []int
			if ids, err = parseIDList(f[1], gpubind.MaxTableGPUs); err != nil {
				return err
			}
			t.NUMAGPUs[node] = ids
		}
	case "fallback":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.Fallback, err = parseIDList(f[0], gpubind.MaxTableGPUs)
			}
		}
	case "task":
		if err = want(3); err == nil {
			var k gpubind.TableTask
			if k.Local, err = atoiRange(f[0], len(t.Tasks), len(t.Tasks)); err != nil {
				return fmt.Errorf("local id %w (tasks run 0,1,2,... in order)", err)
			}
			if len(t.Tasks) >= gpubind.MaxTableTasks {
				return errors.New("too many task lines")
			}
			if k.GPUs, err = parseIDList(f[1], gpubind.MaxTableGPUs); err != nil {
				return err
			}
			if f[2] != "-" {
				if k.CPUs, err = gpubind.ParseCPUList(f[2]); err != nil {
					return err
				}
			}
			t.Tasks = append(t.Tasks, k)
		}
	case "depends":
		if err = want(1); err == nil {
			if f[0] == "?" {
				t.NoCache = true
			} else {
				t.Depends = append(t.Depends, f[0])
			}
		}
	case "fabric":
		if err = want(6); err == nil {
			var fb gpubind.TableFabric
			var st, cl uint64
			if fb.ID, err = atoiRange(f[0], 0, gpubind.MaxTableGPUs-1); err != nil {
				return err
			}
			fb.State, fb.ClusterUUID = f[1], f[4]
			if st, err = strconv.ParseUint(f[2], 10, 32); err != nil {
				return err
			}
			if f[3] != "-" {
				fb.Health = f[3]
			}
			if cl, err = strconv.ParseUint(f[5], 10, 32); err != nil {
				return err
			}
			fb.Status, fb.CliqueID = uint32(st), uint32(cl)
			t.Fabric = append(t.Fabric, fb)
		}
	case "vendor":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				switch f[0] {
				case gpubind.VendorAMD:
					t.Vendor = f[0]
				case "nvidia":
				default:
					err = fmt.Errorf("%q: want amd or nvidia", f[0])
				}
			}
		}
	case "imex":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.IMEXDir = f[0]
			}
		}
	case "visible":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				switch f[0] {
				case gpubind.VisibleOwn, gpubind.VisibleFirst, gpubind.VisibleLocalID:
					t.Visible = f[0]
				default:
					err = fmt.Errorf("%q: want own, first or localid", f[0])
				}
			}
		}
	case "nics":
		if err = once(); err == nil {
			if err = want(1); err == nil {
				t.NICs = strings.Split(f[0], ",")
			}
		}
	case "near":
		if err = want(2); err == nil {
			var g int
			if g, err = atoiRange(f[0], 0, len(t.GPUs)-1); err != nil {
				return fmt.Errorf("gpu id %w (after its gpu line)", err)
			}
			if t.Near == nil {
				t.Near = map[int][]int{}
			}
			if _, dup := t.Near[g]; dup {
				return fmt.Errorf("near %d given twice", g)
			}
			t.Near[g], err = parseIDList(f[1], gpubind.MaxTableGPUs)
		}
	case "part":
		if err = want(2); err == nil {
			var g, x int
			if g, err = atoiRange(f[0], 0, len(t.GPUs)-1); err != nil {
				return fmt.Errorf("gpu id %w (after its gpu line)", err)
			}
			if t.GPUs[g].Part != nil {
				return fmt.Errorf("part %d given twice", g)
			}
			if x, err = atoiRange(f[1], 0, 7); err == nil {
				t.GPUs[g].Part = &x
			}
		}
	case "card":
		if err = want(2); err == nil {
			var g, m int
			if g, err = atoiRange(f[0], 0, len(t.GPUs)-1); err != nil {
				return fmt.Errorf("gpu id %w (after its gpu line)", err)
			}
			if t.GPUs[g].Card >= 0 {
				return fmt.Errorf("card %d given twice", g)
			}
			if m, err = atoiRange(f[1], 0, 1<<20-1); err == nil {
				t.GPUs[g].Card = m
			}
		}
	default:
		return errors.New("unknown line")
	}
	return err
}

// validate checks cross-line consistency after parsing.
func validate(t *gpubind.Table, seen map[string]bool) error {
	if !seen["status"] {
		return errors.New("status line missing")
	}
	if t.Status == gpubind.StatusError {
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
