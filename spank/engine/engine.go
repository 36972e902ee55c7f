// Command engine is the Go side of the gpubind SPANK plugin. Built with the tag
// gpubind_launcher it is the program gpubind-launcher, which the C front end starts with
// posix_spawn in slurm_spank_init_post_opt; it discovers the topology (at most once per
// boot and driver version, through a cache), drops root, plans the step and writes the
// decision table of spank/PROTOCOL.md to a pipe (launcher.go). Built with
// -buildmode=c-shared it is gpubind_engine.so, which srun, sbatch and salloc load to check
// the option and print help. Go never runs inside slurmstepd, nor in a fork of it.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpubind/gpubind/gpubind"
)

// maxRequestBytes bounds the request text.
const maxRequestBytes = 1 << 20

// Test hooks: the NVML library (nil = go-nvml's real one) and the boot id file.
var (
	nvmlLib    nvml.Interface
	bootIDPath = "/proc/sys/kernel/random/boot_id"
)

// request is the parsed request of protocol v1 section 1.
type request struct {
	Option     string
	Mode       gpubind.Mode
	Source     string
	Root       string
	Snapshot   string
	SnapshotFD int // the checked snapshot file, open on this fd (-1: none; read Snapshot)
	CacheDir   string
	GresConf   string
	SlurmConf  string // slurmstepd's own SLURM_CONF ("": unknown)
	Force      string
	Never      string
	NICs       string // plugstack nics=: the admin's rails
	NodeName   string
	LocalTasks int
	GlobalIDs  []int
	Env        map[string]string
	UID, GID   int // -1: keep
}

// envKeys are the env.NAME keys the engine reads: the list of spank/PROTOCOL.md section 1,
// which the front end sends (request_env in spank/frontend/stepd.c). TestEnvKeysNamedOnce
// checks all three agree.
var envKeys = map[string]bool{
	"SLURM_STEP_GPUS": true, "SLURM_JOB_GPUS": true, "CUDA_VISIBLE_DEVICES": true,
	"ROCR_VISIBLE_DEVICES": true, "SLURM_CONF": true, "SLURM_GPU_BIND_TOPO": true,
}

// parseRequest parses KEY=VALUE lines. Unknown keys are ignored; a key given twice, a
// line without '=', or a bad number is an error naming it.
func parseRequest(text string) (*request, error) {
	if len(text) > maxRequestBytes {
		return nil, fmt.Errorf("request is %d bytes, more than %d", len(text), maxRequestBytes)
	}
	r := &request{Env: map[string]string{}, UID: -1, GID: -1, LocalTasks: -1, SnapshotFD: -1}
	seen := map[string]bool{}
	for i, line := range strings.Split(text, "\n") {
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("request line %d %q: want KEY=VALUE", i+1, clip(line))
		}
		if seen[k] {
			return nil, fmt.Errorf("request key %q given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "option":
			r.Option = v
		case "mode":
			if r.Mode, err = gpubind.ParseMode(v); err != nil {
				return nil, fmt.Errorf("request mode=%q: want enforce or optional", clip(v))
			}
		case "source":
			r.Source = v
		case "root":
			r.Root = v
		case "snapshot":
			r.Snapshot = v
		case "snapshot_fd":
			r.SnapshotFD, err = atoi(k, v, 0, 1<<20)
		case "cache_dir":
			r.CacheDir = v
		case "gres_conf":
			r.GresConf = v
		case "slurm_conf":
			r.SlurmConf = v
		case "force":
			r.Force = v
		case "never":
			r.Never = v
		case "nics":
			r.NICs = v
		case "node_name":
			r.NodeName = v
		case "local_tasks":
			r.LocalTasks, err = atoi(k, v, 0, gpubind.MaxTableTasks)
		case "global_ids":
			for _, p := range strings.Split(v, ",") {
				if p == "" && v == "" {
					break
				}
				n, err := atoi(k, p, 0, 1<<30)
				if err != nil {
					return nil, err
				}
				r.GlobalIDs = append(r.GlobalIDs, n)
			}
		case "uid":
			r.UID, err = atoi(k, v, 0, 1<<31-2)
		case "gid":
			r.GID, err = atoi(k, v, 0, 1<<31-2)
		default:
			if name, ok := strings.CutPrefix(k, "env."); ok && envKeys[name] {
				r.Env[name] = v
			}
		}
		if err != nil {
			return nil, err
		}
	}
	if r.LocalTasks < 0 {
		return nil, errors.New("request has no local_tasks")
	}
	if r.GlobalIDs != nil && len(r.GlobalIDs) != r.LocalTasks {
		return nil, fmt.Errorf("request global_ids has %d entries but local_tasks=%d", len(r.GlobalIDs), r.LocalTasks)
	}
	if (r.UID < 0) != (r.GID < 0) {
		return nil, errors.New("request gives uid without gid or gid without uid")
	}
	return r, nil
}

