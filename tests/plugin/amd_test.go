package plugin

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// frontierBus are the GCDs' bus ids of the frontier fixtures, GCD 0..7 (KFD order), and
// frontierNUMA their NUMA nodes (OLCF: GCDs 4,5 on NUMA 0, 2,3 on 1, 6,7 on 2, 0,1 on 3).
var (
	frontierBus = []string{"0000:c1:00.0", "0000:c6:00.0", "0000:c9:00.0", "0000:ce:00.0",
		"0000:d1:00.0", "0000:d6:00.0", "0000:d9:00.0", "0000:de:00.0"}
	frontierNUMA = []int{3, 3, 1, 1, 0, 0, 2, 2}
)

// amdScript prints, per task, the AMD variables and which of the cluster's fake render
// nodes (by GCD) and fake kfd the task may open (access(2) consults the device cgroup).
func amdScript(c *cluster.Cluster) string {
	return `a=; for f in ` + c.DevDir + `/renderD*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}$(( ${f##*renderD} - 128 ))"; done; ` +
		`k=no; [ -r ` + c.DevDir + `/kfd ] && [ -w ` + c.DevDir + `/kfd ] && k=yes; ` +
		`d=; for f in ` + c.DevDir + `/card*; do [ -r "$f" ] && [ -w "$f" ] && d="$d${d:+,}${f##*card}"; done; ` +
		`echo "A $SLURM_PROCID ${ROCR_VISIBLE_DEVICES:--} ${HIP_VISIBLE_DEVICES:--} ${CUDA_VISIBLE_DEVICES:--} ${GPU_DEVICE_ORDINAL:--} ${GPUBIND_PCI_BUS_IDS:--} ${GPUBIND_GPUS:--} ${a:--} $k ${CUDA_DEVICE_ORDER:--} ${d:--}"`
}

var amdRe = regexp.MustCompile(`(?m)^A (\d+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+) (\S+)$`)

type amdTask struct {
	rank                          int
	rocr, hip, cuda, ordinal, bus string
	gcd                           int
	open, kfd, order              string
	cards                         string // card minors the task may open (card0: no GPU's)
}

func parseAMD(t *testing.T, out string, n int) []amdTask {
	t.Helper()
	lines := amdRe.FindAllStringSubmatch(out, -1)
	if len(lines) != n {
		t.Fatalf("%d task lines, want %d:\n%s", len(lines), n, out)
	}
	tasks := make([]amdTask, n)
	for _, m := range lines {
		r, _ := strconv.Atoi(m[1])
		g, err := strconv.Atoi(m[7])
		if err != nil || r < 0 || r >= n {
			t.Fatalf("task line %q", m[0])
		}
		tasks[r] = amdTask{rank: r, rocr: m[2], hip: m[3], cuda: m[4], ordinal: m[5], bus: m[6], gcd: g, open: m[8], kfd: m[9], order: m[10], cards: m[11]}
	}
	return tasks
}

