package helper

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeader compiles gpuhelper.h alone as strict C99 and as C++17.
func TestHeader(t *testing.T) {
	needSetup(t)
	src := `#include <gpuhelper.h>
#include <string.h>
int use(void);
int use(void) {
    gpuhelper_info_t info;
    gpuhelper_group_t g;
    unsigned char ids[2 * GPUHELPER_NCCL_ID_BYTES];
    memset(&info, 0, sizeof(info));
    memset(&g, 0, sizeof(g));
    info.struct_size = sizeof(info);
    g.struct_size = sizeof(g);
    if (gpuhelper_init(&info) != GPUHELPER_SUCCESS) return 1;
    if (gpuhelper_scalable_ids(gpuhelper_scalable_count(), ids, sizeof(ids)) != 0) return 2;
    if (gpuhelper_group_id(GPUHELPER_COLOR_NODE, &g) != 0) return 3;
    (void)gpuhelper_set_nccl_get_unique_id((gpuhelper_nccl_get_unique_id_fn)0);
    (void)gpuhelper_strerror(GPUHELPER_ETIMEOUT);
    (void)gpuhelper_last_error();
    (void)gpuhelper_version();
    {
        unsigned char id[GPUHELPER_NCCL_ID_BYTES], all[2];
        char lib[64];
        int v;
        if (gpuhelper_nccl_id(id) != 0 || gpuhelper_nccl_origin(&v, lib, sizeof(lib)) != 0) return 4;
        if (gpuhelper_barrier() != 0 || gpuhelper_bcast(0, id, sizeof(id)) != 0) return 5;
        if (gpuhelper_allgather(id, 1, all, sizeof(all)) != 0) return 6;
        if (!(info.flags & GPUHELPER_INFO_NCCL_ID)) gpuhelper_abort(GPUHELPER_EFINALIZED, "test");
        if (gpuhelper_nvl_cliques(&v) != 0 || (v > 1 && info.nvl_clique[0] == '\0')) return 7;
    }
    return gpuhelper_finalize() + GPUHELPER_VERSION_MAJOR + GPUHELPER_VERSION_MINOR + GPUHELPER_VERSION_PATCH;
}
`
	dir := t.TempDir()
	for _, c := range []struct {
		compiler, file string
		flags          []string
	}{
		{"cc", "h.c", []string{"-std=c99"}},
		{"c++", "h.cc", []string{"-std=c++17"}},
	} {
		if _, err := exec.LookPath(c.compiler); err != nil {
			t.Errorf("%s not installed", c.compiler)
			continue
		}
		p := filepath.Join(dir, c.file)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append(c.flags, "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", filepath.Join(repoRoot, "lib"), "-c", p, "-o", p+".o")
		if out, err := exec.Command(c.compiler, args...).CombinedOutput(); err != nil {
			t.Errorf("%s %s: %v\n%s", c.compiler, strings.Join(args, " "), err, out)
		}
	}
}

