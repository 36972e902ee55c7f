#!/usr/bin/env bash
# Runs sections 6 and 7 of tests/gpu/slurm.sh (tests/gpu/containers.sh, Slurm's OCI containers;
# tests/gpu/enroot.sh, pyxis + enroot) here, without a GPU: a private cluster (tests/cluster)
# with one fake GPU as GRES, the plugin on the fixture dgxh100-2cpu, runc from GPU_OCI_RUNC,
# else .gpu/oci/runc.gz unpacked (slurm-bundle.sh), else Debian's; pyxis and enroot as
# slurm-bundle.sh packs them, else as tests/containers/build.sh installs them. It checks the
# logic up to the CUDA checks, which FAIL here by design ("no CUDA probe"): a run that shows
# only those FAILs has everything else working.
#
#   tests/gpu/containers-local.sh [SLURM_PREFIX]        (root; default $SLURM_PREFIX, else 26.05.3)
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
prefix=${1:-${SLURM_PREFIX:-$(tests/slurm/build.sh 26.05.3)}}
out=$(mktemp -d /tmp/gpubind-oci-local.XXXXXX)
work=$out/work
mkdir -p "$work/plugin" "$work/bin"
chmod 755 "$out" "$work" "$work/plugin" "$work/bin"
failed=0
section() { printf '\n==== %s\n' "$*"; }
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }
check() {
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}
make -s -C spank/frontend BUILD="$work/plugin" SLURM_PREFIX="$prefix" GB_LAUNCHER="$work/plugin/gpubind-launcher" >/dev/null 2>&1 &&
	go build -trimpath -buildmode=c-shared -o "$work/plugin/gpubind_engine.so" ./spank/engine &&
	go build -trimpath -tags gpubind_launcher -o "$work/plugin/gpubind-launcher" ./spank/engine &&
	go build -trimpath -o "$work/bin/gpubind" ./cmd/gpubind || { echo "FAIL: build"; exit 1; }
B=$work/bin
bundle=$root/.gpu
if [[ -z ${GPU_OCI_RUNC:-} && -f $bundle/oci/runc.gz ]]; then
	GPU_OCI_RUNC=$work/runc
	gzip -dc "$bundle/oci/runc.gz" >"$GPU_OCI_RUNC" && chmod 755 "$GPU_OCI_RUNC"
fi
[[ -x ${GPU_OCI_RUNC:-} ]] || GPU_OCI_RUNC=$(command -v runc)
export GPU_OCI_RUNC
fix=$root/tests/fixtures/dgxh100-2cpu
# pyxis and enroot: the bundle's (slurm-bundle.sh), as the GPU run unpacks them, where it was
# made for this Slurm; else tests/containers/build.sh's install, copied.
if [[ ! -f $bundle/containers/enroot-pyxis.tar.gz || $(cat "$bundle/prefix" 2>/dev/null) != "$prefix" ]]; then
	GPU_ENROOT_FROM=$(tests/containers/build.sh "$prefix" | tail -1) || { echo "FAIL: tests/containers/build.sh"; exit 1; }
fi
# pyxis runs enroot from slurmstepd's PATH: section 7 puts it in $work/enroot.
export PATH=$work/enroot/bin:$PATH
plug="required $work/plugin/spank_gpubind.so cache_dir=$work root=$fix source=sysfs"
dir=$(SLURM_PREFIX=$prefix tests/cluster/cluster.sh start -cpus 8 -gpus 1 -task task/cgroup,task/affinity \
	-constrain-devices -plugstack "$plug" | tail -1)
[[ -d $dir ]] || { echo "FAIL: cluster did not start"; exit 1; }
trap 'tests/cluster/cluster.sh stop "$dir" >/dev/null 2>&1; rm -rf "$out"' EXIT
eval "$(build/testcluster env "$dir")"
cfg=$dir
GPU_OCI_DEVS="$dir/dev/nvidia*"
GPU_OCI_DEVDIR=$dir/dev
GPU_OCI_WHEREAMI="--root $fix"
GPU_OCI_BINDS=$fix
GPU_OCI_SLURMD_LOG=$dir/log/slurmd-node1.log
# The task's GPU as the plugin gives it (the GPU machine takes it from nvidia-smi).
line=$(srun -n1 --gpus=1 --gpu-bind-topo=closest,verbose true 2>&1 | grep -m1 'gpubind: task 0')
read -r gpu_bus gpu_uuid <<<"$(sed -E 's/.* -> GPU [0-9]+ (\S+) (\S+) .*/\1 \2/' <<<"$line")"
echo "the task's GPU: $gpu_bus $gpu_uuid"
oci_cudaprobe=/nonexistent
# shellcheck source=tests/gpu/containers.sh
. tests/gpu/containers.sh
GPU_PLUGSTACK=$dir/plugstack.conf
GPU_ENROOT_MOUNTS=$dir/dev,$fix
# shellcheck source=tests/gpu/enroot.sh
. tests/gpu/enroot.sh
section "summary"
if ((failed)); then echo "containers-local.sh: FAILED (the CUDA checks fail here by design: no GPU)"; else echo "containers-local.sh: all checks passed"; fi
exit "$failed"
