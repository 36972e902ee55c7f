// Package rule runs the plugin's per-task rule for Go callers: the CLI (`gpubind plan`)
// and the tests. The rule itself is C (the .c files next to this file, behind table.h: the
// table parser parse.c, the rule rule.c, the output output.c, default.c, fields.c and
// fabric.c; cgo compiles them all): the SPANK front end compiles the same files into
// spank_gpubind.so and applies them in each task, so there is one copy of the rule and the
// CLI shows exactly what a task gets.
package rule

/*
#cgo CFLAGS: -D_GNU_SOURCE -std=gnu11 -Wall
#include <stdio.h>
#include <stdlib.h>
#include "table.h"
#include "fabric.h"
#include <errno.h>
#include <string.h>
#include <unistd.h>

// Device nodes a test says the task may not open ("\n"-separated), for the call of
// go_warning on this thread; others are asked with access(2).
static __thread const char *go_denied;

static int go_can_open(const char *dev)
{
	size_t l = strlen(dev);

	for (const char *p = go_denied; p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t n = nl ? (size_t) (nl - p) : strlen(p);

		if (n == l && !strncmp(p, dev, l))
			return EACCES;
		p += n + (nl ? 1 : 0);
	}
	return access(dev, R_OK | W_OK) ? errno : 0;
}

static int go_warning(const struct gb_table *t, const struct gb_result *r,
		      int lid, const char *denied, char *buf, size_t len)
{
	int rc;

	go_denied = denied;
	rc = gb_fabric_warning(t, r, lid, go_can_open, buf, len);
	go_denied = NULL;
	return rc;
}

// A CPU mask from Go: n CPU ids into set (none: unknown, NULL).
static const cpu_set_t *go_cpus(const int *ids, int n, cpu_set_t *set)
{
	if (n == 0)
		return NULL;
	CPU_ZERO(set);
	for (int i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < CPU_SETSIZE)
			CPU_SET(ids[i], set);
	return set;
}

// A CPU mask to Go: the CPU ids in set, ascending, into ids (CPU_SETSIZE long).
static int go_cpu_ids(const cpu_set_t *set, int *ids)
{
	int n = 0;

	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, set))
			ids[n++] = c;
	return n;
}

// gb_result_env's callback for Go: "NAME=VALUE\n" lines into a buffer.
struct go_env { char *buf; size_t len, off; };

static int go_env_add(void *ctx, const char *name, const char *value,
		      int overwrite)
{
	(void) overwrite; // the CLI has no task environment to keep
	struct go_env *e = ctx;
	int n = snprintf(e->buf + e->off, e->len - e->off, "%s=%s\n", name, value);

	if (n < 0 || (size_t) n >= e->len - e->off)
		return -1;
	e->off += (size_t) n;
	return 0;
}

static int go_env(const struct gb_table *t, const struct gb_result *r,
		  char *buf, size_t len)
{
	struct go_env e = { buf, len, 0 };

	buf[0] = '\0';
	return gb_result_env(t, r, go_env_add, &e);
}

// As the front end's task_init: the rule, the device limit (when denied is
// not NULL: those device nodes denied, the others asked with access(2)), then
// visible=first|localid. own and step NULL: unknown.
static int go_apply(const struct gb_table *t, int lid, const char *btype,
		    const char *blist, const cpu_set_t *own,
		    const cpu_set_t *step, const char *denied,
		    struct gb_result *r, char *err, size_t errlen)
{
	struct gb_binds b;
	int rc;

	gb_binds_parse(t, btype[0] ? btype : NULL, blist[0] ? blist : NULL, &b);
	rc = gb_rule_apply(t, lid, &b, own, step, r, err, errlen);
	if (!rc && denied) {
		go_denied = denied;
		rc = gb_result_restrict(t, r, go_can_open, err, errlen);
		go_denied = NULL;
	}
	if (!rc)
		gb_result_widen(t, r, lid);
	return rc;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/gpubind/gpubind/gpubind"
)

// Table is a decision table as the front end parsed it.
type Table struct {
	c *C.struct_gb_table
}

// Parse parses a decision table (spank/PROTOCOL.md section 2) with the front end's
// parser. A table with "status error" parses; Apply then fails. Close frees it.
func Parse(text string) (*Table, error) {
	ct := (*C.struct_gb_table)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_gb_table{}))))
	if ct == nil {
		return nil, errors.New("out of memory")
	}
	var err [512]C.char
	// gb_table_parse takes a length: the text needs no NUL, but C.CString adds one.
	cs := C.CString(text)
	defer C.free(unsafe.Pointer(cs))
	if C.gb_table_parse(cs, C.size_t(len(text)), ct, &err[0], C.size_t(len(err))) != 0 {
		C.free(unsafe.Pointer(ct))
		return nil, errors.New(C.GoString(&err[0]))
	}
	return &Table{c: ct}, nil
}

// Close frees the table.
func (t *Table) Close() {
	if t.c != nil {
		C.gb_table_free(t.c)
		C.free(unsafe.Pointer(t.c))
		t.c = nil
	}
}

// devMinors is gb_gpu_dev_minors (the device minors isolate guards) for step GPU ids.
func (t *Table) devMinors(ids []int) ([]int, error) {
	cids := make([]C.int, len(ids)+1)
	for i, id := range ids {
		cids[i] = C.int(id)
	}
	out := make([]C.int, 2*len(ids)+1)
	var err [512]C.char
	n := C.gb_gpu_dev_minors(t.c, &cids[0], C.int(len(ids)), &out[0], C.int(len(out)), &err[0], C.size_t(len(err)))
	if n < 0 {
		return nil, errors.New(C.GoString(&err[0]))
	}
	m := make([]int, n)
	for i := range m {
		m[i] = int(out[i])
	}
	return m, nil
}

// ContainerGPUs is gb_step_container_gpus: NVIDIA_VISIBLE_DEVICES for a container runtime,
// the UUIDs of every step GPU of the table, or an error saying why there is none.
func (t *Table) ContainerGPUs() (string, error) {
	var buf [16384]C.char
	if C.gb_step_container_gpus(t.c, &buf[0], C.size_t(len(buf))) != 0 {
		return "", errors.New(C.GoString(&buf[0]))
	}
	return C.GoString(&buf[0]), nil
}

// NTasks is the number of local tasks the table plans for.
func (t *Table) NTasks() int { return int(t.c.ntasks) }

// NGPUs is the number of step GPUs ("gpu" lines) in the table.
func (t *Table) NGPUs() int { return int(t.c.ngpus) }

// The protocol's limits as the C parser enforces them (table.h).
const (
	maxBytes   = C.GB_TABLE_MAX_BYTES
	maxLine    = C.GB_TABLE_MAX_LINE
	maxTasks   = C.GB_TABLE_MAX_TASKS
	maxGPUs    = C.GB_TABLE_MAX_GPUS
	maxNUMA    = C.GB_TABLE_MAX_NUMA
	maxShare   = C.GB_TABLE_MAX_SHARE
	maxPerTask = C.GB_MAX_PER_TASK
)

// flagNames is the C side's list of the option's flags (gb_flag_names), in order.
func flagNames() []string {
	names := make([]string, C.GB_NFLAGS)
	for i := range names {
		names[i] = C.GoString(C.gb_flag_names[i].name)
	}
	return names
}

// Task is what the front end knows about a task in slurm_spank_task_init.
type Task struct {
	Local    int    // local task id
	Rank     int    // global task id (for the log line)
	BindType string // SLURM_CPU_BIND_TYPE ("" when unset)
	BindList string // SLURM_CPU_BIND_LIST ("" when unset)
	// Own is the task's affinity (empty when unknown), Step the step's CPUs, its cpuset
	// (empty when unknown: the whole node).
	Own, Step gpubind.CPUSet
	// Denied are device nodes the task may not open (an IMEX channel outside the job's
	// device cgroup; a GPU's DEV that Slurm's per-task ConstrainDevices or isolate
	// denies); the others are asked with access(2). Non-nil: the rule's device limit
	// (gb_result_restrict) runs on the GPUs as in the task; nil: it does not (the CLI has
	// no task to ask).
	Denied []string
}

// Result is the rule's answer for one task.
type Result struct {
	GPUs    []int          // table GPU ids, in the order the task sees them (CUDA_VISIBLE_DEVICES)
	Own     []int          // the task's own GPUs (GPUs but those visible=first|localid added)
	ByTable bool           // the task took its "task L" line
	CPUs    gpubind.CPUSet // the rule's CPUs for the task (cpus flag), empty for none
	// Affinity is what the task runs on (gb_result_affinity, as the front end sets it): CPUs
	// within Own; Own without the cpus flag or when none of CPUs is in Own; CPUs when Own
	// is unknown.
	Affinity gpubind.CPUSet
	Env      []string // NAME=VALUE, as the front end sets them
	LogLine  string   // the mapping line, without the "gpubind: " prefix of the log
	// Warning is what the task prints on the user's terminal about its multi-node
	// NVLink fabric or IMEX channel ("" none), without "gpubind: warning: ".
	Warning string
}

// Apply runs the per-task rule for one task.
func (t *Table) Apply(k Task) (Result, error) {
	var r C.struct_gb_result
	var errb [512]C.char
	cs := func(s string) *C.char { return C.CString(s) }
	bt, bl := cs(k.BindType), cs(k.BindList)
	defer func() {
		for _, p := range []*C.char{bt, bl} {
			C.free(unsafe.Pointer(p))
		}
	}()
	var ownSet, stepSet C.cpu_set_t
	own, err := cpuSet(k.Own, &ownSet)
	if err != nil {
		return Result{}, err
	}
	step, err := cpuSet(k.Step, &stepSet)
	if err != nil {
		return Result{}, err
	}
	denied := C.CString(strings.Join(k.Denied, "\n"))
	defer C.free(unsafe.Pointer(denied))
	limit := denied
	if k.Denied == nil {
		limit = nil
	}
	if C.go_apply(t.c, C.int(k.Local), bt, bl, own, step, limit, &r, &errb[0], C.size_t(len(errb))) != 0 {
		return Result{}, errors.New(C.GoString(&errb[0]))
	}
	res := Result{ByTable: r.by_table != 0}
	for i := 0; i < int(r.ngpus); i++ {
		res.GPUs = append(res.GPUs, int(r.gpus[i]))
	}
	res.Own = res.GPUs[int(r.own_at) : int(r.own_at)+int(r.nown)]
	var buf [16384]C.char
	if r.set_cpus != 0 {
		res.CPUs = goCPUs(&r.cpus)
	}
	var aff C.cpu_set_t
	C.gb_result_affinity(&r, own, &aff)
	res.Affinity = goCPUs(&aff)
	if r.ngpus > 0 {
		if C.go_env(t.c, &r, &buf[0], C.size_t(len(buf))) != 0 {
			return Result{}, errors.New("per-task environment too long")
		}
		res.Env = strings.Split(strings.TrimSuffix(C.GoString(&buf[0]), "\n"), "\n")
	}
	if C.gb_result_logline(t.c, &r, C.int(k.Local), C.long(k.Rank), &buf[0], C.size_t(len(buf))) != 0 {
		return Result{}, errors.New("log line too long")
	}
	res.LogLine = C.GoString(&buf[0])
	if C.go_warning(t.c, &r, C.int(k.Local), denied, &buf[0], C.size_t(len(buf))) != 0 {
		res.Warning = C.GoString(&buf[0])
	}
	return res, nil
}

// verdict is what the admin's default= does with a step on a node (gb_default_decide).
type verdict int

// The verdicts of table.h's enum gb_default_verdict, in its order.
const (
	defaultNoGPUs     verdict = C.GB_DEFAULT_NO_GPUS
	defaultFewerTasks verdict = C.GB_DEFAULT_FEWER_TASKS
	defaultBind       verdict = C.GB_DEFAULT_BIND
	defaultShare      verdict = C.GB_DEFAULT_SHARE
	defaultAskEngine  verdict = C.GB_DEFAULT_ASK_ENGINE
)

// defaultDecision is the front end's decision for a step that only the admin's default=
// would bind, from its environment alone: stepGPUs is SLURM_STEP_GPUS (nil when unset),
// ntasks the node's local tasks. It returns the verdict, the step's GPUs on the node and
// how many the policy gives the tasks (-1 unknown), and the option text the front end
// plans with ("" when it does not plan). force is the plugstack's forced flags ("isolate",
// "cpus,isolate", "" none).
func defaultDecision(option string, stepGPUs *string, ntasks int, force string) (v verdict, ngpus, used int, planned string, err error) {
	co := C.CString(option)
	defer C.free(unsafe.Pointer(co))
	var forced C.unsigned
	if force != "" {
		cf := C.CString(force)
		defer C.free(unsafe.Pointer(cf))
		if C.gb_flags_parse(cf, &forced) != 0 {
			return 0, -1, -1, "", errors.New("force " + force + ": unknown flag")
		}
	}
	var s C.struct_gb_default_step
	s.ntasks = C.int(ntasks)
	if stepGPUs != nil {
		s.step_gpus = C.CString(*stepGPUs)
		defer C.free(unsafe.Pointer(s.step_gpus))
	}
	v = verdict(C.gb_default_decide(co, &s))
	ngpus, used = int(s.ngpus), int(s.used)
	if v == defaultNoGPUs || v == defaultFewerTasks {
		return v, ngpus, used, "", nil
	}
	var buf [1024]C.char
	if C.gb_default_option(co, C.enum_gb_default_verdict(v), forced, &buf[0], C.size_t(len(buf))) != 0 {
		return v, ngpus, used, "", errors.New("option text too long")
	}
	return v, ngpus, used, C.GoString(&buf[0]), nil
}

// cpuSet puts s into the C set c; nil (unknown) when s is empty. The rule's sets are
// cpu_set_t: a CPU beyond CPU_SETSIZE is an error, as in a CPU list the rule parses.
func cpuSet(s gpubind.CPUSet, c *C.cpu_set_t) (*C.cpu_set_t, error) {
	ids := s.CPUs()
	if len(ids) == 0 {
		return nil, nil
	}
	cids := make([]C.int, len(ids))
	for i, id := range ids {
		if id >= C.CPU_SETSIZE {
			return nil, fmt.Errorf("bad CPU list %s: CPU %d is beyond the rule's %d", s, id, C.CPU_SETSIZE)
		}
		cids[i] = C.int(id)
	}
	return C.go_cpus(&cids[0], C.int(len(cids)), c), nil
}

// goCPUs is the C set c as a CPUSet.
func goCPUs(c *C.cpu_set_t) gpubind.CPUSet {
	var ids [C.CPU_SETSIZE]C.int
	n := int(C.go_cpu_ids(c, &ids[0]))
	s := gpubind.NewCPUSet()
	for _, id := range ids[:n] {
		s.Add(int(id))
	}
	return s
}
