package gpubind

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The CPUs nearest a GPU, finer than its NUMA node (the cpus flag): on AMD nodes the
// GPU's share of its NUMA node's L3 domains, and gres.conf Cores= where the admin gave
// it. docs/admin.md "AMD Instinct GPUs" ("cpus on AMD nodes") says what is read and why.

// cpuTopology is what sysfs says about the node's CPUs: its cores, in Slurm's logical
// core order (gres.conf Cores= numbers them so), and its L3 domains, each the set of
// CPUs sharing one L3 cache (an AMD CCD), in order of their first CPU.
type cpuTopology struct {
	cores []CPUSet
	l3    []CPUSet
}

// readCPUTopology reads, for every CPU of the NUMA nodes, its core
// (topology/core_cpus_list, else thread_siblings_list), package
// (topology/physical_package_id) and L3 (the cache/indexN whose level is 3:
// shared_cpu_list) from sysfs under root. A CPU without these files (a fixture, a VM
// that hides them) gives no cores or no L3: the caller then keeps to NUMA nodes.
// Cores are in Slurm's logical order (hwloc's: by package, then by first CPU), which
// gres.conf Cores= indexes.
func readCPUTopology(root string, numa []NUMANode) cpuTopology {
	var all CPUSet
	for _, n := range numa {
		all = all.Union(n.CPUs)
	}
	type core struct {
		cpus    CPUSet
		pkgLow  int // the lowest CPU of the core's package
		pkgID   int
		coreLow int
	}
	var cores []core
	var l3 []CPUSet
	coreOK, l3OK := true, true
	seenCore := map[string]bool{}
	seenL3 := map[string]bool{}
	pkgLow := map[int]int{}
	for _, c := range all.CPUs() {
		dir := rootPath(root, "sys", "devices", "system", "cpu", "cpu"+strconv.Itoa(c))
		if coreOK {
			cs, err := readCPUListFile(filepath.Join(dir, "topology", "core_cpus_list"))
			if err != nil {
				cs, err = readCPUListFile(filepath.Join(dir, "topology", "thread_siblings_list"))
			}
			pkg, perr := readTrim(filepath.Join(dir, "topology", "physical_package_id"))
			p, aerr := strconv.Atoi(pkg)
			if err != nil || perr != nil || aerr != nil || !cs.Has(c) {
				coreOK = false
			} else {
				if low, ok := pkgLow[p]; !ok || c < low {
					pkgLow[p] = c
				}
				if k := cs.String(); !seenCore[k] {
					seenCore[k] = true
					cores = append(cores, core{cpus: cs.Intersect(all), pkgID: p, coreLow: cs.CPUs()[0]})
				}
			}
		}
		if l3OK {
			s, ok := readL3(dir)
			if !ok || !s.Has(c) {
				l3OK = false
			} else if k := s.String(); !seenL3[k] {
				seenL3[k] = true
				l3 = append(l3, s.Intersect(all))
			}
		}
	}
	var out cpuTopology
	if coreOK && len(cores) > 0 {
		for i := range cores {
			cores[i].pkgLow = pkgLow[cores[i].pkgID]
		}
		sort.SliceStable(cores, func(i, j int) bool {
			if cores[i].pkgLow != cores[j].pkgLow {
				return cores[i].pkgLow < cores[j].pkgLow
			}
			return cores[i].coreLow < cores[j].coreLow
		})
		for _, k := range cores {
			out.cores = append(out.cores, k.cpus)
		}
	}
	if l3OK && len(l3) > 0 {
		sort.SliceStable(l3, func(i, j int) bool { return l3[i].CPUs()[0] < l3[j].CPUs()[0] })
		out.l3 = l3
	}
	return out
}

