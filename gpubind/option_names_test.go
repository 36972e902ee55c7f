package gpubind

import (
	"reflect"
	"strings"
	"testing"
)

// Every field of Flags has its entry in flagDefs, and every name of the two lists
// reaches the parser and the help text.
func TestOptionNamesOneList(t *testing.T) {
	if n := reflect.TypeOf(Flags{}).NumField(); n != len(flagDefs) {
		t.Errorf("Flags has %d fields, flagDefs %d entries", n, len(flagDefs))
	}
	var all Flags
	for _, name := range FlagNames {
		if !all.set(name, true) {
			t.Errorf("flag %s: set refuses it", name)
		}
		if !strings.Contains(PolicyHelpText, "\n  "+name+" ") {
			t.Errorf("flag %s: not in the help text", name)
		}
	}
	if all.String() != strings.Join(FlagNames, ",") {
		t.Errorf("all flags print as %s", all.String())
	}
	for _, d := range policyDefs {
		opt := d.name
		if d.arg != "" {
			opt += ":1"
		}
		o, err := ParseOption(opt + ",verbose")
		if err != nil || o.Policy != d.name {
			t.Errorf("policy %s: %v (%+v)", d.name, err, o)
		}
		if !strings.Contains(PolicyHelpText, "\n  "+d.name) {
			t.Errorf("policy %s: not in the help text", d.name)
		}
	}
	if _, err := ParseOption("bogus"); err == nil || !strings.Contains(err.Error(), "policies are closest, pack, spread, map:LIST, per-task:N, single:N, off; flags are verbose, nic, cpus, isolate") {
		t.Errorf("unknown word: %v", err)
	}
}
