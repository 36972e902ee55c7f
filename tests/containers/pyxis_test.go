package containers

import (
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// pyxisEnv is what the pyxis tests share: one cluster, the plugstack lines, and enroot's
// directories per user.
type pyxisEnv struct {
	c       *cluster.Cluster
	gb, px  string              // gpubind's and pyxis's plugstack lines
	xdg     map[string][]string // user ("" root) -> XDG_* settings for the job's environment
	nobody  string              // uid of nobody
	prefix  string              // the runtimes' install prefix
	bin     string              // gpubind's directory (gpubindBinary)
	stubLog string              // the nvidia-container-cli stub's log
}

// order sets plugstack.conf to gpubind before or after pyxis ("before", "after"), gpubind's
// line with args added.
func (e *pyxisEnv) order(t *testing.T, order string, args ...string) {
	t.Helper()
	gb := e.gb
	if len(args) > 0 {
		gb += " " + strings.Join(args, " ")
	}
	if order == "after" {
		setPlugStack(t, e.c, e.px, gb)
	} else {
		setPlugStack(t, e.c, gb, e.px)
	}
}

// steps runs s outside a container and inside the image img (runIn), and returns both.
func (e *pyxisEnv) steps(t *testing.T, s step, img string, inArgs ...string) (outside, inside []task) {
	t.Helper()
	return e.run(t, s), e.runIn(t, s, img, inArgs...)
}

// run runs s, its user's enroot directories, the stub's settings and whereami's command
// added to the job's environment; t fails when srun does.
func (e *pyxisEnv) run(t *testing.T, s step) []task {
	t.Helper()
	tasks, _, err := e.try(t, s)
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// try is run, returning srun's stderr and error instead of failing.
func (e *pyxisEnv) try(t *testing.T, s step) ([]task, string, error) {
	t.Helper()
	s.Env = append(append([]string{}, s.Env...), e.xdg[s.User]...)
	s.Env = append(s.Env, "GPUBIND_STUB_LOG="+e.stubLog, "GPUBIND_STUB_DEVDIR="+e.c.DevDir,
		"GPUBIND_STUB_GPUS="+filepath.Join(fixtureRoot(), "proc/driver/nvidia/gpus"),
		"GPUBIND_WHEREAMI="+whereamiCmd(e.bin, e.c))
	return runTasks(t, e.c, s)
}

// inImage is s run inside img (pyxis options inArgs first) with gpubind's binary and the
// fixture mounted (whereami), and dev too when not "".
func (e *pyxisEnv) inImage(s step, img, dev string, inArgs ...string) step {
	mounts := []string{e.bin + ":" + e.bin, fixtureRoot() + ":" + fixtureRoot()}
	if dev != "" {
		mounts = append(mounts, dev+":"+dev)
	}
	s.Args = append(append([]string{"--container-image=" + img, "--container-mounts=" + strings.Join(mounts, ",")}, inArgs...), s.Args...)
	return s
}

// runIn runs s inside the image img, the fake GPU nodes mounted into the container at their
// host paths (as enroot's default /dev holds the real ones), with pyxis options inArgs.
func (e *pyxisEnv) runIn(t *testing.T, s step, img string, inArgs ...string) []task {
	t.Helper()
	return e.run(t, e.inImage(s, img, e.c.DevDir, inArgs...))
}

// restricted is s inside img with ENROOT_RESTRICT_DEV=y: the container's GPU nodes are only
// those enroot's nvidia hook has nvidia-container-cli (the stub) mount, for
// NVIDIA_VISIBLE_DEVICES.
func (e *pyxisEnv) restricted(s step, img string) step {
	s.Env = append(append([]string{}, s.Env...), "ENROOT_RESTRICT_DEV=y")
	return e.inImage(s, img, "")
}

// stubCalls returns the stub's log lines since the last call, and empties the log.
func (e *pyxisEnv) stubCalls(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(e.stubLog)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.stubLog, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.stubLog, 0o666); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// cudaAgrees fails t unless every task's CUDA (what whereami resolves its
// CUDA_VISIBLE_DEVICES to where it runs) is the GPU gpubind chose for it (Bus): the whole list
// for visible=own, and with visible=first (localid) the entry 0 (SLURM_LOCALID) of a list of
// all 4 step GPUs. opt is the --gpu-bind-topo value.
func cudaAgrees(t *testing.T, opt string, tasks []task) {
	t.Helper()
	for _, k := range tasks {
		got := k.CUDA
		if strings.Contains(opt, "visible=") {
			l := strings.Split(k.CUDA, ",")
			at := 0
			if strings.Contains(opt, "visible=localid") {
				at = k.Local
			}
			if len(l) != 4 || at >= len(l) {
				t.Errorf("%v: CUDA would use %s, want the step's 4 GPUs", k, k.CUDA)
				continue
			}
			got = l[at]
		}
		if got != k.Bus {
			t.Errorf("%v: CUDA would use %s, gpubind chose %s (whereami: %s)", k, k.CUDA, k.Bus, k.Whereami)
		}
	}
}

// newPyxisEnv builds the runtimes and the plugin and starts the one cluster of TestPyxis:
// enroot on the daemons' PATH (pyxis runs it from slurmstepd's PATH), pyxis's runtime_path
// a directory anyone may enter, enroot's paths per user through XDG_* in the job's
// environment (pyxis passes them on; ENROOT_*_PATH are on its deny list).
func newPyxisEnv(t *testing.T) *pyxisEnv {
	prefix := runtimes(t)
	u, err := osuser.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	e := &pyxisEnv{nobody: u.Uid, prefix: prefix, xdg: map[string][]string{}}
	for user, owner := range map[string]int{"": 0, "nobody": uid} {
		base := sharedDir(t, owner)
		env := []string{"HOME=" + base}
		for _, v := range []string{"XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR"} {
			d := filepath.Join(base, strings.ToLower(v))
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, owner, -1); err != nil {
				t.Fatal(err)
			}
			env = append(env, v+"="+d)
		}
		e.xdg[user] = env
	}
	// enroot, and the nvidia-container-cli stub its nvidia hook runs, on the daemons' PATH.
	stub := sharedDir(t, 0)
	if err := testbuildCopy(filepath.Join(repo(), "tests/containers/nvidia-container-cli"), filepath.Join(stub, "nvidia-container-cli")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Join(prefix, "bin")+":"+stub+":"+os.Getenv("PATH"))
	logs := sharedDir(t, 0)
	if err := os.Chmod(logs, 0o1777); err != nil {
		t.Fatal(err)
	}
	e.stubLog = filepath.Join(logs, "nvidia-container-cli.log")
	e.stubCalls(t)
	e.bin = gpubindBinary(t)
	e.gb = gpubindLine(t)
	e.px = "required " + filepath.Join(prefix, "lib/slurm/spank_pyxis.so") + " runtime_path=" + sharedDir(t, 0)
	// GRES index i is minor order[i]: the step's 4 GPUs are minors 4-7, not the node's first
	// (CUDA_VISIBLE_DEVICES numbers count what the task's cgroup lets it open, so 0-3 still).
	e.c = startCluster(t, cluster.Config{PlugStack: []string{e.gb, e.px}, GresOrder: []int{4, 5, 6, 7, 0, 1, 2, 3}})
	return e
}

// The step of the pyxis tests: 4 tasks, 4 of the 8 GPUs, two tasks per CPU.
var pyxisStep = []string{"-n4", "--gpus=4", "--cpu-bind=map_cpu:0,1,0,1"}

// TestPyxis runs steps outside a container and inside a pyxis+enroot container on one
// cluster configured as sites do (task/cgroup, task/affinity, ConstrainDevices), with
// gpubind listed before and after pyxis in plugstack.conf. Inside, every task must get what
// it gets outside: CUDA_VISIBLE_DEVICES, its GPU, the device nodes it can open, its cgroup.
func TestPyxis(t *testing.T) {
	e := newPyxisEnv(t)
	plain := squashImage(t)

	// CI time: each case is two sruns; gpubind after pyxis (the recommended order) gets every
	// option, before pyxis the two that differ most (isolate acts outside the container).
	for _, c := range []struct{ order, opt string }{
		{"before", "closest"}, {"before", "closest,isolate"},
		{"after", "closest"}, {"after", "closest,isolate"}, {"after", "closest,uuid"}, {"after", "closest,visible=localid"},
	} {
		order, opt := c.order, c.opt
		t.Run("gpubind "+order+" pyxis/"+opt, func(t *testing.T) {
			e.order(t, order)
			outside, inside := e.steps(t, step{Args: append([]string{"--gpu-bind-topo=" + opt}, pyxisStep...)}, plain)
			sameTasks(t, 4, outside, inside)
			cudaAgrees(t, opt, append(outside, inside...))
		})
	}

	// The admin's default= (plugstack) binds a step that asks for nothing, inside as outside.
	t.Run("default=closest/gpubind after pyxis", func(t *testing.T) {
		e.order(t, "after", "default=closest")
		outside, inside := e.steps(t, step{Args: pyxisStep}, plain)
		sameTasks(t, 4, outside, inside)
		// default= chooses visible=localid where every task may see every GPU (docs/admin.md).
		cudaAgrees(t, "closest,visible=localid", append(outside, inside...))
		for _, k := range outside {
			if k.Bus == "-" {
				t.Errorf("%v: default= did not bind the step", k)
			}
		}
	})

	// With the admin's default=, the steps that did not ask for a binding see inside a container
	// exactly what they see there without gpubind: a CPU-only step, --gpu-bind=none, one task
	// driving several GPUs (torchrun), and a GPU step whose launcher cannot run (the plan
	// fails in slurmstepd before pyxis makes the container). tests/sitedefault checks the same
	// steps, and more, outside containers.
	t.Run("default=closest/steps that did not ask see what they see without gpubind", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "no-launcher-here")
		for _, c := range []struct {
			name      string
			args      []string
			plugstack string
		}{
			{"cpu-only step", []string{"-n2"}, ""},
			{"--gpu-bind=none", append([]string{"--gpu-bind=none"}, pyxisStep...), ""},
			{"1 task and 4 GPUs", []string{"-n1", "--gpus=4"}, ""},
			{"GPU step, launcher missing", pyxisStep, "launcher=" + missing},
		} {
			setPlugStack(t, e.c, e.px)
			without := e.runIn(t, step{Args: c.args}, plain)
			e.order(t, "after", strings.TrimSpace("default=closest mode=enforce "+c.plugstack))
			with := e.runIn(t, step{Args: c.args}, plain)
			sameRuns(t, c.name, without, with)
		}
	})

	// Jobs of ordinary users, as at sites: pyxis then joins the container's user namespace
	// and sets its seccomp filter before the tasks go on.
	for _, c := range []struct{ order, opt string }{{"after", "closest"}, {"before", "closest,uuid"}} {
		order, opt := c.order, c.opt
		t.Run("nobody/gpubind "+order+" pyxis/"+opt, func(t *testing.T) {
			e.order(t, order)
			outside, inside := e.steps(t, step{User: "nobody", Args: append([]string{"--gpu-bind-topo=" + opt}, pyxisStep...)}, plain)
			for _, k := range outside {
				if k.UID != e.nobody {
					t.Fatalf("%v: want uid %s (nobody)", k, e.nobody)
				}
			}
			sameTasks(t, 4, outside, inside)
		})
	}

	// An image whose /etc/environment sets CUDA_VISIBLE_DEVICES (CUDA base images set
	// NVIDIA_VISIBLE_DEVICES, some both). pyxis imports the container's environment into
	// every task with overwrite. With gpubind after pyxis, gpubind sets each task's value
	// after that import, so every task keeps its own.
	envImage := squashImage(t, imageFile{"etc/environment", "CUDA_VISIBLE_DEVICES=7\nNVIDIA_VISIBLE_DEVICES=void\n"})
	t.Run("image environment/gpubind after pyxis", func(t *testing.T) {
		e.order(t, "after")
		outside, inside := e.steps(t, step{Args: append([]string{"--gpu-bind-topo=closest"}, pyxisStep...)}, envImage)
		sameTasks(t, 4, outside, inside, "NVVisible")
	})
	// With gpubind before pyxis the image's value replaces gpubind's in every task (the
	// finding of issue 36: pyxis's import, not gpubind's; docs/containers.md), unless the user
	// keeps the job's value with --container-env=CUDA_VISIBLE_DEVICES. This records that
	// behaviour: should pyxis stop overwriting, the docs' placement advice changes.
	t.Run("image environment/gpubind before pyxis", func(t *testing.T) {
		e.order(t, "before")
		s := step{Args: append([]string{"--gpu-bind-topo=closest"}, pyxisStep...)}
		outside, inside := e.steps(t, s, envImage)
		if len(inside) != 4 {
			t.Fatalf("%d tasks inside, want 4: %v", len(inside), inside)
		}
		for _, k := range inside {
			if k.Visible != "7" {
				t.Errorf("%v: want the image's CUDA_VISIBLE_DEVICES=7 (pyxis imports the image's environment over the task's)", k)
			}
		}
		kept := e.runIn(t, s, envImage, "--container-env=CUDA_VISIBLE_DEVICES")
		sameTasks(t, 4, outside, kept, "NVVisible")
	})

	t.Run("ENROOT_RESTRICT_DEV=y", func(t *testing.T) { restrictDev(t, e) })
}

