package plugin

import (
	"context"
	"regexp"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
)

var planTook = regexp.MustCompile(`gpubind: step plan took ([0-9.]+) ms`)
var boundAfter = regexp.MustCompile(`gpubind: task \d+ bound ([0-9.]+) ms after the step plan started`)

// BenchmarkStep measures a 4-task srun step on one node: without the
// plugin in plugstack.conf, with it loaded but unused, and binding with the
// DGX H100 fixture. The plugin's own figures from the slurmd log are
// reported as plan-ms (init_post_opt: fork, engine, parse) and
// lasttask-ms (from the plan's start to the last task's binding), medians.
//
//	go test -run '^$' -bench Step -benchtime 20x ./tests/plugin
func BenchmarkStep(b *testing.B) {
	dir := pluginDirB(b)
	line := "required " + dir + "/spank_gpubind.so source=sysfs root=" + fixture("dgxh100-2cpu") + " cache_dir=" + cacheDirB(b)
	c := cluster.StartT(b, cluster.Config{CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8, SlurmConf: []string{"SlurmdDebug=verbose"}})
	for _, bc := range []struct {
		name  string
		plug  []string
		extra []string
	}{
		{"no-plugin", nil, nil},
		{"plugin-unused", []string{line}, nil},
		{"plugin-closest", []string{line}, []string{"--gpu-bind-topo=closest"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			writePlugStack(b, c, bc.plug)
			args := append([]string{"-n4", "--gpus=4", "--cpu-bind=map_cpu:0,1,0,1"}, bc.extra...)
			args = append(args, "true")
			before := len(c.SlurmdLog(c.NodeNames[0]))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				_, errOut, err := c.Srun(ctx, args...)
				cancel()
				if err != nil {
					b.Fatalf("srun: %v\n%s", err, errOut)
				}
			}
			b.StopTimer()
			log := c.SlurmdLog(c.NodeNames[0])[before:]
			if m := median(planTook.FindAllStringSubmatch(log, -1)); m >= 0 {
				b.ReportMetric(m, "plan-ms")
			}
			if m := median(boundAfter.FindAllStringSubmatch(log, -1)); m >= 0 {
				b.ReportMetric(m, "lasttask-ms")
			}
		})
	}
}

func median(ms [][]string) float64 {
	if len(ms) == 0 {
		return -1
	}
	v := make([]float64, len(ms))
	for i, m := range ms {
		v[i], _ = strconv.ParseFloat(m[1], 64)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}
