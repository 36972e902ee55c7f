package spankhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fakeGPUs makes /dev/nvidiaN-like nodes (minor N) and a gres.conf listing
// them in order, as the engine maps GRES indices through device minors.
func fakeGPUs(t *testing.T, n int) (gresConf string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for mknod")
	}
	dir := t.TempDir()
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, "nvidia"+itoa(i))
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(195<<8|i)); err != nil {
			t.Fatal(err)
		}
	}
	gresConf = filepath.Join(dir, "gres.conf")
	if err := os.WriteFile(gresConf, []byte("Name=gpu File="+dir+"/nvidia[0-"+itoa(n-1)+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return gresConf
}

func itoa(i int) string { return strconv.Itoa(i) }

func cacheDir(t *testing.T) string {
	d := filepath.Join(t.TempDir(), "cache")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// The real engine (found next to the plugin, no engine=) on the DGX H100
// fixture: the host keeps its one thread and sees every child exit, and
// each task gets exactly what `gpubind plan` says.
func TestRealEngine(t *testing.T) {
	build(t)
	gres := fakeGPUs(t, 8)
	root := filepath.Join(repoRoot(), "tests/fixtures/dgxh100-2cpu")
	for _, c := range []struct{ pol, gpus string }{
		{"closest", "0,1,4,5"}, {"closest,nic", "0,1,4,5"}, {"spread", "0,1,4,5"},
		{"per-task:2", "0,1,2,3,4,5,6,7"}, {"map:5,4,1,0", "0,1,4,5"}, {"single:2", "0,1,4,5"},
	} {
		pol := c.pol
		r := host(t, []string{"-n", "4", "-C", "200", "-t", "mask_cpu:", "-l", "0x1,0x2,0x1,0x2",
			"-e", "SLURM_STEP_GPUS=" + c.gpus, "-o", pol},
			"root="+root, "source=sysfs", "gres_conf="+gres, "cache_dir="+cacheDir(t))
		if r.rc(t, "init_post_opt") != 0 {
			t.Fatalf("%s: init_post_opt failed:\n%s", pol, r.stderr)
		}
		if th := kv(t, r.lines["threads before"]); th["after"] != 1 {
			t.Errorf("%s: threads after init_post_opt = %d", pol, th["after"])
		}
		if ch := kv(t, r.lines["children forked"]); ch["seen"] != 200 {
			t.Errorf("%s: children seen %d of 200", pol, ch["seen"])
		}
		out, err := cli("plan", "--root", root, "--tasks", "4", "--gpus", c.gpus, "--task-cpus", "0;1;0;1", "--policy", pol, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var want struct{ Tasks []planTask }
		if err := json.Unmarshal([]byte(out), &want); err != nil {
			t.Fatal(err)
		}
		for _, w := range want.Tasks {
			got := r.tasks[w.Task]
			delete(got, "rc")
			if len(got) != len(w.Env) {
				t.Errorf("%s task %d: env %v, plan %v", pol, w.Task, got, w.Env)
			}
			for k, v := range w.Env {
				if got[k] != v {
					t.Errorf("%s task %d: %s=%q, plan says %q", pol, w.Task, k, got[k], v)
				}
			}
			if line := "gpubind: task " + itoa(w.Task) + " (rank " + itoa(w.Task) + "): CUDA_VISIBLE_DEVICES=" + w.Visible + " -> GPU "; !strings.Contains(r.stderr, "host-log info: "+line) {
				t.Errorf("%s: no slurm_info line %q in\n%s", pol, line, r.stderr)
			}
			for _, g := range w.GPUs {
				if !strings.Contains(r.stderr, g.BusID) {
					t.Errorf("%s: log lacks bus id %s", pol, g.BusID)
				}
			}
		}
	}
}

// A bad option value fails the step naming the text (enforce) or runs
// unbound with a warning (optional); the srun side rejects it early.
func TestBadOption(t *testing.T) {
	build(t)
	gres := fakeGPUs(t, 8)
	root := filepath.Join(repoRoot(), "tests/fixtures/dgxh100-2cpu")
	args := []string{"root=" + root, "source=sysfs", "gres_conf=" + gres, "cache_dir=" + cacheDir(t)}
	r := host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1", "-o", "closets"}, args...)
	if kv(t, r.lines["tasks ok"])["failed"] != 2 || !strings.Contains(r.stderr, "gpubind: error: ") || !strings.Contains(r.stderr, `"closets"`) {
		t.Errorf("enforce: want the tasks failed naming \"closets\":\n%s", r.stderr)
	}
	r = host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1", "-o", "closets"}, append(args, "mode=optional")...)
	if r.rc(t, "init_post_opt") != 0 || !strings.Contains(r.stderr, "closets") || len(r.tasks[0]) != 1 {
		t.Errorf("optional: want a warning naming \"closets\" and unbound tasks:\n%s\n%v", r.stderr, r.tasks)
	}
	// srun: the option callback checks with the engine in-process.
	r = host(t, []string{"-X", "local", "-o", "spread,bogus"}, args...)
	if r.rc(t, "option") != -1 || !strings.Contains(r.stderr, "bogus") {
		t.Errorf("srun: want the option refused naming \"bogus\":\n%s", r.stderr)
	}
	r = host(t, []string{"-X", "local", "-e", "X=1", "-o", "spread,verbose"}, args...)
	if r.rc(t, "option") != 0 {
		t.Errorf("srun: valid option refused:\n%s", r.stderr)
	}
}

// sbatch/salloc export the option to the job environment, so that steps
// inside the job inherit it.
func TestAllocatorExportsOption(t *testing.T) {
	r := host(t, []string{"-X", "allocator", "-o", "spread,verbose"})
	if r.rc(t, "option") != 0 || !strings.Contains(r.lines["env SLURM_GPU_BIND_TOPO"], "=spread,verbose") {
		t.Errorf("allocator: %q\n%s", r.lines["env SLURM_GPU_BIND_TOPO"], r.stderr)
	}
	r = host(t, []string{"-X", "allocator", "-o", "-"})
	if !strings.Contains(r.lines["env SLURM_GPU_BIND_TOPO"], "=closest") {
		t.Errorf("bare option: %q", r.lines["env SLURM_GPU_BIND_TOPO"])
	}
	r = host(t, []string{"-X", "local", "-o", "spread"})
	if !strings.Contains(r.lines["env SLURM_GPU_BIND_TOPO"], "(unset)") {
		t.Errorf("srun must not export the option: %q", r.lines["env SLURM_GPU_BIND_TOPO"])
	}
}

// Option precedence, off, and the steps that are never bound. The test
// engine saves the request it got in cache_dir, so "no request" means no
// child ran.
func TestPrecedenceAndOff(t *testing.T) {
	build(t)
	p := dgxPlan(t, 2, "-")
	cases := []struct {
		name  string
		flags []string
		args  []string
		want  string // option= in the request; "" = no child at all
	}{
		{"absent, no default", nil, nil, ""},
		// Issue 33: a binding from default= alone never shrinks what a task sees: every
		// task keeps every step GPU, its own at entry SLURM_LOCALID.
		{"absent, default", nil, []string{"default=spread,verbose"}, "spread,verbose,visible=localid"},
		{"default naming visible=", nil, []string{"default=spread,visible=first"}, "spread,visible=first"},
		// ... and where the tasks take fewer GPUs than the step has, or Slurm gave the
		// step none here, no launcher runs at all.
		{"default, fewer tasks than GPUs", []string{"-e", "SLURM_STEP_GPUS=0,1,2,3"}, []string{"default=closest"}, ""},
		{"default, an empty SLURM_STEP_GPUS", []string{"-e", "SLURM_STEP_GPUS="}, []string{"default=closest"}, ""},
		{"default, the user's --gpu-bind=none", []string{"-e", "SLURM_TRES_BIND=gres/gpu:none"}, []string{"default=closest"}, ""},
		{"env, fewer tasks than GPUs: as asked", []string{"-e", "SLURM_STEP_GPUS=0,1,2,3", "-e", "SLURM_GPU_BIND_TOPO=spread"}, []string{"default=closest"}, "spread"},
		{"bare", []string{"-o", "-"}, []string{"default=spread"}, "closest"},
		{"user beats env and default", []string{"-o", "pack", "-e", "SLURM_GPU_BIND_TOPO=spread"}, []string{"default=single:2"}, "pack"},
		{"env beats default", []string{"-e", "SLURM_GPU_BIND_TOPO=spread"}, []string{"default=pack"}, "spread"},
		// Issue 23: off means "as if I asked nothing"; with cpus=force that is the default
		// with what the admin forces, so off cannot bypass force.
		{"user off under cpus=force: the default", []string{"-o", "off"}, []string{"default=closest"}, "closest,visible=localid"},
		{"user off, no default", []string{"-o", "off"}, nil, ""},
		{"default off", nil, []string{"default=off"}, ""},
		{"batch step", []string{"-s", "4294967291", "-o", "closest"}, nil, ""},
		{"extern step", []string{"-s", "4294967292", "-o", "closest"}, nil, ""},
		{"interactive step", []string{"-s", "4294967290", "-o", "closest"}, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			flags := append([]string{"-n", "2", "-C", "5", "-e", "SLURM_STEP_GPUS=0,1"}, c.flags...)
			args := append([]string{"launcher=" + bin.launchers["table"], "snapshot=" + p, "cache_dir=" + dir, "isolate=never", "cpus=force"}, c.args...)
			r := host(t, flags, args...)
			req := requestOf(t, dir)
			if c.want == "" {
				if req != nil {
					t.Errorf("a child ran: request %v", req)
				}
				for id, env := range r.tasks {
					if len(env) != 1 {
						t.Errorf("task %d environment changed: %v", id, env)
					}
				}
				if th := kv(t, r.lines["threads before"]); th["after"] != 1 {
					t.Errorf("threads %d", th["after"])
				}
				return
			}
			if req == nil {
				t.Fatalf("no child ran:\n%s", r.stderr)
			}
			if req["option"] != c.want {
				t.Errorf("option=%q, want %q", req["option"], c.want)
			}
			// A job-wide option that gives the tasks fewer GPUs than the step has: said
			// once, by global task 0.
			if cut := "from the job (SLURM_GPU_BIND_TOPO) gives this step's 2 tasks 2 of its 4 GPUs"; strings.Contains(c.name, "fewer tasks") &&
				strings.Count(r.stderr, cut) != 1 {
				t.Errorf("want one warning %q:\n%s", cut, r.stderr)
			}
			for k, v := range map[string]string{"force": "cpus", "never": "isolate", "local_tasks": "2", "global_ids": "0,1",
				"env.SLURM_STEP_GPUS": "0,1", "mode": "enforce", "uid": itoa(0)} {
				if os.Geteuid() != 0 && k == "uid" ||
					k == "env.SLURM_STEP_GPUS" && strings.Contains(strings.Join(c.flags, " "), "SLURM_STEP_GPUS=") {
					continue
				}
				if req[k] != v {
					t.Errorf("request %s=%q, want %q", k, req[k], v)
				}
			}
		})
	}
}

// plugstack.conf arguments: unknown keys and bad values are errors that
// name them.
func TestPlugstackArgs(t *testing.T) {
	bad := map[string]string{
		"colour=blue":     `unknown plugstack argument "colour=blue"`,
		"mode=maybe":      "mode=maybe: expected enforce or optional",
		"source=magic":    "source=magic: expected auto, nvml, sysfs or snapshot",
		"timeout=0":       "timeout=0: expected milliseconds",
		"timeout=5s":      "timeout=5s: expected milliseconds",
		"isolate=yes":     "isolate=yes: expected allow, force or never",
		"cpus=sometimes":  "cpus=sometimes: expected allow, force or never",
		"root=relative":   "root=relative: expected an absolute path",
		"engine=x.so":     "engine=x.so: expected an absolute path",
		"source=snapshot": "source=snapshot needs snapshot=FILE",
		"noequals":        `"noequals": expected key=value`,
	}
	for arg, want := range bad {
		r := host(t, []string{"-o", "closest"}, arg)
		if r.rc(t, "init") != -1 || !strings.Contains(r.stderr, "gpubind: ") || !strings.Contains(r.stderr, want) {
			t.Errorf("%s: want init failure with %q:\n%s", arg, want, r.stderr)
		}
	}
	r := host(t, nil, "mode=optional", "timeout=100")
	if r.rc(t, "init") != 0 {
		t.Errorf("good arguments refused:\n%s", r.stderr)
	}
	r = host(t, nil, "mode=optional", "mode=enforce")
	if r.rc(t, "init") != -1 || !strings.Contains(r.stderr, "mode= given twice") {
		t.Errorf("duplicate: %s", r.stderr)
	}
}

// planTask is one task of `gpubind plan --json`.
type planTask struct {
	Task    int               `json:"task"`
	Visible string            `json:"visible"`
	GPUs    []planGPU         `json:"gpus"`
	CPUs    string            `json:"cpus"`
	Env     map[string]string `json:"env"`
}

type planGPU struct {
	Index int    `json:"index"`
	BusID string `json:"pci_bus_id"`
	UUID  string `json:"uuid"`
	NUMA  int    `json:"numa"`
}

func cli(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(bin.dir, "gpubind"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return "", fmt.Errorf("gpubind %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// Review finding: the admin's force/never lists were applied only in the
// engine, which runs as the job's user. The front end applies them to the plan too: a
// table that asks for isolate and cpus under isolate=never,cpus=never is used without
// them, and cpus=force adds cpus to a table without it.
func TestAdminFlagsInTheFrontEnd(t *testing.T) {
	build(t)
	for _, c := range []struct {
		table string
		args  []string
		want  string
	}{
		{"isolate,cpus,verbose", []string{"isolate=never", "cpus=never"}, "flags verbose"},
		{"-", []string{"cpus=force"}, "flags cpus"},
		{"nic", nil, "flags nic"},
	} {
		p := dgxPlan(t, 2, c.table)
		args := append([]string{"launcher=" + bin.launchers["table"], "snapshot=" + p, "cache_dir=" + t.TempDir()}, c.args...)
		r := host(t, []string{"-n", "2", "-e", "SLURM_STEP_GPUS=0,1", "-o", "closest"}, args...)
		if !strings.Contains(r.stderr, "step plan took") || !strings.Contains(r.stderr, ", "+c.want+")") {
			t.Errorf("table flags %s with %v: want %q in the plan line:\n%s", c.table, c.args, c.want, r.stderr)
		}
	}
}

// Review finding: the nic flag overwrote an NCCL_IB_HCA the user had set,
// and always named port 1. The user's NCCL_IB_HCA/UCX_NET_DEVICES stay; the table's NIC
// field carries the port (NAME:PORT, from the port's state), and an old NAME-only field
// still means port 1.
func TestNICKeepsTheUsersChoice(t *testing.T) {
	build(t)
	p := dgxPlan(t, 1, "nic")
	r := host(t, []string{"-n", "1", "-e", "SLURM_STEP_GPUS=0,1", "-e", "NCCL_IB_HCA==mlx5_9:2", "-o", "closest"},
		"launcher="+bin.launchers["table"], "snapshot="+p, "cache_dir="+t.TempDir())
	if env := r.tasks[0]; env["NCCL_IB_HCA"] != "=mlx5_9:2" || env["UCX_NET_DEVICES"] != "mlx5_0:1" {
		t.Errorf("user's NCCL_IB_HCA: task env %v", env)
	}
	body := strings.Replace(string(mustRead(t, p)), "GPU-aaaa 0 mlx5_0", "GPU-aaaa 0 mlx5_0:2", 1)
	must(t, os.WriteFile(p, []byte(body), 0o644))
	r = host(t, []string{"-n", "1", "-e", "SLURM_STEP_GPUS=0,1", "-o", "closest"},
		"launcher="+bin.launchers["table"], "snapshot="+p, "cache_dir="+t.TempDir())
	// NCCL_IB_HCA: the node's rails (the gpu lines' NICs, each once: this table has no
	// "nics" line), the same for every task; UCX and GPUBIND_NIC: the task's own.
	if env := r.tasks[0]; env["NCCL_IB_HCA"] != "=mlx5_0:2,mlx5_1:1,mlx5_4:1,mlx5_5:1" || env["UCX_NET_DEVICES"] != "mlx5_0:2" ||
		env["GPUBIND_NIC"] != "mlx5_0:2" {
		t.Errorf("port 2: task env %v", env)
	}
}