// TestLibraryFile checks the shared object: SONAME, only the API exported, no NVML.
func TestLibraryFile(t *testing.T) {
	needSetup(t)
	so := filepath.Join(libBuild, "libgpuhelper.so.1")
	out, err := exec.Command("readelf", "-d", so).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Library soname: [libgpuhelper.so.1]") {
		t.Errorf("no SONAME libgpuhelper.so.1:\n%s", out)
	}
	if strings.Contains(string(out), "nvidia-ml") {
		t.Errorf("links NVML:\n%s", out)
	}
	// Static TLS: a library dlopen'ed after start (Python, plugin hosts) draws its TLS from
	// glibc's small static surplus; a large block makes dlopen fail with "cannot allocate
	// memory in static TLS block". Only pointers may live there (Go's runtime.tlsg is 8 bytes).
	out, err = exec.Command("readelf", "-lW", so).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf -l: %v\n%s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 && f[0] == "TLS" {
			size, err := strconv.ParseUint(strings.TrimPrefix(f[5], "0x"), 16, 64)
			if err != nil || size > 64 {
				t.Errorf("TLS segment of %s bytes (MemSiz), want at most 64:\n%s", f[5], l)
			}
		}
	}
	out, err = exec.Command("nm", "-D", "--defined-only", so).CombinedOutput()
	if err != nil {
		t.Fatalf("nm: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`^gpuhelper_[a-z_]+@@GPUHELPER_1\.[013]$|^GPUHELPER_1\.[013]$`)
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		sym := f[len(f)-1]
		if !re.MatchString(sym) {
			t.Errorf("exported symbol %q is not part of the API", sym)
		}
		n++
	}
	// 1.0 binaries ask for gpuhelper_*@GPUHELPER_1.0: those must stay there; new calls get 1.1.
	for _, sym := range []string{"gpuhelper_init@@GPUHELPER_1.0", "gpuhelper_group_id@@GPUHELPER_1.0", "gpuhelper_nccl_id@@GPUHELPER_1.1", "gpuhelper_nccl_origin@@GPUHELPER_1.1",
		"gpuhelper_barrier@@GPUHELPER_1.1", "gpuhelper_bcast@@GPUHELPER_1.1", "gpuhelper_allgather@@GPUHELPER_1.1", "gpuhelper_abort@@GPUHELPER_1.1",
		"gpuhelper_nvl_cliques@@GPUHELPER_1.3"} {
		if !regexp.MustCompile(`(?m) ` + regexp.QuoteMeta(sym) + `$`).Match(out) {
			t.Errorf("%s is not exported:\n%s", sym, out)
		}
	}
	if n != 19 {
		t.Errorf("%d dynamic symbols, want 16 functions and the 3 version nodes:\n%s", n, out)
	}
	// The header's version macros and gpuhelper.pc's Version agree (gpuhelper_version,
	// lib/shim.c, is built from the macros; the library has no other copy of the version).
	h, _ := os.ReadFile(filepath.Join(repoRoot, "lib/gpuhelper.h"))
	var v [3]string
	for i, m := range []string{"MAJOR", "MINOR", "PATCH"} {
		mm := regexp.MustCompile(`#define GPUHELPER_VERSION_` + m + ` (\d+)`).FindSubmatch(h)
		if mm == nil {
			t.Fatalf("GPUHELPER_VERSION_%s missing from gpuhelper.h", m)
		}
		v[i] = string(mm[1])
	}
	pc, _ := os.ReadFile(filepath.Join(repoRoot, "lib/gpuhelper.pc.in"))
	if !strings.Contains(string(pc), "Version: "+strings.Join(v[:], ".")) {
		t.Errorf("gpuhelper.pc.in version differs from the header's %s", strings.Join(v[:], "."))
	}
}