// sameRuns fails t unless two runs of the step name inside a container (without and with
// gpubind) gave, task by task, the same: variables, the nodes it can open, its cgroup, what
// CUDA would use. enroot roots the container's cgroup namespace at the cgroup of the task that
// created it, which may be another task in each run: that task sees "/" and the others
// "/../task_N". Its "/" is taken as its own task_N, as the others show it, so the runs
// compare; a task moved elsewhere still differs (its path, or the others' relative to it).
func sameRuns(t *testing.T, name string, without, with []task) {
	t.Helper()
	if len(without) == 0 || len(with) != len(without) {
		t.Fatalf("%s: %d tasks without gpubind, %d with:\n%v\n%v", name, len(without), len(with), without, with)
	}
	creator := func(k task) task {
		k.Whereami = "" // compared through CUDA
		if k.Cgroup == "/" {
			k.Cgroup = "/../task_" + strconv.Itoa(k.Local)
		}
		return k
	}
	for i := range without {
		if a, b := creator(without[i]), creator(with[i]); a != b {
			t.Errorf("%s: task %d differs:\nwithout gpubind %v\nwith gpubind    %v", name, i, without[i], with[i])
		}
	}
}

// testbuildCopy copies the file src to dst, mode 0755 (a program).
func testbuildCopy(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}

