// Command nvmlcost times each NVML call that GPU discovery makes, one process per run, so that
// the per-step cost of asking NVML can be compared with reading sysfs and the per-boot cache.
//
//	nvmlcost [-runs N]   prints one line per call: name, calls, median and total microseconds
//
// It re-executes itself for every run, because nvml.Init's cost is paid once per process.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type sample map[string][]time.Duration

func (s sample) time(name string, f func() nvml.Return) nvml.Return {
	start := time.Now()
	ret := f()
	s[name] = append(s[name], time.Since(start))
	return ret
}

// once performs one discovery the way a naive per-step implementation would.
func once() (sample, error) {
	s := sample{}
	total := time.Now()
	if ret := s.time("Init", func() nvml.Return { return nvml.Init() }); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml.Init: %v", nvml.ErrorString(ret))
	}
	defer nvml.Shutdown()
	var n int
	s.time("DeviceGetCount", func() (r nvml.Return) { n, r = nvml.DeviceGetCount(); return })
	for i := 0; i < n; i++ {
		var d nvml.Device
		s.time("DeviceGetHandleByIndex", func() (r nvml.Return) { d, r = nvml.DeviceGetHandleByIndex(i); return })
		s.time("GetPciInfo", func() (r nvml.Return) { _, r = d.GetPciInfo(); return })
		s.time("GetUUID", func() (r nvml.Return) { _, r = d.GetUUID(); return })
		s.time("GetMinorNumber", func() (r nvml.Return) { _, r = d.GetMinorNumber(); return })
		s.time("GetNumaNodeId", func() (r nvml.Return) { _, r = d.GetNumaNodeId(); return })
		s.time("GetCpuAffinity", func() (r nvml.Return) { _, r = d.GetCpuAffinity(64); return })
		s.time("GetMigMode", func() (r nvml.Return) { _, _, r = d.GetMigMode(); return })
		s.time("GetName", func() (r nvml.Return) { _, r = d.GetName(); return })
		for l := 0; l < int(nvml.NVLINK_MAX_LINKS); l++ {
			s.time("GetNvLinkState", func() (r nvml.Return) { _, r = d.GetNvLinkState(l); return })
		}
	}
	s["total"] = []time.Duration{time.Since(total)}
	return s, nil
}

func main() {
	runs := flag.Int("runs", 10, "number of fresh processes to time")
	child := flag.Bool("child", false, "internal: run one discovery and print JSON")
	flag.Parse()
	if *child {
		s, err := once()
		if err != nil {
			fmt.Fprintln(os.Stderr, "nvmlcost:", err)
			os.Exit(1)
		}
		_ = json.NewEncoder(os.Stdout).Encode(s)
		return
	}
	all := sample{}
	perRun := sample{} // per-call totals of each run, to report a median per run
	for r := 0; r < *runs; r++ {
		out, err := exec.Command(os.Args[0], "-child").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "nvmlcost: run", r, ":", err)
			os.Exit(1)
		}
		var s sample
		if err := json.Unmarshal(out, &s); err != nil {
			fmt.Fprintln(os.Stderr, "nvmlcost: bad child output:", err)
			os.Exit(1)
		}
		for k, v := range s {
			all[k] = append(all[k], v...)
			var sum time.Duration
			for _, d := range v {
				sum += d
			}
			perRun[k] = append(perRun[k], sum)
		}
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool { return median(perRun[names[i]]) > median(perRun[names[j]]) })
	fmt.Printf("%-24s %8s %14s %16s\n", "call", "calls/run", "median us/call", "median us/run")
	for _, k := range names {
		fmt.Printf("%-24s %8d %14.1f %16.1f\n", k, len(all[k])/(*runs),
			float64(median(all[k]).Nanoseconds())/1e3, float64(median(perRun[k]).Nanoseconds())/1e3)
	}
}

func median(d []time.Duration) time.Duration {
	c := append([]time.Duration(nil), d...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	if len(c) == 0 {
		return 0
	}
	return c[len(c)/2]
}
