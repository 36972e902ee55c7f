package rule

import (
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
)

// The C parser and the Go encoder agree on the protocol's limits (rule_test.go's
// TestLargestTableParses checks that the largest table parses).
func TestLimitsAgree(t *testing.T) {
	for name, pair := range map[string][2]int{
		"tasks": {maxTasks, gpubind.MaxTableTasks}, "gpus": {maxGPUs, gpubind.MaxTableGPUs},
		"numa": {maxNUMA, gpubind.MaxTableNUMA}, "bytes": {maxBytes, gpubind.MaxTableBytes},
		"line": {maxLine, gpubind.MaxTableLine}, "per_task": {maxPerTask, gpubind.MaxPerTask},
		"share": {maxShare, gpubind.MaxShare},
	} {
		if pair[0] != pair[1] {
			t.Errorf("limit %s: C %d, Go %d", name, pair[0], pair[1])
		}
	}
}

// The C side's flag names (table parser, srun's early check, help) are Go's, in order.
func TestFlagNamesAgree(t *testing.T) {
	if c, g := strings.Join(flagNames(), ","), strings.Join(gpubind.FlagNames, ","); c != g {
		t.Errorf("flag names: C %s, Go %s", c, g)
	}
	for _, n := range gpubind.FlagNames {
		text := "gpubind-plan 1\nstatus error\nflags " + n + "\nend 3\n"
		rt, err := Parse(text)
		if err != nil {
			t.Errorf("flag %s: the C parser refuses it: %v", n, err)
			continue
		}
		rt.Close()
	}
}