// restrictDev (TestPyxis): enroot with ENROOT_RESTRICT_DEV=y (sites set it in enroot.conf; a job
// may set it too) and an image that sets NVIDIA_VISIBLE_DEVICES=all, as CUDA images do. The
// container's /dev then holds only what the nvidia hook mounts, decided once per node from
// the environment and cgroup of the task that creates the container (the stub models
// nvidia-container-cli: NVML sees the GPUs the caller may open). Wanted: every task opens
// inside what it opens outside, and CUDA (whereami inside, numbering by what the task can open
// there) uses the GPU gpubind chose.
func restrictDev(t *testing.T, e *pyxisEnv) {
	hostDevForRestrict(t)
	cudaImage := squashImage(t, imageFile{"etc/environment", "NVIDIA_VISIBLE_DEVICES=all\n"})
	uuids := stepUUIDs(t, e)

	plainImage := squashImage(t)
	// Without containers=yes (the findings). An image that does not set
	// NVIDIA_VISIBLE_DEVICES (any non-CUDA base image): enroot's hook mounts no GPU, and the
	// tasks find none of theirs inside.
	t.Run("without containers=yes/plain image/closest", func(t *testing.T) {
		e.order(t, "before")
		s := step{Args: append([]string{"--gpu-bind-topo=closest"}, pyxisStep...)}
		inside := e.run(t, e.restricted(s, plainImage))
		if calls := e.stubCalls(t); len(calls) != 0 {
			t.Errorf("nvidia-container-cli calls %q, want none (NVIDIA_VISIBLE_DEVICES unset)", calls)
		}
		for _, k := range inside {
			if k.Openable != "-" {
				t.Errorf("%v: opens GPUs in a container whose /dev got none", k)
			}
		}
	})
	// The image's "all" under isolate: resolved in the creating task's cgroup, which isolate
	// has already limited to that task's GPU, so the container holds that one GPU only, and
	// the other tasks find theirs missing.
	t.Run("without containers=yes/CUDA image/closest,isolate", func(t *testing.T) {
		e.order(t, "before")
		s := step{Args: append([]string{"--gpu-bind-topo=closest,isolate"}, pyxisStep...)}
		inside := e.run(t, e.restricted(s, cudaImage))
		calls := e.stubCalls(t)
		if len(calls) != 1 || !strings.Contains(calls[0], "--device=all ") {
			t.Errorf("nvidia-container-cli calls %q, want one with --device=all (the image's value)", calls)
		}
		without := 0
		for _, k := range inside {
			if k.Openable == "-" {
				without++
			}
		}
		if len(inside) != 4 || without != 3 {
			t.Errorf("%d of %d tasks without their GPU inside, want 3 of 4 (all but the creating task's):\n%v", without, len(inside), inside)
		}
	})

	// containers=yes: NVIDIA_VISIBLE_DEVICES is the step's GPUs by UUID before any task exists
	// (in the hook the job's value wins over the image's), and uuid is forced. Inside, the
	// tasks' NVIDIA_VISIBLE_DEVICES is the image's again, where it sets one (pyxis imports the
	// container's environment); only the hook reads it.
	plain := e.gb
	e.gb += " containers=yes"
	defer func() { e.gb = plain }()
	for _, c := range []struct{ order, opt, image string }{
		{"after", "closest", "plain"}, {"after", "closest,visible=localid", "plain"}, {"after", "closest,visible=first", "plain"},
		{"before", "closest", "plain"}, {"after", "closest", "CUDA"},
	} {
		t.Run("containers=yes/gpubind "+c.order+" pyxis/"+c.image+" image/"+c.opt, func(t *testing.T) {
			img := plainImage
			if c.image == "CUDA" {
				img = cudaImage
			}
			e.order(t, c.order)
			s := step{Args: append([]string{"--gpu-bind-topo=" + c.opt}, pyxisStep...)}
			outside := e.run(t, s)
			e.stubCalls(t)
			inside := e.run(t, e.restricted(s, img))
			calls := e.stubCalls(t)
			if len(calls) != 1 || sorted(deviceArg.FindStringSubmatch(calls[0])) != uuids {
				t.Errorf("nvidia-container-cli calls %q, want one with --device= the step's GPUs %s", calls, uuids)
			}
			sameTasks(t, 4, outside, inside, "NVVisible")
			cudaAgrees(t, c.opt, append(outside, inside...))
			for _, k := range outside {
				if sorted([]string{"", k.NVVisible}) != uuids {
					t.Errorf("%v: want NVIDIA_VISIBLE_DEVICES= the step's GPUs %s", k, uuids)
				}
			}
			for _, k := range append(outside, inside...) {
				if !strings.HasPrefix(k.Visible, "GPU-") {
					t.Errorf("%v: want CUDA_VISIBLE_DEVICES by UUID (containers=yes forces uuid)", k)
				}
			}
		})
	}

	// isolate: the hook runs in the creating task's cgroup, which isolate has already limited
	// to that task's GPU, so nvidia-container-cli cannot resolve the other tasks' GPUs. The
	// step must fail naming it, never run a task without its GPU.
	t.Run("containers=yes/gpubind after pyxis/closest,isolate", func(t *testing.T) {
		e.order(t, "after")
		s := step{Args: append([]string{"--gpu-bind-topo=closest,isolate"}, pyxisStep...)}
		tasks, stderr, err := e.try(t, e.restricted(s, cudaImage))
		calls := e.stubCalls(t)
		t.Logf("nvidia-container-cli calls: %q", calls)
		if err == nil {
			for _, k := range tasks {
				if k.CUDA != k.Bus || k.Openable == "-" {
					t.Errorf("%v: the step ran, and this task has not its GPU", k)
				}
			}
			return
		}
		if !strings.Contains(stderr, "unknown device") {
			t.Errorf("the step failed without naming the device nvidia-container-cli could not resolve: %v", err)
		}
	})
}

