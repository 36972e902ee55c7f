package helper

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rankOut is what ghtest printed for one rank in "info" mode.
type rankOut struct {
	rank, size, lrank, lsize, node, nnodes, pid, cuda int
	bus, uuid, host, id                               string
	scal                                              []string
	nodeG, colorG                                     group
	seconds                                           float64
}

type group struct {
	color, rank, size, root int
	id                      string
	seen                    bool
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// parse reads ghtest's output; FAIL lines fail the test.
func parse(t *testing.T, out string) map[int]*rankOut {
	t.Helper()
	res := map[int]*rankOut{}
	get := func(r int) *rankOut {
		if res[r] == nil {
			res[r] = &rankOut{rank: r}
		}
		return res[r]
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "FAIL":
			t.Errorf("ghtest: %s", sc.Text())
		case "TIME":
			get(atoi(t, f[1])).seconds, _ = strconv.ParseFloat(f[2], 64)
		case "INFO":
			if len(f) != 13 {
				t.Fatalf("bad INFO line %q", sc.Text())
			}
			o := get(atoi(t, f[1]))
			o.size, o.lrank, o.lsize, o.node, o.nnodes = atoi(t, f[2]), atoi(t, f[3]), atoi(t, f[4]), atoi(t, f[5]), atoi(t, f[6])
			o.pid, o.cuda = atoi(t, f[7]), atoi(t, f[8])
			o.bus, o.uuid, o.host, o.id = f[9], f[10], f[11], f[12]
		case "SCAL":
			o := get(atoi(t, f[1]))
			o.scal = f[3:]
			if len(o.scal) != atoi(t, f[2]) {
				t.Errorf("SCAL line with %d IDs, says %s", len(o.scal), f[2])
			}
		case "NODE":
			get(atoi(t, f[1])).nodeG = group{color: -1, rank: atoi(t, f[2]), size: atoi(t, f[3]), root: atoi(t, f[4]), id: f[5], seen: true}
		case "COLOR":
			get(atoi(t, f[1])).colorG = group{color: atoi(t, f[2]), rank: atoi(t, f[3]), size: atoi(t, f[4]), root: atoi(t, f[5]), id: f[6], seen: true}
		}
	}
	return res
}

// rankHasRoot is NCCL's documented function for ncclCommInitRankScalable (the oracle here,
// written independently of ncclid.rootRanks).
func rankHasRoot(rank, nRanks, nIds int) bool {
	rmr, rpr := nRanks%nIds, nRanks/nIds
	rlim := rmr * (rpr + 1)
	if rank < rlim {
		return rank%(rpr+1) == 0
	}
	return (rank-rlim)%rpr == 0
}

