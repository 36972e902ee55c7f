package gpubind

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
)

// FormatTopo prints the topology like `nvidia-smi topo -m` (GPU/NIC matrix with NV#,
// PIX, PXB, PHB, NODE, SYS), then a GPU table, the NICs and the NUMA nodes.
func FormatTopo(t *Topology) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	var hdr []string
	for i := range t.GPUs {
		hdr = append(hdr, fmt.Sprintf("GPU%d", t.GPUs[i].Index))
	}
	for _, n := range t.NICs {
		hdr = append(hdr, n.Name)
	}
	fmt.Fprintf(tw, "\t%s\tCPU Affinity\tNUMA Affinity\n", strings.Join(hdr, "\t"))
	for i, g := range t.GPUs {
		row := []string{fmt.Sprintf("GPU%d", g.Index)}
		for j := range t.GPUs {
			row = append(row, t.GPULink(i, j).String())
		}
		for k := range t.NICs {
			row = append(row, t.NICLink(i, k).String())
		}
		numa := "N/A"
		if g.NUMA >= 0 {
			numa = fmt.Sprint(g.NUMA)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.Join(row, "\t"), dash(g.CPUs.String()), numa)
	}
	for k, n := range t.NICs {
		row := []string{n.Name}
		for i := range t.GPUs {
			row = append(row, t.NICLink(i, k).String())
		}
		for k2 := range t.NICs {
			if k == k2 {
				row = append(row, "X")
			} else {
				row = append(row, Link{Class: pciClass(n.PCIPath, t.NICs[k2].PCIPath, n.NUMA, t.NICs[k2].NUMA)}.String())
			}
		}
		fmt.Fprintf(tw, "%s\n", strings.Join(row, "\t"))
	}
	tw.Flush()
	b.WriteString("\nLegend: X self, SYS across NUMA nodes, NODE across host bridges in a NUMA node, PHB through a host bridge,\n" +
		"        PXB through several PCIe bridges, PIX through at most one PCIe switch, NV# bonded set of # NVLinks\n" +
		"        XGMI# AMD XGMI link of KFD weight # (15 per hop)\n\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tMINOR\tPCI BUS ID\tUUID\tNUMA\tCPUS\tNIC\tMIG\tFABRIC\tSOURCES")
	for i, g := range t.GPUs {
		var mig []string
		for _, m := range g.MIG {
			mig = append(mig, m.UUID+"("+m.Profile+")")
		}
		var src []string
		for f, s := range g.Source {
			src = append(src, f+"="+s)
		}
		if g.Fabric == nil {
			// sysfs has no fabric facts: say so rather than leave it out.
			src = append(src, "fabric=none(no fabric info)")
		}
		sort.Strings(src)
		// Key: an AMD compute partition's bus id and XCP ("0000:05:00.0 xcp 3").
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", g.Index, g.Minor, g.Key(), dash(g.UUID), g.NUMA,
			dash(g.CPUs.String()), dash(t.ClosestNIC(i)), dash(strings.Join(mig, ",")), g.Fabric.String(), dash(strings.Join(src, ",")))
	}
	tw.Flush()
	if len(t.NICs) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NIC\tPCI BUS ID\tNUMA\tNETDEV")
		for _, n := range t.NICs {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", n.Name, n.BusID, n.NUMA, dash(n.Netdev))
		}
		tw.Flush()
	}
	b.WriteString("\n")
	for _, n := range t.NUMA {
		fmt.Fprintf(&b, "NUMA %d: CPUs %s\n", n.ID, dash(n.CPUs.String()))
	}
	fmt.Fprintf(&b, "backends: %s\n", strings.Join(t.Backends, ","))
	if !t.hasFabricSource() {
		b.WriteString("fabric: no fabric info (sysfs cannot read it; NVML or a snapshot from NVML can)\n")
	}
	return b.String()
}
