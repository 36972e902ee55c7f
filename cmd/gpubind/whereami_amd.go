package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/gpubind/gpubind/gpubind"
	"github.com/gpubind/gpubind/gpubind/cudavis"
)

// amdVisible resolves what HIP shows the process on an AMD node. ROCr enumerates the GPUs
// in KFD order and skips those whose render node (dev/dri/renderD<minor>) the process
// cannot open (missing, or denied by its device cgroup), numbering the others from 0; it
// applies ROCR_VISIBLE_DEVICES to those (cudavis.ROCRVisible: indices or GPU- UUID
// prefixes; an unknown, ambiguous, repeated or bad entry ends the list); HIP then applies HIP_VISIBLE_DEVICES, else
// CUDA_VISIBLE_DEVICES, relative to what ROCr shows. usable are the GPUs the process can
// open, vis what HIP shows, device 0 first.
func amdVisible(topo *gpubind.Topology, dev string, lookup func(string) (string, bool)) (usable, vis []cudavis.GPU, err error) {
	gpus := append([]gpubind.GPU(nil), topo.GPUs...)
	sort.SliceStable(gpus, func(i, j int) bool { return gpus[i].Index < gpus[j].Index })
	for _, g := range gpus {
		if g.Minor >= 0 {
			err := cudavis.Access(filepath.Join(dev, "dri", fmt.Sprintf("renderD%d", g.Minor)))
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
				continue
			}
		}
		usable = append(usable, cudavis.GPU{BusID: g.BusID, UUID: g.UUID, Minor: g.Minor})
	}
	rocr, set := lookup("ROCR_VISIBLE_DEVICES")
	shown := cudavis.ROCRVisible(usable, rocr, set) // ROCr's filter, as libgpuhelper applies it
	name := "HIP_VISIBLE_DEVICES"
	hip, set := lookup(name)
	if !set {
		name = "CUDA_VISIBLE_DEVICES"
		hip, set = lookup(name)
	}
	if vis, err = cudavis.Visible(shown, hip, set); err != nil {
		return nil, nil, fmt.Errorf("%s (relative to ROCR_VISIBLE_DEVICES): %w", name, err)
	}
	return usable, vis, nil
}