// TestPkgConfigLink builds hello the way a user does, with default flags, and runs it with
// LD_BIND_NOW=1 (every symbol resolved at start: no NVML-style unresolved symbols).
func TestPkgConfigLink(t *testing.T) {
	needSetup(t)
	env := append(os.Environ(), "PKG_CONFIG_PATH="+filepath.Join(libBuild, "pkgconfig"))
	cmd := exec.Command("pkg-config", "--cflags", "--libs", "gpuhelper")
	cmd.Env = env
	flags, err := cmd.Output()
	if err != nil {
		t.Fatalf("pkg-config gpuhelper: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "hello")
	args := append([]string{filepath.Join(repoRoot, "examples/hello.c"), "-o", exe}, strings.Fields(string(flags))...)
	if out, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	out, err := launch(t, cleanEnv(os.Environ(), "LD_BIND_NOW=1", "GPUHELPER_NCCL_LIBRARY="+stubLib), time.Minute, exe)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "hello: rank 0/1 local 0/1 node 0/1") {
		t.Errorf("hello printed %q", out)
	}
}

// TestSingleton runs ghtest without a launcher: a job of one, where no PMIx server is needed,
// and the error paths that need no job.
func TestSingleton(t *testing.T) {
	needSetup(t)
	stub := "GPUHELPER_NCCL_LIBRARY=" + stubLib
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string // in an OK line
	}{
		{"badargs", nil, []string{"badargs"}, "badargs"},
		{"userfn", nil, []string{"userfn"}, "userfn"},
		{"twice", nil, []string{"twice"}, "twice"},
		{"threads", nil, []string{"threads"}, "threads"},
		{"fork", nil, []string{"fork"}, "fork"},
		{"init after finalize", nil, []string{"reinit", "-11"}, "released PMIx in this process (gpuhelper_finalize was called)"},
		{"newer caller's larger structs", nil, []string{"bigstruct"}, "bigstruct"},
		{"Slurm step of 4 without PMIx", []string{"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=4"}, []string{"expect", "-2"}, "srun --mpi=pmix"},
		{"Open MPI env of 2 without PMIx", []string{"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=0"}, []string{"expect", "-2"}, "launch with `srun --mpi=pmix`"},
		{"Slurm step of 1 without PMIx", []string{"SLURM_STEP_ID=0", "SLURM_PROCID=0", "SLURM_NTASKS=1"}, []string{"expect", "0"}, "SUCCESS"},
		{"bad GPUHELPER_TIMEOUT", []string{"GPUHELPER_TIMEOUT=soon"}, []string{"expect", "-9"}, `GPUHELPER_TIMEOUT="soon"`},
		{"bad GPUHELPER_EXCHANGE", []string{"GPUHELPER_EXCHANGE=bcast"}, []string{"expect", "-9"}, `"bcast"`},
		{"bad GPUBIND_PCI_BUS_IDS", []string{"GPUBIND_GPUS=3", "GPUBIND_PCI_BUS_IDS=zz"}, []string{"expect", "-7"}, "GPUBIND_PCI_BUS_IDS"},
		{"failing ncclGetUniqueId", []string{"STUBNCCL_FAIL=3"}, []string{"noid"}, "ncclResult_t 3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := launch(t, cleanEnv(os.Environ(), append(c.env, stub)...), time.Minute, bin("ghtest"), c.args...)
			if err != nil {
				t.Fatal(err)
			}
			checkOK(t, out, 1, c.args[0], c.want)
		})
	}
	// ghtest_dl dlopens the stub: RTLD_LOCAL keeps its symbols out of the process's scope. So
	// does libpmix's (issue 26: it was RTLD_GLOBAL). PMIx 4.2 itself dlopens its plugins
	// (pmix_mca_*.so) RTLD_GLOBAL, which promotes libpmix, their dependency, to the global scope
	// all the same; PMIX_MCA_mca_base_component_disable_dlopen=1 stops that (docs/helper.md).
	t.Run("dlopen scope", func(t *testing.T) {
		out, err := launch(t, cleanEnv(os.Environ(), stub, "PMIX_MCA_mca_base_component_disable_dlopen=1"), time.Minute, bin("ghtest_dl"), "dlscope")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 1, "dlscope", "dlscope")
	})
	// ghtest_dl has no ncclGetUniqueId of its own, and the library it would dlopen is missing.
	for _, mode := range []string{"noid", "lateid"} {
		t.Run("no NCCL at all/"+mode, func(t *testing.T) {
			out, err := launch(t, cleanEnv(os.Environ(), noNCCL), time.Minute, bin("ghtest_dl"), mode)
			if err != nil {
				t.Fatal(err)
			}
			want := "/nonexistent/libnccl.so.2"
			if mode == "lateid" {
				want = mode
			}
			checkOK(t, out, 1, mode, want)
		})
	}
}

// noNCCL points the library at a libnccl that does not exist. The test programs that run with
// it (ghtest_dl, hello) do not link the stub, so no ncclGetUniqueId is reachable at all.
const noNCCL = "GPUHELPER_NCCL_LIBRARY=/nonexistent/libnccl.so.2"

