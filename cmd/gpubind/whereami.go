package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/cudavis"
)

// whereReport is what `gpubind whereami` found: what the process really got, next to what
// the plugin said it gave (its GPUBIND_* variables). The JSON keys are the issue's.
type whereReport struct {
	Host  string `json:"host"`
	Rank  *int   `json:"rank"`     // SLURM_PROCID (PMIX_RANK, OMPI_COMM_WORLD_RANK); null: unknown
	Local *int   `json:"local_id"` // SLURM_LOCALID (OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK)
	// CPUs is the process's affinity: /proc/self/status Cpus_allowed_list (what
	// sched_getaffinity returns for the main thread).
	CPUs string `json:"cpus"`
	// Mems is /proc/self/status Mems_allowed_list (the cpuset's memory nodes).
	Mems string `json:"mems"`
	// MemPolicy is get_mempolicy(2): default, bind:NODES, preferred:NODES, ... ("" when not
	// asked: --root).
	MemPolicy string     `json:"mempolicy,omitempty"`
	GPUs      []whereGPU `json:"gpus"`
	// CPUsLocalToGPUs: every CPU of the process is local to its first visible GPU (that
	// GPU's NUMA node, or its local_cpulist when the node is unknown).
	CPUsLocalToGPUs bool              `json:"cpus_local_to_gpus"`
	NIC             string            `json:"nic"` // the RDMA NIC nearest the first visible GPU, NAME:PORT
	Env             map[string]string `json:"env"`
	Cgroup          []string          `json:"cgroup"` // /proc/self/cgroup, "ID:CONTROLLERS:PATH"
	// Sources: what was read: "sysfs", and "nvml" where NVML loads in the task.
	Sources  []string `json:"sources"`
	Warnings []string `json:"warnings"`
}

// whereGPU is one GPU CUDA shows the process, as CUDA_VISIBLE_DEVICES resolves.
type whereGPU struct {
	VisibleIndex int    `json:"visible_index"` // the CUDA device number
	Index        int    `json:"index"`         // NVML index (PCI order of the node), -1 unknown (MIG)
	BusID        string `json:"pci_bus_id"`
	UUID         string `json:"uuid"`
	NUMA         int    `json:"numa"`
	Openable     bool   `json:"openable"` // access(2) on its /dev/nvidiaN allows read and write
}

// whereEnv lists the variables whereami reports when they are set.
var whereEnv = []string{"ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GPUBIND_GPUS", "GPUBIND_PCI_BUS_IDS",
	"GPUBIND_UUIDS", "GPUBIND_NUMA", "GPUBIND_CUDA_DEVICES", "GPUBIND_NIC", "NCCL_IB_HCA", "UCX_NET_DEVICES",
	"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}

func cmdWhereami(args []string, stdout, stderr io.Writer) error {
	var c common
	fs := newFlags("whereami", stderr, &c)
	strict := fs.Bool("strict", false, "exit 1 when there are warnings")
	dev := fs.String("dev", "", "the GPUs' device nodes are DIR/nvidiaN (default ROOT/dev)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if c.snapshot != "" || c.source != "" {
		return usageError{"whereami reads the node itself: --root only"}
	}
	self := c.root == "" || c.root == "/"
	var nv func() (*gpubind.Topology, error)
	if self {
		nv = func() (*gpubind.Topology, error) { return gpubind.DiscoverNVML(gpubind.NewNVML()) }
	}
	rep, err := whereami(c.root, *dev, os.LookupEnv, self, nv)
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if _, err := io.WriteString(stdout, rep.text()); err != nil {
		return err
	}
	if *strict && len(rep.Warnings) > 0 {
		return errStrict
	}
	return nil
}

// errStrict: --strict and warnings (exit 1; the warnings were printed already).
var errStrict = errors.New("whereami --strict: there are warnings")

func envInt(lookup func(string) (string, bool), names ...string) *int {
	for _, n := range names {
		if v, ok := lookup(n); ok {
			if i, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return &i
			}
		}
	}
	return nil
}

