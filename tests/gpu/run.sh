#!/usr/bin/env bash
# Real-GPU evidence for gpubind, in one command, on any Linux node with NVIDIA GPUs (root).
#
#   tests/gpu/run.sh [OUTDIR]
#
# Expects the x86-64 build outputs in build/ (`make build` on any machine with Go; the
# binaries travel) and, on this node: nvidia-smi, gcc, python3; nvcc + libnccl + mpirun
# for the NCCL part (skipped with a message when absent). Every section prints what it ran
# and PASS/FAIL lines; the exit status is 1 when any check failed.
#
#  1. the driver's view: nvidia-smi, /proc/driver/nvidia/gpus/*/information
#  2. `gpubind topo` and `gpubind snapshot` with the nvml and sysfs backends, compared with (1)
#  3. `gpubind plan` on the real topology
#  4. what a naive per-step NVML discovery costs, call by call (fresh process per run)
#  5. the plugin's per-step engine cost as the front end pays it (fork + dlopen + run):
#     discovery every step (no cache) against the per-boot cache, NVML and sysfs
#  6. examples/nccl_allreduce over libgpuhelper: 1 rank under mpirun, then 2 ranks with
#     one-rank communicators from gpuhelper_group_id (NCCL refuses 2 ranks on one GPU)
#  7. cgroup device isolation with the plugin's own BPF code (tests/gpu/cgroup_gpu.sh)
#  8. multi-node NVLink fabric and IMEX as real NVML reports them: on a GPU without a
#     multi-node NVLink domain (the H200) no clique variable, no warning, no fabric lines
set -uo pipefail

# shellcheck source=tests/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need "$B/gpubind" "$B/gpubind_engine.so" "$B/libgpuhelper.so.1" "$B/nvmlcost"