// checkLazy: under GPUHELPER_NCCL_ID=lazy every rank got the same ID from gpuhelper_nccl_id,
// and the stub made exactly that one ID, in rank 0's process (ghtest checked that rank 0 made
// none during init).
func checkLazy(t *testing.T, out string, n int, stubLog string) {
	t.Helper()
	checkOK(t, out, n, "lazyid", "lazyid")
	ids := map[string]bool{}
	pid0 := ""
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "OK" && f[2] == "lazyid" {
			ids[f[4]] = true
			if f[1] == "0" {
				pid0 = f[3]
			}
		}
	}
	data, err := os.ReadFile(stubLog)
	if err != nil {
		t.Fatalf("stub log: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(ids) != 1 || len(lines) != 1 || pid0 == "" {
		t.Fatalf("%d distinct IDs, %d stub calls, rank 0 pid %q; want 1, 1:\n%s\nstub log:\n%s", len(ids), len(lines), pid0, out, data)
	}
	if f := strings.Fields(lines[0]); len(f) != 3 || f[0] != pid0 || !ids[f[2]] {
		t.Errorf("stub log %q: want rank 0 (pid %s) making the ID everyone got", lines[0], pid0)
	}
}

// TestLazyID: GPUHELPER_NCCL_ID=lazy leaves NCCL alone during init; the first gpuhelper_nccl_id
// makes the world ID.
func TestLazyID(t *testing.T) {
	needSetup(t)
	for _, prog := range []string{"ghtest", "ghtest_dl"} {
		t.Run("mpirun n=3 "+prog, func(t *testing.T) {
			log := stubLogPath(t)
			out, err := mpirun(t, []string{"GPUHELPER_NCCL_ID=lazy", "STUBNCCL_LOG=" + log, "GPUHELPER_NCCL_LIBRARY=" + stubLib}, 3, bin(prog), "lazyid")
			if err != nil {
				t.Fatal(err)
			}
			checkLazy(t, out, 3, log)
		})
	}
	t.Run("bad value", func(t *testing.T) {
		out, err := launch(t, cleanEnv(os.Environ(), "GPUHELPER_NCCL_ID=later", "GPUHELPER_NCCL_LIBRARY="+stubLib), time.Minute, bin("ghtest"), "expect", "-9")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 1, "expect", `GPUHELPER_NCCL_ID="later"`)
	})
}

// checkHelloNoNCCL wants a line from each of n ranks on nodes nodes, with its facts and the
// reason why there is no NCCL ID.
func checkHelloNoNCCL(t *testing.T, out string, n, nodes int) {
	t.Helper()
	seen := map[string]bool{}
	re := regexp.MustCompile(fmt.Sprintf(`^hello: rank (\d+)/%d local \d+/\d+ node \d+/%d: .* nccl_id none \(.*/nonexistent/libnccl\.so\.2.*\)`, n, nodes))
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			seen[m[1]] = true
		}
	}
	if len(seen) != n {
		t.Errorf("%d of %d ranks printed their facts and the missing ID:\n%s", len(seen), n, out)
	}
}

// TestNoNCCL runs examples/hello where no libnccl is reachable: rank, node and GPU facts need no
// NCCL; only the ID is missing, and hello says so.
func TestNoNCCL(t *testing.T) {
	needSetup(t)
	check := func(t *testing.T, out string, n int) { t.Helper(); checkHelloNoNCCL(t, out, n, 1) }
	t.Run("singleton", func(t *testing.T) {
		out, err := launch(t, cleanEnv(os.Environ(), noNCCL), time.Minute, bin("hello"))
		if err != nil {
			t.Fatal(err)
		}
		check(t, out, 1)
	})
	t.Run("mpirun n=3", func(t *testing.T) {
		out, err := mpirun(t, []string{noNCCL}, 3, bin("hello"))
		if err != nil {
			t.Fatal(err)
		}
		check(t, out, 3)
	})
	t.Run("mpirun n=3 ghtest_dl", func(t *testing.T) {
		out, err := mpirun(t, []string{noNCCL}, 3, bin("ghtest_dl"), "noid")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 3, "noid", "/nonexistent/libnccl.so.2")
	})
	t.Run("mpirun n=3 lateid", func(t *testing.T) {
		out, err := mpirun(t, []string{noNCCL}, 3, bin("ghtest_dl"), "lateid")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 3, "lateid", "lateid")
	})
	// A 1.0 binary keeps 1.0's contract: init fails when rank 0 cannot make the ID.
	t.Run("1.0 binary", func(t *testing.T) {
		out, err := mpirun(t, []string{"STUBNCCL_FAIL=3"}, 3, bin("ghtest10"), "expect", "-5")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 3, "expect", "ncclResult_t 3")
	})
}