var deviceArg = regexp.MustCompile(`--device=(\S*)`)

// sorted is m[1] (a comma list; "" when m is nil) sorted, for comparing lists as sets.
func sorted(m []string) string {
	if m == nil {
		return ""
	}
	l := strings.Split(m[1], ",")
	sort.Strings(l)
	return strings.Join(l, ",")
}

// stepUUIDs is the UUIDs of the GPUs of pyxisStep (GRES 0-3: minors 4-7), sorted: from a step outside a container with closest,uuid and
// visible=first, whose task 0 sees every GPU of the step, in bus order.
func stepUUIDs(t *testing.T, e *pyxisEnv) string {
	t.Helper()
	e.order(t, "after")
	tasks := e.run(t, step{Args: append([]string{"--gpu-bind-topo=closest,uuid,visible=first"}, pyxisStep...)})
	if len(tasks) != 4 {
		t.Fatalf("%d tasks, want 4", len(tasks))
	}
	l := strings.Split(tasks[0].Visible, ",")
	sort.Strings(l)
	return strings.Join(l, ",")
}

// hostDevForRestrict gives this machine what enroot's 10-devices.sh bind-mounts, without
// nofail, into a container's fresh /dev under ENROOT_RESTRICT_DEV=y and what every systemd
// host has: /dev/mqueue (a mqueue mount) and /dev/log (journald's socket there; here an empty
// file, which only has to exist). What it made goes again at the end of the test.
func hostDevForRestrict(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/mqueue"); os.IsNotExist(err) {
		if err := os.Mkdir("/dev/mqueue", 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("mount", "-t", "mqueue", "mqueue", "/dev/mqueue").CombinedOutput(); err != nil {
			t.Logf("mount -t mqueue: %v: %s (an empty /dev/mqueue instead)", err, out)
		}
		t.Logf("made /dev/mqueue, which this machine lacks (enroot's 10-devices.sh needs it)")
		t.Cleanup(func() {
			_ = exec.Command("umount", "/dev/mqueue").Run()
			_ = os.Remove("/dev/mqueue")
		})
	}
	if _, err := os.Lstat("/dev/log"); os.IsNotExist(err) {
		if err := os.WriteFile("/dev/log", nil, 0o666); err != nil {
			t.Fatal(err)
		}
		t.Logf("made /dev/log, which this machine lacks (enroot's 10-devices.sh needs it)")
		t.Cleanup(func() { _ = os.Remove("/dev/log") })
	}
}
