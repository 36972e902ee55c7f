package rule_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/rule"
)

// fakeDevs gives every GPU of tab a device node nvidia<minor> in a new directory
// (plain files: access(2) answers for them as for the real nodes) and returns it.
func fakeDevs(t *testing.T, tab *gpubind.Table) string {
	t.Helper()
	dir := t.TempDir()
	for i := range tab.GPUs {
		p := filepath.Join(dir, fmt.Sprintf("nvidia%d", tab.GPUs[i].Minor))
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			t.Fatal(err)
		}
		tab.GPUs[i].Dev = p
	}
	return dir
}

// Issue 23 item 5: a GPU whose device node does not exist (ENOENT) cannot be
// opened by the task, as one its device cgroup denies: the rule does not hand
// it out and CUDA numbers only the GPUs that are there.
func TestMissingDeviceNodeNotOpenable(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest,visible=first", 2, "0,1,2,3")
	dev := fakeDevs(t, tab)
	if err := os.Remove(filepath.Join(dev, "nvidia1")); err != nil {
		t.Fatal(err)
	}
	res := applyAll(t, tab, 2, []string{"0"}, func(L int) []string { return []string{} })
	checkWithoutGPU1(t, res, "its device node is missing")
}

// No device node for any step GPU: a clear error naming the missing node,
// never a task handed GPUs it cannot open.
func TestNoDeviceNodesError(t *testing.T) {
	tab := planFixture(t, "dgx4nic-2cpu", "closest", 2, "0,1,2,3")
	dir := t.TempDir()
	for i := range tab.GPUs {
		tab.GPUs[i].Dev = filepath.Join(dir, fmt.Sprintf("nvidia%d", tab.GPUs[i].Minor))
	}
	rt := parse(t, tab)
	_, err := rt.Apply(rule.Task{Local: 0, Denied: []string{}})
	if err == nil || !strings.Contains(err.Error(), "no device node "+tab.GPUs[0].Dev) {
		t.Fatalf("err = %v, want one naming the missing %s", err, tab.GPUs[0].Dev)
	}
}
