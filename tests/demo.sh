#!/usr/bin/env bash
# `make demo` (after deps and build): start a private Slurm cluster, run the demonstration
# steps on it, print each command before it runs, stop the cluster on exit.
#
# Layout for contributors: each demonstration is a function demo_<name> in its own marked
# section below, listed in DEMOS (in order). A demo that needs the cluster configured
# differently adds -plugstack/-conf flags to CLUSTER_ARGS in its section (read at start).
# Use `run CMD...` so the reader sees exactly what ran.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
CLUSTER_SH=$ROOT/tests/cluster/cluster.sh
CLUSTER_DIR=
CLUSTER_ARGS=(-nodes 2)   # testcluster start flags; sections below may append
DEMOS=()

section() { printf '\n==== %s ====\n' "$*"; }
# run prints a command (shell-quoted) and runs it.
run() {
	printf '+'; printf ' %q' "$@"; printf '\n'
	"$@"
}

# ---- cluster ---------------------------------------------------------------------------------
start_cluster() {
	section "start a private Slurm cluster"
	printf '+ %s start %s\n' "$CLUSTER_SH" "${CLUSTER_ARGS[*]}"
	CLUSTER_DIR=$("$CLUSTER_SH" start "${CLUSTER_ARGS[@]}")
	eval "$("$CLUSTER_SH" env "$CLUSTER_DIR")"
	echo "cluster directory: $CLUSTER_DIR (SLURM_CONF=$SLURM_CONF)"
	run sinfo -N -o '%N %T %c %G'
}

stop_cluster() {
	local rc=$?
	if [[ -n $CLUSTER_DIR ]]; then
		section "stop the cluster"
		printf '+ %s stop %s\n' "$CLUSTER_SH" "$CLUSTER_DIR"
		"$CLUSTER_SH" stop "$CLUSTER_DIR" || rc=1
		CLUSTER_DIR=
	fi
	exit "$rc"
}

# ---- demo: a plain step on two nodes with fake GPUs ------------------------------------------
demo_plain_step() {
	section "a step on two nodes: 4 tasks, 2 fake GPUs per node, as Slurm alone binds them"
	run srun -N2 -n4 --ntasks-per-node=2 --gpus-per-node=2 bash -c \
		'echo "task $SLURM_PROCID on $(hostname): SLURM_STEP_GPUS=$SLURM_STEP_GPUS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' |
		sort
	echo "(every task sees the same GPU list: nothing binds a task to its own GPU yet)"
}
DEMOS+=(demo_plain_step)

# ---- demo: PMIx key exchange under srun --mpi=pmix -------------------------------------------
demo_pmix() {
	section "PMIx: rank 0 puts 128 bytes, every rank gets them (srun --mpi=pmix)"
	local bin=$CLUSTER_DIR/pmix_putget   # private: others may run the demo from this tree at once
	run gcc -Wall -Wextra -Werror -O2 -o "$bin" "$ROOT/tests/c/pmix_putget.c" $(pkg-config --cflags --libs pmix)
	run srun -N2 -n4 --mpi=pmix "$bin" 1 | sort
}
DEMOS+=(demo_pmix)

# ---- demo: --gpu-bind-topo plugin ------------------------------------------------------------
# Nodes declared with 8 CPUs (8 tasks per node) and the plugin on every node, reading the
# DGX H100 fixture (NUMA 0 = CPU 0, NUMA 1 = CPU 1)
# instead of this machine's (GPU-less) sysfs; the discovery cache stays in the build dir.
GPUBIND_CACHE=$BUILD/gpubind-cache
CLUSTER_ARGS+=(-cpus 8 -plugstack "required $BUILD/spank_gpubind.so launcher=$BUILD/gpubind-launcher source=sysfs root=$ROOT/tests/fixtures/dgxh100-2cpu cache_dir=$GPUBIND_CACHE")

demo_gpu_bind_topo() {
	section "--gpu-bind-topo: 8 tasks on the DGX H100 fixture, each bound to its own GPU"
	mkdir -p -m 0755 "$GPUBIND_CACHE"
	run srun --gpu-bind-topo=help
	# verbose: each task's mapping line goes to the step's stderr, like --gpu-bind=verbose.
	local err=$CLUSTER_DIR/gpubind-verbose.txt
	run srun -N1 -n8 --gpus=8 --gpu-bind-topo=verbose bash -c \
		'echo "task $SLURM_PROCID: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES GPUBIND_PCI_BUS_IDS=$GPUBIND_PCI_BUS_IDS GPUBIND_NUMA=$GPUBIND_NUMA"' \
		2>"$err" | sort -k2,2n
	echo "(the step's stderr: one line per task, visible index -> physical GPU -> PCI bus id -> UUID -> NUMA node)"
	sort -k3,3n "$err"
	echo "(the same lines are in the slurmd log; map: takes Slurm's GRES indices:)"
	run srun -N1 -n4 --gpus=4 --gpu-bind-topo=map:3,2,1,0,verbose true 2>&1 | sort
}
DEMOS+=(demo_gpu_bind_topo)


