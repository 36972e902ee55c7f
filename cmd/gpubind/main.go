// Command gpubind prints a node's GPU topology, writes snapshots of it, and dry-runs
// the --gpu-bind-topo plan of a step.
//
//	gpubind topo [--root DIR] [--source auto|nvml|sysfs] [--snapshot FILE] [--json]
//	gpubind snapshot [--root DIR] [--source auto|nvml|sysfs] > node.json
//	gpubind plan --tasks N [--gpus LIST] [--task-cpus "0;1;0;1"] [--policy POLICY[,FLAGS]]
//	             [--root DIR | --snapshot FILE] [--json]
//	gpubind topology-conf --snapshots DIR
//	gpubind version [--plugin FILE] [--slurmd FILE]
//
// Exit status: 0 ok, 1 failure, 2 usage error. Errors go to stderr.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
)

const usage = `usage:
  gpubind topo     [--root DIR] [--source auto|nvml|sysfs] [--snapshot FILE] [--json]
  gpubind snapshot [--root DIR] [--source auto|nvml|sysfs]
  gpubind plan     --tasks N [--gpus LIST] [--task-cpus "0;1;0;1"] [--policy POLICY[,FLAGS]]
                   [--root DIR | --snapshot FILE] [--json]
                   [--slurm-conf FILE] [--gres-conf FILE] [--node NAME]
                   [--numbering global|relative] [--source S] [--table] [--nics LIST]
  gpubind check    [--json] [--root DIR] [FILE options: gpubind check -h]
  gpubind whereami [--json] [--strict] [--root DIR] [--dev DIR]   (run as a task: srun ... gpubind whereami)
  gpubind topology-conf --snapshots DIR
  gpubind help-policies
  gpubind version  [--plugin FILE] [--slurmd FILE]   (also --version)
`

// usageError is an error of the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "topo":
		err = cmdTopo(args[1:], stdout, stderr)
	case "snapshot":
		err = cmdSnapshot(args[1:], stdout, stderr)
	case "plan":
		err = cmdPlan(args[1:], stdout, stderr)
	case "version", "--version":
		err = cmdVersion(args[1:], stdout)
	case "check":
		err = cmdCheck(args[1:], stdout, stderr)
	case "whereami":
		err = cmdWhereami(args[1:], stdout, stderr)
	case "topology-conf":
		err = cmdTopologyConf(args[1:], stdout, stderr)
	case "help-policies":
		fmt.Fprint(stdout, gpubind.PolicyHelpText)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
	default:
		err = usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errStrict):
		return 1
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gpubind: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "gpubind: %v\n", err)
		return 1
	}
}

type common struct {
	root, source, snapshot string
	json                   bool
}

func newFlags(name string, stderr io.Writer, c *common) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.root, "root", "", "read DIR/sys and DIR/proc instead of /sys and /proc")
	fs.StringVar(&c.source, "source", "", "auto, nvml, sysfs or snapshot")
	fs.StringVar(&c.snapshot, "snapshot", "", "read the topology from a JSON snapshot")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func (c *common) discover() (*gpubind.Topology, []string, error) {
	src := c.source
	if c.snapshot != "" && c.root != "" && src == gpubind.SourceSysfs {
		// --source sysfs --root DIR --snapshot FILE: the tree plus the snapshot's NVLinks/MIG.
	} else if c.snapshot != "" {
		if c.root != "" {
			return nil, nil, usageError{"give --root or --snapshot, not both (or --source sysfs to pair a tree with its snapshot)"}
		}
		if src != "" && src != gpubind.SourceSnapshot {
			return nil, nil, usageError{"--snapshot conflicts with --source " + src}
		}
		src = gpubind.SourceSnapshot
	} else if src == gpubind.SourceSnapshot {
		return nil, nil, usageError{"--source snapshot needs --snapshot FILE"}
	}
	switch src {
	case "", gpubind.SourceAuto, gpubind.SourceNVML, gpubind.SourceSysfs, gpubind.SourceSnapshot:
	default:
		return nil, nil, usageError{fmt.Sprintf("--source %q: want auto, nvml, sysfs or snapshot", src)}
	}
	return gpubind.Discover(gpubind.DiscoverOptions{Source: src, Root: c.root, Snapshot: c.snapshot})
}

func cmdTopo(args []string, stdout, stderr io.Writer) error {
	t, c, err := discoverCmd("topo", args, stderr)
	if err != nil {
		return err
	}
	if c.json {
		return gpubind.WriteSnapshot(stdout, t)
	}
	_, err = io.WriteString(stdout, gpubind.FormatTopo(t))
	return err
}

func cmdSnapshot(args []string, stdout, stderr io.Writer) error {
	t, _, err := discoverCmd("snapshot", args, stderr)
	if err != nil {
		return err
	}
	return gpubind.WriteSnapshot(stdout, t)
}

// discoverCmd parses the common flags of a command and discovers the topology, printing
// the discovery's notes on stderr.
func discoverCmd(name string, args []string, stderr io.Writer) (*gpubind.Topology, *common, error) {
	var c common
	fs := newFlags(name, stderr, &c)
	if err := parse(fs, args); err != nil {
		return nil, nil, err
	}
	t, notes, err := c.discover()
	if err != nil {
		return nil, nil, err
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "gpubind: note: %s\n", n)
	}
	return t, &c, nil
}

