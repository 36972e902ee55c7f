package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
	"github.com/gpubind/gpubind/tests/tabletext"
)

func cli(args ...string) (int, string, string) {
	var o, e bytes.Buffer
	rc := run(args, &o, &e)
	return rc, o.String(), e.String()
}

func TestExitCodes(t *testing.T) {
	root := fixtures.Root("dgxh100")
	for _, c := range []struct {
		args []string
		rc   int
		err  string
	}{
		{nil, 2, "usage"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"plan"}, 2, "plan needs --tasks N"},
		{[]string{"plan", "--tasks", "x"}, 2, "invalid value"},
		{[]string{"plan", "--tasks", "2", "--root", root, "--snapshot", "x.json"}, 2, "not both"},
		{[]string{"plan", "--tasks", "2", "--task-cpus", "0;1;2", "--root", root}, 2, "has 3 entries"},
		{[]string{"plan", "--tasks", "1", "--task-cpus", "zz", "--root", root}, 2, `"zz"`},
		{[]string{"plan", "--tasks", "2", "--policy", "nearest", "--root", root}, 1, `"nearest"`},
		{[]string{"plan", "--tasks", "2", "--gpus", "0,9", "--root", root}, 1, "GPU 9"},
		{[]string{"topo", "--root", "/nonexistent"}, 1, "nonexistent"},
		{[]string{"topo", "--source", "magic"}, 2, `"magic"`},
		{[]string{"topo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"plan", "--tasks", "2", "--root", root}, 0, ""},
	} {
		rc, _, stderr := cli(c.args...)
		if rc != c.rc || !strings.Contains(stderr, c.err) {
			t.Errorf("gpubind %q: rc %d stderr %q; want rc %d and %q", c.args, rc, stderr, c.rc, c.err)
		}
	}
}

func TestTopoAndSnapshot(t *testing.T) {
	rc, out, _ := cli("topo", "--snapshot", fixtures.Snapshot("dgxh100"))
	if rc != 0 || !strings.Contains(out, "GPU0    X     NV18") || !strings.Contains(out, "mlx5_7  0000:da:00.0  1     ibp218s0") {
		t.Fatalf("topo:\n%s", out)
	}
	rc, out, _ = cli("topo", "--root", fixtures.Root("pcie4"))
	if rc != 0 || !strings.Contains(out, "GPU0    X     PIX   PHB   PHB   PIX") {
		t.Fatalf("pcie4 topo:\n%s", out)
	}
	rc, snap, _ := cli("snapshot", "--root", fixtures.Root("numa8"))
	if rc != 0 {
		t.Fatal(rc)
	}
	p := filepath.Join(t.TempDir(), "node.json")
	os.WriteFile(p, []byte(snap), 0o644)
	rc, out, stderr := cli("plan", "--tasks", "8", "--snapshot", p)
	if rc != 0 || !strings.Contains(out, "task 0 (rank 0): CUDA_VISIBLE_DEVICES=3 -> GPU 3 0000:61:00.0") {
		t.Fatalf("plan from a written snapshot: %d %s %s", rc, out, stderr)
	}
}

// TestTaskCPUsIsTheRule proves that `plan --task-cpus --json` prints what the per-task
// rule gives: the table printed by --table, parsed back and resolved with the same bind
// list, must give the same env for every task.
func TestTaskCPUsIsTheRule(t *testing.T) {
	for _, c := range []struct{ fixture, policy, tasks, gpus, cpus string }{
		{"dgxh100-2cpu", "closest,nic", "4", "0,1,4,5", "0;1;0;1"},
		{"dgxh100-2cpu", "per-task:2", "2", "", "1;0"},
		{"dgxh100-2cpu", "single:2", "4", "0,5", "0;0;1;1"},
		{"misordered-2cpu", "closest", "4", "", "1;1;0;0"},
		{"misordered-2cpu", "spread", "3", "", "0;1;0"},
		{"dgxh100", "closest,cpus", "3", "", "0-3;60;200"},
	} {
		args := []string{"plan", "--tasks", c.tasks, "--root", fixtures.Root(c.fixture), "--policy", c.policy, "--task-cpus", c.cpus}
		if c.gpus != "" {
			args = append(args, "--gpus", c.gpus)
		}
		rc, tableText, stderr := cli(append(args, "--table")...)
		if rc != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
		tab, err := tabletext.Parse(strings.NewReader(tableText))
		if err != nil {
			t.Fatal(err)
		}
		rt, err := rule.Parse(tableText)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		rc, js, stderr := cli(append(args, "--json")...)
		if rc != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
		var out struct {
			Tasks []struct {
				Task    int               `json:"task"`
				Visible string            `json:"visible"`
				CPUs    string            `json:"cpus"`
				Env     map[string]string `json:"env"`
				GPUs    []struct {
					Index int    `json:"index"`
					BusID string `json:"pci_bus_id"`
					UUID  string `json:"uuid"`
					NUMA  int    `json:"numa"`
				} `json:"gpus"`
			} `json:"tasks"`
		}
		if err := json.Unmarshal([]byte(js), &out); err != nil {
			t.Fatal(err)
		}
		var hex []string
		for _, p := range strings.Split(c.cpus, ";") {
			s, _ := gpubind.ParseCPUList(p)
			hex = append(hex, s.Hex())
		}
		for local, task := range out.Tasks {
			own, _ := gpubind.ParseCPUList(strings.Split(c.cpus, ";")[local])
			b, err := rt.Apply(rule.Task{Local: local, BindType: "mask_cpu:", BindList: strings.Join(hex, ","), Own: own})
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{}
			for _, kv := range b.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			if !reflect.DeepEqual(env, task.Env) || task.Task != local || task.Visible != env["CUDA_VISIBLE_DEVICES"] || len(task.GPUs) != len(b.GPUs) {
				t.Errorf("%v task %d: json %+v, rule %v", args, local, task, env)
			}
			for i, id := range b.GPUs {
				if task.GPUs[i].BusID != tab.GPUs[id].BusID || task.GPUs[i].Index != tab.GPUs[id].NVMLIndex {
					t.Errorf("task %d gpu %d: %+v vs %+v", local, i, task.GPUs[i], tab.GPUs[id])
				}
			}
		}
	}
}

// TestPlanJSONShape pins the JSON of the issue.
func TestPlanJSONShape(t *testing.T) {
	rc, js, _ := cli("plan", "--tasks", "2", "--gpus", "5", "--snapshot", fixtures.Snapshot("dgxh100"), "--policy", "closest,nic", "--json")
	if rc != 0 {
		t.Fatal(rc)
	}
	var v map[string][]map[string]any
	if err := json.Unmarshal([]byte(js), &v); err != nil {
		t.Fatal(err)
	}
	task := v["tasks"][1]
	keys := []string{}
	for k := range task {
		keys = append(keys, k)
	}
	if len(keys) != 5 || task["visible"] != "5" || task["task"] != 1.0 || task["cpus"] != "" {
		t.Errorf("task keys %v: %v", keys, task)
	}
	g := task["gpus"].([]any)[0].(map[string]any)
	if g["index"] != 5.0 || g["pci_bus_id"] != "0000:ab:00.0" || g["numa"] != 1.0 || !strings.HasPrefix(g["uuid"].(string), "GPU-") || g["own"] != true || len(g) != 5 {
		t.Errorf("gpu %v", g)
	}
	if env := task["env"].(map[string]any); env["NCCL_IB_HCA"] != "=mlx5_5:1" || env["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID" {
		t.Errorf("env %v", env)
	}
}

// TestPlanAsNode: `plan --slurm-conf --node` reads the node's configuration with the
// engine's function and prints the table the engine writes on that node
// (gpubind/testdata/nodeconf/table.golden, compared by spank/engine's TestPlanAsNode too).
func TestPlanAsNode(t *testing.T) {
	conf := filepath.Join("..", "..", "gpubind", "testdata", "nodeconf")
	want, err := os.ReadFile(filepath.Join(conf, "table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"plan", "--root", fixtures.Root("dgxh100"), "--tasks", "2", "--gpus", "3,6", "--table",
		"--slurm-conf", filepath.Join(conf, "slurm.conf"), "--node", "node1"}
	rc, out, errOut := cli(args...)
	if rc != 0 || out != string(want) {
		t.Errorf("plan as node1: rc %d, table differs from table.golden:\n--- want\n%s--- got\n%s%s", rc, want, out, errOut)
	}
	// --numbering still wins over slurm.conf; node9's gres.conf lines are its own.
	if rc, out, _ = cli(append(args, "--numbering", "global")...); rc != 0 || !strings.Contains(out, "\ngpu 0 3 3 3 ") {
		t.Errorf("--numbering global: rc %d\n%s", rc, out)
	}
	if rc, _, errOut = cli(append(args, "--node", "node9")...); rc == 0 || !strings.Contains(errOut, "/dev/nonexistent0") {
		t.Errorf("node9 planned with node1's gres.conf lines: rc %d %s", rc, errOut)
	}
	if rc, _, errOut = cli("plan", "--root", fixtures.Root("dgxh100"), "--tasks", "1", "--slurm-conf", "/nonexistent/slurm.conf"); rc == 0 || !strings.Contains(errOut, "/nonexistent/slurm.conf") {
		t.Errorf("a missing --slurm-conf was accepted: rc %d %s", rc, errOut)
	}
}