// whereami reads the process's own view under root ("" is /): procfs for its affinity,
// memory nodes and cgroups, sysfs for the GPUs and NICs, the device nodes' access for what
// CUDA can open. self says root is the live system (get_mempolicy asks the kernel). nv, when
// not nil, is NVML's view from inside the task, compared with what CUDA will show.
func whereami(root, dev string, lookup func(string) (string, bool), self bool, nv func() (*gpubind.Topology, error)) (*whereReport, error) {
	if root == "" {
		root = "/"
	}
	if dev == "" {
		dev = filepath.Join(root, "dev")
	}
	// A tree without processes (a fixture of sysfs and the driver's procfs) keeps the live
	// /proc for the process itself.
	procRoot := filepath.Join(root, "proc")
	if _, err := os.Lstat(filepath.Join(procRoot, "self")); err != nil {
		procRoot = "/proc"
	}
	getenv := func(n string) string { v, _ := lookup(n); return v }
	rep := &whereReport{Env: map[string]string{}, GPUs: []whereGPU{}, Warnings: []string{}, Cgroup: []string{},
		Sources: []string{gpubind.BackendSysfs}}
	rep.Host = getenv("SLURMD_NODENAME")
	if rep.Host == "" {
		rep.Host, _ = os.Hostname()
	}
	rep.Rank = envInt(lookup, "SLURM_PROCID", "PMIX_RANK", "OMPI_COMM_WORLD_RANK")
	rep.Local = envInt(lookup, "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK")
	for _, n := range whereEnv {
		if v, ok := lookup(n); ok {
			rep.Env[n] = v
		}
	}
	warn := func(format string, a ...any) { rep.Warnings = append(rep.Warnings, fmt.Sprintf(format, a...)) }

	// The process: procfs.
	pfs, err := procfs.NewFS(procRoot)
	if err != nil {
		return nil, fmt.Errorf("procfs at %s: %w", procRoot, err)
	}
	p, err := pfs.Self()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(procRoot, "self"), err)
	}
	st, err := p.NewStatus()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(procRoot, "self/status"), err)
	}
	var cpus gpubind.CPUSet
	for _, c := range st.CpusAllowedList {
		cpus = cpus.Union(gpubind.NewCPUSet(int(c)))
	}
	rep.CPUs = cpus.String()
	rep.Mems = memsAllowed(filepath.Join(procRoot, strconv.Itoa(p.PID), "status"))
	if cgs, err := p.Cgroups(); err == nil {
		for _, cg := range cgs {
			rep.Cgroup = append(rep.Cgroup, fmt.Sprintf("%d:%s:%s", cg.HierarchyID, strings.Join(cg.Controllers, ","), cg.Path))
		}
	}
	if self {
		rep.MemPolicy = memPolicy()
	}

	// The node: sysfs; the GPUs CUDA shows: the openable ones, CUDA_VISIBLE_DEVICES applied.
	topo, err := gpubind.DiscoverSysfs(root)
	if err != nil {
		return nil, err
	}
	amd := topo.IsAMD()
	var usable, vis []cudavis.GPU
	cvd, set := lookup("CUDA_VISIBLE_DEVICES")
	if amd {
		// HIP: ROCR_VISIBLE_DEVICES, then HIP's variables relative to it (whereami_amd.go).
		usable, vis, err = amdVisible(topo, dev, lookup)
	} else {
		if usable, err = cudavis.ScanDev(root, dev, nil); err == nil {
			vis, err = cudavis.Visible(usable, cvd, set)
		}
	}
	if err != nil {
		return nil, err
	}
	find := topoFinder(topo, amd)
	for k, g := range vis {
		wg := whereGPU{VisibleIndex: k, Index: -1, BusID: g.BusID, UUID: g.UUID, NUMA: -1, Openable: true}
		if i, ok := find(g); ok {
			wg.Index, wg.NUMA = topo.GPUs[i].Index, topo.GPUs[i].NUMA
		}
		if g.Minor >= 0 && !amd { // amdVisible keeps only the render nodes it can open
			err := cudavis.Access(filepath.Join(dev, "nvidia"+strconv.Itoa(g.Minor)))
			wg.Openable = !errors.Is(err, syscall.EPERM) && !errors.Is(err, syscall.EACCES)
		}
		if !wg.Openable {
			warn("CUDA device %d (%s) cannot be opened: its /dev/nvidia%d denies read and write", k, g.BusID, g.Minor)
		}
		rep.GPUs = append(rep.GPUs, wg)
	}
	if len(vis) > 1 && !amd && getenv("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" {
		warn("CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA may number the %d visible GPUs in another order than shown", len(vis))
	}
	switch {
	case len(vis) == 0 && amd:
		warn("no GPU is visible to HIP (ROCR_VISIBLE_DEVICES=%q, HIP_VISIBLE_DEVICES=%q, CUDA_VISIBLE_DEVICES=%q, %d GPUs can be opened)",
			getenv("ROCR_VISIBLE_DEVICES"), getenv("HIP_VISIBLE_DEVICES"), cvd, len(usable))
	case len(vis) == 0:
		warn("no GPU is visible to CUDA (CUDA_VISIBLE_DEVICES=%q, %d GPUs can be opened)", cvd, len(usable))
	}
	if nv != nil {
		checkNVML(rep, nv, vis, warn)
	}
	checkCPUs(rep, topo, cpus, find, vis, warn)
	checkClaim(rep, getenv, vis, usable, warn)
	checkNIC(rep, topo, find, vis, getenv, warn)
	return rep, nil
}

