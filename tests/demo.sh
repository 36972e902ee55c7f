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

# ---- cluster (H-A) ------------------------------------------------------------------------
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

# ---- demo: a plain step on two nodes with fake GPUs (H-A) -------------------------------
demo_plain_step() {
	section "a step on two nodes: 4 tasks, 2 fake GPUs per node, as Slurm alone binds them"
	run srun -N2 -n4 --gpus-per-node=2 bash -c \
		'echo "task $SLURM_PROCID on $(hostname): SLURM_STEP_GPUS=$SLURM_STEP_GPUS CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"' |
		sort
	echo "(every task sees the same GPU list: nothing binds a task to its own GPU yet)"
}
DEMOS+=(demo_plain_step)

# ---- demo: PMIx key exchange under srun --mpi=pmix (H-A) ----------------------------------
demo_pmix() {
	section "PMIx: rank 0 puts 128 bytes, every rank gets them (srun --mpi=pmix)"
	local bin=$CLUSTER_DIR/pmix_putget   # private: others may run the demo from this tree at once
	run gcc -Wall -Wextra -Werror -O2 -o "$bin" "$ROOT/tests/c/pmix_putget.c" $(pkg-config --cflags --libs pmix)
	run srun -N2 -n4 --mpi=pmix "$bin" 1 | sort
}
DEMOS+=(demo_pmix)

# ---- demo: --gpu-bind-topo plugin (H-C adds here) -----------------------------------------

# ---- demo: libgpuhelper hello (H-D adds here) ---------------------------------------------

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