func atoi(key, v string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("request %s=%q: want an integer %d..%d", key, clip(v), lo, hi)
	}
	return n, nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func (r *request) env(name string) *string {
	if v, ok := r.Env[name]; ok {
		return &v
	}
	return nil
}

// handle handles one request and writes the decision table to out. The table is built in
// memory and written once, so a failure never leaves half a table: on error the table
// has status error and the message, and the error is returned too.
func handle(request string, out io.Writer) error {
	var tab *gpubind.Table
	req, err := parseRequest(request)
	if err != nil {
		tab = gpubind.ErrorTable(err)
	} else if tab, err = plan(req); err != nil {
		tab = gpubind.ErrorTable(err)
	}
	var buf bytes.Buffer
	if eerr := tab.Encode(&buf); eerr != nil {
		buf.Reset()
		_ = gpubind.ErrorTable(eerr).Encode(&buf)
		if err == nil {
			err = eerr
		}
	}
	if _, werr := out.Write(buf.Bytes()); werr != nil && err == nil {
		err = werr
	}
	return err
}

func plan(req *request) (*gpubind.Table, error) {
	// Root part: admin settings only (source, root, snapshot, cache).
	topo, notes, err := loadTopology(req)
	if err != nil {
		return nil, err
	}
	// Slurm's configuration as the node reads it. What the admin names (slurmstepd's own
	// SLURM_CONF, the plugstack's gres_conf=, the default paths) is read as root: a
	// root:slurm 0640 gres.conf is common, and the user cannot choose these files. A
	// SLURM_CONF from the job's environment is the user's choice: read after the drop.
	userConf := req.SlurmConf == "" && req.Env["SLURM_CONF"] != ""
	var nc *gpubind.NodeConf
	if !userConf {
		if nc, err = gpubind.LoadNodeConf(req.SlurmConf, req.GresConf, req.NodeName); err != nil {
			return nil, err
		}
	}
	// Everything after this line runs as the job's user.
	if err := dropPrivileges(req.UID, req.GID); err != nil {
		return nil, err
	}
	if userConf {
		if nc, err = gpubind.LoadNodeConf(req.Env["SLURM_CONF"], req.GresConf, req.NodeName); err != nil {
			return nil, err
		}
	}
	force, err := gpubind.ParseFlags("force", req.Force)
	if err != nil {
		return nil, err
	}
	never, err := gpubind.ParseFlags("never", req.Never)
	if err != nil {
		return nil, err
	}
	rails, err := gpubind.ParseRails(req.NICs)
	if err != nil {
		return nil, fmt.Errorf("plugstack %w", err)
	}
	cvd := req.env("CUDA_VISIBLE_DEVICES")
	if cvd == nil && topo.IsAMD() {
		// gres.conf Flags=amd_gpu_env: Slurm sets ROCR_VISIBLE_DEVICES alone, numbered
		// as it would number CUDA_VISIBLE_DEVICES.
		cvd = req.env("ROCR_VISIBLE_DEVICES")
	}
	pr := gpubind.PlanRequest{
		Topo: topo, Tasks: req.LocalTasks, Option: req.Option, Mode: req.Mode,
		Force: force, Never: never, Rails: rails,
		Env: gpubind.StepEnv{
			StepGPUs: req.env("SLURM_STEP_GPUS"), JobGPUs: req.env("SLURM_JOB_GPUS"),
			CudaVisible: cvd,
		},
	}
	pr.Numbering, pr.Gres, pr.GresFrom, pr.SlurmGres = nc.Numbering, nc.Gres, nc.GresFrom, nc.SlurmGres
	tab, err := gpubind.Plan(pr)
	if err != nil {
		return nil, err
	}
	tab.Depends = nc.Read
	if tab.IMEXDir != "" && req.Root != "" {
		tab.IMEXDir = gpubind.IMEXDir(req.Root) // a fixture tree's channels
	}
	tab.Messages = append(notes, tab.Messages...)
	return tab, nil
}
