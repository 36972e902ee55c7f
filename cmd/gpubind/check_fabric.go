package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpubind/gpubind/gpubind"
)

// fabricTopology is where the fabric facts come from: NVML when checkNVML loaded it,
// else the plugin's snapshot (source=snapshot); nil when neither has them.
func (c *checker) fabricTopology() *gpubind.Topology {
	if c.nvTopo != nil {
		return c.nvTopo
	}
	if c.topo != nil && c.args["source"] == gpubind.SourceSnapshot {
		return c.topo
	}
	return nil
}

// checkFabric reports the GPUs' multi-node NVLink fabric (GB200 NVL72): ok when no GPU
// is in an NVLink domain or all are completed and healthy; warn when a fabric is not
// ready (tasks then get no GPUBIND_NVL_CLIQUE, and a warning).
func (c *checker) checkFabric() {
	t := c.fabricTopology()
	if t == nil {
		c.add("fabric", statusOK, "not checked: only NVML (or a snapshot from it) knows the NVLink fabric")
		return
	}
	cliques := map[string]int{}
	var bad []string
	inDomain := 0
	for _, g := range t.GPUs {
		switch f := g.Fabric; {
		case !f.InDomain():
		case f.Usable():
			inDomain++
			cliques[f.Clique()]++
		default:
			inDomain++
			bad = append(bad, fmt.Sprintf("GPU %d %s: %s", g.Index, g.BusID, f))
		}
	}
	if inDomain == 0 {
		c.add("fabric", statusOK, "%d GPUs, none in a multi-node NVLink domain (fabric not supported): no GPUBIND_NVL_CLIQUE", len(t.GPUs))
		return
	}
	if len(bad) > 0 {
		c.add("fabric", statusWarn, "NVLink fabric not ready: %s; tasks on these GPUs get no GPUBIND_NVL_CLIQUE and a warning (the fabric manager and IMEX must finish first)", strings.Join(bad, "; "))
		return
	}
	var names []string
	for k, n := range cliques {
		names = append(names, fmt.Sprintf("%s (%d GPUs)", k, n))
	}
	sort.Strings(names)
	c.add("fabric", statusOK, "NVLink fabric completed and healthy: clique %s", strings.Join(names, ", "))
}

// checkIMEX reports the IMEX channel devices: the driver's major number and the
// channelN nodes. Missing channels matter only where some GPU is in an NVLink domain.
func (c *checker) checkIMEX() {
	root := c.root
	if c.sysRoot != "" && !strings.HasPrefix(c.sysRoot, "snapshot ") {
		root = c.sysRoot
	}
	im, err := gpubind.DiscoverIMEX(root)
	if err != nil {
		c.add("imex", statusWarn, "%v", err)
		return
	}
	needed := false
	if t := c.fabricTopology(); t != nil {
		needed = t.HasFabric()
	}
	level := statusOK
	if needed {
		level = statusWarn
	}
	if im.Major < 0 {
		c.add("imex", level, "the driver registers no %s device (not in /proc/devices): no IMEX support", gpubind.IMEXDeviceName)
		return
	}
	var good, bad []string
	for _, ch := range im.Channels {
		if ch.Problem != "" {
			bad = append(bad, fmt.Sprintf("%s: %s", ch.Path, ch.Problem))
		} else {
			good = append(good, fmt.Sprintf("channel%d", ch.N))
		}
	}
	switch {
	case len(bad) > 0:
		c.add("imex", statusWarn, "%s major %d; bad channel devices: %s", gpubind.IMEXDeviceName, im.Major, strings.Join(bad, "; "))
	case len(good) == 0 && needed:
		c.add("imex", statusWarn, "%s major %d, but no channel device in %s: tasks in an NVLink clique will fail with CUDA_ERROR_NOT_PERMITTED (Slurm's switch/nvidia_imex creates one per job; or create channel0: mknod %s/channel0 c %d 0)",
			gpubind.IMEXDeviceName, im.Major, im.Dir, gpubind.IMEXChannelDir, im.Major)
	case len(good) == 0:
		c.add("imex", statusOK, "%s major %d, no channel device in %s (none needed: no GPU in a multi-node NVLink domain)", gpubind.IMEXDeviceName, im.Major, im.Dir)
	default:
		c.add("imex", statusOK, "%s major %d, channel devices in %s: %s", gpubind.IMEXDeviceName, im.Major, im.Dir, strings.Join(good, ","))
	}
}
