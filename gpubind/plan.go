package gpubind

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// planInput is everything the planner needs for one node of a step.
type planInput struct {
	Topo   *Topology
	Step   *step
	Tasks  int
	Option Option
	// Rails are the admin's RDMA devices for NCCL and UCX (plugstack nics=); nil: the
	// NICs closest to the step's GPUs.
	Rails []string
}

// buildTable plans a step: it validates the option against the step, orders the
// step's GPUs for the policy and fills the decision table, including the plan-time
// answer for every task. Errors name the bad input.
func buildTable(in planInput) (*Table, error) {
	t, o, st := in.Topo, in.Option, in.Step
	if in.Tasks < 0 || in.Tasks > MaxTableTasks {
		return nil, fmt.Errorf("%d local tasks: want 0..%d", in.Tasks, MaxTableTasks)
	}
	tab := &Table{
		Status: StatusOK, Flags: o.Flags, Rule: RuleTable,
		Share: 1, PerTask: 1, NTasks: in.Tasks, NUMAGPUs: map[int][]int{},
	}
	tab.Messages = append(tab.Messages, st.Notes...)
	if t.IsAMD() {
		tab.Vendor = VendorAMD
	}
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
		card := -1
		if g.CardMinor != nil {
			card = *g.CardMinor
		}
		tab.GPUs = append(tab.GPUs, TableGPU{
			ID: id, Visible: sg.Visible, NVMLIndex: g.Index, Minor: g.Minor, BusID: g.BusID,
			UUID: uuid, NUMA: g.NUMA, NIC: rt.nicPort(rt.ClosestNIC(sg.Topo)), Dev: devPath(sg, g),
			Card: card, Part: g.Partition,
		})
	}
	tab.NICs = railSet(rt, in.Rails, tab.GPUs)
	if o.Visible != "" && o.Visible != VisibleOwn {
		tab.Visible = o.Visible
		tab.Near = nearOrder(t, st)
	}
	// CUDA enumerates only the first MIG device of CUDA_VISIBLE_DEVICES: a list of
	// several would put every task on the first one's slice. The rule (rule/rule.c,
	// gb_result_widen) gives a MIG task its own slice only; say so here.
	if hasMIG(st) && (tab.Visible != "" || o.Policy == policyPerTask && o.N > 1) {
		tab.Status = StatusWarn
		tab.Messages = append(tab.Messages, "the step's GPUs are MIG devices, and CUDA sees only the first MIG device a task lists: "+
			"each task sees its own slice only (not "+migAsked(o)+")")
		tab.Visible = ""
		tab.Near = nil
	}
	tab.uuidOrWarn()
	tab.addFabric(t, st, "")
	plan := policyPlan(o.Policy)
	if plan == nil {
		return nil, fmt.Errorf("policy %q does not plan", o.Policy)
	}
	if G == 0 {
		tab.Status = StatusWarn
		tab.Messages = append(tab.Messages, "the step has no GPUs on this node; nothing to bind")
		for local := 0; local < in.Tasks; local++ {
			tab.Tasks = append(tab.Tasks, TableTask{Local: local})
		}
		for _, n := range t.NUMA {
			tab.NUMAGPUs[n.ID] = nil
		}
		return tab, nil
	}
	p := newPlanner(in, tab)
	if err := plan(p); err != nil {
		return nil, err
	}
	// numagpus: per NUMA node the step GPUs, best first (pack order for per-task).
	for _, n := range t.NUMA {
		tab.NUMAGPUs[n.ID] = nil
	}
	for _, id := range p.numaOrder {
		// Only nodes with a numa line: the rule can only pick those.
		if n := p.numaOf(id); n >= 0 {
			if _, listed := tab.NUMAGPUs[n]; listed {
				tab.NUMAGPUs[n] = append(tab.NUMAGPUs[n], id)
			}
		}
	}
	for local, a := range p.assign {
		k := TableTask{Local: local, GPUs: a}
		if o.Flags.CPUs {
			k.CPUs = gpuCPUs(t, st, a)
		}
		tab.Tasks = append(tab.Tasks, k)
	}
	if in.Tasks > G*tab.Share/tab.PerTask && o.Policy != policyMap && o.Policy != policySingle {
		tab.Messages = append(tab.Messages, strconv.Itoa(in.Tasks)+" tasks share "+strconv.Itoa(G)+" GPUs")
	}
	return tab, nil
}

