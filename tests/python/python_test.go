// Package python tests the Python package gpubind (python/gpubind) as a user runs it: Debian's
// /usr/bin/python3 with python3-torch, under a real `srun --mpi=pmix` on a private Slurm cluster
// of two nodes with the gpubind plugin (fake GPUs of the DGX H100 fixture), with the stub
// libnccl for the NCCL ID. The address chooser's unit tests (pytest, unit/) run here too.
package python

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/stubnccl"
	"github.com/gpubind/gpubind/tests/testbuild"
)

// Python is Debian's interpreter, where python3-torch and python3-pytest live (a python3 earlier
// in PATH, such as a pyenv one, has neither). GPUBIND_TEST_PYTHON overrides it.
var Python = "/usr/bin/python3"

var (
	repoRoot  string
	workDir   string // built library, stub libnccl, plugin
	libPath   string // workDir/lib/libgpuhelper.so.1
	stubLib   string // workDir/libnccl.so.2
	pluginDir string // workDir/plugin
	setupErr  error
)

func TestMain(m *testing.M) {
	if p := os.Getenv("GPUBIND_TEST_PYTHON"); p != "" {
		Python = p
	}
	repoRoot = testbuild.RepoRoot()
	code := 1
	func() {
		dir, err := os.MkdirTemp("", "gpubind-python-")
		if err != nil {
			setupErr = err
			return
		}
		defer os.RemoveAll(dir)
		_ = os.Chmod(dir, 0o755) // slurmstepd's tasks read it
		workDir = dir
		setupErr = setup()
		code = m.Run()
	}()
	os.Exit(code)
}

// setup builds the library (as `make helper` does, into the test's own directory), the stub
// libnccl and, when root (the cluster tests), the plugin.
func setup() error {
	lib := filepath.Join(workDir, "lib")
	if err := testbuild.Run(repoRoot, []string{"make", "-s", "-f", "lib/Makefile.inc", "BUILD=" + lib}); err != nil {
		return err
	}
	libPath = filepath.Join(lib, "libgpuhelper.so.1")
	var err error
	if stubLib, err = stubnccl.Build(workDir); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		pluginDir = filepath.Join(workDir, "plugin")
		if err := os.Mkdir(pluginDir, 0o755); err != nil {
			return err
		}
		return testbuild.Plugin(pluginDir)
	}
	return nil
}

// needPython fails the test when the build failed or Debian's python3 lacks torch or pytest:
// `make deps` installs them, so their absence is an error, not a reason to skip.
func needPython(t *testing.T, modules ...string) {
	t.Helper()
	if setupErr != nil {
		t.Fatalf("building the library, stub libnccl and plugin: %v", setupErr)
	}
	for _, m := range modules {
		if out, err := exec.Command(Python, "-c", "import "+m).CombinedOutput(); err != nil {
			t.Fatalf("%s cannot import %s (make deps installs python3-torch and python3-pytest): %v\n%s", Python, m, err, out)
		}
	}
}