// gpuFinder finds a GPU the task sees in the node's topology, by its index there.
type gpuFinder func(cudavis.GPU) (int, bool)

// topoFinder matches by render minor on AMD nodes, where the compute partitions of an MI300
// share their device's bus id (and only their render nodes tell them apart), and by bus id
// on NVIDIA nodes.
func topoFinder(topo *gpubind.Topology, amd bool) gpuFinder {
	return func(g cudavis.GPU) (int, bool) {
		for i, tg := range topo.GPUs {
			if amd && g.Minor >= 0 {
				if tg.Minor == g.Minor {
					return i, true
				}
			} else if g.BusID != "" && tg.BusID == g.BusID {
				return i, true
			}
		}
		return -1, false
	}
}

// checkNVML compares NVML's view inside the task with the GPUs CUDA will show: NVML lists
// the GPUs the task can open (under ConstrainDevices, numbered from 0), each with its UUID.
// No NVML (no driver library, a container without it) is no warning.
func checkNVML(rep *whereReport, nv func() (*gpubind.Topology, error), vis []cudavis.GPU, warn func(string, ...any)) {
	t, err := nv()
	if err != nil || t == nil {
		return
	}
	rep.Sources = append(rep.Sources, gpubind.BackendNVML)
	uuid := map[string]string{}
	for _, g := range t.GPUs {
		uuid[g.BusID] = g.UUID
	}
	for k, g := range vis {
		if g.BusID == "" {
			continue // a MIG instance: no bus id to look up
		}
		u, ok := uuid[g.BusID]
		switch {
		case !ok:
			warn("CUDA device %d (%s) is not among the GPUs NVML lists in this task", k, g.BusID)
		case u != "" && g.UUID != "" && !strings.EqualFold(u, g.UUID):
			warn("CUDA device %d (%s): the driver's /proc says %s, NVML says %s", k, g.BusID, g.UUID, u)
		}
	}
}

// checkCPUs: the task's CPUs against its first GPU's, and across NUMA nodes.
func checkCPUs(rep *whereReport, topo *gpubind.Topology, cpus gpubind.CPUSet, find gpuFinder, vis []cudavis.GPU, warn func(string, ...any)) {
	var nodes []string
	for _, n := range topo.NUMA {
		if !cpus.Intersect(n.CPUs).IsEmpty() {
			nodes = append(nodes, strconv.Itoa(n.ID))
		}
	}
	if len(nodes) > 1 {
		warn("the task's CPUs %s span NUMA nodes %s", cpus, strings.Join(nodes, ", "))
	}
	if len(vis) == 0 {
		return
	}
	i, ok := find(vis[0])
	if !ok {
		return
	}
	g := &topo.GPUs[i]
	local := g.CPUs
	if l := topo.NUMACPUs(g.NUMA); g.NUMA >= 0 && !l.IsEmpty() {
		local = l
	}
	rep.CPUsLocalToGPUs = !cpus.IsEmpty() && local.Contains(cpus)
	if !rep.CPUsLocalToGPUs && !local.IsEmpty() && !local.Equal(topo.AllCPUs()) {
		warn("the task's CPUs %s are not all local to CUDA device 0 (%s, NUMA %d: CPUs %s)", cpus, g.BusID, g.NUMA, local)
	}
}

// checkClaim compares the plugin's claim (GPUBIND_PCI_BUS_IDS at the CUDA devices
// GPUBIND_CUDA_DEVICES names, device 0.. without it) with what CUDA_VISIBLE_DEVICES resolves to.
func checkClaim(rep *whereReport, getenv func(string) string, vis, usable []cudavis.GPU, warn func(string, ...any)) {
	buses := splitComma(getenv("GPUBIND_PCI_BUS_IDS"))
	devs := splitComma(getenv("GPUBIND_CUDA_DEVICES"))
	for i, b := range buses {
		bus, err := cudavis.NormalizeBusID(b)
		if err != nil {
			warn("GPUBIND_PCI_BUS_IDS entry %q is no PCI bus id", b)
			continue
		}
		k := i
		if i < len(devs) {
			if k, err = strconv.Atoi(devs[i]); err != nil {
				warn("GPUBIND_CUDA_DEVICES entry %q is no number", devs[i])
				continue
			}
		}
		openable := false
		for _, u := range usable {
			openable = openable || u.BusID == bus
		}
		switch {
		case !openable:
			warn("the plugin gave this task GPU %s, but the task cannot open it (device cgroup or permissions)", bus)
		case k < 0 || k >= len(vis):
			warn("the plugin says the task's GPU %s is CUDA device %d, but only %d devices are visible", bus, k, len(vis))
		case vis[k].BusID != bus:
			warn("the plugin says the task's GPU %s is CUDA device %d, but CUDA device %d is %s", bus, k, k, vis[k].BusID)
		}
	}
}