// TestABI10 runs ghtest10, ghtest compiled against the frozen 1.0 header
// (tests/helper/gpuhelper-1.0.h), with this library: a binary built against 1.0 must keep
// working, whatever 1.x fields the structs have gained since.
func TestABI10(t *testing.T) {
	needSetup(t)
	stub := "GPUHELPER_NCCL_LIBRARY=" + stubLib
	for _, v := range []string{"10", "12"} {
		for _, args := range [][]string{{"badargs"}, {"twice"}, {"bigstruct"}} {
			t.Run("header "+v+"/"+args[0], func(t *testing.T) {
				out, err := launch(t, cleanEnv(os.Environ(), stub), time.Minute, bin("ghtest"+v), args...)
				if err != nil {
					t.Fatal(err)
				}
				checkOK(t, out, 1, args[0], args[0])
				if h := "header " + v[:1] + "." + v[1:] + ".0"; args[0] == "badargs" && !strings.Contains(out, h) {
					t.Errorf("ghtest%s was not built against the %s header:\n%s", v, h, out)
				}
			})
		}
	}
	t.Run("mpirun n=4", func(t *testing.T) {
		log := stubLogPath(t)
		out, err := mpirun(t, []string{"STUBNCCL_LOG=" + log, "GPUHELPER_TIMEOUT=60"}, 4, bin("ghtest10"), "info", "2")
		if err != nil {
			t.Fatal(err)
		}
		checkInfo(t, out, 4, 1, 2, log)
	})
}

