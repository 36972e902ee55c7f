package spankhost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// result is what one spankhost run printed.
type result struct {
	stdout, stderr string
	lines          map[string]string // first word(s) -> rest, for summary lines
	tasks          map[int]map[string]string
}

// rc is the rc= value of a summary line such as "init_post_opt rc=0".
func (r result) rc(t *testing.T, key string) int {
	t.Helper()
	v, ok := kv(t, r.lines[key+" rc"])["rc"]
	if !ok {
		t.Fatalf("no %q line:\n%s", key+" rc", r.stdout)
	}
	return v
}

var taskLine = regexp.MustCompile(`^task (\d+) rc=(-?\d+)(.*)$`)

// host runs the spankhost with flags, then the plugin and its arguments.
func host(t *testing.T, flags []string, args ...string) result {
	t.Helper()
	r, err := hostRun(t, 5*time.Minute, flags, args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hostRun is host without failing the test; a run that outlives limit is
// killed (a hang guard, not a timing assertion).
func hostRun(t *testing.T, limit time.Duration, flags []string, args ...string) (result, error) {
	t.Helper()
	build(t)
	all := append(append([]string{}, flags...), bin.plugin)
	all = append(all, args...)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.host, all...)
	// The host's tasks and launcher inherit its stdout: a hung child would hold the pipe open
	// and Run would wait past the limit for good. So the host leads a process group, the
	// whole group is killed at the limit, and Run stops reading soon after.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		return result{stdout: so.String(), stderr: se.String()}, fmt.Errorf("spankhost %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(all, " "), err, so.String(), se.String())
	}
	r := result{stdout: so.String(), stderr: se.String(), lines: map[string]string{}, tasks: map[int]map[string]string{}}
	for _, l := range strings.Split(r.stdout, "\n") {
		if m := taskLine.FindStringSubmatch(l); m != nil {
			id, _ := strconv.Atoi(m[1])
			env := map[string]string{"rc": m[2]}
			for _, kv := range strings.Fields(m[3]) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			r.tasks[id] = env
			continue
		}
		for _, key := range []string{"init rc", "option rc", "init_post_opt rc", "threads before", "children forked",
			"tasks ok", "post_fork calls", "oom_score_adj", "fds before", "user_init contained rc", "threads end", "host alive", "env SLURM_GPU_BIND_TOPO"} {
			if strings.HasPrefix(l, key) {
				r.lines[key] = l
			}
		}
	}
	if _, ok := r.lines["host alive"]; !ok {
		return r, fmt.Errorf("host did not finish:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	return r, nil
}

// kv parses the "a=1 b=2" values of a summary line.
func kv(t *testing.T, s string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("bad summary %q", s)
		}
		out[k] = n
	}
	return out
}

// plan writes a decision table (header and end line added) to a file.
func plan(t *testing.T, body ...string) string {
	t.Helper()
	lines := append([]string{"gpubind-plan 1"}, body...)
	text := strings.Join(lines, "\n") + fmt.Sprintf("\nend %d\n", len(lines))
	p := filepath.Join(t.TempDir(), "plan.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// dgxPlan: two NUMA nodes on CPUs 0 and 1, four step GPUs, ntasks tasks,
// rule numa, tasks alternating between the nodes in the table.
func dgxPlan(t *testing.T, ntasks int, flags string, extra ...string) string {
	body := []string{"status ok", "mode enforce", "flags " + flags, "rule numa", "share 1", "per_task 1",
		fmt.Sprintf("ntasks %d", ntasks), "numa 0 0", "numa 1 1",
		"gpu 0 0 0 0 0000:1b:00.0 GPU-aaaa 0 mlx5_0",
		"gpu 1 1 1 1 0000:43:00.0 GPU-bbbb 0 mlx5_1",
		"gpu 2 2 4 4 0000:9b:00.0 GPU-cccc 1 mlx5_4",
		"gpu 3 3 5 5 0000:c2:00.0 GPU-dddd 1 mlx5_5",
		"numagpus 0 0,1", "numagpus 1 2,3", "fallback 0,2,1,3"}
	body = append(body, extra...)
	order := []int{0, 2, 1, 3}
	for i := 0; i < ntasks; i++ {
		body = append(body, fmt.Sprintf("task %d %d %d", i, order[i%4], i%2))
	}
	return plan(t, body...)
}

func requestOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "request.txt"))
	if err != nil {
		return nil
	}
	m := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

// planArgs are plugstack arguments that plan with the test launcher of mode
// (csrc/testengine.c), then args.
func planArgs(t *testing.T, mode string, args ...string) []string {
	t.Helper()
	build(t)
	return append([]string{"launcher=" + bin.launchers[mode]}, args...)
}
