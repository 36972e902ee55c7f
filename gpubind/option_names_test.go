package gpubind

import (
	"os"
	"reflect"
	"regexp"
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
	if _, err := ParseOption("bogus"); err == nil || !strings.Contains(err.Error(), "policies are closest, pack, spread, map:LIST, per-task:N, single:N, off; flags are verbose, nic, cpus, isolate, uuid") {
		t.Errorf("unknown word: %v", err)
	}
}

// The front end's policies[] (spank/frontend/local.c), which srun's early check and the
// fallback help use when the engine cannot be loaded, names the same policies with the same
// arguments in the same order as policyDefs.
func TestFrontEndPolicyNamesAgree(t *testing.T) {
	b, err := os.ReadFile("../spank/frontend/local.c")
	if err != nil {
		t.Fatal(err)
	}
	table := regexp.MustCompile(`(?s)\} policies\[\] = \{(.*?)\n\};`).FindSubmatch(b)
	if table == nil {
		t.Fatal("local.c has no policies[] table")
	}
	var c, goSide []string
	for _, m := range regexp.MustCompile(`\{ "([a-z-]+)", "([^"]*)"`).FindAllSubmatch(table[1], -1) {
		c = append(c, string(m[1])+strings.TrimPrefix(string(m[2]), ":"))
	}
	for _, d := range policyDefs {
		goSide = append(goSide, d.name+d.arg)
	}
	if !reflect.DeepEqual(c, goSide) {
		t.Errorf("local.c policies %v, policyDefs %v (name and argument, in order)", c, goSide)
	}
}
