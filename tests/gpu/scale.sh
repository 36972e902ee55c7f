#!/usr/bin/env bash
# The scale harness (bench/scale.sh, docs/scale.md) on the 16-core GPU machine: up to 1,024
# ranks on 128 simulated nodes (128 slurmd on the one host, Slurm's multiple-slurmd mode), with
# the Slurm, PMIx 4 and programs that tests/gpu/slurm-bundle.sh packed into .gpu/. No GPU is
# used: the ranks run the stub libnccl. One part per call, each within 600 s:
#
#   tests/gpu/slurm-bundle.sh                              (on the build machine -> .gpu/)
#   SCALE_PART=big    tests/gpu/scale.sh [OUTDIR]   1,024 ranks on 128 nodes: helper direct, fence
#                                                   ring, fence tree; raw PMIx the same three ways
#   SCALE_PART=sizes  tests/gpu/scale.sh [OUTDIR]   16, 32, 64 nodes x 8 ranks (128..512 ranks)
#   SCALE_PART=plugin tests/gpu/scale.sh [OUTDIR]   srun -N128 --ntasks-per-node=8 true, with the
#                                                   plugin and without: slurmd/slurmstepd CPU,
#                                                   plan cache hits
#
# Results: OUTDIR/results/scale.md (or scale_plugin.md) and the CSVs, OUTDIR/scale.log. To keep
# them: copy scale.md to bench/results/scale_gpu.md (several parts: one after the other) and
# scale_plugin.md to bench/results/scale_plugin_gpu.md, then `bench/run.sh assemble`. A step
# that fails or times out is counted in the tables, not fatal; no step starts after 440 s
# (SCALE_DEADLINE), so a part ends within 600 s. Exit status 1 when any step failed.
set -uo pipefail

if [[ -z ${GPUBIND_SLURM_NS:-} ]]; then
	exec env GPUBIND_SLURM_NS=1 unshare -m --propagation private bash "$0" "$@"
fi
# shellcheck source=tests/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bundle=$root/.gpu
need "$bundle/slurm.tar.gz" "$bundle/prefix" "$bundle/scale/testcluster" "$bundle/build/spank_gpubind.so"
part=${SCALE_PART:-}
# Each part's sizes; a variable set by the caller wins (a dry run elsewhere: SCALE_NODES=8).
case $part in
big) : "${SCALE_NODES:=128}" "${SCALE_RPN:=8}" "${SCALE_RUNS:=1}" "${SCALE_WARMUP:=0}" "${SCALE_ITERS:=2}" "${SCALE_STEP_TIMEOUT:=150}" ;;
sizes) : "${SCALE_NODES:=16 32 64}" "${SCALE_RPN:=8}" "${SCALE_RUNS:=2}" "${SCALE_WARMUP:=1}" "${SCALE_ITERS:=3}" "${SCALE_STEP_TIMEOUT:=120}" ;;
plugin) : "${SCALE_NODES:=128}" "${SCALE_RPN:=8}" "${SCALE_RUNS:=3}" "${SCALE_WARMUP:=1}" "${SCALE_ITERS:=1}" "${SCALE_STEP_TIMEOUT:=120}"
	: "${SCALE_PLUGIN_NODES:=$SCALE_NODES}" ;;
*) echo "scale.sh: SCALE_PART=$part: expected big, sizes or plugin" >&2; exit 2 ;;
esac
export SCALE_NODES SCALE_RPN SCALE_RUNS SCALE_WARMUP SCALE_ITERS SCALE_STEP_TIMEOUT SCALE_PLUGIN_NODES
export SCALE_DEADLINE=${SCALE_DEADLINE:-440} SCALE_RES=$out/results SCALE_PREBUILT=$bundle/scale SCALE_AUTH_SLURM=1
SCALE_PMIX_VERSION=$(cat "$bundle/scale/pmix-version" 2>/dev/null)
export SCALE_PMIX_VERSION BUILD=$bundle/build
export SCALE_TITLE="8d. Scale on the GPU machine ($(nproc) cores): $part" SCALE_PLUGIN_TITLE="9b. The plugin at scale on the GPU machine ($(nproc) cores)"

section "Slurm from .gpu, Debian's PMIx 4 over the system's"
prefix=$(cat "$bundle/prefix")
if [[ ! -x $prefix/sbin/slurmd ]]; then # a Slurm already there (the build machine) is left alone
	mkdir -p "$prefix"
	tar -xzf "$bundle/slurm.tar.gz" -C "$prefix"
fi
mkdir -p "$work/lib"
for l in "$bundle"/lib/*; do
	so=$(basename "$l")
	ldconfig -p | grep -qE "^[[:space:]]+${so//./\\.} " || cp -a "$l" "$work/lib/"
done
export LD_LIBRARY_PATH=$bundle/pmix2/lib:$work/lib
pmixdir=/usr/lib/x86_64-linux-gnu/pmix2
mkdir -p "$pmixdir"
mount --bind "$bundle/pmix2" "$pmixdir" || { echo "FAIL: bind-mount PMIx 4 over $pmixdir"; exit 1; }
export PATH=$prefix/bin:$prefix/sbin:$PATH SLURM_PREFIX=$prefix
slurmd -V
ulimit -n 65536 2>/dev/null
ulimit -u unlimited 2>/dev/null

section "bench/scale.sh ($part: nodes {$SCALE_NODES}, $SCALE_RPN ranks per node)"
sections=ids
[[ $part == plugin ]] && sections=plugin
BENCH_NICE=0 timeout -k 20 550 bench/scale.sh $sections 2>&1 | tee "$out/scale.log"
rc=${PIPESTATUS[0]}
[[ $rc == 0 ]] || { echo "FAIL: bench/scale.sh exited $rc"; failed=1; }
for f in "$out"/results/*.md; do [[ -f $f ]] && cat "$f"; done
if grep -q ',failed,' "$out"/results/scale*.csv 2>/dev/null; then
	echo "FAIL: some steps failed or timed out (see $out/results/scale_failures.log)"
	failed=1
fi
exit $failed