// readL3 is the shared_cpu_list of the CPU's level-3 cache (cpu/cpuN/cache/indexK with
// level 3), false when it has none.
func readL3(cpuDir string) (CPUSet, bool) {
	ents, err := os.ReadDir(filepath.Join(cpuDir, "cache"))
	if err != nil {
		return CPUSet{}, false
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "index") {
			continue
		}
		d := filepath.Join(cpuDir, "cache", e.Name())
		if lvl, err := readTrim(filepath.Join(d, "level")); err != nil || lvl != "3" {
			continue
		}
		s, err := readCPUListFile(filepath.Join(d, "shared_cpu_list"))
		return s, err == nil && !s.IsEmpty()
	}
	return CPUSet{}, false
}

func readCPUListFile(path string) (CPUSet, error) {
	s, err := readTrim(path)
	if err != nil {
		return CPUSet{}, err
	}
	cs, err := ParseCPUList(s)
	if err != nil {
		return CPUSet{}, fmt.Errorf("%s: %w", path, err)
	}
	return cs, nil
}

// splitL3 gives each AMD GPU its share of its NUMA node's L3 domains (GPU.L3): where a
// NUMA node holds k GPUs and m*k L3 domains (m >= 1, k >= 2), the GPUs in KFD order
// (bus order on the Instinct platforms) take the domains in CPU order, m each. On a
// Frontier node (NUMA node = 2 CCDs = 2 GCDs) GCD 4 gets cores 0-7, GCD 5 cores 8-15,
// which is the OLCF user guide's GCD-to-L3 mapping. Elsewhere (one GPU per NUMA node,
// L3 domains that do not divide among its GPUs, no L3 in sysfs) the GPU keeps its NUMA
// node: a guess that could split a GPU from its cores is never made.
func splitL3(t *Topology, l3 []CPUSet) {
	for _, n := range t.NUMA {
		var doms []CPUSet
		for _, d := range l3 {
			if !d.IsEmpty() && n.CPUs.Contains(d) {
				doms = append(doms, d)
			}
		}
		var gpus []int
		for i := range t.GPUs {
			if t.GPUs[i].NUMA == n.ID {
				gpus = append(gpus, i)
			}
		}
		k := len(gpus)
		if k < 2 || len(doms) < k || len(doms)%k != 0 {
			continue
		}
		var union CPUSet
		for _, d := range doms {
			union = union.Union(d)
		}
		if !union.Equal(n.CPUs) {
			continue // some CPUs of the node are in no L3 domain read: not a clean split
		}
		sort.SliceStable(gpus, func(a, b int) bool { return t.GPUs[gpus[a]].Index < t.GPUs[gpus[b]].Index })
		m := len(doms) / k
		for j, gi := range gpus {
			var s CPUSet
			for _, d := range doms[j*m : (j+1)*m] {
				s = s.Union(d)
			}
			t.GPUs[gi].L3 = s
			t.GPUs[gi].setSource("l3_cpus", BackendSysfs)
		}
	}
}

// coresCPUs turns a gres.conf Cores= value (Slurm's logical core indices: "0-7",
// "[0-7]", "0,2-3") into the CPUs of those cores, every hardware thread of each.
func coresCPUs(t *Topology, val string) (CPUSet, error) {
	v := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(val), "["), "]")
	idx, err := ParseCPUList(v)
	if err != nil || idx.IsEmpty() {
		return CPUSet{}, fmt.Errorf("gres.conf Cores=%s is not a list of core indices (0-7,16-23)", val)
	}
	if len(t.Cores) == 0 {
		return CPUSet{}, fmt.Errorf("gres.conf Cores=%s: the node's core list is unknown (no topology/core_cpus_list in sysfs, or a snapshot without cores)", val)
	}
	var s CPUSet
	for _, i := range idx.CPUs() {
		if i >= len(t.Cores) {
			return CPUSet{}, fmt.Errorf("gres.conf Cores=%s: core %d, but the node has %d cores (0-%d, Slurm's logical core numbers)", val, i, len(t.Cores), len(t.Cores)-1)
		}
		s = s.Union(t.Cores[i])
	}
	return s, nil
}
