package helper

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/fixtures"
	"github.com/gpubind/gpubind/tests/stubnccl"
)

// frontierGCD is one GCD of the frontier-2cpu fixture, read from its KFD topology (the test's
// own reading, not the library's).
type frontierGCD struct {
	minor int    // render minor; the cluster's fake renderD<minor> is GCD minor-128
	bus   string // from location_id
	uuid  string // GPU- and 16 upper-case hex digits of unique_id
}

// frontierGCDs returns the fixture's GCDs in KFD order (nodes 4..11; 0..3 are CPU nodes).
func frontierGCDs(t *testing.T) []frontierGCD {
	t.Helper()
	dir := filepath.Join(fixtures.Root("frontier-2cpu"), "sys/devices/virtual/kfd/kfd/topology/nodes")
	var out []frontierGCD
	for n := 4; n <= 11; n++ {
		b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(n), "properties"))
		if err != nil {
			t.Fatal(err)
		}
		p := map[string]uint64{}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) == 2 {
				p[f[0]], _ = strconv.ParseUint(f[1], 10, 64)
			}
		}
		loc := p["location_id"]
		out = append(out, frontierGCD{minor: int(p["drm_render_minor"]),
			bus:  "0000:" + hex2(loc>>8&0xff) + ":" + hex2(loc>>3&0x1f) + "." + strconv.FormatUint(loc&7, 16),
			uuid: "GPU-" + strings.ToUpper(strconv.FormatUint(p["unique_id"], 16))})
		if u := out[len(out)-1].uuid; len(u) != 20 {
			t.Fatalf("KFD node %d: unique_id gives %q, want 16 hex digits", n, u)
		}
	}
	return out
}

func hex2(v uint64) string { s := strconv.FormatUint(v, 16); return strings.Repeat("0", 2-len(s)) + s }

// amdSysroot makes a GPUHELPER_SYSROOT of the frontier-2cpu fixture's sysfs whose dev/dri is
// the cluster's device directory (fake renderD128+N, governed by the tasks' device cgroup).
func amdSysroot(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	root := filepath.Join(c.Dir, "sysroot-amd")
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{
		"sys": filepath.Join(fixtures.Root("frontier-2cpu"), "sys"), "dev/dri": c.DevDir,
	} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	return root
}

