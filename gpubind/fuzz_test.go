package gpubind_test

import (
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// Fuzz targets, one per parser. Run each with, for example:
//   go test ./gpubind -run '^$' -fuzz '^FuzzParseOption$' -fuzztime 60s

func FuzzParseOption(f *testing.F) {
	for _, s := range []string{"", "closest", "map:0,1*3,verbose", "per-task:2,nic", "single:4", "verbose,pack", "map:GPU-a,MIG-b*2", "off", "help"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := gpubind.ParseOption(s)
		if err != nil {
			return
		}
		if o.Policy == gpubind.PolicyHelp {
			return
		}
		o2, err := gpubind.ParseOption(o.String())
		if err != nil || o2.String() != o.String() {
			t.Fatalf("%q -> %q -> %q, %v", s, o.String(), o2.String(), err)
		}
	})
}

func FuzzParseCPULists(f *testing.F) {
	for _, s := range []string{"0-3,8", "", "0x3", "ff,00000000", "1-1", "65535"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := gpubind.ParseCPUList(s); err == nil {
			c2, err := gpubind.ParseCPUList(c.String())
			if err != nil || !c2.Equal(c) {
				t.Fatalf("CPU list %q -> %q: %v", s, c.String(), err)
			}
		}
	})
}

// FuzzStepEnv feeds SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES forms to the step model.
func FuzzStepEnv(f *testing.F) {
	topo, err := gpubind.LoadSnapshot(fixtures.Snapshot("h100mig"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("0,1", "0,1", 2)
	f.Add("1", "0", 1)
	f.Add("", topo.GPUs[0].MIG[0].UUID, 3)
	f.Add("0,1", topo.GPUs[1].UUID+","+topo.GPUs[0].UUID, 2)
	f.Fuzz(func(t *testing.T, step, cvd string, tasks int) {
		if _, err := gpubind.ParseGPUList("X", step); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
		env := gpubind.StepEnv{CudaVisible: &cvd}
		if step != "" {
			env.StepGPUs = &step
		}
		gm, _ := gpubind.BuildGresMap(topo, &gpubind.GresConf{AutoDetect: "nvml"}, "fuzz")
		st, err := gpubind.ResolveStep(topo, env, gm, gpubind.NumberingAuto)
		if err != nil {
			return
		}
		if tasks < 0 || tasks > 64 {
			tasks = 3
		}
		o, _ := gpubind.ParseOption("closest")
		tab, err := gpubind.BuildTable(gpubind.PlanInput{Topo: topo, Step: st, Tasks: tasks, Option: o})
		if err != nil {
			return
		}
		rt, err := rule.Parse(tab.String())
		if err != nil {
			t.Fatalf("table from %q/%q does not parse: %v\n%s", step, cvd, err, tab)
		}
		rt.Close()
	})
}

func FuzzParseSnapshot(f *testing.F) {
	for _, n := range []string{"dgxh100", "h100mig", "vm1"} {
		b, err := readFile(fixtures.Snapshot(n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"version":1,"gpus":[{"index":0,"minor":0,"pci_bus_id":"1b:00.0","numa":-1,"cpus":"0-3"}],"numa":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := gpubind.ParseSnapshot(data)
		if err != nil {
			return
		}
		// Anything accepted can be planned and printed without a panic.
		_ = gpubind.FormatTopo(topo)
		for i := range topo.GPUs {
			_ = topo.ClosestNIC(i)
		}
		all := "all"
		_, _ = gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 3, Option: "pack,nic", Gres: &gpubind.GresConf{}, Env: gpubind.StepEnv{CudaVisible: &all}})
		for _, opt := range []string{"closest,nic,cpus", "spread", "per-task:2", "single:2"} {
			tab, err := gpubind.Plan(gpubind.PlanRequest{Topo: topo, Tasks: 3, Option: opt, Gres: &gpubind.GresConf{}})
			if err != nil {
				continue
			}
			var buf strings.Builder
			if tab.Encode(&buf) != nil {
				continue // too large for one protocol line: an error table, not a bad one
			}
			rt, err := rule.Parse(buf.String())
			if err != nil {
				t.Fatalf("plan %s of an accepted snapshot gives a bad table: %v\n%s", opt, err, buf.String())
			}
			rt.Close()
		}
	})
}

// FuzzSysfsFiles covers the procfs/sysfs file parsers of the sysfs backend.
func FuzzSysfsFiles(f *testing.F) {
	f.Add("Model: \t H100\nGPU UUID: \t GPU-1\nBus Location: \t 0000:18:00.0\nDevice Minor: \t 0\n")
	f.Add("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Thu\n")
	f.Add("00000000:3B:00.0")
	f.Fuzz(func(t *testing.T, s string) {
		if bus, _, err := gpubind.ParseNvidiaInformation(s); err == nil {
			if b2, err := gpubind.NormalizeBusID(bus); err != nil || b2 != bus {
				t.Fatalf("bus %q not normal: %q %v", bus, b2, err)
			}
		}
		_ = gpubind.ParseDriverVersion(s)
		if b, err := gpubind.NormalizeBusID(s); err == nil {
			if b2, err := gpubind.NormalizeBusID(b); err != nil || b2 != b {
				t.Fatalf("NormalizeBusID not idempotent: %q -> %q -> %q", s, b, b2)
			}
		}
	})
}

func FuzzGresConf(f *testing.F) {
	f.Add("NodeName=node[1-2] Name=gpu File=/dev/nvidia[0-3]\nAutoDetect=nvml\n", "node1")
	f.Add("Name=gpu MultipleFiles=/dev/nvidia0,/dev/nvidia-caps/nvidia-cap21", "x")
	f.Fuzz(func(t *testing.T, text, node string) {
		gc, err := gpubind.ParseGresConf(text, node)
		if err == nil && len(gc.Files) > 100000 {
			t.Fatalf("%d files", len(gc.Files))
		}
		_, _ = gpubind.ExpandHostlist(text)
	})
}