// planner is what a policy's plan function reads and fills: the step's GPUs (ids, by
// table id, and pack, in pack order), and per task its GPUs (assign), the table's rule
// fields and fallback, and the order of the numagpus lists (numaOrder).
type planner struct {
	in        planInput
	tab       *Table
	ids       []int // 0..G-1
	pack      []int // ids in pack order
	numaOf    func(id int) int
	assign    [][]int // per task, its GPUs (table ids)
	numaOrder []int   // the order of the GPUs in the numagpus lists, ids unless set
}

func newPlanner(in planInput, tab *Table) *planner {
	t, st := in.Topo, in.Step
	ids := make([]int, len(st.GPUs))
	for i := range ids {
		ids[i] = i
	}
	link := func(a, b int) Link {
		if st.GPUs[a].Topo == st.GPUs[b].Topo {
			return Link{Class: ClassSelf}
		}
		return t.GPULink(st.GPUs[a].Topo, st.GPUs[b].Topo)
	}
	return &planner{
		in: in, tab: tab, ids: ids, pack: packOrder(ids, link),
		numaOf:    func(id int) int { return t.GPUs[st.GPUs[id].Topo].NUMA },
		assign:    make([][]int, in.Tasks),
		numaOrder: ids,
	}
}

// policyPlan is the plan function of the policy name, nil for one that does not plan
// (off, help) or no policy.
func policyPlan(name string) func(*planner) error {
	for _, d := range policyDefs {
		if d.name == name {
			return d.plan
		}
	}
	return nil
}

func planClosest(p *planner) error {
	p.tab.Rule = RuleNUMA
	for local, id := range gpuFirst(p.ids, p.numaOf, p.in.Tasks) {
		p.assign[local] = []int{id}
	}
	p.tab.Fallback = p.ids
	return nil
}

func planSingle(p *planner) error {
	n, tasks, G := p.in.Option.N, p.in.Tasks, len(p.ids)
	p.tab.Rule, p.tab.Share = RuleNUMA, n
	need := (tasks + n - 1) / n
	if need > G {
		return fmt.Errorf("single:%d with %d tasks needs %d GPUs, but the step has %d on this node", n, tasks, need, G)
	}
	virt := gpuFirst(p.ids, p.numaOf, need)
	for local := range p.assign {
		p.assign[local] = []int{virt[local/n]}
	}
	p.tab.Fallback = p.ids
	return nil
}

func planPerTask(p *planner) error {
	n, tasks, G := p.in.Option.N, p.in.Tasks, len(p.ids)
	p.tab.Rule, p.tab.PerTask = RuleNUMA, n
	if n > G {
		return fmt.Errorf("per-task:%d asks %d GPUs per task, but the step has %d on this node", n, n, G)
	}
	if tasks*n > G {
		return fmt.Errorf("per-task:%d with %d tasks needs %d GPUs, but the step has %d on this node", n, tasks, tasks*n, G)
	}
	groups := G / n
	for local := range p.assign {
		g := local % groups
		p.assign[local] = append([]int(nil), p.pack[g*n:(g+1)*n]...)
	}
	p.tab.Fallback = p.pack
	p.numaOrder = p.pack
	return nil
}

func planPack(p *planner) error {
	for local := range p.assign {
		p.assign[local] = []int{p.pack[blockIndex(local, p.in.Tasks, len(p.ids))]}
	}
	p.tab.Fallback = p.pack
	return nil
}

func planSpread(p *planner) error {
	t, st := p.in.Topo, p.in.Step
	sp := spreadOrder(p.ids, p.numaOf, func(id int) string { return switchKey(t.GPUs[st.GPUs[id].Topo].PCIPath) })
	for local := range p.assign {
		p.assign[local] = []int{sp[local%len(sp)]}
	}
	p.tab.Fallback = sp
	return nil
}