# ---- demo: libgpuhelper hello ----------------------------------------------------------------
# examples/hello under srun --mpi=pmix --gpu-bind-topo: the plugin binds each task to its GPU
# and exports GPUBIND_*; libgpuhelper reads them and hands every rank the same NCCL unique ID
# over PMIx, in one call. Without NCCL on this machine the ID comes from the tests' stub libnccl.
demo_helper_hello() {
	section "libgpuhelper: examples/hello under srun --mpi=pmix --gpu-bind-topo (rank, GPU, NCCL ID in one call)"
	local dir=$CLUSTER_DIR/helper   # private: others may run the demo from this tree at once
	mkdir -p "$dir"
	(cd "$ROOT" && run make -s -f lib/Makefile.inc BUILD="$BUILD")
	run gcc -Wall -Wextra -Werror -O2 -o "$dir/hello" "$ROOT/examples/hello.c" \
		$(PKG_CONFIG_PATH="$BUILD/pkgconfig" pkg-config --cflags --libs gpuhelper)
	local env=(env)
	if ! ldconfig -p | grep -q 'libnccl\.so\.2 '; then
		echo "(no NCCL on this machine: rank 0 makes the ID with the tests' stub libnccl)"
		run gcc -Wall -Wextra -Werror -O2 -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$dir/libnccl.so.2" \
			"$ROOT/tests/stubnccl/csrc/stubnccl.c"
		env+=(GPUHELPER_NCCL_LIBRARY="$dir/libnccl.so.2")
	fi
	local bind=(--gpu-bind-topo)
	if ! srun --help 2>&1 | grep -q -- --gpu-bind-topo; then
		echo "(the gpubind plugin is not in this cluster's plugstack: running without --gpu-bind-topo)"
		bind=()
	fi
	run "${env[@]}" srun -N2 -n4 --ntasks-per-node=2 --gpus-per-node=2 --mpi=pmix "${bind[@]}" "$dir/hello" | sort
	echo "(one NCCL ID on every rank; each rank names its own GPU by CUDA index and PCI bus id)"
}
DEMOS+=(demo_helper_hello)

# ---- demo: PyTorch DDP started by gpubind.torch ----------------------------------------------
# examples/torch_ddp.py under plain srun --mpi=pmix: gpubind.torch.init_process_group takes
# ranks from PMIx, rank 0 opens the TCPStore on a free port and broadcasts it; gloo on CPU.
# Debian's python3 (python3-torch), the package from the source tree, the library just built.
demo_torch_ddp() {
	section "PyTorch: examples/torch_ddp.py, DDP on 4 ranks over 2 nodes (srun --mpi=pmix, no torchrun, no MASTER_ADDR)"
	(cd "$ROOT" && run make -s -f lib/Makefile.inc BUILD="$BUILD")
	local bind=(--gpu-bind-topo)
	srun --help 2>&1 | grep -q -- --gpu-bind-topo || bind=()
	run env PYTHONPATH="$ROOT/python" GPUBIND_LIBGPUHELPER="$BUILD/libgpuhelper.so.1" PYTHONDONTWRITEBYTECODE=1 \
		srun -N2 -n4 --ntasks-per-node=2 --gpus-per-node=2 --mpi=pmix "${bind[@]}" \
		/usr/bin/python3 "$ROOT/examples/torch_ddp.py" 40
	echo "(every rank ends with the same weights, near w=3 b=-1: DDP averaged the gradients over gloo)"
}
DEMOS+=(demo_torch_ddp)

main() {
	if [[ $(id -u) != 0 ]]; then
		echo "demo: needs root (private Slurm cluster)" >&2
		exit 1
	fi
	mkdir -p "$BUILD"
	trap stop_cluster EXIT
	trap 'exit 130' INT TERM
	start_cluster
	for d in "${DEMOS[@]}"; do
		"$d"
	done
	section "demo done"
}

main "$@"
