package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// blockSlurm is a Slurm install prefix with topology/block (23.11 and later): the one
// the tests run ($SLURM_PREFIX) when it has it, else the matrix's cached 24.11.7.
func blockSlurm(t *testing.T) string {
	prefix := os.Getenv("SLURM_PREFIX")
	if prefix == "/usr" {
		prefix = ""
	}
	out, err := exec.Command(slurmBin(prefix, "slurmctld"), "-V").Output()
	if m := regexp.MustCompile(`slurm (\d+)\.(\d+)`).FindStringSubmatch(string(out)); err == nil && m != nil {
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if major > 23 || (major == 23 && minor >= 11) {
			return prefix
		}
	}
	root, _ := filepath.Abs("../..")
	p, err := exec.Command(filepath.Join(root, "tests/slurm/build.sh"), "--prefix", "24.11.7").Output()
	cached := strings.TrimSpace(string(p))
	if _, serr := os.Stat(filepath.Join(cached, "sbin", "slurmctld")); err != nil || serr != nil {
		t.Skipf("the Slurm here (%q) has no topology/block and 24.11.7 is not built (tests/slurm/build.sh 24.11.7)", strings.TrimSpace(string(out)))
	}
	return cached
}

// TestTopologyConfSlurm: the topology.conf that `gpubind topology-conf` writes for two
// NVLink cliques (node[1-2], node[3-4]; node5's fabric still in progress) is what a real
// slurmctld with topology/block reads, and it places a 2-node job inside one clique:
// with node1 taken, `srun -N2 --exclusive` runs on node[3-4], never on node2 and node3.
func TestTopologyConfSlurm(t *testing.T) {
	prefix := blockSlurm(t)
	var nodes []*gpubind.Topology
	for h, c := range map[string]uint32{"node1": 1, "node2": 1, "node3": 2, "node4": 2} {
		nodes = append(nodes, fixtures.GB200Tray(h, c, gpubind.FabricCompleted))
	}
	nodes = append(nodes, fixtures.GB200Tray("node5", 2, gpubind.FabricInProgress))
	conf, err := gpubind.TopologyConf(nodes)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(conf, "BlockName=nvl6b0f3c1e_1 Nodes=node[1-2]\n") || !strings.Contains(conf, "BlockSizes=2,4\n") ||
		!strings.Contains(conf, "#   node5: fabric in_progress\n") {
		t.Fatalf("topology.conf:\n%s", conf)
	}
	c := StartT(t, Config{Nodes: 4, NoGPUs: true, SlurmPrefix: prefix,
		SlurmConf:    []string{"TopologyPlugin=topology/block"},
		TopologyConf: strings.Split(strings.TrimSuffix(conf, "\n"), "\n")})
	ctx := ctxT(t)
	out, errOut, err := c.Run(ctx, "scontrol", "show", "topology")
	if err != nil {
		t.Fatalf("scontrol show topology: %v\n%s%s", err, out, errOut)
	}
	t.Logf("scontrol show topology:\n%s", out)
	for _, want := range []string{"BlockName=nvl6b0f3c1e_1", "Nodes=node[1-2]", "BlockName=nvl6b0f3c1e_2", "Nodes=node[3-4]"} {
		if !strings.Contains(out, want) {
			t.Errorf("scontrol show topology lacks %q:\n%s", want, out)
		}
	}
	if log := c.slurmctldLog(); strings.Contains(log, "error: ") && strings.Contains(log, "block") {
		t.Errorf("slurmctld complains about the blocks:\n%s", log)
	}
	if out, errOut, err := c.Run(ctx, "sbatch", "-N1", "-w", "node1", "--exclusive", "-o", "/dev/null", "--wrap", "sleep 300"); err != nil {
		t.Fatalf("sbatch: %v\n%s%s", err, out, errOut)
	}
	if _, _, err := c.Run(ctx, "bash", "-c", `for i in $(seq 100); do squeue -h -t R | grep -q . && exit 0; sleep 0.2; done; exit 1`); err != nil {
		t.Fatal("the job on node1 did not start")
	}
	out, errOut, err = c.Srun(ctx, "-N2", "--exclusive", "hostname")
	if err != nil {
		t.Fatalf("srun -N2: %v\n%s%s", err, out, errOut)
	}
	t.Logf("srun -N2: %s (slurmctld %s)", strings.Fields(out), c.Bin("slurmctld"))
	got := strings.Fields(out)
	sort.Strings(got)
	if !slices.Equal(got, []string{"node3", "node4"}) {
		t.Errorf("srun -N2 with node1 busy ran on %q, want node3 node4 (one clique)", got)
	}
}
