// Package gpubind models a node's GPU topology, discovers it, and plans which GPU(s)
// each task of a Slurm step should use. It is the engine behind the gpubind SPANK
// plugin (spank/engine) and the gpubind admin CLI (cmd/gpubind).
//
// # Topology
//
// A Topology holds the GPUs (NVML index, minor and device path, UUID, PCI bus id
// normalised to 0000:1b:00.0, NUMA node with -1 for none, local CPUs, the PCIe bridge
// chain up to the host bridge, NVLink peers with link counts, MIG instances), the RDMA
// NICs (name, bus id, NUMA node, netdev, bridge chain) and the NUMA nodes with their
// CPUs. GPULink and NICLink give the distance classes of `nvidia-smi topo -m`: NV#,
// PIX, PXB, PHB, NODE, SYS. Inside the code GPUs are identified by PCI bus id.
//
// # Discovery
//
// Discover selects a backend: "nvml" (go-nvml's nvml.Interface, so the go-nvml mocks
// work), "sysfs" (ROOT/sys and ROOT/proc through github.com/prometheus/procfs: NVIDIA
// PCI functions of class 0x0302/0x0300 with numa_node, local_cpulist and bridges;
// /sys/class/infiniband; /sys/devices/system/node; minors and UUIDs from
// /proc/driver/nvidia/gpus/*/information), "snapshot" (a JSON file written by
// WriteSnapshot), or "auto": NVML when it loads and ROOT is the host's /, with sysfs
// filling what NVML lacks (NICs, bridges, NUMA CPUs); sysfs alone otherwise. Every GPU
// and NIC records in its Source map which backend supplied each fact.
//
// # Step model
//
// Slurm's GPU numbers (SLURM_STEP_GPUS, SLURM_JOB_GPUS, a global CUDA_VISIBLE_DEVICES,
// map:LIST) are GRES indices: positions in gres.conf's File= order, or PCI order with
// AutoDetect=nvml. buildGresMap maps GRES index -> File= device -> minor (stat rdev)
// -> /proc/driver/nvidia/gpus/*/information -> PCI bus id. Lists may also hold GPU- and
// MIG- UUIDs. resolveStep decides the numbering the task will see: relative (with
// ConstrainDevices, the step's GPUs numbered from 0 in PCI order, as CUDA enumerates
// them with CUDA_DEVICE_ORDER=PCI_BUS_ID) or global (NVML index); UUIDs stay UUIDs.
// When the GRES mapping cannot be known (no gres.conf) Plan fails in enforce mode and
// warns in optional mode; it never guesses silently.
//
// # Policies
//
// The option is POLICY[,FLAG...] (ParseOption). Policies:
//
//   - closest (default): a task with a CPU binding takes a GPU on the NUMA node that
//     holds most of its CPUs: the k-th task on NUMA node n takes the k-th step GPU of
//     n (in bus order), wrapping; when n has no step GPU, all step GPUs from the end of
//     the bus order (the ones the other nodes' tasks take last), rotated by one more slot
//     for each further GPU-less node. Without a binding the plan is GPU-first: tasks are spread
//     evenly over the NUMA nodes and GPUs, consecutive tasks on the same NUMA node
//     (with more tasks than GPUs, consecutive tasks share a GPU); the cpus flag then
//     binds each task to its GPU's NUMA node.
//   - pack: fill groups of GPUs joined by the best links first. GPUs are ordered by a
//     greedy walk that starts at the GPU with the best link to any other and always
//     steps to the best-linked unused GPU (NVLink before one PCIe switch before several
//     bridges before host bridge, NUMA node, system); task L takes the L-th GPU, with
//     more tasks than GPUs in blocks.
//   - spread: tasks as far apart as possible: round robin over NUMA nodes, and within
//     a node over PCIe branches (root ports); task L takes order[L mod G].
//   - map:LIST: explicit, like Slurm's --gpu-bind=map_gpu: task L takes entry L mod
//     len(LIST). Entries are GRES indices (Slurm's numbering, as in SLURM_STEP_GPUS and
//     map_gpu) or GPU-/MIG- UUIDs; "N*K" repeats N K times; bare numbers after map:
//     continue the list until a flag ("map:0,1,2*2,verbose"). Every entry must be a GPU
//     of the step.
//   - per-task:N: each task gets N GPUs, the best-connected groups of the pack order;
//     with a CPU binding, N GPUs starting at the task's slot in its NUMA node's list
//     (pack order within the node). Asking for more GPUs than the step has is an error.
//   - single:N: N tasks share one GPU (closest's rule with N tasks per slot). More than
//     N tasks per GPU is an error.
//   - off: nothing happens (handled by the front end); help prints PolicyHelpText.
//
// Flags: verbose (the mapping line also goes to the user's stderr), nic (NCCL_IB_HCA the
// node's rails, the same exact-match list on every task, =mlx5_0:1,mlx5_1:1: '=' because
// without it mlx5_1 also matches mlx5_10, and NCCL picks each GPU's rail itself, NVIDIA/nccl
// issues 1478, 1591, 2428; UCX_NET_DEVICES and GPUBIND_NIC the task's closest NIC), cpus (bind the task's CPUs to its GPU's
// NUMA node when Slurm did not bind them), isolate (per-task cgroup device isolation,
// applied by the front end; it breaks CUDA IPC/P2P between the step's tasks), uuid
// (CUDA_VISIBLE_DEVICES by GPU UUID, same GPUs and order: rule/output.c writes it).
//
// # Decision table and per-task rule
//
// A task's CPU binding is often known only inside the task (Slurm writes
// SLURM_CPU_BIND_LIST at exec time). So Plan returns a Table (protocol v1 of
// spank/PROTOCOL.md): the step's GPUs with their visible values, bus ids, UUIDs,
// minors, NUMA nodes and NICs; per NUMA node its step GPUs best first; a fallback
// order; share and per_task; and each task's plan-time answer. The deterministic
// per-task rule that turns a task's binding into its GPUs and environment is C
// (rule/rule.c, rule/output.c): the front end runs it in each task, and package rule runs the same
// code for the CLI and the tests. Errors are values whose text names the bad input;
// nothing panics.
package gpubind
