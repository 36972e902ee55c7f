package gpubind

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Numbering says how the tasks will number the GPUs they see.
type Numbering int

const (
	// NumberingAuto decides from the environment: a CUDA_VISIBLE_DEVICES of 0..n-1 that
	// differs from SLURM_STEP_GPUS means relative.
	NumberingAuto Numbering = iota
	// NumberingGlobal: the task sees all GPUs of the node (no ConstrainDevices).
	NumberingGlobal
	// NumberingRelative: the task sees only the step's GPUs (ConstrainDevices=yes),
	// numbered from 0 in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID).
	NumberingRelative
)

func (n Numbering) String() string {
	switch n {
	case NumberingGlobal:
		return "global"
	case NumberingRelative:
		return "relative"
	}
	return "auto"
}

// StepEnv holds the step's GPU-related environment. A nil pointer means unset.
type StepEnv struct {
	StepGPUs    *string // SLURM_STEP_GPUS
	JobGPUs     *string // SLURM_JOB_GPUS
	CudaVisible *string // CUDA_VISIBLE_DEVICES
}

// stepGPU is one GPU (or MIG instance) the step may use.
type stepGPU struct {
	Topo    int        // index into Topology.GPUs
	MIG     *MIGDevice // nil for a whole GPU
	Gres    int        // GRES index, -1 unknown
	Visible string     // value for the task's CUDA_VISIBLE_DEVICES
	// Dev is the device node Slurm constrains for this GPU (gres.conf File=), "" unknown.
	Dev string
	// Cores are the CPUs of its gres.conf Cores= (AMD nodes), empty when none.
	Cores CPUSet
}

// step is the resolved set of GPUs of a step.
type step struct {
	GPUs      []stepGPU // sorted by bus id (then MIG GI/CI)
	Numbering Numbering // as decided
	Notes     []string  // warnings about assumptions (never silent)
	// Unknown is set when the GRES -> GPU mapping had to be assumed: the engine turns it
	// into an error in enforce mode and a warning in optional mode.
	Unknown bool
}

// listItem is one entry of a GPU list: a number or a UUID.
type listItem struct {
	num  int
	uuid string
}

// parseGPUList parses a GPU list as Slurm and CUDA write it: "0,1,3", "GPU-...",
// "MIG-...", mixed. what names the variable in errors.
func parseGPUList(what, s string) ([]listItem, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if len(s) > MaxOptionLen {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", what, len(s), MaxOptionLen)
	}
	var out []listItem
	seen := map[string]bool{}
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		var it listItem
		switch {
		case strings.HasPrefix(t, "GPU-") || strings.HasPrefix(t, "MIG-"):
			if len(t) < 5 || strings.ContainsAny(t, " \t") {
				return nil, fmt.Errorf("%s=%q: %q is not a GPU-/MIG- UUID", what, s, t)
			}
			it.uuid = t
		default:
			n, err := strconv.Atoi(t)
			if err != nil || n < 0 || n > 65535 {
				return nil, fmt.Errorf("%s=%q: %q is not a GPU index or GPU-/MIG- UUID", what, s, t)
			}
			it.num = n
			t = strconv.Itoa(n)
		}
		if seen[t] {
			return nil, fmt.Errorf("%s=%q: %q listed twice", what, s, t)
		}
		seen[t] = true
		out = append(out, it)
	}
	return out, nil
}

// findUUID finds a GPU or MIG UUID in the topology.
func findUUID(t *Topology, u string) (int, *MIGDevice) {
	for i := range t.GPUs {
		if t.GPUs[i].UUID == u {
			return i, nil
		}
		for k := range t.GPUs[i].MIG {
			if t.GPUs[i].MIG[k].UUID == u {
				return i, &t.GPUs[i].MIG[k]
			}
		}
	}
	return -1, nil
}

// partitionUUID: a GPU- UUID names a whole device, and the compute partitions of an
// MI300 device share its unique_id, so it cannot name one of them (GPU i of t): an error
// naming the partitions, nil otherwise.
func partitionUUID(t *Topology, i int, mig *MIGDevice) error {
	g := &t.GPUs[i]
	if mig != nil || g.Partition == nil {
		return nil
	}
	var same []string
	for k := range t.GPUs {
		if t.GPUs[k].UUID == g.UUID {
			same = append(same, fmt.Sprintf("GPU %d (%s, renderD%d)", t.GPUs[k].Index, t.GPUs[k].Key(), t.GPUs[k].Minor))
		}
	}
	return fmt.Errorf("%s, which the compute partitions %s share (MI300 CPX/DPX/QPX: one unique_id per device): it names no single GPU; use indices",
		g.UUID, strings.Join(same, ", "))
}

