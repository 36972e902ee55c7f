package rule_test

import (
	"strings"
	"testing"

	"github.com/gpubind/gpubind/gpubind"
)

// TestContainerGPUs: NVIDIA_VISIBLE_DEVICES for containers=yes (gb_step_container_gpus) is
// every step GPU of the node by UUID, in table order, whatever the option; a GPU without a
// UUID or AMD GPUs give no value and say why.
func TestContainerGPUs(t *testing.T) {
	for _, opt := range []string{"closest", "closest,isolate", "closest,visible=localid", "closest,uuid"} {
		tab := planFixture(t, "dgxh100-2cpu", opt, 4, "4,5,6,7")
		var want []string
		for _, g := range tab.GPUs {
			want = append(want, g.UUID)
		}
		if len(want) != 4 || !strings.HasPrefix(want[0], "GPU-") {
			t.Fatalf("%s: fixture step GPUs' UUIDs %q, want 4", opt, want)
		}
		got, err := parse(t, tab).ContainerGPUs()
		if err != nil || got != strings.Join(want, ",") {
			t.Errorf("%s: ContainerGPUs() = %q, %v; want %q", opt, got, err, strings.Join(want, ","))
		}
	}

	tab := planFixture(t, "dgxh100-2cpu", "closest", 2, "1,2")
	tab.GPUs[1].UUID = ""
	if got, err := parse(t, tab).ContainerGPUs(); err == nil || !strings.Contains(err.Error(), "the UUID of GPU") ||
		!strings.Contains(err.Error(), tab.GPUs[1].BusID) {
		t.Errorf("a GPU without UUID: ContainerGPUs() = %q, %v; want an error naming GPU %d (%s)", got, err,
			tab.GPUs[1].NVMLIndex, tab.GPUs[1].BusID)
	}

	tab = planFixture(t, "dgxh100-2cpu", "closest", 2, "1,2")
	tab.Vendor = gpubind.VendorAMD
	if got, err := parse(t, tab).ContainerGPUs(); err == nil || !strings.Contains(err.Error(), "AMD") {
		t.Errorf("AMD GPUs: ContainerGPUs() = %q, %v; want an error naming AMD", got, err)
	}
}
