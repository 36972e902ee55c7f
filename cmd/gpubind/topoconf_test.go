package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/tests/fixtures"
)

// writeSnapshots writes one snapshot per host into dir, as `gpubind snapshot` on each
// node would: GB200 trays in the given cliques ("" state: completed).
func writeSnapshots(t *testing.T, dir string, hosts map[string]uint32, states map[string]string) {
	t.Helper()
	for h, c := range hosts {
		st := states[h]
		if st == "" {
			st = gpubind.FabricCompleted
		}
		f, err := os.Create(filepath.Join(dir, h+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := gpubind.WriteSnapshot(f, fixtures.GB200Tray(h, c, st)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

func TestTopologyConfCommand(t *testing.T) {
	dir := t.TempDir()
	writeSnapshots(t, dir, map[string]uint32{"node1": 1, "node2": 1, "node3": 2, "node4": 2, "node5": 2},
		map[string]string{"node5": gpubind.FabricNotStarted})
	rc, out, errOut := cli("topology-conf", "--snapshots", dir)
	if rc != 0 {
		t.Fatalf("rc %d: %s", rc, errOut)
	}
	for _, want := range []string{"BlockName=nvl6b0f3c1e_1 Nodes=node[1-2]\n", "BlockName=nvl6b0f3c1e_2 Nodes=node[3-4]\n", "BlockSizes=2,4\n", "#   node5: fabric not_started\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	// Bad input: clear errors naming it.
	empty := t.TempDir()
	if rc, _, e := cli("topology-conf", "--snapshots", empty); rc != 1 || !strings.Contains(e, "holds no snapshot (*.json)") {
		t.Errorf("empty dir: rc %d %q", rc, e)
	}
	if rc, _, e := cli("topology-conf"); rc != 2 || !strings.Contains(e, "needs --snapshots DIR") {
		t.Errorf("no dir: rc %d %q", rc, e)
	}
	if rc, _, e := cli("topology-conf", "--snapshots", filepath.Join(empty, "nope")); rc != 2 || !strings.Contains(e, "not a directory") {
		t.Errorf("missing dir: rc %d %q", rc, e)
	}
	if err := os.WriteFile(filepath.Join(empty, "bad.json"), []byte(`{"version":1,"gpus":[],"numa":[],"x":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, _, e := cli("topology-conf", "--snapshots", empty); rc != 1 || !strings.Contains(e, "bad.json") || !strings.Contains(e, `unknown field "x"`) {
		t.Errorf("bad snapshot: rc %d %q", rc, e)
	}
	if err := os.WriteFile(filepath.Join(empty, "bad.json"), []byte(`{"version":1,"gpus":[],"numa":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if rc, _, e := cli("topology-conf", "--snapshots", empty); rc != 1 || !strings.Contains(e, `bad.json: snapshot has no "host"`) {
		t.Errorf("no host: rc %d %q", rc, e)
	}
}