// resolveStep finds the step's GPUs. Slurm numbers (SLURM_STEP_GPUS) are GRES indices,
// mapped through gm; UUIDs are looked up directly. SLURM_JOB_GPUS without SLURM_STEP_GPUS
// is a step without GPUs in a job with GPUs: no GPUs.
// CUDA_VISIBLE_DEVICES decides the numbering under NumberingAuto, and is the GPU list
// only when Slurm set neither variable. With no list at all: where Slurm manages GPU GRES
// on the node (gm.Managed), the step has no GPUs (Slurm unsets SLURM_STEP_GPUS and
// CUDA_VISIBLE_DEVICES for a step without GPUs); elsewhere it may use every GPU of the
// node.
func resolveStep(t *Topology, env StepEnv, gm *gresMap, num Numbering) (*step, error) {
	st := &step{Numbering: num}
	var slurmName string
	var slurmList *string
	switch {
	case env.StepGPUs != nil:
		slurmName, slurmList = "SLURM_STEP_GPUS", env.StepGPUs
	case env.JobGPUs != nil:
		// Slurm sets SLURM_STEP_GPUS for every step that has GPUs. A step of a job with
		// GPUs that has none (--gres=none, --gpus=0) must not take the job's, which
		// belong to its sibling steps.
		st.Notes = append(st.Notes, fmt.Sprintf("the job has GPUs (SLURM_JOB_GPUS=%s) but this step has none (no SLURM_STEP_GPUS)", *env.JobGPUs))
		st.defaultGlobal()
		return st, nil
	}
	if slurmList == nil && env.CudaVisible == nil && gm.Managed {
		st.Notes = append(st.Notes, fmt.Sprintf("Slurm manages this node's GPUs (%s) and gave this step none (no SLURM_STEP_GPUS, no CUDA_VISIBLE_DEVICES)", gm.Source))
		st.defaultGlobal()
		return st, nil
	}
	r := &stepResolver{t: t, gm: gm, st: st}
	if env.CudaVisible != nil {
		if err := r.parseCUDAVisible(*env.CudaVisible); err != nil {
			return nil, err
		}
	}
	var err error
	switch {
	case slurmList != nil:
		err = r.fromSlurm(slurmName, *slurmList)
	case len(r.cvd) > 0:
		err = r.fromCUDAVisible()
	default:
		r.wholeNode()
	}
	if err != nil {
		return nil, err
	}
	if err := r.collect(); err != nil {
		return nil, err
	}
	return st, nil
}

// defaultGlobal turns NumberingAuto into NumberingGlobal, for the sources that give no
// reason to think the tasks number their GPUs from 0.
func (st *step) defaultGlobal() {
	if st.Numbering == NumberingAuto {
		st.Numbering = NumberingGlobal
	}
}

// pick is one GPU or MIG instance chosen for the step, before sorting.
type pick struct {
	topo int
	mig  *MIGDevice
	gres int
}

// stepResolver holds what resolveStep's sources share: the node, the parsed
// CUDA_VISIBLE_DEVICES, and the picks so far.
type stepResolver struct {
	t        *Topology
	gm       *gresMap
	st       *step
	cvdText  string     // CUDA_VISIBLE_DEVICES as set
	cvd      []listItem // CUDA_VISIBLE_DEVICES parsed, nil when unset or empty
	cvdUUIDs bool       // CUDA_VISIBLE_DEVICES names UUIDs (never mixed with indices)
	picks    []pick
}

func (r *stepResolver) parseCUDAVisible(s string) error {
	cvd, err := parseGPUList("CUDA_VISIBLE_DEVICES", s)
	if err != nil {
		return err
	}
	r.cvdText, r.cvd = s, cvd
	r.cvdUUIDs = len(cvd) > 0 && cvd[0].uuid != ""
	for _, it := range cvd {
		if (it.uuid != "") != r.cvdUUIDs {
			return fmt.Errorf("CUDA_VISIBLE_DEVICES=%q mixes indices and UUIDs", s)
		}
	}
	return nil
}

