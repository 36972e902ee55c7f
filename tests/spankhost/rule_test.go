package spankhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// The plan check: the plugin's C table parser and per-task rule
// (spank/frontend/table.c, run by csrc/rule_check.c) give exactly what
// `gpubind plan --task-cpus ... --json` (the Go rule) gives, for every
// fixture, several policies and many task CPU layouts.

type planTask struct {
	Task    int               `json:"task"`
	Visible string            `json:"visible"`
	GPUs    []planGPU         `json:"gpus"`
	CPUs    string            `json:"cpus"`
	Env     map[string]string `json:"env"`
}

type planGPU struct {
	Index int    `json:"index"`
	BusID string `json:"pci_bus_id"`
	UUID  string `json:"uuid"`
	NUMA  int    `json:"numa"`
}

func cli(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(bin.dir, "gpubind"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return "", fmt.Errorf("gpubind %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// numaCPUs reads the "numa" lines of a table: node -> CPU list text.
func numaCPUs(table string) [][2]string {
	var out [][2]string
	for _, l := range strings.Split(table, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "numa" && f[2] != "-" {
			out = append(out, [2]string{f[1], f[2]})
		}
	}
	return out
}

// firstCPU of a CPU list like "0-55,112-167".
func firstCPU(list string) int {
	n, _ := strconv.Atoi(strings.FieldsFunc(list, func(r rune) bool { return r == '-' || r == ',' })[0])
	return n
}

// layouts returns task CPU layouts ("" means no binding known) for n tasks
// over the table's NUMA nodes.
func layouts(numa [][2]string, n int) []string {
	if len(numa) == 0 {
		return []string{""}
	}
	join := func(f func(j int) string) string {
		parts := make([]string, n)
		for j := range parts {
			parts[j] = f(j)
		}
		return strings.Join(parts, ";")
	}
	nn := len(numa)
	all := make([]string, nn)
	for i, x := range numa {
		all[i] = x[1]
	}
	return []string{
		"",
		join(func(j int) string { return strconv.Itoa(firstCPU(numa[j%nn][1])) }),                    // round robin
		join(func(j int) string { return strconv.Itoa(firstCPU(numa[nn-1][1])) }),                    // all on the last node
		join(func(j int) string { return strconv.Itoa(firstCPU(numa[(j*nn/n)%nn][1])) }),             // blocks
		join(func(j int) string { return numa[(j+1)%nn][1] }),                                        // whole nodes, shifted
		join(func(j int) string { return strings.Join(all, ",") }),                                   // every CPU
		join(func(j int) string { return numa[0][1] + "," + strconv.Itoa(firstCPU(numa[nn-1][1])) }), // mostly node 0
	}
}

func TestRuleMatchesGoPlan(t *testing.T) {
	build(t)
	fixtures := []string{"dgxh100-2cpu", "misordered-2cpu", "dgxh100", "numa8", "pcie4", "gh200", "vm1"}
	policies := []string{"closest", "closest,cpus", "closest,nic", "spread", "pack", "per-task:2", "single:2", "map:0,1"}
	taskCounts := []int{1, 2, 4, 8}
	if testing.Short() {
		fixtures, taskCounts = fixtures[:2], []int{4}
	}
	root := repoRoot()
	compared := 0
	for _, fx := range fixtures {
		for _, pol := range policies {
			for _, n := range taskCounts {
				args := []string{"plan", "--root", filepath.Join(root, "tests/fixtures", fx), "--tasks", strconv.Itoa(n), "--policy", pol}
				table, err := cli(append(args, "--table")...)
				if err != nil {
					continue // a combination the policy refuses (e.g. more GPUs than the node)
				}
				tf := filepath.Join(t.TempDir(), "table.txt")
				if err := os.WriteFile(tf, []byte(table), 0o644); err != nil {
					t.Fatal(err)
				}
				if strings.Contains(table, "status error") {
					continue
				}
				for _, lay := range layouts(numaCPUs(table), n) {
					goArgs := append([]string{}, args...)
					if lay != "" {
						goArgs = append(goArgs, "--task-cpus", lay)
					}
					goOut, err := cli(append(goArgs, "--json")...)
					if err != nil {
						t.Errorf("%s %s n=%d layout %q: %v", fx, pol, n, lay, err)
						continue
					}
					var want struct{ Tasks []planTask }
					if err := json.Unmarshal([]byte(goOut), &want); err != nil {
						t.Fatalf("gpubind plan --json: %v\n%s", err, goOut)
					}
					cmd := exec.Command(filepath.Join(bin.dir, "rule_check"), "--table", tf, "mask_cpu:", lay)
					cOut, err := cmd.Output()
					if err != nil {
						t.Errorf("%s %s n=%d layout %q: rule_check: %v", fx, pol, n, lay, err)
						continue
					}
					var got []planTask
					for _, l := range strings.Split(strings.TrimSpace(string(cOut)), "\n") {
						var pt planTask
						if err := json.Unmarshal([]byte(l), &pt); err != nil {
							t.Fatalf("rule_check output %q: %v", l, err)
						}
						if len(pt.Env) == 0 {
							pt.Env = map[string]string{}
						}
						if pt.GPUs == nil {
							pt.GPUs = []planGPU{}
						}
						got = append(got, pt)
					}
					if !reflect.DeepEqual(got, want.Tasks) {
						t.Errorf("%s --policy %s --tasks %d --task-cpus %q: C rule differs from gpubind plan\nC:  %+v\nGo: %+v", fx, pol, n, lay, got, want.Tasks)
					}
					compared++
				}
			}
		}
	}
	if compared < 20 {
		t.Fatalf("only %d plans compared", compared)
	}
	t.Logf("%d plans compared", compared)
}