// TestAMDFrontier: a real Slurm with task/cgroup+task/affinity, proctrack/cgroup and
// ConstrainDevices=yes, gres.conf listing fake render nodes (char 226:128+N in the
// cluster's private directory, in NUMA order, not KFD order) and a fake kfd; the plugin
// reads the frontier-2cpu fixture (NUMA 0 = CPU 0, NUMA 1 = CPU 1). closest must give the
// task on CPU 0 a GCD of NUMA 0 (4 or 5: the OLCF mapping, not GCD 0) and the task on
// CPU 1 one of NUMA 1, in ROCR_VISIBLE_DEVICES as ROCr numbers the step's GCDs inside the
// task, with HIP's variables 0; every task can open its step's render nodes and the kfd.
// The cluster also has fake card nodes: card0 (226:0, a BMC's VGA, no GCD's) and
// card<1+N> (226:1+N) for GCD N, as the fixture's sysfs names them (card minor is not
// render minor - 128 there). With isolate (the "isolate" cases) each task can open
// exactly its own GCD's render node and the kfd among GPU nodes: the other step GCDs'
// render and card nodes are denied, the GCDs Slurm denied stay denied, and everything
// Slurm allowed and gpubind does not guard (card0, the card nodes of GCDs outside the
// step, the kfd) stays as Slurm set it.
func TestAMDFrontier(t *testing.T) {
	line := plugLine(t, "root="+fixture("frontier-2cpu"), "source=sysfs")
	gresOrder := []int{4, 5, 2, 3, 6, 7, 0, 1} // GRES index -> GCD: NUMA 0, 1, 2, 3
	c := cluster.StartT(t, cluster.Config{CPUs: 8, TaskPlugin: "task/cgroup,task/affinity",
		Proctrack: "proctrack/cgroup", ConstrainDevices: true, AMD: true, GPUs: 8, GresOrder: gresOrder,
		PlugStack: []string{line}})
	script := amdScript(c)

	for _, tc := range []struct {
		name string
		args []string
		// the step's GCDs (GRES 0..k-1 through gresOrder), in KFD order
		step    []int
		isolate bool
	}{
		// All eight: ROCr numbers them 0..7 = KFD index.
		{"gpus=8", []string{"--gpus=8"}, []int{0, 1, 2, 3, 4, 5, 6, 7}, false},
		// GRES 0-3 = GCDs 4,5,2,3: the task sees GCDs 2,3,4,5 as ROCr 0,1,2,3.
		{"gpus=4", []string{"--gpus=4"}, []int{2, 3, 4, 5}, false},
		// isolate: the task opens its own GCD only, which ROCr then numbers 0.
		{"gpus=8 isolate", []string{"--gpus=8"}, []int{0, 1, 2, 3, 4, 5, 6, 7}, true},
		{"gpus=4 isolate", []string{"--gpus=4"}, []int{2, 3, 4, 5}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := "closest,verbose"
			if tc.isolate {
				opt = "closest,isolate,verbose"
			}
			args := append(append([]string{"-n2"}, tc.args...), "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo="+opt, "sh", "-c", script)
			out, errOut, err := c.Srun(ctx(t), args...)
			if err != nil {
				t.Fatalf("srun %v: %v\n%s\n%s", tc.args, err, out, errOut)
			}
			var stepOpen []string
			for _, g := range tc.step {
				stepOpen = append(stepOpen, strconv.Itoa(g))
			}
			for _, k := range parseAMD(t, out, 2) {
				if k.gcd < 0 || k.gcd > 7 || frontierNUMA[k.gcd] != k.rank || k.bus != frontierBus[k.gcd] {
					t.Errorf("task %d (CPU %d, NUMA %d): GCD %d %s", k.rank, k.rank, k.rank, k.gcd, k.bus)
					continue
				}
				rocr := -1
				for i, g := range tc.step {
					if g == k.gcd {
						rocr = i
					}
				}
				// Card nodes: card0 and those of GCDs outside the step are not
				// gpubind's to deny; with isolate the other step GCDs' are denied.
				wantOpen, wantCards := stepOpen, []string{"0"}
				for g := 0; g < 8; g++ {
					inStep := false
					for _, s := range tc.step {
						inStep = inStep || s == g
					}
					if !inStep || !tc.isolate || g == k.gcd {
						wantCards = append(wantCards, strconv.Itoa(g+1))
					}
				}
				if tc.isolate {
					rocr = 0
					wantOpen = []string{strconv.Itoa(k.gcd)}
				}
				if cards := strings.Join(sortedInts(strings.Split(k.cards, ",")), ","); cards != strings.Join(wantCards, ",") {
					t.Errorf("task %d (GCD %d) may open card nodes %s, want %s", k.rank, k.gcd, cards, strings.Join(wantCards, ","))
				}
				if k.rocr != strconv.Itoa(rocr) || k.hip != "0" || k.cuda != "0" || k.ordinal != "0" || k.order != "-" {
					t.Errorf("task %d: ROCR_VISIBLE_DEVICES=%s HIP=%s CUDA=%s GPU_DEVICE_ORDINAL=%s CUDA_DEVICE_ORDER=%s, want ROCr %d and 0s",
						k.rank, k.rocr, k.hip, k.cuda, k.ordinal, k.order, rocr)
				}
				if open := strings.Split(k.open, ","); strings.Join(sortedInts(open), ",") != strings.Join(wantOpen, ",") || k.kfd != "yes" {
					t.Errorf("task %d may open render nodes of GCDs %s and kfd %s, want %v and yes", k.rank, k.open, k.kfd, wantOpen)
				}
				want := "ROCR_VISIBLE_DEVICES=" + strconv.Itoa(rocr) + " -> GPU " + strconv.Itoa(k.gcd) + " " + frontierBus[k.gcd]
				if !strings.Contains(errOut, "(rank "+strconv.Itoa(k.rank)+"): "+want) {
					t.Errorf("no mapping line %q for task %d in:\n%s", want, k.rank, errOut)
				}
			}
		})
	}
}