// pyEnv is what every Python process of the tests gets: the package from the source tree,
// the library just built, no bytecode written into the tree.
func pyEnv() []string {
	return []string{"PYTHONPATH=" + filepath.Join(repoRoot, "python"), "GPUBIND_LIBGPUHELPER=" + libPath,
		"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}
}

// TestUnit runs the pytest unit tests (tests/python/unit): the master address chooser on
// made-up interface tables, NCCL_SOCKET_IFNAME matching, the ctypes struct against the C
// header's offsets, errors without a library. No cluster needed.
func TestUnit(t *testing.T) {
	needPython(t, "pytest")
	cmd := exec.Command(Python, "-m", "pytest", "-q", "-p", "no:cacheprovider", filepath.Join(repoRoot, "tests/python/unit"))
	cmd.Env = append(cleanEnv(os.Environ()), pyEnv()...)
	cmd.Env = append(cmd.Env, "GPUBIND_TEST_INCLUDE="+filepath.Join(repoRoot, "lib"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`\d+ passed`).Match(out) || regexp.MustCompile(`\d+ (skipped|failed|error)`).Match(out) {
		t.Fatalf("pytest did not pass every test:\n%s", out)
	}
	t.Logf("%s", lastLine(string(out)))
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// cleanEnv drops launcher and gpubind variables of the calling environment.
func cleanEnv(base []string, extra ...string) []string {
	drop := func(kv string) bool {
		for _, p := range []string{"PMIX_", "OMPI_", "SLURM_", "GPUHELPER_", "STUBNCCL_", "GPUBIND_", "CUDA_",
			"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_", "TORCHELASTIC_", "GLOO_", "NCCL_", "PYTHON"} {
			if strings.HasPrefix(kv, p) && !strings.HasPrefix(kv, "SLURM_CONF=") {
				return true
			}
		}
		return false
	}
	var out []string
	for _, kv := range base {
		if !drop(kv) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// startCluster starts two nodes of 8 CPUs and 8 fake GPUs each, task/affinity, the gpubind
// plugin reading the DGX H100 fixture.
func startCluster(t *testing.T) *cluster.Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (private Slurm cluster)")
	}
	if _, err := exec.LookPath("srun"); err != nil {
		t.Skip("Slurm not installed (make deps)")
	}
	cache := filepath.Join(workDir, "cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	line := strings.Join([]string{"required", filepath.Join(pluginDir, "spank_gpubind.so"), "cache_dir=" + cache,
		"root=" + filepath.Join(repoRoot, "tests/fixtures/dgxh100-2cpu"), "source=sysfs"}, " ")
	return cluster.StartT(t, cluster.Config{Nodes: 2, CPUs: 8, TaskPlugin: "task/affinity", GPUs: 8, PlugStack: []string{line}})
}

// srun runs rank.py MODE ARGS under srun with srunArgs; it returns stdout, stderr.
func srun(t *testing.T, c *cluster.Cluster, env []string, srunArgs []string, mode ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(append([]string{}, srunArgs...), Python, filepath.Join(repoRoot, "tests/python/progs/rank.py"))
	cmd := exec.CommandContext(ctx, c.Bin("srun"), append(args, mode...)...)
	if !strings.Contains(strings.Join(env, " "), "GPUHELPER_TIMEOUT=") {
		env = append(env, "GPUHELPER_TIMEOUT=60")
	}
	cmd.Env = append(append(cleanEnv(c.Env()), pyEnv()...), env...)
	cmd.WaitDelay = 5 * time.Second
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("srun %s did not finish in 3 minutes (hang?)\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), o.String(), e.String())
	}
	if err != nil {
		t.Fatalf("srun %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

var pyLine = regexp.MustCompile(`(?m)^PY (\d+) (\S+) ?(.*)$`)

// lines returns, per rank, the fields after "PY <rank> <tag>" of its lines tagged tag.
func lines(out, tag string) map[int][]string {
	m := map[int][]string{}
	for _, l := range pyLine.FindAllStringSubmatch(out, -1) {
		if l[2] == tag {
			r, _ := strconv.Atoi(l[1])
			m[r] = strings.Fields(l[3])
		}
	}
	return m
}

// want checks that every rank 0..n-1 printed a line tagged tag and returns them.
func want(t *testing.T, out, errOut, tag string, n int) map[int][]string {
	t.Helper()
	m := lines(out, tag)
	if len(m) != n {
		t.Fatalf("%d ranks printed %s, want %d\nstdout:\n%s\nstderr:\n%s", len(m), tag, n, out, errOut)
	}
	for r := 0; r < n; r++ {
		if m[r] == nil {
			t.Fatalf("rank %d printed no %s line\nstdout:\n%s\nstderr:\n%s", r, tag, out, errOut)
		}
	}
	return m
}

// The plugin's verbose mapping line of a task with one GPU.
var mapLine = regexp.MustCompile(`gpubind: task (\d+) \(rank (\d+)\): CUDA_VISIBLE_DEVICES=(\S+) -> GPU (\d+) (\S+) (\S+) NUMA (\d+)`)

// TestSrun runs in parallel with TestSrunErrors, each on a cluster of its own (the package's
// other tests are sequential and run first).
func TestSrun(t *testing.T) {
	t.Parallel()
	needPython(t, "torch", "torch.distributed")
	c := startCluster(t)
	two := []string{"--mpi=pmix", "-N2", "-n4", "--ntasks-per-node=2"}

	// 4 ranks on 2 nodes: init()'s ranks, local ranks, GPU and bus id agree with the plugin's
	// mapping line of the same task, and with Slurm's SLURM_PROCID/LOCALID/NODEID.
	t.Run("info agrees with the mapping line/N=2/n=4", func(t *testing.T) {
		out, errOut := srun(t, c, nil, append(two, "--gpus-per-node=2", "--gpu-bind-topo=verbose"), "info")
		infos := want(t, out, errOut, "INFO", 4)
		idem := want(t, out, errOut, "IDEMPOTENT", 4)
		maps := map[int][]string{}
		for _, m := range mapLine.FindAllStringSubmatch(errOut, -1) {
			r, _ := strconv.Atoi(m[2])
			maps[r] = m[1:]
		}
		if len(maps) != 4 {
			t.Fatalf("%d mapping lines, want 4:\n%s", len(maps), errOut)
		}
		for r := 0; r < 4; r++ {
			f, mp := infos[r], maps[r]
			// f: rank size lrank lsize node nodes cuda bus uuid CVD order procid localid nodeid
			wantF := map[string][2]string{
				"rank":                       {f[0], strconv.Itoa(r)},
				"size":                       {f[1], "4"},
				"local rank (SLURM_LOCALID)": {f[2], f[12]},
				"local rank (mapping line)":  {f[2], mp[0]},
				"local size":                 {f[3], "2"},
				"node (SLURM_NODEID)":        {f[4], f[13]},
				"nodes":                      {f[5], "2"},
				"rank (SLURM_PROCID)":        {f[0], f[11]},
				"cuda_device":                {f[6], "0"},
				"pci_bus_id":                 {f[7], mp[4]},
				"gpu_uuid":                   {f[8], mp[5]},
				"CUDA_VISIBLE_DEVICES":       {f[9], mp[2]},
				"CUDA_DEVICE_ORDER":          {f[10], "PCI_BUS_ID"},
			}
			for name, v := range wantF {
				if v[0] != v[1] {
					t.Errorf("rank %d: %s %s, want %s (INFO %v, mapping %v)", r, name, v[0], v[1], f, mp)
				}
			}
			if idem[r][0] != "True" {
				t.Errorf("rank %d: a second init() returned another object", r)
			}
		}
	})

	// One NCCL ID, made lazily by rank 0 with the stub libnccl: none during init, the same
	// 128 bytes on every rank from nccl_id(), exactly one ncclGetUniqueId call, on rank 0.
	t.Run("one NCCL ID/N=2/n=4", func(t *testing.T) {
		log := filepath.Join(t.TempDir(), "stub.log")
		_ = os.Chmod(filepath.Dir(log), 0o777)
		out, errOut := srun(t, c, []string{"GPUHELPER_NCCL_LIBRARY=" + stubLib, "STUBNCCL_LOG=" + log}, two, "ncclid")
		initID := want(t, out, errOut, "INITID", 4)
		ids := want(t, out, errOut, "NCCLID", 4)
		ids2 := want(t, out, errOut, "NCCLID2", 4)
		for r := 0; r < 4; r++ {
			if initID[r][0] != "none" {
				t.Errorf("rank %d: init() returned an NCCL ID; gpubind makes it lazily", r)
			}
			if ids[r][0] != "128" || ids[r][1] != ids[0][1] || ids2[r][0] != ids[0][1] {
				t.Errorf("rank %d: NCCL ID %v (again %v), rank 0 has %v", r, ids[r], ids2[r], ids[0])
			}
		}
		if ids[0][1] == strings.Repeat("0", 256) {
			t.Errorf("the NCCL ID is all zero")
		}
		b, err := os.ReadFile(log)
		if err != nil {
			t.Fatal(err)
		}
		made := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(made) != 1 || len(strings.Fields(made[0])) != 3 || strings.Fields(made[0])[1] != "0" || strings.Fields(made[0])[2] != ids[0][1] {
			t.Errorf("stub libnccl log %q: want one ID, made by rank 0, the one every rank got (%s)", b, ids[0][1])
		}
	})

	// Issue 38: an RCCL that Python loaded itself (ctypes, RTLD_LOCAL, as torch on ROCm loads
	// it) makes the ID, although libnccl.so.2 is on the library path and this node has no AMD
	// GPU (NCCL first by name): the library the program already loaded wins.
	t.Run("RCCL loaded by Python/N=2/n=4", func(t *testing.T) {
		dir := t.TempDir()
		_ = os.Chmod(dir, 0o755)
		rccl, err := stubnccl.BuildRCCL(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stubnccl.Build(dir); err != nil {
			t.Fatal(err)
		}
		out, errOut := srun(t, c, []string{"LD_LIBRARY_PATH=" + dir, "RANKPY_PRELOAD=" + rccl}, two, "ncclid")
		ids := want(t, out, errOut, "NCCLID", 4)
		for r := 0; r < 4; r++ {
			if ids[r][1] != ids[0][1] || !strings.HasPrefix(ids[r][1], stubnccl.RCCLPrefix) {
				t.Errorf("rank %d: NCCL ID %.16s..., want rank 0's, made by the loaded RCCL (%s...)", r, ids[r][1], stubnccl.RCCLPrefix)
			}
		}
	})

	// bcast and allgather with lengths that differ between ranks (and zero).
	t.Run("bcast and allgather/N=2/n=4", func(t *testing.T) {
		out, errOut := srun(t, c, nil, two, "coll")
		for tag, w := range map[string]string{"BCAST1": "1003 end", "BCAST0": "0", "BCASTSTR": "héllo",
			"ALLGATHER": "0,11,-,3333", "ALLEMPTY": "4 0", "BARRIER": "ok"} {
			for r, f := range want(t, out, errOut, tag, 4) {
				if strings.Join(f, " ") != w {
					t.Errorf("rank %d: %s %v, want %s", r, tag, f, w)
				}
			}
		}
	})

	// torch.distributed with gloo on two nodes (master address from the interface tables) and
	// on one (127.0.0.1): an all_reduce of the ranks gives 0+1+...+(n-1) on every rank.
	for _, tc := range []struct {
		name string
		args []string
		n    int
	}{
		{"N=2/n=4", two, 4},
		{"N=1/n=3", []string{"--mpi=pmix", "-N1", "-n3"}, 3},
	} {
		t.Run("torch gloo all_reduce/"+tc.name, func(t *testing.T) {
			out, errOut := srun(t, c, nil, tc.args, "allreduce")
			sum := tc.n * (tc.n - 1) / 2
			for r, f := range want(t, out, errOut, "ALLREDUCE", tc.n) {
				// sum world backend launcher addr gloo_if RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE device
				if f[0] != strconv.Itoa(sum) || f[1] != strconv.Itoa(tc.n) || f[2] != "gloo" || f[3] != "pmix" ||
					f[6] != strconv.Itoa(r) || f[7] != strconv.Itoa(tc.n) || f[10] != "cpu" {
					t.Errorf("rank %d: %v, want sum %d of %d ranks with gloo on the cpu", r, f, sum, tc.n)
				}
				if tc.n == 3 && (f[4] != "127.0.0.1" || f[5] != "lo") {
					t.Errorf("rank %d: one node: master %s on %s, want 127.0.0.1 on lo", r, f[4], f[5])
				}
				if tc.n == 4 && (strings.HasPrefix(f[4], "127.") || f[4] == "::1" || f[5] == "lo" || f[5] == "-") {
					t.Errorf("rank %d: two nodes: master %s on %s, want a non-loopback address", r, f[4], f[5])
				}
			}
		})
	}
}

// TestSrunErrors: each rank prints the error (the Python package's Error class) it got. The
// cases run side by side, on a cluster of their own, in parallel with TestSrun: the timeout
// cases spend most of a minute waiting (the late rank then waits in Slurm's mpi/pmix, which
// retries its messages to the other node's slurmstepd, gone with its timed-out ranks, for
// 31.5 s; no Slurm setting changes that: tests/helper TestSrunTimeouts).
func TestSrunErrors(t *testing.T) {
	t.Parallel()
	needPython(t, "torch", "torch.distributed")
	c := startCluster(t)
	for _, tc := range []struct {
		name  string
		args  []string
		env   []string
		mode  []string
		ranks []int  // the ranks that must report the error
		code  string // Error.code
		text  string // in the message
	}{
		{"no PMIx server", []string{"--mpi=none", "-N2", "-n2"}, nil, []string{"expect", "init"}, []int{0, 1},
			"-2", "srun --mpi=pmix"},
		{"rank 0 never arrives", []string{"--mpi=pmix", "-N2", "-n3"}, []string{"GPUHELPER_TIMEOUT=3", "LATE=9"},
			[]string{"expect", "late0"}, []int{1, 2}, "-4", "GPUHELPER_ETIMEOUT"},
		{"last rank never arrives", []string{"--mpi=pmix", "-N2", "-n3"}, []string{"GPUHELPER_TIMEOUT=3", "LATE=9"},
			[]string{"expect", "absent"}, []int{0, 1}, "-4", "GPUHELPER_ETIMEOUT"},
		{"missing library", []string{"--mpi=pmix", "-N2", "-n2"}, []string{"GPUBIND_LIBGPUHELPER=/nonexistent/libgpuhelper.so.1"},
			[]string{"expect", "init"}, []int{0, 1}, "None", "cannot load libgpuhelper.so.1 (/nonexistent/libgpuhelper.so.1: "},
		{"RANK exported by the batch script", []string{"--mpi=pmix", "-N2", "-n2"}, []string{"RANK=0", "LOCAL_RANK=0", "GPUHELPER_TIMEOUT=5"},
			[]string{"expect", "torch"}, []int{1}, "None", "RANK=0 but PMIx says 1"},
		{"torchrun worker", []string{"--mpi=pmix", "-N1", "-n1"}, []string{"TORCHELASTIC_RUN_ID=job7"},
			[]string{"expect", "init"}, []int{0}, "None", "TORCHELASTIC_RUN_ID=job7 is set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			out, errOut := srun(t, c, tc.env, tc.args, tc.mode...)
			got := lines(out, "ERROR")
			for _, r := range tc.ranks {
				f := got[r]
				if f == nil || f[0] != tc.code || !strings.Contains(strings.Join(f[2:], " "), tc.text) {
					t.Errorf("rank %d: error %v, want code %s with %q\nstdout:\n%s\nstderr:\n%s", r, f, tc.code, tc.text, out, errOut)
				}
			}
			t.Logf("%s in %v", tc.name, time.Since(start).Round(time.Millisecond))
		})
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// TestTorchrun: under torchrun (TORCHELASTIC_RUN_ID set in its workers) init_process_group
// uses torchrun's variables and never PMIx, though srun --mpi=pmix gave the one task (whose
// workers all inherit it) a PMIx identity.
func TestTorchrun(t *testing.T) {
	needPython(t, "torch", "torch.distributed")
	c := startCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	// The static rendezvous at 127.0.0.1: with c10d, torchrun gives its workers the agent's
	// host name as MASTER_ADDR, and the test cluster's node names (node1) do not resolve.
	cmd := exec.CommandContext(ctx, c.Bin("srun"), "--mpi=pmix", "-N1", "-n1", Python, "-m", "torch.distributed.run",
		"--nnodes=1", "--nproc_per_node=2", "--master_addr=127.0.0.1", fmt.Sprintf("--master_port=%d", port),
		// Debian's torch 1.13 under Python 3.11 turns --redirects/--tee 0 (the default) and 3
		// into None and fails (Std.from_str: Python 3.11 changed `in` on IntFlag); 2 (stderr)
		// works and leaves stdout alone.
		"--redirects=2", "--tee=2",
		filepath.Join(repoRoot, "tests/python/progs/rank.py"), "allreduce")
	cmd.Env = append(cleanEnv(c.Env()), pyEnv()...)
	cmd.WaitDelay = 5 * time.Second
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v: %v\nstdout:\n%s\nstderr:\n%s", cmd, err, o.String(), e.String())
	}
	for r, f := range want(t, o.String(), e.String(), "ALLREDUCE", 2) {
		if f[0] != "1" || f[1] != "2" || f[3] != "torchrun" || f[6] != strconv.Itoa(r) {
			t.Errorf("rank %d: %v, want sum 1 of 2 torchrun ranks", r, f)
		}
	}
	if !strings.Contains(e.String(), "gpubind: under torchrun (TORCHELASTIC_RUN_ID=") {
		t.Errorf("rank 0 did not say it uses torchrun's variables:\n%s", e.String())
	}
}
