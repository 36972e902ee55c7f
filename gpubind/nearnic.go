package gpubind

import (
	"fmt"
	"sort"
	"strings"
)

// This file holds what the table carries for NCCL and CUDA programs beyond each task's own
// GPUs: the node's rail set (the "nics" line, NCCL_IB_HCA) and, for visible=first|localid,
// the order of the other step GPUs a task sees (the "near" lines).

// railTopology is t with only the NICs the admin lists as rails (plugstack nics=), in
// which ClosestNIC then chooses; t itself when there is no list. Listed names the node
// lacks are reported in notes.
func railTopology(t *Topology, rails []string) (*Topology, []string) {
	if len(rails) == 0 {
		return t, nil
	}
	rt := *t
	rt.NICs = nil
	var notes []string
	for _, name := range rails {
		found := false
		for _, n := range t.NICs {
			if n.Name == name {
				rt.NICs, found = append(rt.NICs, n), true
			}
		}
		if !found {
			notes = append(notes, fmt.Sprintf("plugstack nics=%s: this node has no RDMA device %s; left out", strings.Join(rails, ","), name))
		}
	}
	return &rt, notes
}

// railSet is NCCL_IB_HCA's list for every task of the node, NAME:PORT: the admin's rails
// as listed (those the node has), else the NICs closest to the step's GPUs, in GPU order,
// each once. NICs near no GPU (storage, management) are never closest to one.
func railSet(rt *Topology, rails []string, gpus []TableGPU) []string {
	var out []string
	seen := map[string]bool{}
	add := func(nicPort string) {
		if nicPort != "" && !seen[nicPort] {
			seen[nicPort] = true
			out = append(out, nicPort)
		}
	}
	if len(rails) > 0 {
		for _, n := range rt.NICs {
			add(rt.nicPort(n.Name))
		}
		return out
	}
	for _, g := range gpus {
		add(g.NIC)
	}
	return out
}

// ParseRails checks the plugstack nics= list: comma-separated RDMA device names.
func ParseRails(list string) ([]string, error) {
	list = strings.TrimSpace(list)
	if list == "" {
		return nil, nil
	}
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n == "" || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != "" {
			return nil, fmt.Errorf("nics=%s: %q is not an RDMA device name such as mlx5_0", list, n)
		}
		out = append(out, n)
	}
	return out, nil
}

// nearOrder is, for each step GPU id, the other step GPUs nearest first: behind the same
// PCIe switch, then on the same NUMA node, then the others; ties by id. A task sees at most
// MaxPerTask GPUs (the rule's limit), so a list stops at MaxPerTask-1: the lines stay short
// on nodes with hundreds of GPUs (MIG instances).
func nearOrder(t *Topology, st *step) map[int][]int {
	out := map[int][]int{}
	rank := func(a, b int) int {
		ga, gb := &t.GPUs[st.GPUs[a].Topo], &t.GPUs[st.GPUs[b].Topo]
		switch {
		case pciClass(ga.PCIPath, gb.PCIPath, ga.NUMA, gb.NUMA) <= ClassPXB:
			return 0
		case ga.NUMA == gb.NUMA:
			return 1
		}
		return 2
	}
	for a := range st.GPUs {
		var others []int
		for b := range st.GPUs {
			if b != a {
				others = append(others, b)
			}
		}
		sort.SliceStable(others, func(i, j int) bool { return rank(a, others[i]) < rank(a, others[j]) })
		out[a] = others[:min(len(others), MaxPerTask-1)]
	}
	return out
}

// NICPort is "NAME:PORT" for the NIC named name, on its first ACTIVE port (1 when unknown),
// as the plugin writes NICs; "" for "".
func (t *Topology) NICPort(name string) string { return t.nicPort(name) }