// sortedInts sorts decimal strings by value.
func sortedInts(s []string) []string {
	out := append([]string(nil), s...)
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i])
		b, _ := strconv.Atoi(out[j])
		return a < b
	})
	return out
}

// TestAMDCPUs: the cpus flag on an AMD node binds each task to its GCD's cores, not to
// the whole NUMA node (issue 38 item 5). A real Slurm (task/cgroup+task/affinity,
// proctrack/cgroup, ConstrainCores and ConstrainDevices) runs two tasks with
// --cpu-bind=none (Slurm binds no CPUs, so the cpus flag applies) on GRES 0,1 = GCDs 4
// and 5, both on NUMA 0. The plugin reads the frontier-l3-2cpu fixture: NUMA 0 is
// CPUs 0-1, each CPU a core with an L3 of its own, as GCDs 4 and 5 have one CCD each on
// a real node. Without Cores= in gres.conf the L3 split gives GCD 4 CPU 0 and GCD 5
// CPU 1; with Cores= (Slurm's logical core numbers) the admin's word wins: here
// swapped, GCD 4 Cores=1 and GCD 5 Cores=0. The node's gres.conf lists GCDs 4 and 5
// only (Slurm's choice among GPUs with Cores= follows core affinity, and the test
// must know which GCDs the step gets).
func TestAMDCPUs(t *testing.T) {
	line := plugLine(t, "root="+fixture("frontier-l3-2cpu"), "source=sysfs")
	gresOrder := []int{4, 5}
	for _, tc := range []struct {
		name string
		gres []string
		want map[int]string // GCD -> the task's CPUs
	}{
		{"L3 split", nil, map[int]string{4: "0", 5: "1"}},
		{"gres.conf Cores=", []string{"Cores=1", "Cores=0"}, map[int]string{4: "1", 5: "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := cluster.Config{CPUs: 2, TaskPlugin: "task/cgroup,task/affinity", Proctrack: "proctrack/cgroup",
				ConstrainDevices: true, AMD: true, GPUs: 2, GresOrder: gresOrder, PlugStack: []string{line}}
			if tc.gres != nil {
				for i, gcd := range gresOrder {
					l := "Name=gpu File=@DEV@/renderD" + strconv.Itoa(128+gcd)
					if i < len(tc.gres) {
						l += " " + tc.gres[i]
					}
					cfg.GresConf = append(cfg.GresConf, l)
				}
			}
			c := cluster.StartT(t, cfg)
			script := `echo "C $SLURM_PROCID ${GPUBIND_GPUS:--} ${ROCR_VISIBLE_DEVICES:--} $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"`
			out, errOut, err := c.Srun(ctx(t), "-n2", "--gpus=2", "--cpu-bind=none", "--gpu-bind-topo=closest,cpus,verbose", "sh", "-c", script)
			if err != nil {
				t.Fatalf("srun: %v\n%s\n%s", err, out, errOut)
			}
			lines := regexp.MustCompile(`(?m)^C (\d+) (\S+) (\S+) (\S+)$`).FindAllStringSubmatch(out, -1)
			if len(lines) != 2 {
				t.Fatalf("%d task lines, want 2:\n%s\n%s", len(lines), out, errOut)
			}
			seen := map[int]bool{}
			for _, m := range lines {
				gcd, err := strconv.Atoi(m[2])
				want, ok := tc.want[gcd]
				if err != nil || !ok || seen[gcd] {
					t.Errorf("task %s got GCD %s, want one of GCDs 4, 5 each once\n%s", m[1], m[2], errOut)
					continue
				}
				seen[gcd] = true
				if m[4] != want {
					t.Errorf("task %s (GCD %d, ROCR_VISIBLE_DEVICES=%s) runs on CPUs %s, want %s (not NUMA 0's 0-1)\n%s", m[1], gcd, m[3], m[4], want, errOut)
				}
			}
		})
	}
}

