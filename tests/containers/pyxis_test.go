package containers

import (
	"os"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
)

// pyxisEnv is what the pyxis tests share: one cluster, the plugstack lines, and enroot's
// directories per user.
type pyxisEnv struct {
	c      *cluster.Cluster
	gb, px string              // gpubind's and pyxis's plugstack lines
	xdg    map[string][]string // user ("" root) -> XDG_* settings for the job's environment
	nobody string              // uid of nobody
	prefix string              // the runtimes' install prefix
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

// run runs s (its user's enroot directories added to the job's environment).
func (e *pyxisEnv) run(t *testing.T, s step) []task {
	t.Helper()
	s.Env = append(append([]string{}, s.Env...), e.xdg[s.User]...)
	tasks, _, err := runTasks(t, e.c, s)
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// runIn runs s inside the image img, the fake GPU nodes mounted into the container at their
// host paths (as enroot's default /dev holds the real ones), with pyxis options inArgs.
func (e *pyxisEnv) runIn(t *testing.T, s step, img string, inArgs ...string) []task {
	t.Helper()
	s.Args = append(append([]string{"--container-image=" + img, "--container-mounts=" + e.c.DevDir + ":" + e.c.DevDir}, inArgs...), s.Args...)
	return e.run(t, s)
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
	t.Setenv("PATH", filepath.Join(prefix, "bin")+":"+os.Getenv("PATH"))
	e.gb = gpubindLine(t)
	e.px = "required " + filepath.Join(prefix, "lib/slurm/spank_pyxis.so") + " runtime_path=" + sharedDir(t, 0)
	e.c = startCluster(t, cluster.Config{PlugStack: []string{e.gb, e.px}})
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

	for _, order := range []string{"before", "after"} {
		for _, opt := range []string{"closest", "closest,isolate", "closest,uuid"} {
			t.Run("gpubind "+order+" pyxis/"+opt, func(t *testing.T) {
				e.order(t, order)
				outside, inside := e.steps(t, step{Args: append([]string{"--gpu-bind-topo=" + opt}, pyxisStep...)}, plain)
				sameTasks(t, 4, outside, inside)
			})
		}
	}

	// Jobs of ordinary users, as at sites: pyxis then joins the container's user namespace
	// and sets its seccomp filter before the tasks go on.
	for _, order := range []string{"after", "before"} {
		for _, opt := range []string{"closest", "closest,uuid"} {
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
}
