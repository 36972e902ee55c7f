package gpubind

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// PlanInput is everything the planner needs for one node of a step.
type PlanInput struct {
	Topo   *Topology
	Step   *Step
	Tasks  int
	Option Option
	Mode   string // enforce (default) or optional
	// Rails are the admin's RDMA devices for NCCL and UCX (plugstack nics=); nil: the
	// NICs closest to the step's GPUs.
	Rails []string
}

// BuildTable plans a step: it validates the option against the step, orders the
// step's GPUs for the policy and fills the decision table, including the plan-time
// answer for every task. Errors name the bad input.
func BuildTable(in PlanInput) (*Table, error) {
	t, o, st := in.Topo, in.Option, in.Step
	if in.Tasks < 0 || in.Tasks > MaxTableTasks {
		return nil, fmt.Errorf("%d local tasks: want 0..%d", in.Tasks, MaxTableTasks)
	}
	mode := in.Mode
	if mode == "" {
		mode = ModeEnforce
	}
	tab := &Table{
		Status: StatusOK, Mode: mode, Flags: o.Flags, Rule: RuleTable,
		Share: 1, PerTask: 1, NTasks: in.Tasks, NUMAGPUs: map[int][]int{},
	}
	tab.Messages = append(tab.Messages, st.Notes...)
	for _, n := range t.NUMA {
		tab.NUMA = append(tab.NUMA, TableNUMA(n))
	}
	G := len(st.GPUs)
	rt, notes := railTopology(t, in.Rails)
	tab.Messages = append(tab.Messages, notes...)
	for id, sg := range st.GPUs {
		g := &t.GPUs[sg.Topo]
		uuid := g.UUID
		if sg.MIG != nil {
			uuid = sg.MIG.UUID
		}
		tab.GPUs = append(tab.GPUs, TableGPU{
			ID: id, Visible: sg.Visible, NVMLIndex: g.Index, Minor: g.Minor, BusID: g.BusID,
			UUID: uuid, NUMA: g.NUMA, NIC: rt.nicPort(rt.ClosestNIC(sg.Topo)), Dev: devPath(sg, g.Minor),
		})
	}
	tab.NICs = railSet(rt, in.Rails, tab.GPUs)
	if o.Visible != "" && o.Visible != VisibleOwn {
		tab.Visible = o.Visible
		tab.Near = nearOrder(t, st)
	}
	tab.addFabric(t, st, "")
	switch o.Policy {
	case PolicyOff, PolicyHelp:
		return nil, fmt.Errorf("policy %q does not plan", o.Policy)
	}
	if G == 0 {
		tab.Status = StatusWarn
		tab.Messages = append(tab.Messages, "the step has no GPUs on this node; nothing to bind")
		for L := 0; L < in.Tasks; L++ {
			tab.Tasks = append(tab.Tasks, TableTask{Local: L})
		}
		for _, n := range t.NUMA {
			tab.NUMAGPUs[n.ID] = nil
		}
		return tab, nil
	}
	ids := make([]int, G)
	for i := range ids {
		ids[i] = i
	}
	link := func(a, b int) Link {
		if st.GPUs[a].Topo == st.GPUs[b].Topo {
			return Link{Class: ClassSelf}
		}
		return t.GPULink(st.GPUs[a].Topo, st.GPUs[b].Topo)
	}
	numaOf := func(id int) int { return t.GPUs[st.GPUs[id].Topo].NUMA }
	pack := packOrder(ids, link)
	assign := make([][]int, in.Tasks)
	switch o.Policy {
	case PolicyClosest:
		tab.Rule = RuleNUMA
		for L, id := range gpuFirst(ids, numaOf, in.Tasks) {
			assign[L] = []int{id}
		}
		tab.Fallback = ids
	case PolicySingle:
		tab.Rule, tab.Share = RuleNUMA, o.N
		need := (in.Tasks + o.N - 1) / o.N
		if need > G {
			return nil, fmt.Errorf("single:%d with %d tasks needs %d GPUs, but the step has %d on this node", o.N, in.Tasks, need, G)
		}
		virt := gpuFirst(ids, numaOf, need)
		for L := range assign {
			assign[L] = []int{virt[L/o.N]}
		}
		tab.Fallback = ids
	case PolicyPerTask:
		tab.Rule, tab.PerTask = RuleNUMA, o.N
		if o.N > G {
			return nil, fmt.Errorf("per-task:%d asks %d GPUs per task, but the step has %d on this node", o.N, o.N, G)
		}
		if in.Tasks*o.N > G {
			return nil, fmt.Errorf("per-task:%d with %d tasks needs %d GPUs, but the step has %d on this node", o.N, in.Tasks, in.Tasks*o.N, G)
		}
		groups := G / o.N
		for L := range assign {
			g := L % groups
			assign[L] = append([]int(nil), pack[g*o.N:(g+1)*o.N]...)
		}
		tab.Fallback = pack
	case PolicyPack:
		for L := range assign {
			assign[L] = []int{pack[blockIndex(L, in.Tasks, G)]}
		}
		tab.Fallback = pack
	case PolicySpread:
		sp := spreadOrder(ids, numaOf, func(id int) string { return switchKey(t.GPUs[st.GPUs[id].Topo].PCIPath) })
		for L := range assign {
			assign[L] = []int{sp[L%G]}
		}
		tab.Fallback = sp
	case PolicyMap:
		mapped := make([]int, len(o.Map))
		for i, e := range o.Map {
			id, err := mapEntry(t, st, e)
			if err != nil {
				return nil, err
			}
			mapped[i] = id
		}
		for L := range assign {
			assign[L] = []int{mapped[L%len(mapped)]}
		}
		tab.Fallback = ids
	default:
		return nil, fmt.Errorf("unknown policy %q", o.Policy)
	}
	// numagpus: per NUMA node the step GPUs, best first (pack order for per-task).
	order := ids
	if o.Policy == PolicyPerTask {
		order = pack
	}
	for _, n := range t.NUMA {
		tab.NUMAGPUs[n.ID] = nil
	}
	for _, id := range order {
		// Only nodes with a numa line: the rule can only pick those.
		if n := numaOf(id); n >= 0 {
			if _, listed := tab.NUMAGPUs[n]; listed {
				tab.NUMAGPUs[n] = append(tab.NUMAGPUs[n], id)
			}
		}
	}
	for L, a := range assign {
		k := TableTask{Local: L, GPUs: a}
		if o.Flags.CPUs {
			k.CPUs = gpuCPUs(t, st, a)
		}
		tab.Tasks = append(tab.Tasks, k)
	}
	if in.Tasks > G*tab.Share/tab.PerTask && o.Policy != PolicyMap && o.Policy != PolicySingle {
		tab.Messages = append(tab.Messages, strconv.Itoa(in.Tasks)+" tasks share "+strconv.Itoa(G)+" GPUs")
	}
	return tab, nil
}

