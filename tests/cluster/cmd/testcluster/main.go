// Command testcluster starts and stops the private Slurm test cluster for humans and scripts
// (tests/cluster/cluster.sh wraps it):
//
//	testcluster start [-nodes N] [-cpus N] [-task PLUGIN] [-gpus N] [-constrain-devices]
//	                  [-plugstack LINE]... [-conf LINE]...   prints the cluster directory
//	testcluster env DIR                                      prints export lines for a shell
//	testcluster stop DIR
//	testcluster list                                         lists clusters in the temp dirs
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpubind/gpubind/tests/cluster"
)

type lines []string

func (l *lines) String() string     { return strings.Join(*l, "\n") }
func (l *lines) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "testcluster:", err)
		os.Exit(1)
	}
}

func usage() error {
	return fmt.Errorf("usage: testcluster start [flags] | env DIR | stop DIR | list")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	switch args[0] {
	case "start":
		fs := flag.NewFlagSet("start", flag.ContinueOnError)
		var cfg cluster.Config
		var plug, conf lines
		fs.IntVar(&cfg.Nodes, "nodes", 1, "slurmd nodes (1..256, one slurmd each on this host)")
		fs.IntVar(&cfg.CPUs, "cpus", 0, "CPUs per node (default nproc)")
		fs.StringVar(&cfg.TaskPlugin, "task", "task/none", "TaskPlugin")
		fs.StringVar(&cfg.Proctrack, "proctrack", "", "ProctrackType (default by TaskPlugin)")
		fs.IntVar(&cfg.GPUs, "gpus", 8, "fake GPUs per node")
		fs.BoolVar(&cfg.ConstrainDevices, "constrain-devices", false, "cgroup.conf ConstrainDevices=yes")
		fs.BoolVar(&cfg.OwnMunge, "own-munge", false, "always start a private munged")
		fs.BoolVar(&cfg.AuthSlurm, "auth-slurm", false, "auth/slurm with a generated key, no munge (Slurm 23.11+)")
		fs.Var(&plug, "plugstack", "plugstack.conf line (repeatable)")
		fs.Var(&conf, "conf", "extra slurm.conf line (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 0 {
			return fmt.Errorf("start: unexpected arguments %q", fs.Args())
		}
		cfg.PlugStack, cfg.SlurmConf = plug, conf
		cfg.Detached = true // the daemons must outlive this command
		c, err := cluster.Start(cfg)
		if err != nil {
			return err
		}
		fmt.Println(c.Dir)
		return nil
	case "list":
		// Helps find a cluster someone forgot to stop; it never stops anything itself.
		for _, parent := range []string{os.TempDir(), "/var/tmp"} {
			dirs, _ := filepath.Glob(filepath.Join(parent, "gpubind-cluster-*"))
			for _, d := range dirs {
				c, err := cluster.Load(d)
				if err != nil {
					fmt.Printf("%s\tunreadable: %v\n", d, err)
					continue
				}
				fmt.Printf("%s\t%s\tnodes=%d\tlive daemons=%d\n", d, c.Name, len(c.NodeNames), c.LiveDaemons())
			}
		}
		return nil
	case "env", "stop":
		if len(args) != 2 {
			return fmt.Errorf("%s: expected the cluster directory as the only argument", args[0])
		}
		c, err := cluster.Load(args[1])
		if err != nil {
			return err
		}
		if args[0] == "stop" {
			return c.Stop()
		}
		fmt.Printf("export SLURM_CONF=%s\n", shellQuote(c.ConfPath))
		fmt.Printf("export %s=%s\n", cluster.MarkerEnv, shellQuote(c.Dir))
		if p := c.SlurmPrefix(); p != "" {
			fmt.Printf("export PATH=%s:%s:\"$PATH\"\n", shellQuote(p+"/bin"), shellQuote(p+"/sbin"))
		}
		return nil
	}
	return usage()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
