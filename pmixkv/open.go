package pmixkv

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Options configure Open.
type Options struct {
	// Getenv reads the launcher variables for the fallback; nil means os.Getenv. A C library
	// passes a C getenv here, because Go's copy of the environment is taken at load time.
	Getenv func(string) string
	// Session, when not nil, is a PMIx session opened in C before Go ran (see Session): Open
	// takes it over instead of calling PMIx_Init.
	Session Session
}

// Open connects to the job's PMIx server. Without one (PMIx_Init: UNREACH) it reads the
// launcher's variables; that fallback is allowed only for a job of one process, since nothing
// can be exchanged without a server. Any other case returns an error matching ErrNeedServer that
// says how to launch.
func Open(opts Options) (KV, error) {
	c, err := newClient(opts.Session)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, errNoServer) {
		return nil, err
	}
	initErr := err
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	info, err := envInfo(getenv)
	if err != nil {
		return nil, err
	}
	if info.Size != 1 {
		return nil, fmt.Errorf("pmixkv: no PMIx server (%v) but %s says the job has %d processes: "+
			"launch with `srun --mpi=pmix` (or Open MPI's mpirun) so the ranks can exchange data: %w",
			initErr, info.Source, info.Size, ErrNeedServer)
	}
	job, err := NewMemJob(1, nil)
	if err != nil {
		return nil, err
	}
	m := job.Rank(0)
	m.info = info
	return m, nil
}

// envInfo reads a process's place from launcher variables: Slurm's SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NODEID (inside a step, i.e. with SLURM_STEP_ID set), else Open MPI's
// OMPI_COMM_WORLD_*; with neither, a singleton (rank 0 of 1).
func envInfo(getenv func(string) string) (Info, error) {
	host, _ := os.Hostname()
	type spec struct {
		source                              string
		marker                              string
		rank, size, lrank, lsize, node, nnd string
	}
	for _, s := range []spec{
		{"slurm-env", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "", "SLURM_NODEID", "SLURM_STEP_NUM_NODES"},
		{"ompi-env", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "", ""},
	} {
		if getenv(s.marker) == "" {
			continue
		}
		in := Info{Source: s.source, Hostname: host, LocalSize: -1, NumNodes: -1}
		var err error
		read := func(name string, dflt int) int {
			if err != nil {
				return 0
			}
			if name == "" || getenv(name) == "" {
				if dflt >= 0 {
					return dflt
				}
				err = fmt.Errorf("pmixkv: %s is not set, expected a number from the launcher", name)
				return 0
			}
			v, e := strconv.Atoi(getenv(name))
			if e != nil || v < 0 {
				err = fmt.Errorf("pmixkv: %s=%q, expected a non-negative integer", name, getenv(name))
			}
			return v
		}
		if s.source == "slurm-env" && getenv(s.size) == "" {
			s.size = "SLURM_NTASKS"
		}
		in.Size = read(s.size, -1)
		in.Rank = read(s.rank, -1)
		in.LocalRank = read(s.lrank, 0)
		in.NodeID = read(s.node, 0)
		if err != nil {
			return Info{}, err
		}
		if in.Size == 1 {
			in.LocalSize, in.NumNodes, in.LocalPeers = 1, 1, []int{0}
			return in, checkInfo(in)
		}
		// Several processes: the fallback will refuse; the facts are only for the message.
		return in, nil
	}
	return Info{Source: "singleton", Size: 1, LocalSize: 1, NumNodes: 1, Hostname: host, LocalPeers: []int{0}}, nil
}
