package gpubind_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/nvmlmock"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// BenchmarkPlan8GPUs128Tasks plans 128 tasks on the DGX H100 and resolves every task
// with a bind list (what the engine plus all task_init calls do together).
func BenchmarkPlan8GPUs128Tasks(b *testing.B) {
	topo := snapshot(b, "dgxh100")
	var hex []string
	for L := 0; L < 128; L++ {
		hex = append(hex, strconv.Itoa(L))
	}
	layout := strings.Join(hex, ";")
	gres := &gpubind.GresConf{AutoDetect: "nvml"}
	for _, pol := range []string{"closest,nic", "pack", "spread", "per-task:2", "single:16"} {
		b.Run(strings.SplitN(pol, ",", 2)[0], func(b *testing.B) {
			tasks := 128
			if pol == "per-task:2" {
				tasks = 4
			}
			for i := 0; i < b.N; i++ {
				tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: tasks, Option: pol, Gres: gres})
				if err != nil {
					b.Fatal(err)
				}
				_ = applyRule(b, tab, tasks, strings.Join(strings.Split(layout, ";")[:tasks], ";"))
			}
		})
	}
}

func BenchmarkEncodeParseTable128(b *testing.B) {
	topo := snapshot(b, "dgxh100")
	tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 128, Option: "closest", Gres: &gpubind.GresConf{}})
	if err != nil {
		b.Fatal(err)
	}
	text := tab.String()
	b.SetBytes(int64(len(text)))
	for i := 0; i < b.N; i++ {
		rt, err := rule.Parse(tab.String())
		if err != nil {
			b.Fatal(err)
		}
		rt.Close()
	}
}

func BenchmarkDiscoverSysfs(b *testing.B) {
	for _, name := range []string{"dgxh100", "vm1"} {
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := gpubind.DiscoverSysfs(fixtures.Root(name)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDiscoverNVMLMock(b *testing.B) {
	lib := nvmlmock.New(snapshot(b, "dgxh100"))
	for i := 0; i < b.N; i++ {
		t, err := gpubind.DiscoverNVML(lib)
		if err != nil || len(t.GPUs) != 8 {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseSnapshot(b *testing.B) {
	data, err := readFile(fixtures.Snapshot("dgxh100"))
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if _, err := gpubind.ParseSnapshot(data); err != nil {
			b.Fatal(err)
		}
	}
}
