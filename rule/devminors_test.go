package rule

import (
	"fmt"
	"strings"
	"testing"
)

// devTable is a two-GPU table; vendor "" is NVIDIA (no vendor line), extra lines go
// after the gpu lines.
func devTable(vendor string, extra ...string) string {
	lines := []string{"gpubind-plan 1", "status ok", "flags isolate", "rule table", "share 1", "per_task 1", "ntasks 2"}
	if vendor != "" {
		lines = append(lines, "vendor "+vendor)
	}
	lines = append(lines, "numa 0 0-1",
		"gpu 0 0 4 132 0000:d1:00.0 - 0 - /dev/dri/renderD132",
		"gpu 1 1 5 133 0000:d6:00.0 - 0 - -")
	lines = append(lines, extra...)
	lines = append(lines, "numagpus 0 0,1", "fallback 0,1", "task 0 0 -", "task 1 1 -")
	return strings.Join(lines, "\n") + fmt.Sprintf("\nend %d\n", len(lines))
}

// TestDevMinors: the device minors isolate guards per GPU (gb_gpu_dev_minors): NVIDIA
// the gpu line's minor; AMD its render minor then its "card" line's minor; an AMD GPU
// without a card line (a table of an older launcher) is an error naming it, never a
// GPU left unguarded. The parser takes one card line per known GPU.
func TestDevMinors(t *testing.T) {
	for _, c := range []struct {
		name, text string
		ids        []int
		want       string // minors, or the error's text
	}{
		{"nvidia", devTable(""), []int{1, 0}, "133,132"},
		{"amd", devTable("amd", "card 0 5", "card 1 6"), []int{1, 0}, "133,6,132,5"},
		{"amd card0", devTable("amd", "card 1 0", "card 0 5"), []int{1}, "133,0"},
		{"amd no card line", devTable("amd", "card 0 5"), []int{0, 1}, "step GPU 1 (0000:d6:00.0) has no known /dev/dri/cardN minor"},
		{"bad id", devTable("amd", "card 0 5", "card 1 6"), []int{2}, "step GPU 2 is not in the table's 2 gpu lines"},
	} {
		tab, err := Parse(c.text)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, c.text)
		}
		m, err := tab.devMinors(c.ids)
		tab.Close()
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			for i, v := range m {
				got += map[bool]string{true: ",", false: ""}[i > 0] + fmt.Sprint(v)
			}
		}
		if !strings.Contains(got, c.want) || (err == nil && got != c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	for _, bad := range [][]string{{"card 0 5", "card 0 6"}, {"card 2 5"}, {"card 0 -1"}, {"card 0"}, {"card 0 x"}} {
		if tab, err := Parse(devTable("amd", bad...)); err == nil {
			tab.Close()
			t.Errorf("card lines %q parse", bad)
		}
	}
}