func (r *stepResolver) addUUID(what, u string) error {
	i, mig := findUUID(r.t, u)
	if i < 0 {
		return fmt.Errorf("%s names %s, which is not a GPU or MIG instance of this node's topology", what, u)
	}
	if err := partitionUUID(r.t, i, mig); err != nil {
		return fmt.Errorf("%s names %w", what, err)
	}
	r.picks = append(r.picks, pick{topo: i, mig: mig, gres: -1})
	return nil
}

func (r *stepResolver) addGres(what string, n int) error {
	gm := r.gm
	if gm.Assumed {
		r.st.Unknown = true
	}
	if n >= len(gm.GPUs) {
		return fmt.Errorf("%s names GPU %d, but this node has GRES indices 0..%d (%s); the topology lacks a GPU Slurm allocated", what, n, len(gm.GPUs)-1, gm.Source)
	}
	r.picks = append(r.picks, pick{topo: gm.GPUs[n], gres: n})
	return nil
}

// fromSlurm takes the step's GPUs from Slurm's list (name=list): GRES indices through
// the GRES map, UUIDs directly. A UUID CUDA_VISIBLE_DEVICES then names the devices
// (MIG slices, or Slurm 25.11's GPU- UUIDs); an index one decides the numbering.
func (r *stepResolver) fromSlurm(name, list string) error {
	gm, st := r.gm, r.st
	items, err := parseGPUList(name, list)
	if err != nil {
		return err
	}
	for _, it := range items {
		if it.uuid != "" {
			err = r.addUUID(name, it.uuid)
		} else {
			err = r.addGres(name, it.num)
		}
		if err != nil {
			return err
		}
	}
	if gm.Assumed && len(items) > 0 && items[0].uuid == "" {
		st.Notes = append(st.Notes, fmt.Sprintf("GRES indices of %s assumed to be in PCI order (AutoDetect=nvml): %s", name, gm.Source))
	}
	if r.cvdUUIDs {
		return r.uuidsOnSlurmGPUs(name, list, len(items))
	}
	if st.Numbering == NumberingAuto {
		cvd := r.cvd
		st.Numbering = NumberingGlobal
		if len(cvd) == len(items) && len(cvd) > 0 && isIota(cvd) && !sameNums(cvd, items) {
			st.Numbering = NumberingRelative
		} else if len(cvd) > 0 && !sameNums(cvd, items) {
			st.Notes = append(st.Notes, fmt.Sprintf("CUDA_VISIBLE_DEVICES=%q matches neither %s=%q nor 0..%d; using %s", r.cvdText, name, list, len(items)-1, name))
		}
	}
	return nil
}

// uuidsOnSlurmGPUs replaces the picks from Slurm's list (name=list, n entries) by the
// UUIDs of CUDA_VISIBLE_DEVICES. Slurm 25.11 may hand out GPU- UUIDs, and MIG slices are
// named by MIG- UUIDs: they identify the devices, and must lie on the GPUs Slurm
// allocated.
func (r *stepResolver) uuidsOnSlurmGPUs(name, list string, n int) error {
	if len(r.cvd) != n {
		return fmt.Errorf("CUDA_VISIBLE_DEVICES=%q has %d entries but %s=%q has %d", r.cvdText, len(r.cvd), name, list, n)
	}
	gresOf := map[int]int{}
	for _, p := range r.picks {
		gresOf[p.topo] = p.gres
	}
	r.picks = nil
	for _, it := range r.cvd {
		if err := r.addUUID("CUDA_VISIBLE_DEVICES", it.uuid); err != nil {
			return err
		}
		last := &r.picks[len(r.picks)-1]
		g, ok := gresOf[last.topo]
		if !ok && !r.gm.Assumed {
			return fmt.Errorf("CUDA_VISIBLE_DEVICES names %s, which is not on a GPU of %s=%q", it.uuid, name, list)
		}
		if ok && last.mig == nil {
			last.gres = g
		}
	}
	return nil
}

