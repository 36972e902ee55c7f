package gpubind

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// compressHostlist writes names as Slurm's compressed hostlist ("gb[01-04,07],login1"),
// the inverse of expandHostlist: names with the same prefix and a numeric suffix of the
// same width are joined in ranges; the others stay as they are. Names are sorted and
// duplicates dropped.
func compressHostlist(names []string) string {
	type key struct {
		prefix string
		width  int
	}
	groups := map[key][]int{}
	var plain []string
	split := func(n string) (prefix, digits string) {
		i := len(n)
		for i > 0 && n[i-1] >= '0' && n[i-1] <= '9' {
			i--
		}
		return n[:i], n[i:]
	}
	// Zero-padded widths per prefix ("gb01": 2); "gb10" then joins "gb01" in gb[01-10].
	padded := map[key]bool{}
	for _, n := range names {
		if p, d := split(n); len(d) > 1 && d[0] == '0' {
			padded[key{p, len(d)}] = true
		}
	}
	for _, n := range names {
		prefix, digits := split(n)
		if digits == "" || prefix == "" || len(digits) > 9 || strings.ContainsAny(prefix, "[],") {
			plain = append(plain, n)
			continue
		}
		v, _ := strconv.Atoi(digits)
		w := len(digits)
		if !padded[key{prefix, w}] {
			w = 0 // no zero padding: width does not matter
		}
		k := key{prefix, w}
		groups[k] = append(groups[k], v)
	}
	var parts []string
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].prefix != keys[b].prefix {
			return keys[a].prefix < keys[b].prefix
		}
		return keys[a].width < keys[b].width
	})
	for _, k := range keys {
		nums := groups[k]
		sort.Ints(nums)
		num := func(v int) string { return fmt.Sprintf("%0*d", k.width, v) }
		var ranges []string
		count := 0
		for i := 0; i < len(nums); {
			j := i
			for j+1 < len(nums) && nums[j+1] <= nums[j]+1 {
				j++
			}
			if nums[j] == nums[i] {
				ranges = append(ranges, num(nums[i]))
			} else {
				ranges = append(ranges, num(nums[i])+"-"+num(nums[j]))
			}
			count += nums[j] - nums[i] + 1
			i = j + 1
		}
		if count == 1 && len(ranges) == 1 {
			parts = append(parts, k.prefix+ranges[0])
		} else {
			parts = append(parts, k.prefix+"["+strings.Join(ranges, ",")+"]")
		}
	}
	sort.Strings(plain)
	for i, p := range plain {
		if i == 0 || p != plain[i-1] {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ",")
}

// nvlBlock is one NVLink clique across nodes: a Slurm topology/block block.
type nvlBlock struct {
	ClusterUUID string
	CliqueID    uint32
	Nodes       []string
}

// name is the block's BlockName: the cluster UUID's first 8 digits and the clique id
// (Slurm takes any unique name).
func (b nvlBlock) name() string {
	return fmt.Sprintf("nvl%s_%d", strings.SplitN(b.ClusterUUID, "-", 2)[0], b.CliqueID)
}

// nvlBlocks groups node snapshots by NVLink clique (cluster UUID and clique id, what NCCL
// compares): nodes whose GPUs all have a usable fabric in one clique form blocks; the
// others are returned in left with the reason ("fabric in_progress", "no multi-node
// NVLink", ...). Every topology must name its host; hosts must be unique.
func nvlBlocks(nodes []*Topology) (blocks []nvlBlock, left map[string]string, err error) {
	left = map[string]string{}
	seen := map[string]bool{}
	byClique := map[string]*nvlBlock{}
	for _, t := range nodes {
		if t.Host == "" || strings.ContainsAny(t.Host, " ,[]=\t\n") {
			return nil, nil, fmt.Errorf("snapshot without a usable host name (%q): write it with `gpubind snapshot` on the node", t.Host)
		}
		if seen[t.Host] {
			return nil, nil, fmt.Errorf("host %s: two snapshots", t.Host)
		}
		seen[t.Host] = true
		clique, why := nodeClique(t)
		if why != "" {
			left[t.Host] = why
			continue
		}
		b := byClique[clique]
		if b == nil {
			f := t.GPUs[0].Fabric
			b = &nvlBlock{ClusterUUID: f.ClusterUUID, CliqueID: f.CliqueID}
			byClique[clique] = b
		}
		b.Nodes = append(b.Nodes, t.Host)
	}
	for _, b := range byClique {
		blocks = append(blocks, *b)
	}
	sort.Slice(blocks, func(i, j int) bool {
		if blocks[i].ClusterUUID != blocks[j].ClusterUUID {
			return blocks[i].ClusterUUID < blocks[j].ClusterUUID
		}
		return blocks[i].CliqueID < blocks[j].CliqueID
	})
	return blocks, left, nil
}