// gpuFixture makes a sysfs/procfs tree with NVIDIA GPUs at the given bus ids.
func gpuFixture(t *testing.T, buses ...string) string {
	t.Helper()
	root := t.TempDir()
	_ = os.Chmod(root, 0o755)
	for i, b := range buses {
		d := filepath.Join(root, "sys/bus/pci/devices", b)
		p := filepath.Join(root, "proc/driver/nvidia/gpus", b)
		for _, err := range []error{
			os.MkdirAll(d, 0o755), os.MkdirAll(p, 0o755),
			os.WriteFile(filepath.Join(d, "vendor"), []byte("0x10de\n"), 0o644),
			os.WriteFile(filepath.Join(d, "class"), []byte("0x030200\n"), 0o644),
			os.WriteFile(filepath.Join(p, "information"), []byte(fmt.Sprintf("GPU UUID: \t GPU-%d\n", i)), 0o644),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// TestGPUChoice checks what the library reports as the GPU, through the C API.
func TestGPUChoice(t *testing.T) {
	needSetup(t)
	root := gpuFixture(t, "0000:db:00.0", "0000:1b:00.0", "0000:3b:00.0")
	base := []string{"GPUHELPER_SYSROOT=" + root, "GPUHELPER_NCCL_LIBRARY=" + stubLib}
	for _, c := range []struct {
		name      string
		env       []string
		cuda      int
		bus, uuid string
		order     string
	}{
		{"PCI order", nil, 0, "0000:1b:00.0", "GPU-1", "PCI_BUS_ID"},
		{"CUDA_VISIBLE_DEVICES index", []string{"CUDA_VISIBLE_DEVICES=2,0"}, 0, "0000:db:00.0", "GPU-0", "PCI_BUS_ID"},
		{"CUDA_VISIBLE_DEVICES uuid", []string{"CUDA_VISIBLE_DEVICES=GPU-2"}, 0, "0000:3b:00.0", "GPU-2", "PCI_BUS_ID"},
		{"CUDA_VISIBLE_DEVICES uuid list, not in PCI order (Slurm env_uuid)", []string{"CUDA_VISIBLE_DEVICES=GPU-0,GPU-2"}, 0, "0000:db:00.0", "GPU-0", "PCI_BUS_ID"},
		{"plugin variables, uuid flag", []string{"CUDA_VISIBLE_DEVICES=GPU-2", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "GPUBIND_GPUS=2", "GPUBIND_PCI_BUS_IDS=0000:3b:00.0", "GPUBIND_UUIDS=GPU-2", "GPUBIND_NUMA=0"}, 0, "0000:3b:00.0", "GPU-2", "PCI_BUS_ID"},
		{"no GPU visible", []string{"CUDA_VISIBLE_DEVICES="}, -1, "-", "-", "PCI_BUS_ID"},
		{"plugin variables", []string{"CUDA_VISIBLE_DEVICES=5", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "GPUBIND_GPUS=5", "GPUBIND_PCI_BUS_IDS=00000000:9A:00.0", "GPUBIND_UUIDS=GPU-x", "GPUBIND_NUMA=1"}, 0, "0000:9a:00.0", "GPU-x", "PCI_BUS_ID"},
		{"order chosen by the user", []string{"CUDA_DEVICE_ORDER=FASTEST_FIRST"}, 0, "0000:1b:00.0", "GPU-1", "FASTEST_FIRST"},
		{"libcuda already loaded", []string{"LD_PRELOAD=" + fakeCuda(t)}, 0, "0000:1b:00.0", "GPU-1", "(unset)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := launch(t, cleanEnv(os.Environ(), append(base, c.env...)...), time.Minute, bin("ghtest"), "info", "1")
			if err != nil {
				t.Fatal(err)
			}
			var info []string
			order := ""
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) > 0 && f[0] == "INFO" {
					info = f
				}
				if len(f) > 2 && f[0] == "ORDER" {
					order = f[2]
				}
			}
			if len(info) != 13 {
				t.Fatalf("no INFO line:\n%s", out)
			}
			if info[8] != fmt.Sprint(c.cuda) || info[9] != c.bus || info[10] != c.uuid || order != c.order {
				t.Errorf("cuda %s bus %s uuid %s order %s; want %d %s %s %s", info[8], info[9], info[10], order, c.cuda, c.bus, c.uuid, c.order)
			}
		})
	}
	// Local rank modulo the visible GPUs, under a launcher.
	t.Run("mpirun local ranks", func(t *testing.T) {
		out, err := mpirun(t, base, 4, bin("ghtest"), "info", "1")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"0000:1b:00.0", "0000:3b:00.0", "0000:db:00.0", "0000:1b:00.0"}
		n := 0
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) == 13 && f[0] == "INFO" {
				r := atoi(t, f[1])
				if f[8] != fmt.Sprint(r%3) || f[9] != want[r] {
					t.Errorf("rank %d: cuda %s bus %s, want %d %s", r, f[8], f[9], r%3, want[r])
				}
				n++
			}
		}
		if n != 4 {
			t.Errorf("%d INFO lines:\n%s", n, out)
		}
	})
}

