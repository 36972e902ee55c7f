package rule

import "testing"

// The admin's default= on a step, decided from its environment alone (issue 33): a
// binding that comes only from default= never shrinks what a task sees.
func TestDefaultDecision(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name    string
		option  string
		step    *string
		ntasks  int
		force   string
		want    verdict
		ngpus   int
		used    int
		planned string
	}{
		{"cpu-only step: no SLURM_STEP_GPUS", "closest", nil, 2, "", defaultNoGPUs, 0, -1, ""},
		{"empty SLURM_STEP_GPUS", "closest", s(""), 2, "", defaultNoGPUs, 0, -1, ""},
		{"1 task, 4 GPUs", "closest", s("0,1,2,3"), 1, "", defaultFewerTasks, 4, 1, ""},
		{"torchrun: 1 task, 8 GPUs", "closest,cpus", s("0-7"), 1, "", defaultFewerTasks, 8, 1, ""},
		{"2 tasks, 8 GPUs", "closest", s("0,1,2,3,4,5,6,7"), 2, "", defaultFewerTasks, 8, 2, ""},
		{"8 tasks, 8 GPUs", "closest", s("0,1,2,3,4,5,6,7"), 8, "", defaultBind, 8, 8, "closest,visible=localid"},
		{"per-task:2, 4 tasks, 8 GPUs", "per-task:2,cpus", s("0-7"), 4, "", defaultBind, 8, 8, "per-task:2,cpus,visible=localid"},
		{"per-task:2, 2 tasks, 8 GPUs", "per-task:2", s("0-7"), 2, "", defaultFewerTasks, 8, 4, ""},
		{"single:2, 4 tasks, 2 GPUs", "single:2", s("0,1"), 4, "", defaultBind, 2, 2, "single:2,visible=localid"},
		{"16 tasks share 8 GPUs: no per-task cpus, isolate", "closest,cpus,isolate,nic", s("0-7"), 16, "", defaultShare, 8, 16, "closest,nic,visible=localid"},
		{"default= names visible=", "closest,visible=first", s("0,1"), 2, "", defaultBind, 2, 2, "closest,visible=first"},
		{"default= names isolate: own", "closest,isolate", s("0,1"), 2, "", defaultBind, 2, 2, "closest,isolate"},
		{"isolate=force: own", "closest", s("0,1"), 2, "isolate", defaultBind, 2, 2, "closest"},
		{"cpus=force: localid", "closest", s("0,1"), 2, "cpus", defaultBind, 2, 2, "closest,visible=localid"},
		{"default= with uuid", "closest,uuid", s("0-7"), 8, "", defaultBind, 8, 8, "closest,uuid,visible=localid"},
		{"uuid kept when tasks share GPUs", "closest,isolate,uuid", s("0-7"), 16, "", defaultShare, 8, 16, "closest,uuid,visible=localid"},
		{"UUIDs", "closest", s("GPU-a,GPU-b"), 2, "", defaultBind, 2, 2, "closest,visible=localid"},
		{"unreadable list: the engine decides", "closest", s("0,,1"), 2, "", defaultAskEngine, -1, 2, "closest,visible=localid"},
		{"bad per-task N: the engine decides", "per-task:x", s("0,1"), 2, "", defaultAskEngine, 2, -1, "per-task:x,visible=localid"},
	}
	for _, c := range cases {
		v, ngpus, used, planned, err := defaultDecision(c.option, c.step, c.ntasks, c.force)
		if err != nil || v != c.want || ngpus != c.ngpus || used != c.used || planned != c.planned {
			t.Errorf("%s: got verdict %d, %d GPUs, %d used, planned %q, %v; want %d, %d, %d, %q",
				c.name, v, ngpus, used, planned, err, c.want, c.ngpus, c.used, c.planned)
		}
	}
}