// jsonGPU and jsonTask are the shapes of `gpubind plan --json`.
type jsonGPU struct {
	Index int    `json:"index"`
	BusID string `json:"pci_bus_id"`
	UUID  string `json:"uuid"`
	NUMA  int    `json:"numa"`
	Own   bool   `json:"own"` // the task's own GPU (false: one visible=first|localid shows it too)
}

type jsonTask struct {
	Task    int               `json:"task"`
	Visible string            `json:"visible"`
	GPUs    []jsonGPU         `json:"gpus"`
	CPUs    string            `json:"cpus"`
	Env     map[string]string `json:"env"`
}

func cmdPlan(args []string, stdout, stderr io.Writer) error {
	a, err := parsePlanArgs(args, stderr)
	if err != nil {
		return err
	}
	topo, notes, err := a.c.discover()
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(stderr, "gpubind: note: %s\n", n)
	}
	req, err := a.request(topo)
	if err != nil {
		return err
	}
	tab, err := gpubind.Plan(req)
	if err != nil {
		return err
	}
	for _, m := range tab.Messages {
		fmt.Fprintf(stderr, "gpubind: %s: %s\n", tab.Status, m)
	}
	if a.table {
		return tab.Encode(stdout)
	}
	out, text, err := a.applyRule(tab, stderr)
	if err != nil {
		return err
	}
	if a.c.json {
		if out == nil {
			out = []jsonTask{}
		}
		b, err := json.MarshalIndent(map[string]any{"tasks": out}, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	_, err = io.WriteString(stdout, text)
	return err
}

// planArgs are gpubind plan's arguments, checked.
type planArgs struct {
	c        common
	tasks    int               // --tasks
	gpus     string            // --gpus, "" the whole node
	stepCPUs gpubind.CPUSet    // --step-cpus, empty when not given
	policy   string            // --policy
	num      gpubind.Numbering // --numbering
	// numberingGiven: --numbering was given, so --slurm-conf does not decide it.
	numberingGiven            bool
	masks                     []gpubind.CPUSet // --task-cpus, nil when not given
	nics                      string           // --nics
	table                     bool             // --table
	slurmConf, gresConf, node string
}

func parsePlanArgs(args []string, stderr io.Writer) (*planArgs, error) {
	a := &planArgs{}
	fs := newFlags("plan", stderr, &a.c)
	fs.IntVar(&a.tasks, "tasks", -1, "number of local tasks (required)")
	fs.StringVar(&a.gpus, "gpus", "", "the step's GPUs as SLURM_STEP_GPUS holds them: GRES indices or GPU-/MIG- UUIDs (default: all)")
	taskCPUs := fs.String("task-cpus", "", "each task's CPU list, separated by ';' (as SLURM_CPU_BIND_LIST would bind them)")
	stepCPUs := fs.String("step-cpus", "", "the step's CPUs (its cpuset), a CPU list (default: the whole node)")
	fs.StringVar(&a.policy, "policy", "closest", "POLICY[,FLAGS] as --gpu-bind-topo takes it")
	fs.StringVar(&a.slurmConf, "slurm-conf", "", "plan as a node whose SLURM_CONF is FILE: numbering from it and cgroup.conf, gres.conf next to it")
	fs.StringVar(&a.gresConf, "gres-conf", "", "gres.conf giving the GRES order, as the plugin's gres_conf= (default: next to --slurm-conf, else PCI order)")
	fs.StringVar(&a.node, "node", "", "node name for gres.conf NodeName= lines (default the short host name, as on a node)")
	fs.StringVar(&a.nics, "nics", "", "the admin's RDMA rails, as plugstack nics= gives them (mlx5_0,mlx5_3)")
	numbering := fs.String("numbering", "global", "global (tasks see all GPUs) or relative (ConstrainDevices); default from --slurm-conf")
	fs.BoolVar(&a.table, "table", false, "print the protocol v1 decision table")
	if err := parse(fs, args); err != nil {
		return nil, err
	}
	if a.tasks < 0 {
		return nil, usageError{"plan needs --tasks N"}
	}
	if a.tasks > gpubind.MaxTableTasks {
		return nil, usageError{fmt.Sprintf("--tasks %d: at most %d", a.tasks, gpubind.MaxTableTasks)}
	}
	switch *numbering {
	case "global":
		a.num = gpubind.NumberingGlobal
	case "relative":
		a.num = gpubind.NumberingRelative
	default:
		return nil, usageError{fmt.Sprintf("--numbering %q: want global or relative", *numbering)}
	}
	if *stepCPUs != "" {
		s, err := gpubind.ParseCPUList(*stepCPUs)
		if err != nil || s.IsEmpty() {
			return nil, usageError{fmt.Sprintf("--step-cpus %q: want a non-empty CPU list such as 0-3,8", *stepCPUs)}
		}
		a.stepCPUs = s
	}
	fs.Visit(func(f *flag.Flag) { a.numberingGiven = a.numberingGiven || f.Name == "numbering" })
	if *taskCPUs != "" {
		parts := strings.Split(*taskCPUs, ";")
		if len(parts) != a.tasks {
			return nil, usageError{fmt.Sprintf("--task-cpus %q has %d entries, want one per task (%d)", *taskCPUs, len(parts), a.tasks)}
		}
		for i, p := range parts {
			s, err := gpubind.ParseCPUList(p)
			if err != nil || s.IsEmpty() {
				return nil, usageError{fmt.Sprintf("--task-cpus entry %d %q: want a non-empty CPU list such as 0-3,8", i, p)}
			}
			a.masks = append(a.masks, s)
		}
	}
	return a, nil
}

// request is the plan request of the arguments on the node topo.
func (a *planArgs) request(topo *gpubind.Topology) (gpubind.PlanRequest, error) {
	req := gpubind.PlanRequest{Topo: topo, Tasks: a.tasks, Option: a.policy, Numbering: a.num,
		Gres: &gpubind.GresConf{AutoDetect: "nvml"}, GresFrom: "(none: PCI order)"}
	var err error
	if req.Rails, err = gpubind.ParseRails(a.nics); err != nil {
		return req, usageError{"--" + err.Error()}
	}
	if err := planConf(&req, a.slurmConf, a.gresConf, a.node, a.numberingGiven); err != nil {
		return req, err
	}
	gpus := a.gpus
	if gpus == "" {
		// Default: the whole node, as GRES indices 0..n-1 (quietly, unlike the engine).
		var all []string
		for i := range topo.GPUs {
			all = append(all, strconv.Itoa(i))
		}
		gpus = strings.Join(all, ",")
	}
	if gpus != "" {
		req.Env.StepGPUs = &gpus
	}
	return req, nil
}

// applyRule gives each task its answer from the rule the front end applies, run here
// through cgo: the tasks for --json, and the text lines otherwise.
func (a *planArgs) applyRule(tab *gpubind.Table, stderr io.Writer) ([]jsonTask, string, error) {
	rt, err := rule.Parse(tab.String())
	if err != nil {
		return nil, "", fmt.Errorf("the plugin cannot read this plan: %v", err)
	}
	defer rt.Close()
	masks := a.masks
	bindList := ""
	if masks != nil {
		hex := make([]string, len(masks))
		for i, m := range masks {
			hex[i] = m.Hex()
		}
		bindList = strings.Join(hex, ",")
	}
	var out []jsonTask
	var text strings.Builder
	for local := 0; local < a.tasks; local++ {
		k := rule.Task{Local: local, Rank: local, Step: a.stepCPUs}
		if masks != nil {
			k.BindType, k.BindList, k.Own = "mask_cpu:", bindList, masks[local]
		}
		b, err := rt.Apply(k)
		if err != nil {
			return nil, "", fmt.Errorf("task %d: %v", local, err)
		}
		// What the task runs on, as the front end sets it (gb_result_affinity).
		cpus := b.Affinity
		jt := jsonTask{Task: local, CPUs: cpus.String(), Env: map[string]string{}, GPUs: []jsonGPU{}}
		for _, kv := range b.Env {
			if name, val, ok := strings.Cut(kv, "="); ok {
				jt.Env[name] = val
			}
		}
		jt.Visible = jt.Env["CUDA_VISIBLE_DEVICES"]
		for _, id := range b.GPUs {
			g := tab.GPUs[id]
			jt.GPUs = append(jt.GPUs, jsonGPU{Index: g.NVMLIndex, BusID: g.BusID, UUID: g.UUID, NUMA: g.NUMA,
				Own: slices.Contains(b.Own, id)})
		}
		out = append(out, jt)
		if b.Warning != "" {
			fmt.Fprintf(stderr, "gpubind: warning: %s\n", b.Warning)
		}
		text.WriteString("gpubind: " + b.LogLine)
		if s := cpus.String(); s != "" {
			text.WriteString(" cpus " + s)
		}
		text.WriteByte('\n')
	}
	return out, text.String(), nil
}

// planConf fills in what the node's configuration decides, read by the engine's own
// function (gpubind.LoadNodeConf): with slurmConf, the numbering (unless given) and the
// gres.conf next to it; a gresConf as the plugin's gres_conf= argument.
func planConf(req *gpubind.PlanRequest, slurmConf, gresConf, node string, numberingGiven bool) error {
	if slurmConf == "" && gresConf == "" {
		return nil
	}
	if slurmConf != "" {
		// A node falls back to numbering auto without slurm.conf; named here, it must be there.
		if _, _, err := gpubind.ReadSlurmSettings(slurmConf, "", nil); err != nil {
			return err
		}
	}
	nc, err := gpubind.LoadNodeConf(slurmConf, gresConf, node)
	if err != nil {
		return err
	}
	if slurmConf != "" && !numberingGiven {
		req.Numbering = nc.Numbering
	}
	req.Gres, req.GresFrom = nc.Gres, nc.GresFrom
	return nil
}
