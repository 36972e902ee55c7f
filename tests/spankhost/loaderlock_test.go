package spankhost

import (
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/testbuild"
)

// The engine must start even while another slurmstepd thread holds the
// dynamic loader's locks. glibc's fork resets dl_load_lock in the child but
// not dl_load_write_lock, which dl_iterate_phdr holds for its whole walk and
// dlopen/dlclose hold briefly: a forked child that then loads anything waits
// on it forever (issue 22). With the plan cache off every step runs the
// engine; all of them must plan.
func TestPlanWhileAHostThreadHoldsTheLoaderLock(t *testing.T) {
	testLoaderBusy(t, "phdr")
}

// The same with a host thread looping dlopen and dlclose.
func TestPlanWhileAHostThreadLoopsDlopen(t *testing.T) {
	if testbuild.Sanitize() {
		t.Skip("sanitizer build: gcc 12's ASan allocator takes no lock around fork, and the host thread's dlopen/dlclose loop mallocs all the time, so a child forked meanwhile can hang in it for good (one step of .ci/run's sanitizer pass did, for 19 minutes); the plain build runs this test, and TestPlanWhileAHostThreadHoldsTheLoaderLock runs in the sanitizer build")
	}
	build(t)
	testLoaderBusy(t, bin.dlopenLib)
}

func testLoaderBusy(t *testing.T, busy string) {
	const steps = 100
	p := dgxPlan(t, 2, "-")
	ok, ran := 0, 0
	var fails []string
	for ; ran < steps; ran++ {
		r, err := hostRun(t, 60*time.Second, []string{"-q", "-n", "2", "-T", busy, "-o", "closest"},
			planArgs(t, "table", "snapshot="+p, "plan_cache=0", "timeout=3000", "mode=enforce")...)
		// A failed plan shows at task_init: under mode=enforce the tasks fail.
		if err == nil && r.rc(t, "init_post_opt") == 0 && kv(t, r.lines["tasks ok"])["ok"] == 2 &&
			!strings.Contains(r.stderr, "gpubind: error") {
			ok++
			continue
		}
		msg := r.stderr
		if err != nil {
			msg = err.Error()
		}
		fails = append(fails, tail(msg))
		if len(fails) == 3 {
			ran++
			break // the test has failed; a hung step costs a minute each
		}
	}
	if ok != steps {
		t.Fatalf("%d of %d steps planned with a host thread busy in the loader (%s; stopped after %d of %d); failures:\n%s",
			ok, ran, busy, ran, steps, strings.Join(fails, "\n---\n"))
	}
}