// nodeClique is the node's clique, or why it has none usable.
func nodeClique(t *Topology) (clique, why string) {
	if len(t.GPUs) == 0 {
		return "", "no GPU"
	}
	for _, g := range t.GPUs {
		f := g.Fabric
		switch {
		case f == nil:
			return "", "no fabric info (snapshot without NVML)"
		case !f.InDomain():
			return "", "no multi-node NVLink (fabric not_supported)"
		case !f.Usable():
			return "", "fabric " + f.problem()
		case clique != "" && f.Clique() != clique:
			return "", "GPUs in several cliques (" + clique + ", " + f.Clique() + ")"
		}
		clique = f.Clique()
	}
	return clique, ""
}

// blockSizes is the BlockSizes= value for blocks: the planning base block size is the
// smallest block (Slurm refuses a block with fewer nodes than it), then the base times
// each power of two up to the number of blocks, since Slurm wants every further size a
// power-of-two multiple of the base.
func blockSizes(blocks []nvlBlock) []int {
	base := 0
	for _, b := range blocks {
		if base == 0 || len(b.Nodes) < base {
			base = len(b.Nodes)
		}
	}
	if base == 0 {
		return nil
	}
	sizes := []int{base}
	for m := 2; m/2 < len(blocks) && len(sizes) < 16; m *= 2 {
		sizes = append(sizes, base*m)
	}
	return sizes
}

// TopologyConf writes topology.conf for Slurm's topology/block plugin: one BlockName line
// per NVLink clique, the BlockSizes line, and the nodes left out in comments.
func TopologyConf(nodes []*Topology) (string, error) {
	blocks, left, err := nvlBlocks(nodes)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# topology.conf for Slurm's topology/block plugin (TopologyPlugin=topology/block),\n")
	fmt.Fprintf(&b, "# written by gpubind topology-conf from %d node snapshots: one block per multi-node\n", len(nodes))
	fmt.Fprintf(&b, "# NVLink clique (cluster UUID and clique id of the nodes' GPUs, as NCCL compares them).\n")
	if len(blocks) == 0 {
		b.WriteString("# No node has a completed NVLink fabric: no block. Slurm's topology/block needs at\n# least one; leave TopologyPlugin unset until the fabric is up.\n")
	}
	for _, bl := range blocks {
		fmt.Fprintf(&b, "# clique %s.%d: %d nodes\n", bl.ClusterUUID, bl.CliqueID, len(bl.Nodes))
		fmt.Fprintf(&b, "BlockName=%s Nodes=%s\n", bl.name(), compressHostlist(bl.Nodes))
	}
	if sizes := blockSizes(blocks); len(sizes) > 0 {
		s := make([]string, len(sizes))
		for i, v := range sizes {
			s[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(&b, "BlockSizes=%s\n", strings.Join(s, ","))
	}
	if len(left) > 0 {
		byWhy := map[string][]string{}
		for h, why := range left {
			byWhy[why] = append(byWhy[why], h)
		}
		whys := make([]string, 0, len(byWhy))
		for w := range byWhy {
			whys = append(whys, w)
		}
		sort.Strings(whys)
		b.WriteString("# Not in any block:\n")
		for _, w := range whys {
			fmt.Fprintf(&b, "#   %s: %s\n", compressHostlist(byWhy[w]), w)
		}
	}
	return b.String(), nil
}