// TestAMDMI300XCPX: an MI300X node in CPX mode (fixture mi300x-cpx: 2 devices x 8 compute
// partitions, each a KFD node with a render node of its own, sharing the device's bus id
// and UUID) under a real Slurm with ConstrainDevices and gres.conf listing the 16
// partitions' render nodes. A 2-task step of 2 GPUs gets partitions 0 and 1 of the first
// device: each task its own in ROCR_VISIBLE_DEVICES (ROCr numbers the step's partitions
// in KFD order), both render nodes openable and no other, and the mapping line names
// the partition by XCP and render node, since the bus id does not tell them apart.
func TestAMDMI300XCPX(t *testing.T) {
	line := plugLine(t, "root="+fixture("mi300x-cpx"), "source=sysfs")
	var order []int
	for i := 0; i < 16; i++ {
		order = append(order, i)
	}
	c := cluster.StartT(t, cluster.Config{CPUs: 2, TaskPlugin: "task/cgroup,task/affinity", Proctrack: "proctrack/cgroup",
		ConstrainDevices: true, AMD: true, GPUs: 16, GresOrder: order, PlugStack: []string{line}})
	out, errOut, err := c.Srun(ctx(t), "-n2", "--gpus=2", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,verbose", "sh", "-c", amdScript(c))
	if err != nil {
		t.Fatalf("srun: %v\n%s\n%s", err, out, errOut)
	}
	seen := map[int]bool{}
	for _, k := range parseAMD(t, out, 2) {
		if k.gcd < 0 || k.gcd > 1 || seen[k.gcd] || k.rocr != strconv.Itoa(k.gcd) || k.hip != "0" || k.bus != "0000:05:00.0" ||
			strings.Join(sortedInts(strings.Split(k.open, ",")), ",") != "0,1" || k.kfd != "yes" {
			t.Errorf("task %d: partition %d ROCR_VISIBLE_DEVICES=%s HIP=%s bus %s opens %s kfd %s; want partition 0 or 1 of 0000:05:00.0, each once, ROCr = its KFD index, render nodes 0,1",
				k.rank, k.gcd, k.rocr, k.hip, k.bus, k.open, k.kfd)
			continue
		}
		seen[k.gcd] = true
		want := fmt.Sprintf("(rank %d): ROCR_VISIBLE_DEVICES=%d -> GPU %d 0000:05:00.0 xcp %d renderD%d GPU-", k.rank, k.gcd, k.gcd, k.gcd, 128+k.gcd)
		if !strings.Contains(errOut, want) {
			t.Errorf("no mapping line %q in:\n%s", want, errOut)
		}
	}
}
