package gpubind_test

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
)

// words flattens ReadConf's lines to "FILE-BASE:LINE WORDS" for comparison.
func words(lines []gpubind.ConfLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, fmt.Sprintf("%s:%s@%d", filepath.Base(l.File), strings.Join(l.Fields, " "), l.Line))
	}
	return out
}

// One reader follows Include the way each format's Slurm parser does.
func TestReadConfInclude(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "slurm.conf"), "A=1 # comment\n\nINCLUDE conf.d/*.conf\ninclude /abs.conf\nB=2\n")
	writeFile(t, filepath.Join(dir, "conf.d", "x.conf"), "X=1\n")
	writeFile(t, filepath.Join(dir, "conf.d", "y.conf"), "Y=1\nY=2\n")
	writeFile(t, filepath.Join(dir, "root", "abs.conf"), "Z=1\n")
	under := func(p string) string { return filepath.Join(dir, "root", p) }
	lines, err := gpubind.ReadConf(filepath.Join(dir, "slurm.conf"), gpubind.ConfSlurm, under)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"slurm.conf:A=1@1", "x.conf:X=1@1", "y.conf:Y=1@1", "y.conf:Y=2@2", "abs.conf:Z=1@1", "slurm.conf:B=2@5"}
	if got := words(lines); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if v := gpubind.ConfValue(lines, "y"); v != "2" {
		t.Errorf("ConfValue(y) = %q, want the last one, 2", v)
	}

	for name, tc := range map[string]struct {
		format     gpubind.ConfFormat
		text, want string // want: "" no error, else the error names it
	}{
		"slurm missing file":        {gpubind.ConfSlurm, "Include nothere.conf\n", "Include nothere.conf"},
		"slurm pattern, no match":   {gpubind.ConfSlurm, "Include none.d/*.conf\n", ""},
		"slurm two args":            {gpubind.ConfSlurm, "Include a b\n", `want "Include FILE"`},
		"slurm loop":                {gpubind.ConfSlurm, "Include main.conf\n", "nested more than 8"},
		"plugstack missing file":    {gpubind.ConfPlugstack, "include nothere.conf other.conf\n", ""},
		"plugstack Include is text": {gpubind.ConfPlugstack, "Include nothere.conf\n", ""},
		"plugstack loop":            {gpubind.ConfPlugstack, "include main.conf\n", "nested more than 8"},
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "main.conf")
			writeFile(t, p, tc.text)
			_, err := gpubind.ReadConf(p, tc.format, nil)
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// The numbering rule, from slurm.conf with includes and cgroup.conf next to it.
func TestSlurmSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		task, cgroup string
		want         gpubind.Numbering
	}{
		"task/cgroup constrains":   {"TaskPlugin=task/affinity\nTaskPlugin=task/cgroup,task/affinity\n", "ConstrainDevices=yes\n", gpubind.NumberingRelative},
		"short plugin name":        {"TaskPlugin=cgroup\n", "constraindevices=YES\n", gpubind.NumberingRelative},
		"last TaskPlugin counts":   {"TaskPlugin=task/cgroup\nTaskPlugin=task/affinity\n", "ConstrainDevices=yes\n", gpubind.NumberingGlobal},
		"last Constrain counts":    {"TaskPlugin=task/cgroup\n", "ConstrainDevices=yes\nConstrainDevices=no\n", gpubind.NumberingGlobal},
		"no cgroup.conf":           {"TaskPlugin=task/cgroup\n", "", gpubind.NumberingGlobal},
		"constrain without plugin": {"", "ConstrainDevices=yes\n", gpubind.NumberingGlobal},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "slurm.conf"), "ClusterName=c\nInclude task.conf\n")
			writeFile(t, filepath.Join(dir, "task.conf"), tc.task)
			if tc.cgroup != "" {
				writeFile(t, filepath.Join(dir, "cgroup.conf"), tc.cgroup)
			}
			s, _, err := gpubind.ReadSlurmSettings(filepath.Join(dir, "slurm.conf"), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if s.Numbering() != tc.want {
				t.Errorf("%+v: numbering %v, want %v", s, s.Numbering(), tc.want)
			}
			nc, err := gpubind.LoadNodeConf(filepath.Join(dir, "slurm.conf"), "", "node1")
			if err != nil || nc.Numbering != tc.want || nc.Gres != nil {
				t.Errorf("LoadNodeConf: %+v %v, want numbering %v and no gres.conf", nc, err, tc.want)
			}
		})
	}
}

// LoadNodeConf as the engine used it: no SLURM_CONF is numbering auto; gres.conf next to
// slurm.conf is read for the node; a gres_conf= that is missing is an error.
func TestLoadNodeConf(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "gres.conf"), "NodeName=node2 Name=gpu File=/dev/nvidia9\nNodeName=node1 Name=gpu File=/dev/nvidia[0-1]\n")
	if nc, err := gpubind.LoadNodeConf("", filepath.Join(dir, "gres.conf"), "node1"); err != nil || nc.Numbering != gpubind.NumberingAuto ||
		!reflect.DeepEqual(nc.Gres.Files, []string{"/dev/nvidia0", "/dev/nvidia1"}) || nc.Gres.OtherNodes != 1 {
		t.Errorf("gres_conf= only: %+v %v", nc, err)
	}
	// slurm.conf unreadable: numbering auto, as before; gres.conf still next to it.
	nc, err := gpubind.LoadNodeConf(filepath.Join(dir, "slurm.conf"), "", "node2")
	if err != nil || nc.Numbering != gpubind.NumberingAuto || nc.GresFrom != filepath.Join(dir, "gres.conf") ||
		!reflect.DeepEqual(nc.Gres.Files, []string{"/dev/nvidia9"}) {
		t.Errorf("gres.conf next to slurm.conf: %+v %v", nc, err)
	}
	if _, err := gpubind.LoadNodeConf("", filepath.Join(dir, "nothere.conf"), "node1"); err == nil {
		t.Error("a missing gres_conf= was accepted")
	}
	// Read names every file the plan depends on, included ones and the cgroup.conf that
	// could appear later, for the plugin's plan cache.
	writeFile(t, filepath.Join(dir, "slurm.conf"), "Include "+filepath.Join(dir, "task.conf")+"\n")
	writeFile(t, filepath.Join(dir, "task.conf"), "TaskPlugin=task/cgroup\n")
	writeFile(t, filepath.Join(dir, "gres.conf"), "Include gres.d/node1.conf\n")
	writeFile(t, filepath.Join(dir, "gres.d", "node1.conf"), "Name=gpu File=/dev/nvidia3\n")
	nc, err = gpubind.LoadNodeConf(filepath.Join(dir, "slurm.conf"), "", "node1")
	want := []string{"slurm.conf", "cgroup.conf", "task.conf", "gres.conf", "gres.d/node1.conf"}
	for i := range want {
		want[i] = filepath.Join(dir, want[i])
	}
	if err != nil || !reflect.DeepEqual(nc.Read, want) {
		t.Errorf("files read: %q %v, want %q", nc.Read, err, want)
	}
}
