package helper

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// TestBenchInit is a measurement, not a check: gpuhelper_init of two library builds against
// the raw PMIx program at n=8 on one node, programs alternated run by run, 1 warm-up round,
// medians of 21 (the slowest rank's exec -> ID time per run; CPU per rank). It runs only with
// GPUHELPER_BENCH_DIR set to a directory holding stamp, raw_pmix, gh_old and gh_new built as
// bench/run.sh builds stamp, raw_pmix and gh_init (bench/RESULTS.md section 3, helper rows),
// and writes DIR/result.txt.
func TestBenchInit(t *testing.T) {
	dir := os.Getenv("GPUHELPER_BENCH_DIR")
	if dir == "" {
		t.Skip("GPUHELPER_BENCH_DIR not set (a measurement, see bench/RESULTS.md)")
	}
	c := cluster.StartT(t, cluster.Config{Nodes: 1})
	progs := []string{"gh_old", "gh_new", "raw_pmix"}
	res := map[string][]float64{}
	runs := 21
	for run := -1; run < runs; run++ {
		for i := range progs {
			p := progs[(i+run+1)%len(progs)]
			out, err := launch(t, cleanEnv(c.Env()), 120e9, c.Bin("srun"), "--mpi=pmix", "-O", "-N1", "-n8", dir+"/stamp", dir+"/"+p)
			if err != nil {
				t.Fatal(err)
			}
			max := 0.0
			n := 0
			var cpus []float64
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) > 3 && f[0] == "TIME" {
					v, _ := strconv.ParseFloat(f[2], 64)
					if len(f) > 5 {
						cv, _ := strconv.ParseFloat(f[5], 64)
						cpus = append(cpus, cv*1000)
					}
					if v > max {
						max = v
					}
					n++
				}
			}
			if n != 8 {
				t.Fatalf("%s: %d TIME lines\n%s", p, n, out)
			}
			if run >= 0 {
				res[p] = append(res[p], max*1000)
				sort.Float64s(cpus)
				res[p+" cpu"] = append(res[p+" cpu"], cpus[len(cpus)/2])
			}
		}
	}
	med := func(v []float64) float64 { s := append([]float64(nil), v...); sort.Float64s(s); return s[len(s)/2] }
	var b strings.Builder
	for _, p := range progs {
		fmt.Fprintf(&b, "%s median %.2f ms (cpu/rank median %.2f ms) runs %.1f\n", p, med(res[p]), med(res[p+" cpu"]), res[p])
	}
	fmt.Fprintf(&b, "ratio old/raw %.3f new/raw %.3f\n", med(res["gh_old"])/med(res["raw_pmix"]), med(res["gh_new"])/med(res["raw_pmix"]))
	os.WriteFile(dir+"/result.txt", []byte(b.String()), 0o644)
	t.Log(b.String())
}
