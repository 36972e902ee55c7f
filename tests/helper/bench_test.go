package helper

import (
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// BenchmarkInit times gpuhelper_init against raw_pmix, a C program making the same PMIx calls
// by hand (Init, job and proc keys, rank 0 Put+Commit of 128 bytes, the others Get with
// PMIX_TIMEOUT), for 8 ranks under srun --mpi=pmix on one node and on two. Each iteration runs
// one srun step of each program, alternating, so both see the same load on this shared
// machine. Reported per program: the median over steps of the slowest rank (the job goes on
// only when every rank has the ID) and the median over all ranks. Run:
//
//	go test ./tests/helper -run '^$' -bench Init -benchtime 15x
func BenchmarkInit(b *testing.B) {
	needSetup(b)
	if _, err := exec.LookPath("srun"); err != nil {
		b.Skip("Slurm not installed (make deps)")
	}
	c := cluster.StartT(b, cluster.Config{Nodes: 2})
	progs := []struct {
		name string
		args []string
	}{
		{"lib", []string{bin("ghtest"), "expect", "0"}},
		{"raw", []string{bin("raw_pmix")}},
	}
	for _, nodes := range []int{1, 2} {
		b.Run(fmt.Sprintf("N=%d/n=8", nodes), func(b *testing.B) {
			slowest := map[string][]float64{}
			all := map[string][]float64{}
			for i := 0; i < b.N; i++ {
				for _, p := range progs {
					out, err := srun(b, c, nil, append([]string{"--mpi=pmix", "-O", fmt.Sprintf("-N%d", nodes), "-n8"}, p.args...)...)
					if err != nil {
						b.Fatal(err)
					}
					times := parseTimes(b, out)
					if len(times) != 8 {
						b.Fatalf("%s: %d TIME lines, want 8:\n%s", p.name, len(times), out)
					}
					sort.Float64s(times)
					slowest[p.name] = append(slowest[p.name], times[len(times)-1])
					all[p.name] = append(all[p.name], times...)
				}
			}
			for _, p := range progs {
				b.ReportMetric(median(slowest[p.name])*1e3, p.name+"-ms-slowest")
				b.ReportMetric(median(all[p.name])*1e3, p.name+"-ms-rank")
			}
			b.ReportMetric(0, "ns/op") // srun's own wall time is not the point
		})
	}
}

func parseTimes(b testing.TB, out string) []float64 {
	var ts []float64
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "TIME" {
			v, err := strconv.ParseFloat(f[2], 64)
			if err != nil {
				b.Fatalf("bad TIME line %q", l)
			}
			ts = append(ts, v)
		}
	}
	return ts
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
