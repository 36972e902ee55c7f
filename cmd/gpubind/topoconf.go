package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpubind/gpubind/gpubind"
)

// cmdTopologyConf prints topology.conf lines for Slurm's topology/block plugin from one
// `gpubind snapshot` per node (*.json in DIR, each with its host).
func cmdTopologyConf(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("topology-conf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("snapshots", "", "directory of node snapshots (*.json, one `gpubind snapshot` per node)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *dir == "" {
		return usageError{"topology-conf needs --snapshots DIR"}
	}
	files, err := filepath.Glob(filepath.Join(*dir, "*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
			return usageError{fmt.Sprintf("--snapshots %q: not a directory", *dir)}
		}
		return fmt.Errorf("%s holds no snapshot (*.json): write one per node with `gpubind snapshot > %s/$(hostname -s).json`", *dir, *dir)
	}
	sort.Strings(files)
	var nodes []*gpubind.Topology
	for _, f := range files {
		t, err := gpubind.LoadSnapshot(f)
		if err != nil {
			return err
		}
		if t.Host == "" {
			return fmt.Errorf("%s: snapshot has no \"host\": write it with `gpubind snapshot` on the node", f)
		}
		nodes = append(nodes, t)
	}
	out, err := gpubind.TopologyConf(nodes)
	if err != nil {
		return err
	}
	_, err = io.WriteString(stdout, out)
	return err
}
