package gpubind

// IMEXChannelDir holds the IMEX channel devices (channelN). A process that imports
// memory exported by another node's GPU (multi-node NVLink) must be able to open one,
// or CUDA fails with CUDA_ERROR_NOT_PERMITTED; Slurm's switch/nvidia_imex creates one
// per job.
const IMEXChannelDir = "/dev/nvidia-caps-imex-channels"

// IMEXDir is IMEXChannelDir below the discovery root.
func IMEXDir(root string) string { return rootPath(root, IMEXChannelDir) }