section "1. the driver's view"
run nvidia-smi --query-gpu=index,pci.bus_id,uuid,name,driver_version --format=csv
run nvidia-smi topo -m
for f in /proc/driver/nvidia/gpus/*/information; do
	echo "--- $f"
	grep -E 'Model|Device Minor|Bus Location|GPU UUID' "$f"
	bus=$(basename "$(dirname "$f")")
	echo "sysfs numa_node=$(cat "/sys/bus/pci/devices/$bus/numa_node") local_cpulist=$(cat "/sys/bus/pci/devices/$bus/local_cpulist")"
done

section "2. gpubind topo / snapshot, nvml and sysfs backends"
run "$B/gpubind" topo --source nvml
run "$B/gpubind" topo --source sysfs
run "$B/gpubind" snapshot --source nvml >"$out/snapshot-nvml.json"
run "$B/gpubind" snapshot --source sysfs >"$out/snapshot-sysfs.json"
run "$B/gpubind" snapshot --source auto >"$out/snapshot-auto.json"
run python3 tests/gpu/compare.py "$out/snapshot-nvml.json" "$out/snapshot-sysfs.json" "$out/snapshot-auto.json"

section "3. gpubind plan on this node"
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
gpus=$(seq -s, 0 $((ngpu - 1)))
run "$B/gpubind" plan --tasks "$ngpu" --gpus "$gpus" --policy closest,verbose --source auto
run "$B/gpubind" plan --tasks $((2 * ngpu)) --gpus "$gpus" --policy single:2 --source auto

section "4. naive per-step NVML discovery, call by call (10 fresh processes)"
run "$B/nvmlcost" -runs 10

section "5. engine cost per step as the plugin pays it (fork + dlopen + Go start + plan), median of 21"
gcc -O2 -Wall -Wextra -Werror -o "$work/engine_bench" spank/engine/cbench/engine_bench.c -ldl || failed=1
{
	for i in $(seq 0 $((ngpu - 1))); do printf 'Name=gpu File=/dev/nvidia%s\n' "$i"; done
} >"$work/gres.conf"
for src in auto sysfs; do
	cat >"$work/request-$src.txt" <<EOF
option=closest
mode=enforce
source=$src
cache_dir=$work/cache-$src
gres_conf=$work/gres.conf
node_name=$(hostname -s)
local_tasks=$ngpu
global_ids=$(seq -s, 0 $((ngpu - 1)))
env.SLURM_STEP_GPUS=$gpus
env.CUDA_VISIBLE_DEVICES=$gpus
EOF
	echo "--- source=$src, discovery on every step (what the cache avoids)"
	run "$work/engine_bench" "$B/gpubind_engine.so" "$work/request-$src.txt" 21 cold "$work/cache-$src"
	echo "--- source=$src, per-boot cache warm"
	run "$work/engine_bench" "$B/gpubind_engine.so" "$work/request-$src.txt" 21
done
echo "--- the table the engine wrote (source=auto)"
"$B/gpubind" plan --tasks "$ngpu" --gpus "$gpus" --source auto --table

section "6. examples/nccl_allreduce over libgpuhelper"
if command -v nvcc >/dev/null && [ -e /usr/include/nccl.h ] && command -v mpirun >/dev/null; then
	run nvcc -O2 -arch=sm_90 -Ilib examples/nccl_allreduce.cu -o "$work/nccl_allreduce" \
		-L"$B" -lgpuhelper -lnccl -Xlinker -rpath="$B"
	echo "--- 1 rank, world communicator, ID from the process's own ncclGetUniqueId"
	run mpirun --allow-run-as-root -np 1 "$work/nccl_allreduce" $((1 << 24)) 20
	echo "--- 2 ranks sharing one GPU: each its own one-rank communicator via gpuhelper_group_id(color=rank)"
	run mpirun --allow-run-as-root --oversubscribe -np 2 -x GPUHELPER_EXAMPLE_GROUP=rank \
		"$work/nccl_allreduce" $((1 << 20)) 5
else
	echo "SKIP: nvcc, /usr/include/nccl.h or mpirun missing"
fi

section "7. cgroup device isolation with the plugin's own BPF code"
run bash tests/gpu/cgroup_gpu.sh

section "8. multi-node NVLink fabric and IMEX (real NVML)"
# Expected on the lent H200 (driver 580.159.04): GetGpuFabricInfoV answers SUCCESS with state
# NOT_SUPPORTED, clique 0, an all-zero cluster UUID; /proc/devices lists
# nvidia-caps-imex-channels, but no channel node exists. So: fabric not_supported on every
# GPU, no GPUBIND_NVL_CLIQUE, no warning, a table without fabric/imex/"depends ?" lines,
# `gpubind check` items fabric and imex ok. On a GB200 the script prints what it finds.
nvidia-smi -q | grep -A4 -i '^ *Fabric' | head -12
grep -i imex /proc/devices || echo "(no IMEX device in /proc/devices)"
ls -l /dev/nvidia-caps-imex-channels 2>&1 | head -5
run "$B/gpubind" snapshot --source nvml >"$out/snapshot-fabric.json"
run python3 - "$out/snapshot-fabric.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
bad = 0
for g in t["gpus"]:
    f = g.get("fabric")
    print("GPU %d %s fabric %s source %s" % (g["index"], g["pci_bus_id"], json.dumps(f), g.get("source", {}).get("fabric")))
    ok = f is not None and f["state"] == "not_supported" and f["clique_id"] == 0 and \
        f["cluster_uuid"] == "00000000-0000-0000-0000-000000000000" and g["source"]["fabric"] == "nvml" and \
        f.get("version") == 3
    print(("PASS" if ok else "FAIL") + ": GPU %d fabric is not_supported, clique 0, zero cluster UUID, from NVML GetGpuFabricInfoV v3" % g["index"])
    bad += not ok
sys.exit(1 if bad else 0)
PY
"$B/gpubind" topo --source nvml | grep -E 'FABRIC|^[0-9]' | head -10
"$B/gpubind" plan --tasks "$ngpu" --gpus "$gpus" --policy closest --source auto --json >"$work/plan.json" 2>"$work/plan.err"
"$B/gpubind" plan --tasks "$ngpu" --gpus "$gpus" --policy closest --source auto --table >"$work/table.txt" 2>>"$work/plan.err"
if grep -q GPUBIND_NVL_CLIQUE "$work/plan.json" || grep -q warning "$work/plan.err" ||
	grep -qE '^(fabric|imex|depends \?)' "$work/table.txt"; then
	echo "FAIL: a GPU without multi-node NVLink got a clique variable, a warning or fabric lines:"
	cat "$work/plan.json" "$work/plan.err" "$work/table.txt"
	failed=1
else
	echo "PASS: no GPUBIND_NVL_CLIQUE, no warning, no fabric/imex lines in the table"
fi
"$B/gpubind" check --json >"$work/check.json" 2>/dev/null # other items fail without slurm.conf
run python3 - "$work/check.json" <<'PY'
import json, sys
items = {i["name"]: i for i in json.load(open(sys.argv[1]))["items"]}
bad = 0
for name in ("fabric", "imex"):
    i = items.get(name)
    print("%s: %s" % (name, json.dumps(i)))
    ok = i is not None and i["status"] == "ok"
    print(("PASS" if ok else "FAIL") + ": check item %s is ok" % name)
    bad += not ok
sys.exit(1 if bad else 0)
PY

section "summary"
if [ $failed -ne 0 ]; then echo "run.sh: some checks FAILED"; exit 1; fi
echo "run.sh: all checks passed"