// gpuCPUs is the CPU list of the NUMA nodes of the GPUs (their local CPUs when the
// NUMA node is unknown).
func gpuCPUs(t *Topology, st *Step, ids []int) CPUSet {
	var s CPUSet
	for _, id := range ids {
		g := &t.GPUs[st.GPUs[id].Topo]
		if c := t.NUMACPUs(g.NUMA); g.NUMA >= 0 && !c.IsEmpty() {
			s = s.Union(c)
		} else {
			s = s.Union(g.CPUs)
		}
	}
	return s
}

// blockIndex spreads T tasks over G slots in blocks: consecutive tasks share a slot.
func blockIndex(L, T, G int) int {
	if T <= G {
		return L
	}
	return L * G / T
}

// numaGroups groups ids by NUMA node (ascending, unknown -1 last), keeping their order.
func numaGroups(ids []int, numaOf func(int) int) [][]int {
	by := map[int][]int{}
	for _, id := range ids {
		by[numaOf(id)] = append(by[numaOf(id)], id)
	}
	keys := sortedKeys(by)
	sort.SliceStable(keys, func(i, j int) bool { return keys[i] >= 0 && keys[j] < 0 })
	var out [][]int
	for _, k := range keys {
		out = append(out, by[k])
	}
	return out
}

// gpuFirst is closest's plan without a CPU binding: T tasks spread evenly over the
// NUMA nodes and GPUs, consecutive tasks on the same NUMA node.
func gpuFirst(ids []int, numaOf func(int) int, T int) []int {
	groups := numaGroups(ids, numaOf)
	G := len(ids)
	var list []int
	if T >= G {
		for _, g := range groups {
			list = append(list, g...)
		}
		out := make([]int, T)
		for L := range out {
			out[L] = list[blockIndex(L, T, G)]
		}
		return out
	}
	counts := make([]int, len(groups))
	for given := 0; given < T; {
		for i := range groups {
			if given < T && counts[i] < len(groups[i]) {
				counts[i]++
				given++
			}
		}
	}
	for i, g := range groups {
		list = append(list, g[:counts[i]]...)
	}
	return list
}

