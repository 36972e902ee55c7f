package gpubind_test

import (
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
)

// applyRule runs the plugin's per-task rule (package rule, the C code the front end runs)
// on tab for every task, with each task bound to its entry of taskCPUs ("0;56;1": a
// mask_cpu SLURM_CPU_BIND_LIST; "" for no binding).
func applyRule(t testing.TB, tab *gpubind.Table, tasks int, taskCPUs string) []rule.Result {
	t.Helper()
	rt, err := rule.Parse(tab.String())
	if err != nil {
		t.Fatalf("the plugin cannot read the table: %v\n%s", err, tab)
	}
	defer rt.Close()
	var list []string
	var own []gpubind.CPUSet
	if taskCPUs != "" {
		for _, p := range strings.Split(taskCPUs, ";") {
			s, err := gpubind.ParseCPUList(p)
			if err != nil {
				t.Fatal(err)
			}
			list = append(list, s.Hex())
			own = append(own, s)
		}
	}
	var out []rule.Result
	for L := 0; L < tasks; L++ {
		k := rule.Task{Local: L, Rank: L}
		if L < len(own) {
			k.BindType, k.BindList, k.Own = "mask_cpu:", strings.Join(list, ","), own[L]
		}
		r, err := rt.Apply(k)
		if err != nil {
			t.Fatalf("task %d: %v", L, err)
		}
		out = append(out, r)
	}
	return out
}

// envMap turns a rule result's NAME=VALUE list into a map.
func envMap(r rule.Result) map[string]string {
	m := map[string]string{}
	for _, kv := range r.Env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}
