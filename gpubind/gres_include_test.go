package gpubind_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Include lines splice the named files in place, relative to the including file, with globs.
func TestGresConfInclude(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "gres.conf")
	writeFile(t, main, "Name=gpu File=/dev/nvidia0\nInclude gres.d/*.conf\ninclude "+filepath.Join(dir, "last.conf")+"\n")
	writeFile(t, filepath.Join(dir, "gres.d", "a.conf"), "NodeName=node1 Name=gpu File=/dev/nvidia[1-2]\n")
	writeFile(t, filepath.Join(dir, "gres.d", "b.conf"), "NodeName=node9 Name=gpu File=/dev/nvidia7\nAutoDetect=off\n")
	writeFile(t, filepath.Join(dir, "last.conf"), "Name=gpu File=/dev/nvidia3\n")
	nc, err := gpubind.LoadNodeConf("", main, "node1")
	if err != nil {
		t.Fatal(err)
	}
	gc := nc.Gres
	want := []string{"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3"}
	if !reflect.DeepEqual(gc.Files, want) || gc.OtherNodes != 1 || gc.AutoDetect != "off" {
		t.Errorf("got %+v, want files %v, 1 other node, AutoDetect off", gc, want)
	}

	for name, tc := range map[string]struct{ text, want string }{
		"missing file": {"Include nothere.conf\n", "Include nothere.conf"},
		"two args":     {"Include a b\n", `want "Include FILE"`},
		"loop":         {"Include gres.conf\n", "nested more than"},
	} {
		t.Run(name, func(t *testing.T) {
			d := t.TempDir()
			p := filepath.Join(d, "gres.conf")
			writeFile(t, p, tc.text)
			if _, err := gpubind.LoadNodeConf("", p, "node1"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Text without a file cannot resolve Include: an error, not a silent skip.
	if _, err := gpubind.ParseGresConf("Include x.conf\n", "node1"); err == nil {
		t.Error("ParseGresConf accepted an Include line")
	}
}
