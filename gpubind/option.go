package gpubind

import (
	"fmt"
	"strconv"
	"strings"
)

// Policy names.
const (
	policyClosest = "closest"
	policyPack    = "pack"
	policySpread  = "spread"
	policyMap     = "map"
	policyPerTask = "per-task"
	policySingle  = "single"
	policyOff     = "off"
	policyHelp    = "help"
)

// Limits on option values, so that hostile input stays small.
const (
	MaxOptionLen  = 4096
	maxMapEntries = 4096
	MaxPerTask    = 64
	MaxShare      = 1024
)

// Flags are the option's flags.
type Flags struct {
	Verbose bool // log each task's mapping to the user's stderr too
	NIC     bool // set NCCL_IB_HCA/UCX_NET_DEVICES to the GPU's closest NIC
	CPUs    bool // bind the task's CPUs to its GPU's NUMA node (GPU-first plans)
	Isolate bool // per-task cgroup device isolation (applied by the front end)
	UUID    bool // CUDA_VISIBLE_DEVICES lists GPU UUIDs instead of indices
}

// flagDefs is the one list of the option's flags, in canonical order: the parser, String,
// the help text and the error messages read it. The C side's list is gb_flag_names
// (rule/fields.c); rule's TestFlagNamesAgree checks that the two agree.
var flagDefs = []struct {
	name  string
	field func(*Flags) *bool
	help  string
}{
	{"verbose", func(f *Flags) *bool { return &f.Verbose }, "print each task's mapping on stderr"},
	{"nic", func(f *Flags) *bool { return &f.NIC }, `NCCL_IB_HCA: the node's rails (the RDMA NICs nearest the step's GPUs),
the same list on every task, as NCCL wants; UCX_NET_DEVICES and GPUBIND_NIC:
the NIC nearest the task's GPU`},
	{"cpus", func(f *Flags) *bool { return &f.CPUs }, "bind the task's CPUs to its GPU's NUMA node (when Slurm did not bind)"},
	{"isolate", func(f *Flags) *bool { return &f.Isolate }, `allow each task only its own GPU device (cgroup); breaks CUDA IPC/P2P
between the tasks of the step`},
	{"uuid", func(f *Flags) *bool { return &f.UUID }, `CUDA_VISIBLE_DEVICES lists GPU UUIDs (GPU-..., MIG-...), not indices, in
the same order: survives renumbering (containers); not for programs that
read the variable as integers`},
}

// FlagNames lists the flags in their canonical order.
var FlagNames = func() []string {
	names := make([]string, len(flagDefs))
	for i, d := range flagDefs {
		names[i] = d.name
	}
	return names
}()

// field is the named flag of f, or nil when name is no flag.
func (f *Flags) field(name string) *bool {
	for _, d := range flagDefs {
		if d.name == name {
			return d.field(f)
		}
	}
	return nil
}

func (f *Flags) set(name string, v bool) bool {
	p := f.field(name)
	if p != nil {
		*p = v
	}
	return p != nil
}