// checkNIC: the NIC nearest the first GPU, and NCCL_IB_HCA against the node's rails (the
// NICs nearest its GPUs): NCCL wants one list on every rank, holding each GPU's rail.
func checkNIC(rep *whereReport, topo *gpubind.Topology, find gpuFinder, vis []cudavis.GPU, getenv func(string) string, warn func(string, ...any)) {
	rails := map[string]bool{}
	var railList []string
	for i := range topo.GPUs {
		if n := topo.ClosestNIC(i); n != "" && !rails[n] {
			rails[n] = true
			railList = append(railList, n)
		}
	}
	sort.Strings(railList)
	if len(vis) > 0 {
		if i, ok := find(vis[0]); ok {
			rep.NIC = topo.NICPort(topo.ClosestNIC(i))
		}
	}
	hca, ok := strings.CutPrefix(getenv("NCCL_IB_HCA"), "=")
	if !ok || hca == "" {
		return
	}
	names := map[string]bool{}
	for _, e := range splitComma(hca) {
		name, _, _ := strings.Cut(e, ":")
		names[name] = true
		if !rails[name] {
			warn("NCCL_IB_HCA names %s, which is nearest to none of this node's GPUs (the node's rails: %s)", name, strings.Join(railList, ","))
		}
	}
	if own, _, _ := strings.Cut(rep.NIC, ":"); own != "" && !names[own] {
		warn("NCCL_IB_HCA=%s leaves out %s, the NIC nearest this task's GPU: NCCL cannot use that rail", getenv("NCCL_IB_HCA"), own)
	}
}

func splitComma(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}

// memsAllowed is Mems_allowed_list from a status file ("" when absent).
func memsAllowed(status string) string {
	b, err := os.ReadFile(status)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Mems_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memPolicy is the calling thread's NUMA memory policy, get_mempolicy(2).
func memPolicy() string {
	var mode int32
	var mask [16]uint64 // 1024 nodes
	_, _, e := unix.Syscall6(unix.SYS_GET_MEMPOLICY, uintptr(unsafe.Pointer(&mode)),
		uintptr(unsafe.Pointer(&mask[0])), uintptr(len(mask)*64), 0, 0, 0)
	if e != 0 {
		return "unknown (" + e.Error() + ")"
	}
	names := []string{"default", "preferred", "bind", "interleave", "local", "preferred_many", "weighted_interleave"}
	m := int(mode) &^ (1<<15 | 1<<14 | 1<<13) // MPOL_F_STATIC_NODES, RELATIVE_NODES, NUMA_BALANCING
	name := "mode " + strconv.Itoa(m)
	if m >= 0 && m < len(names) {
		name = names[m]
	}
	var nodes gpubind.CPUSet
	for i := 0; i < len(mask)*64; i++ {
		if mask[i/64]&(1<<(i%64)) != 0 {
			nodes = nodes.Union(gpubind.NewCPUSet(i))
		}
	}
	if m == 0 || m == 4 || nodes.IsEmpty() {
		return name
	}
	return name + ":" + nodes.String()
}

func (r *whereReport) text() string {
	var b strings.Builder
	num := func(p *int) string {
		if p == nil {
			return "?"
		}
		return strconv.Itoa(*p)
	}
	fmt.Fprintf(&b, "host %s rank %s local id %s\n", r.Host, num(r.Rank), num(r.Local))
	fmt.Fprintf(&b, "cpus %s  mems %s", dashs(r.CPUs), dashs(r.Mems))
	if r.MemPolicy != "" {
		fmt.Fprintf(&b, "  mempolicy %s", r.MemPolicy)
	}
	b.WriteString("\n")
	for _, g := range r.GPUs {
		open := "openable"
		if !g.Openable {
			open = "NOT openable"
		}
		fmt.Fprintf(&b, "CUDA device %d: GPU %d %s %s NUMA %d %s\n", g.VisibleIndex, g.Index, dashs(g.BusID), dashs(g.UUID), g.NUMA, open)
	}
	if len(r.GPUs) > 0 {
		yes := "no"
		if r.CPUsLocalToGPUs {
			yes = "yes"
		}
		fmt.Fprintf(&b, "cpus local to CUDA device 0: %s\nnic nearest CUDA device 0: %s\n", yes, dashs(r.NIC))
	}
	for _, n := range whereEnv {
		if v, ok := r.Env[n]; ok {
			fmt.Fprintf(&b, "%s=%s\n", n, v)
		}
	}
	for _, c := range r.Cgroup {
		fmt.Fprintf(&b, "cgroup %s\n", c)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

func dashs(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