// checkInfo checks a whole "info" run of n ranks on nodes nodes with nids scalable IDs, and the
// stub's log of ncclGetUniqueId calls.
func checkInfo(t *testing.T, out string, n, nodes, nids int, stubLog string) {
	t.Helper()
	res := parse(t, out)
	if t.Failed() {
		t.Fatalf("output:\n%s", out)
	}
	if len(res) != n {
		t.Fatalf("%d ranks reported, want %d:\n%s", len(res), n, out)
	}
	byNode := map[int][]int{}
	hostOf := map[int]string{}
	want := res[0]
	for r := 0; r < n; r++ {
		o := res[r]
		if o == nil || o.id == "" || !o.nodeG.seen || !o.colorG.seen {
			t.Fatalf("rank %d incomplete output:\n%s", r, out)
		}
		if o.size != n || o.nnodes != nodes || o.node < 0 || o.node >= nodes {
			t.Errorf("rank %d: size %d nodes %d node %d; want size %d, %d nodes", r, o.size, o.nnodes, o.node, n, nodes)
		}
		if o.id != want.id || len(o.id) != 256 {
			t.Errorf("rank %d world ID %.16s..., rank 0 has %.16s...", r, o.id, want.id)
		}
		if strings.Join(o.scal, ",") != strings.Join(want.scal, ",") || len(o.scal) != nids {
			t.Errorf("rank %d scalable IDs differ from rank 0's or are not %d", r, nids)
		}
		byNode[o.node] = append(byNode[o.node], r)
		if h, ok := hostOf[o.node]; ok && h != o.host {
			t.Errorf("node id %d on hosts %s and %s", o.node, h, o.host)
		}
		hostOf[o.node] = o.host
	}
	if len(byNode) != nodes {
		t.Errorf("ranks on %d node ids, want %d", len(byNode), nodes)
	}
	// Local ranks: 0..local_size-1 in global rank order on each node; the node group is the
	// node's ranks with its lowest rank as root.
	nodeIDs := map[int]string{}
	for node, ranks := range byNode {
		sort.Ints(ranks)
		for i, r := range ranks {
			o := res[r]
			if o.lrank != i || o.lsize != len(ranks) {
				t.Errorf("rank %d on node %d: local %d/%d, want %d/%d", r, node, o.lrank, o.lsize, i, len(ranks))
			}
			g := o.nodeG
			if g.rank != i || g.size != len(ranks) || g.root != ranks[0] || g.id != res[ranks[0]].nodeG.id {
				t.Errorf("rank %d node group %+v, want rank %d size %d root %d", r, g, i, len(ranks), ranks[0])
			}
		}
		nodeIDs[node] = res[ranks[0]].nodeG.id
	}
	// Color groups: color = rank % 3.
	colorIDs := map[int]string{}
	for r := 0; r < n; r++ {
		g := res[r].colorG
		var members []int
		for q := r % 3; q < n; q += 3 {
			members = append(members, q)
		}
		if g.color != r%3 || g.rank != r/3 || g.size != len(members) || g.root != members[0] || g.id != res[members[0]].colorG.id {
			t.Errorf("rank %d color group %+v, want color %d rank %d size %d root %d", r, g, r%3, r/3, len(members), members[0])
		}
		colorIDs[r%3] = res[members[0]].colorG.id
	}
	// The stub's log: exactly the expected roots called ncclGetUniqueId, once per ID, and the
	// bytes they made are the bytes everyone got.
	type made struct {
		rank int
		id   string
	}
	expect := map[made]int{{0, want.id}: 1}
	var roots []int
	for r := 0; r < n; r++ {
		if rankHasRoot(r, n, nids) {
			roots = append(roots, r)
		}
	}
	if len(roots) != nids {
		t.Fatalf("oracle: %d roots for %d IDs", len(roots), nids)
	}
	for i, r := range roots {
		expect[made{r, want.scal[i]}]++
	}
	for node, id := range nodeIDs {
		expect[made{byNode[node][0], id}]++
	}
	for c, id := range colorIDs {
		expect[made{c, id}]++
	}
	pidRank := map[int]int{}
	for r, o := range res {
		pidRank[o.pid] = r
	}
	data, err := os.ReadFile(stubLog)
	if err != nil {
		t.Fatalf("stub log: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	total := 0
	for _, c := range expect {
		total += c
	}
	if len(lines) != total {
		t.Errorf("ncclGetUniqueId called %d times, want %d (world + %d scalable + %d node + %d color)", len(lines), total, nids, len(nodeIDs), len(colorIDs))
	}
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			t.Fatalf("stub log line %q", l)
		}
		pid := atoi(t, f[0])
		r, ok := pidRank[pid]
		if !ok {
			t.Errorf("ncclGetUniqueId called by pid %d, which is no rank", pid)
			continue
		}
		m := made{r, f[2]}
		if expect[m] == 0 {
			t.Errorf("rank %d made ID %.16s..., which is no ID it should have made", r, f[2])
			continue
		}
		expect[m]--
	}
	if t.Failed() {
		t.Logf("output:\n%s\nstub log:\n%s", out, data)
	}
}

// launch runs a command with extra environment and returns its stdout; stderr goes to the log
// on failure.
func launch(t testing.TB, env []string, timeout time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v (hang?): %w", name, timeout, ctx.Err())
	}
	if err != nil {
		err = fmt.Errorf("%s %s: %w\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), err
}

// cleanEnv is the environment without launcher variables, plus extra.
func cleanEnv(base []string, extra ...string) []string {
	var out []string
	for _, kv := range base {
		if strings.HasPrefix(kv, "PMIX_") || strings.HasPrefix(kv, "OMPI_") || strings.HasPrefix(kv, "SLURM_") ||
			strings.HasPrefix(kv, "GPUHELPER_") || strings.HasPrefix(kv, "STUBNCCL_") || strings.HasPrefix(kv, "GPUBIND_") ||
			strings.HasPrefix(kv, "CUDA_") {
			if !strings.HasPrefix(kv, "SLURM_CONF=") {
				continue
			}
		}
		out = append(out, kv)
	}
	return append(out, extra...)
}

func stubLogPath(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "stub.log")
	_ = os.Chmod(filepath.Dir(p), 0o777)
	return p
}