// libDirs makes directories for LD_LIBRARY_PATH under the test's directory: "rccl" with the
// stand-in librccl.so.1 only, "both" with it and the stand-in libnccl.so.2, "none" empty.
func libDirs(t *testing.T) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, d := range []string{"rccl", "both", "none"} {
		dirs[d] = filepath.Join(binDir, "libs-"+d)
		if err := os.MkdirAll(dirs[d], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{dirs["rccl"], dirs["both"]} {
		if _, err := stubnccl.BuildRCCL(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stubnccl.Build(dirs["both"]); err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestRCCL: libgpuhelper on an AMD node, under a real Slurm PMIx server (srun --mpi=pmix) with
// task/cgroup, ConstrainDevices and fake render nodes listed in gres.conf (NUMA order, as in
// tests/plugin TestAMDFrontier), GPUs found through the frontier-2cpu fixture's KFD topology,
// and stand-ins for librccl.so.1 (IDs beginning "RCCL") and libnccl.so.2 found through
// LD_LIBRARY_PATH. Each task sets ROCR_VISIBLE_DEVICES itself (an index or the GCD's GPU-
// UUID, among what ROCr shows it), beside what Slurm set (CUDA_VISIBLE_DEVICES=0,1,2,3: HIP
// counts it relative to ROCr). Checked: every rank has the same ID, made by the library the
// rule picks (docs/helper.md "Where the ID comes from"), only by the roots; each rank's
// cuda_device (HIP's number) and pci_bus_id are the GCD that its ROCR_VISIBLE_DEVICES names
// among the render nodes it can open, in KFD order.
func TestRCCL(t *testing.T) {
	needSetup(t)
	if _, err := exec.LookPath("srun"); err != nil {
		t.Skip("Slurm not installed (make deps)")
	}
	gcds := frontierGCDs(t)
	gresOrder := []int{4, 5, 2, 3, 6, 7, 0, 1} // GRES index -> GCD: GRES 0-3 are GCDs 4,5,2,3
	c := cluster.StartT(t, cluster.Config{CPUs: 4, TaskPlugin: "task/cgroup,task/affinity", Proctrack: "proctrack/cgroup",
		ConstrainDevices: true, AMD: true, GPUs: 8, GresOrder: gresOrder})
	root := amdSysroot(t, c)
	libs := libDirs(t)
	var uuids []string
	for _, g := range gcds {
		uuids = append(uuids, g.uuid)
	}
	// Per task: the GCDs it can open (by number), then ROCR_VISIBLE_DEVICES = its local id
	// (index) or the UUID of the local id's openable GCD.
	script := func(form string) string {
		s := `a=; for f in ` + c.DevDir + `/renderD*; do [ -r "$f" ] && [ -w "$f" ] && a="$a${a:+,}$(( ${f##*renderD} - 128 ))"; done; `
		switch form {
		case "index":
			s += `ROCR_VISIBLE_DEVICES=$SLURM_LOCALID; `
		case "uuid":
			// g: the local id's GCD among the openable ones (KFD order); its UUID is the
			// g-th of the fixture's.
			s += `set -- $(echo $a | tr , '\n' | sort -n); shift $SLURM_LOCALID; g=$1; ` +
				`set -- ` + strings.Join(uuids, " ") + `; shift $g; ROCR_VISIBLE_DEVICES=$1; `
		}
		return s + `export ROCR_VISIBLE_DEVICES; echo "ACCESS $SLURM_PROCID ${ROCR_VISIBLE_DEVICES:--} ${a:--}"; exec ` + bin("ghtest_dl") + ` info 1`
	}
	// run launches 4 tasks on the step's 4 GPUs and checks the ID everyone got, which library
	// made it (rccl: the ID begins "RCCL"), and every rank's GPU.
	run := func(t *testing.T, form string, env []string, rccl bool) {
		t.Helper()
		log := stubLogPath(t)
		env = append([]string{"GPUHELPER_SYSROOT=" + root, "STUBNCCL_LOG=" + log}, env...)
		out, err := srun(t, c, env, "--mpi=pmix", "-O", "-n4", "--gres=gpu:4", "sh", "-c", script(form))
		if err != nil {
			t.Fatal(err)
		}
		checkInfo(t, out, 4, 1, 1, log)
		infos := parse(t, out)
		if got := strings.HasPrefix(infos[0].id, stubnccl.RCCLPrefix); got != rccl {
			t.Errorf("world ID %.16s...: made by RCCL %v, want %v", infos[0].id, got, rccl)
		}
		acc := accessRe.FindAllStringSubmatch(out, -1)
		if len(acc) != 4 {
			t.Fatalf("%d ACCESS lines, want 4:\n%s", len(acc), out)
		}
		for _, m := range acc {
			rank := atoi(t, m[1])
			var open []int // the GCDs the task can open, in KFD order: what ROCr enumerates
			for _, s := range strings.Split(m[3], ",") {
				open = append(open, atoi(t, s))
			}
			sort.Ints(open)
			if len(open) != 4 {
				t.Fatalf("rank %d can open GCDs %v, want the step's 4: the device cgroup does not constrain the task", rank, open)
			}
			r := infos[rank]
			want := gcds[open[r.lrank]] // ROCR_VISIBLE_DEVICES names the local id's openable GCD
			if r.cuda != 0 || r.bus != want.bus || r.uuid != want.uuid {
				t.Errorf("rank %d (local %d, ROCR_VISIBLE_DEVICES=%s, can open GCDs %v): cuda_device %d %s %s, want 0 %s %s",
					rank, r.lrank, m[2], open, r.cuda, r.bus, r.uuid, want.bus, want.uuid)
			}
		}
		if t.Failed() {
			t.Logf("output:\n%s", out)
		}
	}
	ldPath := func(d string) string { return "LD_LIBRARY_PATH=" + libs[d] }
	t.Run("librccl only/ROCR index per task", func(t *testing.T) { run(t, "index", []string{ldPath("rccl")}, true) })
	t.Run("librccl only/ROCR GPU-uuid per task", func(t *testing.T) { run(t, "uuid", []string{ldPath("rccl")}, true) })
	// Both present on an AMD node: RCCL first.
	t.Run("both/AMD node", func(t *testing.T) { run(t, "index", []string{ldPath("both")}, true) })
	// GPUHELPER_NCCL_LIBRARY always wins over the search.
	t.Run("both/GPUHELPER_NCCL_LIBRARY=libnccl.so.2", func(t *testing.T) {
		run(t, "index", []string{ldPath("both"), "GPUHELPER_NCCL_LIBRARY=libnccl.so.2"}, false)
	})
	t.Run("librccl only/GPUHELPER_NCCL_LIBRARY=path", func(t *testing.T) {
		run(t, "index", []string{ldPath("none"), "GPUHELPER_NCCL_LIBRARY=" + filepath.Join(libs["rccl"], "librccl.so.1")}, true)
	})

	// Which library rank 0 used, as gpuhelper_nccl_origin reports it.
	origin := func(t *testing.T, env []string, want string) {
		t.Helper()
		out, err := srun(t, c, env, "--mpi=pmix", "-O", "-n2", "--gres=gpu:2", bin("ghtest_dl"), "origin")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 2, "origin", want)
	}
	t.Run("origin/both/AMD node", func(t *testing.T) {
		origin(t, []string{"GPUHELPER_SYSROOT=" + root, ldPath("both")}, "origin 22203 "+filepath.Join(libs["both"], "librccl.so.1"))
	})
	// A node without AMD GPUs (this machine's own sysfs: no GPU at all): NCCL first.
	t.Run("origin/both/no AMD GPU", func(t *testing.T) {
		origin(t, []string{ldPath("both")}, "origin 21805 "+filepath.Join(libs["both"], "libnccl.so.2"))
	})
	// The plugin's variables name an AMD GPU (its bus id is AMD's in sysfs): RCCL first.
	t.Run("origin/both/plugin variables", func(t *testing.T) {
		origin(t, []string{"GPUHELPER_SYSROOT=" + root, ldPath("both"), "GPUBIND_GPUS=4", "GPUBIND_PCI_BUS_IDS=" + gcds[4].bus,
			"GPUBIND_UUIDS=" + gcds[4].uuid, "GPUBIND_CUDA_DEVICES=0"}, "origin 22203 "+filepath.Join(libs["both"], "librccl.so.1"))
	})
	// The program loaded RCCL itself, in a scope of its own (RTLD_LOCAL, as Python and PyTorch
	// load it): that one, even where the search would try NCCL first.
	t.Run("origin/both/RCCL already loaded", func(t *testing.T) {
		origin(t, []string{ldPath("both"), "GHTEST_PRELOAD=" + filepath.Join(libs["rccl"], "librccl.so.1")},
			"origin 22203 "+filepath.Join(libs["rccl"], "librccl.so.1"))
	})
	// Neither library: init succeeds without an ID, and the reason names what was tried, RCCL
	// first on an AMD node.
	t.Run("missing", func(t *testing.T) {
		out, err := srun(t, c, []string{"GPUHELPER_SYSROOT=" + root, ldPath("none")}, "--mpi=pmix", "-O", "-n2", "--gres=gpu:2", bin("ghtest_dl"), "noid")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 2, "noid", "no NCCL or RCCL is loaded, and every library tried failed: dlopen(librccl.so.1) failed: librccl.so.1: cannot open shared object file")
		checkOK(t, out, 2, "noid", "; dlopen(libnccl.so.2) failed: libnccl.so.2: cannot open shared object file")
	})
	t.Run("missing/GPUHELPER_NCCL_LIBRARY", func(t *testing.T) {
		out, err := srun(t, c, []string{"GPUHELPER_SYSROOT=" + root, ldPath("both"), "GPUHELPER_NCCL_LIBRARY=/nonexistent/librccl.so.1"},
			"--mpi=pmix", "-O", "-n2", "--gres=gpu:2", bin("ghtest_dl"), "noid")
		if err != nil {
			t.Fatal(err)
		}
		checkOK(t, out, 2, "noid", "ncclGetUniqueId is not in the process and dlopen(/nonexistent/librccl.so.1) failed")
	})
}
