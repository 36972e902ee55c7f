package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/fixtures"
)

// planJSON runs `gpubind plan ... --json` and returns its tasks and stderr.
func planJSON(t *testing.T, args ...string) ([]planTaskJSON, string) {
	t.Helper()
	rc, out, errOut := cli(append(append([]string{"plan"}, args...), "--json")...)
	if rc != 0 {
		t.Fatalf("gpubind plan %q: rc %d\n%s", args, rc, errOut)
	}
	var v struct {
		Tasks []planTaskJSON `json:"tasks"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return v.Tasks, errOut
}

type planTaskJSON struct {
	Task    int               `json:"task"`
	Visible string            `json:"visible"`
	Env     map[string]string `json:"env"`
}

// taskWarning is task L's warning among the CLI's stderr lines ("" none).
func taskWarning(stderr string, L int) string {
	for _, l := range strings.Split(stderr, "\n") {
		if w, ok := strings.CutPrefix(l, "gpubind: warning: task "+strconv.Itoa(L)+": "); ok {
			return w
		}
	}
	return ""
}

// Issue 33 item 4: CUDA enumerates only the first MIG device of CUDA_VISIBLE_DEVICES. With
// visible=localid (or first) every task listed every slice, so every task ran on task 0's,
// and GPUBIND_CUDA_DEVICES named devices CUDA does not have. Each task must see its own
// slice only, as device 0, with a warning that says why.
func TestMIGVisibleFallsBackToOwnSlice(t *testing.T) {
	snap := fixtures.Snapshot("h100mig")
	b, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		GPUs []struct {
			MIG []struct {
				UUID string `json:"uuid"`
			} `json:"mig"`
		} `json:"gpus"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	var migs []string
	for _, m := range s.GPUs[0].MIG {
		migs = append(migs, m.UUID)
	}
	if len(migs) != 3 {
		t.Fatalf("fixture h100mig: %d MIG devices on GPU 0, want 3", len(migs))
	}
	for _, policy := range []string{"closest,visible=localid", "closest,visible=first", "per-task:3"} {
		tasks, errOut := planJSON(t, "--source", "snapshot", "--snapshot", snap, "--tasks", taskCount(policy),
			"--gpus", strings.Join(migs, ","), "--policy", policy)
		seen := map[string]bool{}
		for _, k := range tasks {
			vis := k.Env["CUDA_VISIBLE_DEVICES"]
			if strings.Contains(vis, ",") || !strings.HasPrefix(vis, "MIG-") || seen[vis] {
				t.Errorf("%s: task %d CUDA_VISIBLE_DEVICES=%q: want one MIG slice of its own", policy, k.Task, vis)
			}
			seen[vis] = true
			if d := k.Env["GPUBIND_CUDA_DEVICES"]; d != "0" {
				t.Errorf("%s: task %d GPUBIND_CUDA_DEVICES=%q: CUDA has only device 0", policy, k.Task, d)
			}
		}
		if !strings.Contains(errOut, "MIG") || !strings.Contains(errOut, "gpubind: warn") {
			t.Errorf("%s: no warning naming MIG on stderr:\n%s", policy, errOut)
		}
	}
}

func taskCount(policy string) string {
	if strings.HasPrefix(policy, "per-task:") {
		return "1"
	}
	return "3"
}

// Issue 33 item 5: the fabric variable and warnings are decided on the task's own GPUs.
// With GPU 3 unhealthy on the gb200 fixture, tasks 0-2 keep GPUBIND_NVL_CLIQUE and say
// nothing under visible=first and visible=localid as under visible=own; task 3 warns.
func TestFabricOnOwnGPUsOnly(t *testing.T) {
	b, err := os.ReadFile(fixtures.Snapshot("gb200"))
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]any
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	for _, g := range snap["gpus"].([]any) {
		g := g.(map[string]any)
		if g["index"] == 3.0 {
			g["fabric"].(map[string]any)["health"] = "unhealthy"
		}
	}
	p := filepath.Join(t.TempDir(), "gb200-gpu3-unhealthy.json")
	b, _ = json.Marshal(snap)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"own", "first", "localid"} {
		tasks, errOut := planJSON(t, "--source", "snapshot", "--snapshot", p, "--tasks", "4", "--policy", "closest,visible="+v)
		if len(tasks) != 4 {
			t.Fatalf("visible=%s: %d tasks", v, len(tasks))
		}
		for _, k := range tasks[:3] {
			// (The fixture has no IMEX channel devices: that warning is right.)
			if w := taskWarning(errOut, k.Task); k.Env["GPUBIND_NVL_CLIQUE"] == "" || strings.Contains(w, "NVLink fabric") {
				t.Errorf("visible=%s: task %d: GPUBIND_NVL_CLIQUE=%q warning %q: its own GPU is healthy", v, k.Task, k.Env["GPUBIND_NVL_CLIQUE"], w)
			}
		}
		if k, w := tasks[3], taskWarning(errOut, 3); k.Env["GPUBIND_NVL_CLIQUE"] != "" || !strings.Contains(w, "unhealthy") {
			t.Errorf("visible=%s: task 3 (unhealthy GPU): GPUBIND_NVL_CLIQUE=%q warning %q", v, k.Env["GPUBIND_NVL_CLIQUE"], w)
		}
	}
}