// fromCUDAVisible takes the step's GPUs from CUDA_VISIBLE_DEVICES alone (Slurm set no
// list): UUIDs, or NVML indices.
func (r *stepResolver) fromCUDAVisible() error {
	t := r.t
	for _, it := range r.cvd {
		var err error
		if it.uuid != "" {
			err = r.addUUID("CUDA_VISIBLE_DEVICES", it.uuid)
		} else if it.num < len(t.GPUs) {
			r.picks = append(r.picks, pick{topo: it.num, gres: -1})
		} else {
			err = fmt.Errorf("CUDA_VISIBLE_DEVICES=%q names GPU %d, but this node has %d GPUs", r.cvdText, it.num, len(t.GPUs))
		}
		if err != nil {
			return err
		}
	}
	if !r.cvdUUIDs {
		r.st.Notes = append(r.st.Notes, "SLURM_STEP_GPUS unset: CUDA_VISIBLE_DEVICES taken as NVML (PCI order) indices")
	}
	r.st.defaultGlobal()
	return nil
}

// wholeNode gives the step every GPU of the node (no list at all, and Slurm does not
// manage the node's GPUs).
func (r *stepResolver) wholeNode() {
	gresOf := map[int]int{}
	for n, i := range r.gm.GPUs {
		gresOf[i] = n
	}
	for i := range r.t.GPUs {
		g, ok := gresOf[i]
		if !ok {
			g = -1
		}
		r.picks = append(r.picks, pick{topo: i, gres: g})
	}
	r.st.defaultGlobal()
	if len(r.t.GPUs) > 0 {
		r.st.Notes = append(r.st.Notes, "no SLURM_STEP_GPUS/SLURM_JOB_GPUS/CUDA_VISIBLE_DEVICES: the step may use all GPUs of the node")
	}
}

// collect turns the picks into the step's GPUs: each once, sorted by bus id (then MIG
// GI/CI), each with its device node and the value the task will see.
func (r *stepResolver) collect() error {
	t, gm, st := r.t, r.gm, r.st
	seen := map[string]bool{}
	for _, p := range r.picks {
		key := t.GPUs[p.topo].Key()
		if p.mig != nil {
			key = p.mig.UUID
		}
		if seen[key] {
			if len(t.GPUs[p.topo].MIG) > 0 {
				return fmt.Errorf("the step's GPU list names %s twice: it is a MIG GPU, and its slices need MIG- UUIDs in CUDA_VISIBLE_DEVICES", key)
			}
			return fmt.Errorf("the step's GPU list names %s twice", key)
		}
		seen[key] = true
		sg := stepGPU{Topo: p.topo, MIG: p.mig, Gres: p.gres}
		if p.gres >= 0 && p.gres < len(gm.Files) {
			sg.Dev = gm.Files[p.gres]
		}
		if p.gres >= 0 && p.gres < len(gm.Cores) {
			sg.Cores = gm.Cores[p.gres]
		}
		st.GPUs = append(st.GPUs, sg)
	}
	sort.SliceStable(st.GPUs, func(i, j int) bool {
		a, b := st.GPUs[i], st.GPUs[j]
		if a.Topo != b.Topo && t.IsAMD() {
			return t.GPUs[a.Topo].Index < t.GPUs[b.Topo].Index // ROCr's order: KFD order
		}
		if a.Topo != b.Topo {
			return t.GPUs[a.Topo].BusID < t.GPUs[b.Topo].BusID
		}
		if a.MIG == nil || b.MIG == nil {
			return a.MIG == nil && b.MIG != nil
		}
		if a.MIG.GI != b.MIG.GI {
			return a.MIG.GI < b.MIG.GI
		}
		return a.MIG.CI < b.MIG.CI
	})
	// Visible values: MIG instances and UUID lists by UUID; otherwise the index the task
	// sees with CUDA_DEVICE_ORDER=PCI_BUS_ID: its rank among the step's GPUs (relative)
	// or its NVML index (global).
	rel := 0
	for i := range st.GPUs {
		g := &st.GPUs[i]
		switch {
		case g.MIG != nil:
			g.Visible = g.MIG.UUID
		case r.cvdUUIDs && t.GPUs[g.Topo].UUID != "":
			g.Visible = t.GPUs[g.Topo].UUID
		case st.Numbering == NumberingRelative:
			g.Visible = strconv.Itoa(rel)
			rel++
		default:
			g.Visible = strconv.Itoa(t.GPUs[g.Topo].Index)
		}
	}
	return nil
}

func isIota(items []listItem) bool {
	for i, it := range items {
		if it.uuid != "" || it.num != i {
			return false
		}
	}
	return true
}

func sameNums(a, b []listItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