// String is the comma list of set flags in canonical order, or "-".
func (f Flags) String() string {
	var out []string
	for _, n := range FlagNames {
		if f.has(n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// has reports whether the named flag is set.
func (f Flags) has(name string) bool {
	p := f.field(name)
	return p != nil && *p
}

// Apply returns f with the admin's forced flags set and forbidden flags cleared.
func (f Flags) Apply(force, never Flags) Flags {
	for _, n := range FlagNames {
		if force.has(n) {
			f.set(n, true)
		}
		if never.has(n) {
			f.set(n, false)
		}
	}
	return f
}

// ParseFlags parses a comma list of flag names ("" or "-" is none), as plugstack's
// force= and never= take them. what names the setting in errors.
func ParseFlags(what, list string) (Flags, error) {
	var f Flags
	list = strings.TrimSpace(list)
	if list == "" || list == "-" {
		return f, nil
	}
	for _, t := range strings.Split(list, ",") {
		if !f.set(strings.TrimSpace(t), true) {
			return f, fmt.Errorf("%s: %q is not a flag; flags are %s", what, t, strings.Join(FlagNames, ", "))
		}
	}
	return f, nil
}

// Values of the visible= setting: which of the step's GPUs a task sees.
const (
	VisibleOwn     = "own"     // only the task's own GPU(s) (the default)
	VisibleFirst   = "first"   // all of the step's GPUs, the task's own first, then nearest first
	VisibleLocalID = "localid" // all of the step's GPUs, the task's own at entry SLURM_LOCALID
)

// visibleHelp is the help text of visible=.
const visibleHelp = `which GPUs a task sees: own (default) only its own; first all of the
step's GPUs on the node, its own first (device 0) then nearest first (CUDA
IPC/P2P between tasks work); localid all, its own at entry SLURM_LOCALID
(for programs that call cudaSetDevice(local_rank))`

// Option is a parsed --gpu-bind-topo value.
type Option struct {
	Policy  string
	N       int      // per-task:N, single:N
	Map     []string // map:LIST entries, expanded: GRES indices or GPU-/MIG- UUIDs
	Flags   Flags
	Visible string // visible=: VisibleOwn ("" means own), VisibleFirst, VisibleLocalID
}

// parseVisible reads "visible=VALUE"; ok is false when t is no visible= item.
func parseVisible(whole, t string) (v string, ok bool, err error) {
	v, ok = strings.CutPrefix(t, "visible=")
	if !ok {
		return "", false, nil
	}
	switch v {
	case VisibleOwn, VisibleFirst, VisibleLocalID:
		return v, true, nil
	}
	return "", true, fmt.Errorf("option %q: visible=%s: want visible=own, visible=first or visible=localid", whole, v)
}

// String prints the option in its canonical form.
func (o Option) String() string {
	p := o.Policy
	switch o.Policy {
	case policyPerTask, policySingle:
		p += ":" + strconv.Itoa(o.N)
	case policyMap:
		p += ":" + strings.Join(o.Map, ",")
	}
	if f := o.Flags.String(); f != "-" {
		p += "," + f
	}
	if o.Visible != "" && o.Visible != VisibleOwn {
		p += ",visible=" + o.Visible
	}
	return p
}

// policyDefs is the one list of the policies, in the order the help text and the error
// messages give them: the parser accepts exactly these names, and buildTable plans each
// through its plan function (nil: the policy does not plan).
var policyDefs = []struct {
	name string
	arg  string // what follows "name:", "" for none
	help string
	plan func(*planner) error
}{
	{policyClosest, "", `(default) the GPU on the NUMA node of the task's CPUs; without a CPU
binding, spread tasks evenly over NUMA nodes and GPUs (GPU-first)`, planClosest},
	{policyPack, "", "fill groups of GPUs joined by the best links (NVLink, PCIe switch) first", planPack},
	{policySpread, "", "spread tasks over NUMA nodes and PCIe switches as far apart as possible", planSpread},
	{policyMap, "LIST", `explicit GPU per task, Slurm map_gpu style: GRES indices (as in
SLURM_STEP_GPUS / --gpu-bind=map_gpu) or GPU-/MIG- UUIDs; 0*4 repeats,
the list is reused when tasks outnumber it (map:0,1,2*2)`, planMap},
	{policyPerTask, "N", "the N best-connected GPUs per task", planPerTask},
	{policySingle, "N", "N tasks share one GPU", planSingle},
	{policyOff, "", "do nothing", nil},
}

func isPolicy(name string) bool {
	for _, d := range policyDefs {
		if d.name == name {
			return true
		}
	}
	return false
}

// policyList is "closest, pack, ..., map:LIST, ..., off", for error messages.
func policyList() string {
	var names []string
	for _, d := range policyDefs {
		if d.arg != "" {
			names = append(names, d.name+":"+d.arg)
		} else {
			names = append(names, d.name)
		}
	}
	return strings.Join(names, ", ")
}

// PolicyHelpText lists the policies and flags; the srun option's help prints it.
var PolicyHelpText = helpText()

func helpText() string {
	var b strings.Builder
	item := func(name, help string) {
		lines := strings.Split(help, "\n")
		fmt.Fprintf(&b, "  %-13s%s\n", name, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(&b, "%15s%s\n", "", l)
		}
	}
	b.WriteString("--gpu-bind-topo[=POLICY][,FLAG...]   bind each task to the GPU(s) nearest to it\nPolicies:\n")
	for _, d := range policyDefs {
		name := d.name
		if d.arg != "" {
			name += ":" + d.arg
		}
		item(name, d.help)
	}
	b.WriteString("Flags:\n")
	for _, d := range flagDefs {
		item(d.name, d.help)
	}
	item("visible=V", visibleHelp)
	b.WriteString(`Examples: --gpu-bind-topo  --gpu-bind-topo=closest,verbose  --gpu-bind-topo=map:3,2,1,0
          --gpu-bind-topo=per-task:2,nic  --gpu-bind-topo=single:2  --gpu-bind-topo=closest,visible=first
`)
	return b.String()
}

// ParseOption parses POLICY[,FLAG...] ("" is closest; a value that starts with a flag
// also means closest). Map entries continue across commas until a flag.
func ParseOption(s string) (Option, error) {
	o := Option{Policy: policyClosest}
	if len(s) > MaxOptionLen {
		return o, fmt.Errorf("option is %d bytes long, more than %d", len(s), MaxOptionLen)
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return o, nil
	}
	if s == policyHelp {
		return Option{Policy: policyHelp}, nil
	}
	tokens := strings.Split(s, ",")
	policySet, inMap := false, false
	for i, t := range tokens {
		if t == "" {
			return o, fmt.Errorf("option %q: empty item at position %d", s, i+1)
		}
		if o.Flags.set(t, true) {
			inMap = false
			continue
		}
		if v, ok, err := parseVisible(s, t); ok {
			if err != nil {
				return o, err
			}
			o.Visible, inMap = v, false
			continue
		}
		name, arg, hasArg := strings.Cut(t, ":")
		if inMap && !hasArg {
			if err := o.addMap(s, t); err != nil {
				return o, err
			}
			continue
		}
		if !isPolicy(name) {
			return o, fmt.Errorf("option %q: unknown policy or flag %q; policies are %s; flags are %s",
				s, t, policyList(), strings.Join(FlagNames, ", "))
		}
		if policySet || i > 0 {
			return o, fmt.Errorf("option %q: second policy %q; give one policy, first, then flags", s, t)
		}
		policySet = true
		o.Policy = name
		switch name {
		case policyMap:
			if !hasArg || arg == "" {
				return o, fmt.Errorf("option %q: map needs a list, as in map:0,1,2,3", s)
			}
			inMap = true
			if err := o.addMap(s, arg); err != nil {
				return o, err
			}
		case policyPerTask, policySingle:
			limit := MaxPerTask
			if name == policySingle {
				limit = MaxShare
			}
			n, err := strconv.Atoi(arg)
			if !hasArg || err != nil || n < 1 || n > limit {
				return o, fmt.Errorf("option %q: %s needs a count 1..%d, as in %s:2, not %q", s, name, limit, name, t)
			}
			o.N = n
		default:
			if hasArg {
				return o, fmt.Errorf("option %q: policy %s takes no argument (%q)", s, name, t)
			}
		}
	}
	return o, nil
}

func (o *Option) addMap(whole, entry string) error {
	item, rep, hasRep := strings.Cut(entry, "*")
	count := 1
	if hasRep {
		n, err := strconv.Atoi(rep)
		if err != nil || n < 1 || n > maxMapEntries {
			return fmt.Errorf("option %q: map entry %q: repeat count must be 1..%d", whole, entry, maxMapEntries)
		}
		count = n
	}
	switch {
	case strings.HasPrefix(item, "GPU-"), strings.HasPrefix(item, "MIG-"):
		if len(item) < 5 || strings.ContainsAny(item, " \t") {
			return fmt.Errorf("option %q: map entry %q is not a GPU-/MIG- UUID", whole, entry)
		}
	default:
		n, err := strconv.Atoi(item)
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("option %q: map entry %q: want a GRES index (0, 1, ...), a GPU-/MIG- UUID, or N*COUNT", whole, entry)
		}
		item = strconv.Itoa(n)
	}
	if len(o.Map)+count > maxMapEntries {
		return fmt.Errorf("option %q: map has more than %d entries", whole, maxMapEntries)
	}
	for i := 0; i < count; i++ {
		o.Map = append(o.Map, item)
	}
	return nil
}
