package gpubind

import "fmt"

// PlanRequest is one node's planning problem in the form the CLI and the engine have it.
type PlanRequest struct {
	Topo     *Topology
	Env      StepEnv
	Gres     *GresConf // nil: no gres.conf known
	GresFrom string    // where Gres came from, for messages
	// SlurmGres: slurm.conf gives this node a GPU GRES (NodeConf.SlurmGres).
	SlurmGres bool
	Numbering Numbering
	Tasks     int
	Option    string   // --gpu-bind-topo value
	Mode      Mode     // enforce (the zero value) or optional
	Force     Flags    // admin: flags always on
	Never     Flags    // admin: flags always off
	Rails     []string // admin: the RDMA devices for NCCL/UCX (plugstack nics=); nil: closest
}

// Plan parses the option, maps the step's GPUs and builds the decision table. An
// unknown GRES mapping is an error in enforce mode and a warning in optional mode.
func Plan(r PlanRequest) (*Table, error) {
	opt, err := ParseOption(r.Option)
	if err != nil {
		return nil, err
	}
	if opt.Policy == policyOff || opt.Policy == policyHelp {
		return nil, fmt.Errorf("option %q: policy %s does not plan", r.Option, opt.Policy)
	}
	opt.Flags = opt.Flags.Apply(r.Force, r.Never)
	if r.Topo == nil {
		return nil, fmt.Errorf("no topology")
	}
	gm, err := buildGresMap(r.Topo, r.Gres, r.GresFrom)
	if err != nil {
		return nil, err
	}
	gm.Managed = gm.Managed || r.SlurmGres
	st, err := resolveStep(r.Topo, r.Env, gm, r.Numbering)
	if err != nil {
		return nil, err
	}
	if st.Unknown && r.Mode == ModeEnforce {
		why := "no gres.conf was found"
		if r.Gres != nil {
			why = "gres.conf " + r.GresFrom + " has GPU lines only for other nodes (NodeName=)"
		}
		return nil, fmt.Errorf("cannot map Slurm's GPU numbers (GRES indices) to GPUs: %s; give the plugin gres_conf= or run in mode=optional", why)
	}
	dropped, err := amdIsolate(r.Topo, &opt, r.Mode)
	if err != nil {
		return nil, err
	}
	droppedUUID, err := amdPartitionUUID(r.Topo, st, &opt, r.Mode)
	if err != nil {
		return nil, err
	}
	tab, err := buildTable(planInput{Topo: r.Topo, Step: st, Tasks: r.Tasks, Option: opt, Rails: r.Rails})
	if err != nil {
		return nil, err
	}
	if st.Unknown {
		tab.Status = StatusWarn
	}
	for _, d := range []string{dropped, droppedUUID} {
		if d != "" {
			tab.Status = StatusWarn
			tab.Messages = append(tab.Messages, d)
		}
	}
	return tab, nil
}