func planMap(p *planner) error {
	entries := p.in.Option.Map
	mapped := make([]int, len(entries))
	for i, e := range entries {
		id, err := mapEntry(p.in.Topo, p.in.Step, e)
		if err != nil {
			return err
		}
		mapped[i] = id
	}
	for local := range p.assign {
		p.assign[local] = []int{mapped[local%len(mapped)]}
	}
	p.tab.Fallback = p.ids
	return nil
}

// gpuCPUs is the CPU list the cpus flag binds a task of these GPUs to: per GPU the
// CPUs of its gres.conf Cores= (the admin's word), else its L3 share (AMD, GPU.L3), else
// its NUMA node's CPUs (its local CPUs when the NUMA node is unknown). docs/admin.md
// "AMD Instinct GPUs" says why Cores= comes first.
func gpuCPUs(t *Topology, st *step, ids []int) CPUSet {
	var s CPUSet
	for _, id := range ids {
		sg := &st.GPUs[id]
		g := &t.GPUs[sg.Topo]
		switch c := t.NUMACPUs(g.NUMA); {
		case !sg.Cores.IsEmpty():
			s = s.Union(sg.Cores)
		case !g.L3.IsEmpty():
			s = s.Union(g.L3)
		case g.NUMA >= 0 && !c.IsEmpty():
			s = s.Union(c)
		default:
			s = s.Union(g.CPUs)
		}
	}
	return s
}

// blockIndex is the slot of task local when T tasks spread over G slots in blocks:
// consecutive tasks share a slot.
func blockIndex(local, T, G int) int {
	if T <= G {
		return local
	}
	return local * G / T
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
		for local := range out {
			out[local] = list[blockIndex(local, T, G)]
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
func mapEntry(t *Topology, st *step, e string) (int, error) {
	for id, sg := range st.GPUs {
		switch {
		case sg.MIG != nil && sg.MIG.UUID == e:
			return id, nil
		case sg.MIG == nil && t.GPUs[sg.Topo].UUID == e:
			if err := partitionUUID(t, sg.Topo, nil); err != nil {
				return -1, fmt.Errorf("map entry %q names %w", e, err)
			}
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
// the driver's /dev/nvidiaN when the minor is known (AMD: the render node).
func devPath(sg stepGPU, g *GPU) string {
	switch {
	case sg.Dev != "" && !strings.ContainsAny(sg.Dev, " \t\r\n"): // one table field
		return sg.Dev
	case g.Minor >= 0 && g.isAMD():
		return "/dev/dri/renderD" + strconv.Itoa(g.Minor)
	case g.Minor >= 0:
		return "/dev/nvidia" + strconv.Itoa(g.Minor)
	}
	return ""
}

// hasMIG tells whether some step GPU is a MIG device.
func hasMIG(st *step) bool {
	for _, g := range st.GPUs {
		if g.MIG != nil {
			return true
		}
	}
	return false
}

// migAsked names what the option asked that a MIG task cannot have.
func migAsked(o Option) string {
	if o.Visible != "" && o.Visible != VisibleOwn {
		return "visible=" + o.Visible
	}
	return "per-task:" + strconv.Itoa(o.N)
}

// uuidOrWarn keeps the uuid flag only when every step GPU has a known UUID: the rule
// (rule/output.c, visible_uuid) lists a GPU without one by its number, and a
// CUDA_VISIBLE_DEVICES that mixes numbers and UUIDs would number the GPUs neither way.
func (tab *Table) uuidOrWarn() {
	if !tab.Flags.UUID {
		return
	}
	for _, g := range tab.GPUs {
		if g.UUID == "" {
			tab.Status = StatusWarn
			tab.Messages = append(tab.Messages, fmt.Sprintf("uuid: the UUID of GPU %d (%s) is unknown (source without NVML or /proc/driver/nvidia): "+
				"CUDA_VISIBLE_DEVICES lists indices", g.NVMLIndex, dash(g.BusID)))
			tab.Flags.UUID = false
			return
		}
	}
}
