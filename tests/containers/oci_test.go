package containers

// Slurm's own OCI containers (srun --container=BUNDLE, oci.conf) with runc and crun, in a
// cluster configuration of their own: Slurm's documentation says not to combine oci.conf with
// a SPANK container plugin such as pyxis. docs/containers.md "Slurm's OCI containers" says
// what was found here.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpubind/gpubind/tests/cluster"
	"github.com/gpubind/gpubind/tests/testbuild"
)

// ociConf is the oci.conf of Slurm's documentation (containers.shtml, "run" examples) for
// runc or crun, with the runtime's state under stateDir/<uid> instead of /run/user/<uid>.
func ociConf(runtime, stateDir string) []string {
	rt := runtime + " --rootless=true --root=" + stateDir + "/%U/"
	id := "%n.%u.%j.%s.%t"
	run := rt + " run " + id + " -b %b"
	if runtime == "crun" {
		run = rt + " run --bundle %b " + id
	}
	return []string{
		// Where the task's spool directory appears in the container: one path for 24.11
		// (default /var/run/slurm) and 26.05 (default: its host path, which the rootfs lacks).
		"MountSpoolDir=" + ociSpoolMount,
		`RunTimeQuery="` + rt + ` state ` + id + `"`,
		`RunTimeKill="` + rt + ` kill -a ` + id + `"`,
		`RunTimeDelete="` + rt + ` delete --force ` + id + `"`,
		`RunTimeRun="` + run + `"`,
	}
}

// ociSpoolMount is oci.conf's MountSpoolDir, a directory every test rootfs has.
const ociSpoolMount = "/run/slurm"