// packOrder orders ids so that neighbours are joined by the best links: start at the
// id with the best link to any other (ties: the first), then repeatedly take the unused
// id best linked to the last one taken.
func packOrder(ids []int, link func(a, b int) Link) []int {
	if len(ids) == 0 {
		return nil
	}
	start, bestLink := 0, Link{Class: ClassSYS + 1}
	for i, a := range ids {
		for _, b := range ids {
			if a != b && link(a, b).Better(bestLink) {
				start, bestLink = i, link(a, b)
			}
		}
	}
	used := make([]bool, len(ids))
	out := []int{ids[start]}
	used[start] = true
	for len(out) < len(ids) {
		last := out[len(out)-1]
		best := -1
		for i, id := range ids {
			if used[i] {
				continue
			}
			if best < 0 || link(last, id).Better(link(last, ids[best])) {
				best = i
			}
		}
		used[best] = true
		out = append(out, ids[best])
	}
	return out
}

// switchKey identifies the PCIe branch above a GPU (host bridge and root port).
func switchKey(path []string) string {
	if len(path) > 2 {
		path = path[:2]
	}
	k := ""
	for _, p := range path {
		k += p + "/"
	}
	return k
}

// spreadOrder interleaves NUMA nodes, and within each node its PCIe branches, so that
// consecutive tasks land as far apart as possible.
func spreadOrder(ids []int, numaOf func(int) int, branch func(int) string) []int {
	var perNUMA [][]int
	for _, g := range numaGroups(ids, numaOf) {
		by := map[string][]int{}
		var keys []string
		for _, id := range g {
			k := branch(id)
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], id)
		}
		var lists [][]int
		for _, k := range keys {
			lists = append(lists, by[k])
		}
		perNUMA = append(perNUMA, interleave(lists))
	}
	return interleave(perNUMA)
}

func interleave(lists [][]int) []int {
	var out []int
	for i := 0; ; i++ {
		added := false
		for _, l := range lists {
			if i < len(l) {
				out = append(out, l[i])
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// mapEntry finds a map:LIST entry (GRES index or UUID) among the step's GPUs.
func mapEntry(t *Topology, st *Step, e string) (int, error) {
	for id, sg := range st.GPUs {
		switch {
		case sg.MIG != nil && sg.MIG.UUID == e:
			return id, nil
		case sg.MIG == nil && t.GPUs[sg.Topo].UUID == e:
			return id, nil
		case sg.Gres >= 0 && strconv.Itoa(sg.Gres) == e:
			return id, nil
		}
	}
	var have []string
	for _, sg := range st.GPUs {
		if sg.Gres >= 0 {
			have = append(have, strconv.Itoa(sg.Gres))
		} else if sg.MIG != nil {
			have = append(have, sg.MIG.UUID)
		} else {
			have = append(have, t.GPUs[sg.Topo].UUID)
		}
	}
	return -1, fmt.Errorf("map entry %q is not a GPU of this step (the step has GRES indices/UUIDs %v)", e, have)
}

// devPath is the device node of a step GPU: gres.conf's File= (what Slurm constrains), else
// the driver's /dev/nvidiaN when the minor is known.
func devPath(sg StepGPU, minor int) string {
	switch {
	case sg.Dev != "" && !strings.ContainsAny(sg.Dev, " \t\r\n"): // one table field
		return sg.Dev
	case minor >= 0:
		return "/dev/nvidia" + strconv.Itoa(minor)
	}
	return ""
}