// fakeCuda builds an empty libcuda.so.1 to preload: the library must then leave
// CUDA_DEVICE_ORDER alone, since CUDA may already have read it.
func fakeCuda(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "cuda.c")
	so := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(src, []byte("int gpubind_fake_cuda;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	return so
}

// TestExamples builds the examples through examples/Makefile (pkg-config gpuhelper from the
// build tree) in a copy of the directory. Without nvcc, nccl_allreduce.cu is only
// syntax-checked as C++ against cudastub/, declarations of the CUDA and NCCL calls it uses.
func TestExamples(t *testing.T) {
	needSetup(t)
	dir := t.TempDir()
	for _, f := range []string{"Makefile", "hello.c", "collectives.c", "nccl_allreduce.cu"} {
		b, err := os.ReadFile(filepath.Join(repoRoot, "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("make", "-C", dir, "PKG_CONFIG_PATH="+filepath.Join(libBuild, "pkgconfig"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -C examples: %v\n%s", err, out)
	}
	for _, prog := range []string{"hello", "collectives"} {
		if _, err := os.Stat(filepath.Join(dir, prog)); err != nil {
			t.Errorf("examples/Makefile built no %s:\n%s", prog, out)
		}
	}
	if _, err := exec.LookPath("nvcc"); err == nil {
		if _, err := os.Stat(filepath.Join(dir, "nccl_allreduce")); err != nil {
			t.Errorf("nvcc present but no nccl_allreduce built:\n%s", out)
		}
		return
	}
	t.Log("nvcc not installed: nccl_allreduce.cu gets a C++ syntax check against tests/helper/cudastub only")
	args := []string{"-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-x", "c++",
		"-I", filepath.Join(repoRoot, "tests/helper/cudastub"), "-I", filepath.Join(repoRoot, "lib"),
		filepath.Join(repoRoot, "examples/nccl_allreduce.cu")}
	if out, err := exec.Command("c++", args...).CombinedOutput(); err != nil {
		t.Errorf("c++ %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

var gpuLineRe = regexp.MustCompile(`(?m)^GPU (\d+) (-?\d+) (-?\d+) (\S+) (\S+) (\S+) \| (.*)$`)
var finLineRe = regexp.MustCompile(`(?m)^FIN (\d+) (-?\d+) ([0-9.]+) ?(.*)$`)

// TestMIG: CUDA shows a process one MIG instance only, the first MIG entry
// of CUDA_VISIBLE_DEVICES. With two instances for two ranks, local rank 1 must get its own
// instance as CUDA device 0 (the library narrows CUDA_VISIBLE_DEVICES before CUDA starts), not
// cuda_device 1, which does not exist for it. With CUDA already loaded, rank 1 fails with
// GPUHELPER_EMIG, and its gpuhelper_finalize still meets rank 0's (no wait for the timeout).
func TestMIG(t *testing.T) {
	needSetup(t)
	root := gpuFixture(t, "0000:1b:00.0")
	base := []string{"GPUHELPER_SYSROOT=" + root, "GPUHELPER_NCCL_LIBRARY=" + stubLib, "CUDA_VISIBLE_DEVICES=MIG-aaaa,MIG-bbbb"}
	t.Run("before CUDA", func(t *testing.T) {
		out, err := mpirun(t, base, 2, bin("ghtest"), "gpu")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{"0": {"0", "0", "MIG-aaaa", "-", "MIG-aaaa,MIG-bbbb"}, "1": {"0", "0", "MIG-bbbb", "-", "MIG-bbbb"}}
		lines := gpuLineRe.FindAllStringSubmatch(out, -1)
		if len(lines) != 2 {
			t.Fatalf("%d GPU lines, want 2:\n%s", len(lines), out)
		}
		for _, m := range lines {
			if w := want[m[1]]; strings.Join(m[2:7], " ") != strings.Join(w, " ") {
				t.Errorf("rank %s: rc cuda uuid bus CUDA_VISIBLE_DEVICES = %v, want %v (%s)", m[1], m[2:7], w, m[7])
			}
		}
	})
	t.Run("CUDA loaded first", func(t *testing.T) {
		start := time.Now()
		out, err := mpirun(t, append(base, "LD_PRELOAD="+fakeCuda(t), "GPUHELPER_TIMEOUT=30"), 2, bin("ghtest"), "gpu")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range gpuLineRe.FindAllStringSubmatch(out, -1) {
			switch {
			case m[1] == "0" && (m[2] != "0" || m[4] != "MIG-aaaa"):
				t.Errorf("rank 0: rc %s uuid %s, want 0 MIG-aaaa (CUDA's first instance): %s", m[2], m[4], m[7])
			case m[1] == "1" && (m[2] != "-12" || !strings.Contains(m[7], "MIG-bbbb") || !strings.Contains(m[7], "already loaded")):
				t.Errorf("rank 1: rc %s (%s), want -12 (GPUHELPER_EMIG) naming MIG-bbbb", m[2], m[7])
			}
		}
		fins := finLineRe.FindAllStringSubmatch(out, -1)
		if len(fins) != 2 {
			t.Fatalf("%d FIN lines, want 2:\n%s", len(fins), out)
		}
		for _, m := range fins {
			if m[2] != "0" {
				t.Errorf("rank %s: gpuhelper_finalize returned %s: %s", m[1], m[2], m[4])
			}
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("took %v: rank 0's finalize waited for the timeout (30 s)", took)
		}
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	})
}

// pmixFiles returns the real files of every libpmix.so.2 the loader could find: the one
// pkg-config names and those in the loader's cache.
func pmixFiles(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if r, err := filepath.EvalSymlinks(p); err == nil && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	if d, err := exec.Command("pkg-config", "--variable=libdir", "pmix").Output(); err == nil {
		add(filepath.Join(strings.TrimSpace(string(d)), "libpmix.so.2"))
	}
	if c, err := exec.Command("ldconfig", "-p").Output(); err == nil {
		for _, l := range strings.Split(string(c), "\n") {
			if _, p, ok := strings.Cut(l, "=> "); ok && strings.Contains(l, "libpmix.so.2") {
				add(strings.TrimSpace(p))
			}
		}
	}
	return out
}

// TestNoPMIxLibrary: libpmix.so.2 is loaded with dlopen, not a DT_NEEDED, so a
// singleton runs on a host without PMIx. The test hides every libpmix.so.2 (/dev/null bound
// over each file in a private mount namespace) and runs hello as a singleton; under a
// launcher's environment of several processes the message says that PMIx is missing.
func TestNoPMIxLibrary(t *testing.T) {
	needSetup(t)
	out, err := exec.Command("readelf", "-d", filepath.Join(libBuild, "libgpuhelper.so.1")).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "libpmix") && strings.Contains(string(out), "NEEDED") {
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "NEEDED") && strings.Contains(l, "libpmix") {
				t.Errorf("libgpuhelper.so.1 needs libpmix at load time: %s", strings.TrimSpace(l))
			}
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("hiding libpmix needs root (a private mount namespace)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) not installed")
	}
	files := pmixFiles(t)
	if len(files) == 0 {
		t.Fatal("no libpmix.so.2 found to hide")
	}
	script := "set -e; "
	for _, f := range files {
		script += "mount --bind /dev/null '" + f + "'; "
	}
	run := func(env []string, args ...string) (string, error) {
		return launch(t, cleanEnv(os.Environ(), env...), time.Minute, "unshare",
			append([]string{"-m", "--propagation", "private", "sh", "-c", script + `exec "$@"`, "sh"}, args...)...)
	}
	// The hiding works: a program that needs libpmix does not start.
	if out, err := run(nil, bin("nodeid")); err == nil {
		t.Fatalf("nodeid (linked with libpmix) ran with libpmix hidden:\n%s", out)
	}
	out2, err := run([]string{noNCCL}, bin("hello"))
	if err != nil {
		t.Fatalf("hello as a singleton without libpmix: %v", err)
	}
	if !strings.Contains(out2, "hello: rank 0/1") {
		t.Errorf("hello without libpmix:\n%s", out2)
	}
	out3, _ := run([]string{"GPUHELPER_NCCL_LIBRARY=" + stubLib, "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=0"}, bin("ghtest"), "expect", "-2")
	if !strings.Contains(out3, "OK 0 rc -2") || !strings.Contains(out3, "libpmix") {
		t.Errorf("2 processes without libpmix: want GPUHELPER_ENOSERVER naming libpmix:\n%s", out3)
	}
}