// ociBundle makes an OCI bundle in a new directory: a rootfs holding dash (as /bin/sh and
// /usr/bin/sh: srun hands the task the host's path of its program) with the C library, a
// marker file, and an empty directory for each of binds; and a config.json as `runc spec
// --rootless` writes it (user namespace mapping uid and gid 0 to the job's user, the host's
// /sys), with binds mounted at their own paths, a device rule that allows the NVIDIA GPUs
// (char 195), as a site's GPU bundle has (runc as root writes the bundle's rules into a cgroup
// of its own; without the rule no GPU opens in the container), and CUDA_VISIBLE_DEVICES=7 in
// its environment, as images that set it have.
func ociBundle(t *testing.T, jobUID, jobGID int, binds []string) string {
	t.Helper()
	dir := sharedDir(t, 0)
	root := filepath.Join(dir, "rootfs")
	for _, d := range append([]string{"bin", "usr/bin", "etc", "dev", "proc", "sys", "tmp", "lib64", "lib/x86_64-linux-gnu", strings.TrimPrefix(ociSpoolMount, "/")}, binds...) {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("ldd", "/bin/dash").Output()
	if err != nil {
		t.Fatalf("ldd /bin/dash: %v", err)
	}
	copies := map[string]string{"/bin/dash": "bin/sh"}
	for _, lib := range regexp.MustCompile(`(/\S+\.so[.0-9]*)`).FindAllString(string(out), -1) {
		copies[lib] = strings.TrimPrefix(lib, "/")
	}
	for src, dst := range copies {
		if out, err := exec.Command("cp", "-L", src, filepath.Join(root, dst)).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v: %s", src, err, out)
		}
	}
	if err := os.Link(filepath.Join(root, "bin/sh"), filepath.Join(root, "usr/bin/sh")); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"passwd": "root:x:0:0:root:/:/bin/sh\n", "group": "root:x:0:\n", "gpubind-test-image": ""} {
		if err := os.WriteFile(filepath.Join(root, "etc", name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	type mount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	mounts := []mount{
		{"/proc", "proc", "proc", nil},
		{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{"/dev/pts", "devpts", "devpts", []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{"/dev/shm", "tmpfs", "shm", []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{"/sys", "none", "/sys", []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
	}
	for _, b := range binds {
		mounts = append(mounts, mount{b, "none", b, []string{"rbind"}})
	}
	caps := []string{"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	idmap := func(host int) []map[string]int {
		return []map[string]int{{"containerID": 0, "hostID": host, "size": 1}}
	}
	config := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"terminal": false,
			"user":     map[string]int{"uid": 0, "gid": 0},
			"args":     []string{"sh"},
			// An image that sets CUDA_VISIBLE_DEVICES (slurmstepd merges the bundle's
			// environment into the step's before the tasks start): each task must keep its own.
			"env": []string{"PATH=/usr/bin:/bin", "CUDA_VISIBLE_DEVICES=7"},
			"cwd": "/",
			"capabilities": map[string][]string{"bounding": caps, "effective": caps, "permitted": caps,
				"ambient": caps},
			"noNewPrivileges": true,
		},
		"root":     map[string]any{"path": "rootfs", "readonly": true},
		"hostname": "oci",
		"mounts":   mounts,
		"linux": map[string]any{
			"uidMappings": idmap(jobUID),
			"gidMappings": idmap(jobGID),
			"namespaces":  []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "user"}},
			"maskedPaths": []string{"/proc/kcore", "/proc/keys", "/sys/firmware"},
			"resources": map[string]any{"devices": []map[string]any{
				{"allow": false, "access": "rwm"},
				{"allow": true, "type": "c", "major": 195, "access": "rwm"},
			}},
		},
	}
	b, err := json.MarshalIndent(config, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// ociTask is what one task reports: the variables, which step GPU nodes it may open, whether
// it ran in the bundle, its cgroups (devices and the unified one) and whereami's report.
type ociTask struct {
	Rank                          int
	Visible, Bus, Openable, Where string
	Cgroups                       string
	Mapping                       string         // the verbose mapping line's GPU (bus id)
	Whereami                      map[string]any // gpubind whereami --json, whole
}

// ociTaskScript prints the task's line and writes whereami's report to OUT/where.RANK.json.
// $1 is gpubind, $2 the fixture root, $3 the device dir, $4 OUT, the rest the step's nodes.
const ociTaskScript = `gb=$1 fx=$2 dev=$3 out=$4; shift 4
for d in "$@"; do if [ -r "$d" ] && [ -w "$d" ]; then o="$o${o:+,}${d##*/}"; fi; done
cg=; while read -r l; do case "$l" in *:devices:*|0::*) cg="$cg${cg:+;}$l";; esac; done < /proc/self/cgroup
"$gb" whereami --json --root "$fx" --dev "$dev" > "$out/where.$SLURM_PROCID.json"
echo "T $SLURM_PROCID ${CUDA_VISIBLE_DEVICES:--} ${GPUBIND_PCI_BUS_IDS:--} ${o:--} $(test -e /etc/gpubind-test-image && echo inside || echo outside) $cg"`

var (
	ociTaskRe = regexp.MustCompile(`^T (\d+) (\S+) (\S+) (\S+) (inside|outside) (\S+)$`)
	// The mapping line: "gpubind: task L (rank R): CUDA_VISIBLE_DEVICES=V [(visible=...)] ->
	// [peer ]GPU N BUS UUID NUMA M[; ...]"; the task's own GPU is the entry without "peer".
	ociMappingRe = regexp.MustCompile(`gpubind: task \d+ \(rank (\d+)\): CUDA_VISIBLE_DEVICES=\S+ (?:\([^)]*\) )?-> (.*)`)
	ociOwnRe     = regexp.MustCompile(`^GPU \d+ (\S+) `)
)

// ociEnv is what every OCI step needs: the cluster, the directory of the gpubind program, the
// fixture, a directory the job's user may write whereami's reports to, and the user.
type ociEnv struct {
	c            *cluster.Cluster
	bin, fixture string
	out          string
	user         string // "" root
	uid, gid     int
	bundle       string // for the user
	stepGPUNodes []string
}

// srun runs args + the task script as e.user (setpriv, from /tmp, like a job of that user
// submitted from a directory every node has) and returns each task's report by rank.
func (e *ociEnv) srun(t *testing.T, args []string) ([]ociTask, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := os.RemoveAll(e.out); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(e.out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(e.out, e.uid, e.gid); err != nil {
		t.Fatal(err)
	}
	full := append(append([]string{}, args...), "/bin/sh", "-c", ociTaskScript, "sh", filepath.Join(e.bin, "gpubind"), e.fixture, e.c.DevDir, e.out)
	full = append(full, e.stepGPUNodes...)
	out, errOut, err := srun(ctx, e.c, e.user, nil, full)
	mapping := map[int]string{}
	for _, m := range ociMappingRe.FindAllStringSubmatch(out+errOut, -1) {
		r, _ := strconv.Atoi(m[1])
		for _, gpu := range strings.Split(m[2], "; ") {
			if own := ociOwnRe.FindStringSubmatch(gpu); own != nil {
				mapping[r] = own[1]
			}
		}
	}
	var tasks []ociTask
	for _, l := range strings.Split(out, "\n") {
		m := ociTaskRe.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		rank, _ := strconv.Atoi(m[1])
		k := ociTask{Rank: rank, Visible: m[2], Bus: m[3], Openable: m[4], Where: m[5], Cgroups: m[6], Mapping: mapping[rank]}
		b, rerr := os.ReadFile(filepath.Join(e.out, "where."+m[1]+".json"))
		if rerr == nil {
			rerr = json.Unmarshal(b, &k.Whereami)
		}
		if rerr != nil {
			t.Errorf("task %d: whereami --json: %v\n%s", rank, rerr, b)
		}
		tasks = append(tasks, k)
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].Rank < tasks[j].Rank })
	if err != nil {
		err = fmt.Errorf("srun %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return tasks, errOut, err
}

// slurmMajorMinor is the version of the Slurm under test (SLURM_PREFIX, else the one in PATH)
// as a number like 2411, and slurmd -V's line (which, unlike srun --version, needs no
// slurm.conf), before any cluster is started.
func slurmMajorMinor(t *testing.T) (int, string) {
	t.Helper()
	slurmd := "slurmd"
	if p := os.Getenv("SLURM_PREFIX"); p != "" && p != "/usr" {
		slurmd = filepath.Join(p, "sbin", "slurmd")
	}
	out, err := exec.Command(slurmd, "-V").Output()
	if err != nil {
		t.Fatalf("%s -V: %v", slurmd, err)
	}
	v := strings.TrimSpace(string(out))
	m := regexp.MustCompile(`(\d+)\.(\d+)\.\d+`).FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("slurmd -V: %q: expected slurm X.Y.Z", v)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major*100 + minor, v
}

// TestOCI runs the same steps outside a container and inside Slurm's OCI container (runc,
// then crun) on Slurm configured as sites do (task/cgroup, task/affinity, ConstrainDevices),
// submitted by an ordinary user (the runtimes then run rootless, as Slurm's documentation
// requires), and as root. Inside, every task must get what it gets outside: the variables,
// its GPU, the device nodes it can open, gpubind whereami's whole report, the cgroup it is in.
func TestOCI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (private Slurm cluster)")
	}
	if v, version := slurmMajorMinor(t); v < 2411 {
		// Tried on Debian's 22.05: slurmstepd refuses a container step with more than one task
		// on a node ("_modify_config: unexpected number of tasks 4 > 1"), and the container's
		// environment is the step's from before the tasks were forked: no SLURM_PROCID, no
		// CUDA_VISIBLE_DEVICES, none of gpubind's variables. 23.x is not in the matrix.
		t.Skipf("Slurm OCI containers with per-task environments need Slurm 24.11 or later of the matrix (22.05: one task per node, no task variables in the container); this is %s", version)
	}
	for _, rt := range []string{"runc", "crun"} {
		if _, err := exec.LookPath(rt); err != nil {
			t.Fatalf("%s not found: `make deps` installs it (Debian package %s)", rt, rt)
		}
	}
	nobody, err := osuser.Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)

	bin := sharedDir(t, 0)
	if err := testbuild.Run(repo(), []string{"go", "build", "-trimpath", "-o", filepath.Join(bin, "gpubind"), "./cmd/gpubind"}); err != nil {
		t.Fatal(err)
	}
	fixture := fixtureRoot()
	state := sharedDir(t, 0)
	if err := os.Chmod(state, 0o1777); err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, cluster.Config{PlugStack: []string{gpubindLine(t)}, OCIConf: ociConf("runc", state)})
	out := sharedDir(t, 0)
	binds := []string{c.DevDir, fixture, bin, out}
	for _, who := range []string{"nobody", "root"} {
		e := &ociEnv{c: c, bin: bin, fixture: fixture, out: filepath.Join(out, "w"), stepGPUNodes: devNodes(c)}
		if who == "nobody" {
			e.user, e.uid, e.gid = "nobody", uid, gid
		}
		e.bundle = ociBundle(t, e.uid, e.gid, binds)
		t.Run(who, func(t *testing.T) {
			steps := [][]string{
				{"-n4", "--gpus=4", "--cpu-bind=map_cpu:0,1,0,1", "--gpu-bind-topo=closest,isolate,verbose"},
				{"-n2", "--gpus=4", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,uuid,visible=localid,verbose"},
			}
			if who == "root" {
				// runc as root makes a cgroup of its own for the container (below the task's in
				// each v1 hierarchy) and writes its device rules there; the whole node's GPUs,
				// so that Slurm's cgroup denies none (below a v1 deny list runc 1.1.5 cannot
				// start: its "c *:* m" is refused, then /dev/null cannot be opened).
				steps = [][]string{{"-n2", "--gpus=8", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,verbose"},
					{"-n2", "--gpus=8", "--cpu-bind=map_cpu:0,1", "--gpu-bind-topo=closest,isolate,verbose"}}
			}
			outside := make([][]ociTask, len(steps))
			for i, step := range steps {
				var err error
				if outside[i], _, err = e.srun(t, step); err != nil {
					t.Fatal(err)
				}
			}
			for _, rt := range []string{"runc", "crun"} {
				t.Run(rt, func(t *testing.T) {
					if err := os.WriteFile(filepath.Join(c.Dir, "oci.conf"), []byte(strings.Join(ociConf(rt, state), "\n")+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					for i, step := range steps {
						t.Run(strings.TrimPrefix(step[len(step)-1], "--gpu-bind-topo="), func(t *testing.T) {
							refusals := strings.Count(c.SlurmdLog(c.NodeNames[0]), ociRootRefusal)
							inside, errOut, err := e.srun(t, append([]string{"--container=" + e.bundle}, step...))
							if who == "root" && strings.Contains(step[len(step)-1], "isolate") {
								// A runtime run as root makes a cgroup of its own for each
								// task: on v2 beside task_N (TestOCIRootRuncV2LeavesTaskCgroup),
								// on v1 runc cannot start below isolate's deny list. gpubind
								// refuses isolate there (mode=enforce: the step fails), naming
								// why, instead of a task bound in name only or runc's error.
								if err == nil || len(inside) != 0 {
									t.Fatalf("root's isolate step ran %d tasks in the container (srun error %v): want gpubind to refuse isolate", len(inside), err)
								}
								if strings.Count(c.SlurmdLog(c.NodeNames[0]), ociRootRefusal) <= refusals {
									t.Fatalf("the step failed without gpubind's refusal (%q in the slurmd log):\n%v", ociRootRefusal, err)
								}
								return
							}
							if rt == "crun" && strings.Contains(errOut, "cgroups in hybrid mode not supported") {
								t.Skipf("crun refuses this host's cgroups: %s", firstLine(errOut, "hybrid"))
							}
							ociCompare(t, who, outside[i], inside, err)
						})
					}
				})
			}
		})
	}
}

// ociRootRefusal is gpubind's refusal of isolate in OCI containers run as root (stepd.c).
const ociRootRefusal = "isolate: the step runs in Slurm's OCI containers"

// ociCompare checks each task inside against the same task outside.
func ociCompare(t *testing.T, who string, outside, inside []ociTask, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	} else if len(inside) != len(outside) {
		t.Fatalf("%d tasks inside, %d outside:\n%v\n%v", len(inside), len(outside), inside, outside)
	}
	byRank := map[int]ociTask{}
	for _, k := range outside {
		byRank[k.Rank] = k
	}
	for _, in := range inside {
		o, ok := byRank[in.Rank]
		if !ok {
			t.Errorf("task %d ran inside only", in.Rank)
			continue
		}
		if o.Where != "outside" || in.Where != "inside" {
			t.Fatalf("task %d ran %s and %s, want outside and inside the bundle", in.Rank, o.Where, in.Where)
		}
		if in.Visible != o.Visible || in.Bus != o.Bus || in.Openable != o.Openable || in.Mapping != o.Mapping {
			t.Errorf("task %d differs:\noutside CUDA_VISIBLE_DEVICES=%s bus %s opens %s mapping %s\ninside  CUDA_VISIBLE_DEVICES=%s bus %s opens %s mapping %s",
				in.Rank, o.Visible, o.Bus, o.Openable, o.Mapping, in.Visible, in.Bus, in.Openable, in.Mapping)
		}
		if in.Mapping == "" || !strings.Contains(in.Bus, in.Mapping) {
			t.Errorf("task %d: the mapping line names GPU %q, GPUBIND_PCI_BUS_IDS=%s", in.Rank, in.Mapping, in.Bus)
		}
		// The cgroup: the same one, or (root) one below it in the same hierarchy.
		if !cgroupsWithin(normCgroups(in.Cgroups), normCgroups(o.Cgroups), who == "root") {
			t.Errorf("task %d left its cgroup:\noutside %s\ninside  %s", in.Rank, o.Cgroups, in.Cgroups)
		}
		wi, wo := withoutCgroup(in.Whereami), withoutCgroup(o.Whereami)
		if !reflect.DeepEqual(wi, wo) {
			bi, _ := json.Marshal(wi)
			bo, _ := json.Marshal(wo)
			t.Errorf("task %d: gpubind whereami --json differs:\noutside %s\ninside  %s", in.Rank, bo, bi)
		}
		if who != "root" && normCgroups(fmt.Sprint(in.Whereami["cgroup"])) != normCgroups(fmt.Sprint(o.Whereami["cgroup"])) {
			t.Errorf("task %d: whereami's cgroups differ:\noutside %v\ninside  %v", in.Rank, o.Whereami["cgroup"], in.Whereami["cgroup"])
		}
	}
}

// cgroupsWithin: each cgroup line of in ("N:devices:/path", "0::/path") is that of out, or,
// with below, a descendant of it.
func cgroupsWithin(in, out string, below bool) bool {
	ins, outs := strings.Split(in, ";"), strings.Split(out, ";")
	if len(ins) != len(outs) {
		return false
	}
	for i := range ins {
		if ins[i] == outs[i] {
			continue
		}
		if !below || !strings.HasPrefix(ins[i], strings.TrimSuffix(outs[i], "/")+"/") {
			return false
		}
	}
	return true
}

// normCgroups replaces what differs between two steps in cgroup paths: the job id, the
// plugin's cgroup name (job, step, slurmstepd pid) and runc's container id (%n.%u.%j.%s.%t).
func normCgroups(s string) string {
	for _, r := range [][2]string{
		{`job_\d+`, "job_J"},
		{`gpubind_j\d+_s\d+_p\d+_t`, "gpubind_jJ_sS_pP_t"},
		{`/([^./]+)\.([^./]+)\.\d+\.\d+\.(\d+)`, "/$1.$2.J.S.$3"},
	} {
		s = regexp.MustCompile(r[0]).ReplaceAllString(s, r[1])
	}
	return s
}

func withoutCgroup(m map[string]any) map[string]any {
	c := map[string]any{}
	for k, v := range m {
		if k != "cgroup" {
			c[k] = v
		}
	}
	return c
}

func firstLine(s, containing string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, containing) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
