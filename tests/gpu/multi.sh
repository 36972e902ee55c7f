#!/usr/bin/env bash
# The multi-GPU run on any Linux node with N >= 1 NVIDIA GPUs, as root, in one command:
#
#   tests/gpu/multi.sh [OUTDIR]
#
# Needs build/ (`make build`; the binaries travel), nvidia-smi, gcc, python3, nvcc, libnccl with
# /usr/include/nccl.h, mpirun and mpicc. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
#
#  1. topology: `gpubind snapshot` (kept in OUTDIR, to commit as a fixture) and `gpubind topo`
#     next to `nvidia-smi topo -m`; the snapshot is checked against the driver (compare.py)
#  2. `gpubind plan --tasks N` and `--tasks 2N --policy single:2` on the real topology; every
#     task's GPU is checked against nvidia-smi's NUMA affinity of that GPU (plan_check.py)
#  3. examples/nccl_allreduce with N ranks under mpirun, GPUs chosen by gpuhelper_init: the sum
#     check and the all-reduce bus bandwidth at 1 GiB
#  4. bootstrap time from exec to having the NCCL ID (real ncclGetUniqueId): gpuhelper_init
#     against MPI_Init + MPI_Comm_split_type + MPI_Bcast, N ranks, 7 runs each, alternating
#  5. isolate: every rank in a cgroup that allows only its own GPU (the plugin's own BPF code,
#     driven by tests/cgroup/csrc/cgtool.c); NCCL's transports (NCCL_DEBUG=INFO) and bus
#     bandwidth with and without, for the README's cost note
set -uo pipefail

# shellcheck source=tests/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
need "$B/gpubind" "$B/libgpuhelper.so.1"
ngpu=$(nvidia-smi -L | grep -c '^GPU ')
gpus=$(seq -s, 0 $((ngpu - 1)))
W=(-O2 -Wall -Wextra -Werror)
mpirun_n() { mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$@"; }

section "1. topology ($ngpu GPUs)"
run nvidia-smi topo -m
run "$B/gpubind" topo --source auto
run "$B/gpubind" snapshot --source auto >"$out/snapshot-multi.json"
run python3 tests/gpu/compare.py "$out/snapshot-multi.json"

section "2. gpubind plan on the real topology, checked against nvidia-smi's NUMA affinity"
run "$B/gpubind" plan --tasks "$ngpu" --gpus "$gpus" --policy closest,verbose --source auto
run "$B/gpubind" plan --tasks "$ngpu" --gpus "$gpus" --policy closest --source auto --json >"$work/plan1.json"
run "$B/gpubind" plan --tasks $((2 * ngpu)) --gpus "$gpus" --policy single:2,verbose --source auto
run "$B/gpubind" plan --tasks $((2 * ngpu)) --gpus "$gpus" --policy single:2 --source auto --json >"$work/plan2.json"
run python3 - "$work/plan1.json" "$work/plan2.json" <<'EOF'
import json, re, subprocess, sys
# nvidia-smi topo -m: GPU rows end with "CPU Affinity  NUMA Affinity  GPU NUMA ID"; the NUMA
# affinity column is a number or N/A.
smi = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, check=True).stdout
smi = re.sub(r"\x1b\[[0-9;]*m", "", smi)
head = [l for l in smi.splitlines() if "NUMA Affinity" in l][0].split("\t")
col = [i for i, h in enumerate(head) if h.strip() == "NUMA Affinity"][0]
numa = {}
for line in smi.splitlines():
    f = line.split("\t")
    if re.fullmatch(r"GPU\d+", f[0].strip()):
        v = f[col].strip()
        numa[int(f[0].strip()[3:])] = -1 if v in ("N/A", "") else int(v)
bus = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                     capture_output=True, text=True, check=True).stdout
idx_of = {}
for line in bus.splitlines():
    i, b = [x.strip() for x in line.split(",")]
    dom, rest = b.lower().split(":", 1)
    idx_of["%04x:%s" % (int(dom, 16), rest)] = int(i)
bad = 0
for path in sys.argv[1:]:
    plan = json.load(open(path))
    use = {}
    for t in plan["tasks"]:
        for g in t["gpus"]:
            i = idx_of[g["pci_bus_id"]]
            use[i] = use.get(i, 0) + 1
            # gpubind says -1 (sysfs numa_node -1: no NUMA affinity); nvidia-smi then names the
            # machine's only NUMA node. Both mean the same on a one-node machine.
            ok = i == g["index"] and (numa[i] == g["numa"] or (g["numa"] == -1 and len(set(numa.values()) | {0}) == 1))
            bad += not ok
            print("%s: task %d: GPU %d %s NUMA %d (nvidia-smi: index %d, NUMA %d)" % (
                "PASS" if ok else "FAIL", t["task"], g["index"], g["pci_bus_id"], g["numa"], i, numa[i]))
    spread = max(use.values()) - min(use.values())
    bad += spread > 0
    print("%s: %s: every GPU used %s times" % ("PASS" if spread == 0 else "FAIL", path, sorted(set(use.values()))))
sys.exit(1 if bad else 0)
EOF

section "3. NCCL all-reduce over libgpuhelper: $ngpu ranks, 1 GiB"
run nvcc -O2 -arch=sm_90 -Ilib examples/nccl_allreduce.cu -o "$work/nccl_allreduce" \
	-L"$B" -lgpuhelper -lnccl -Xlinker -rpath="$B"
run mpirun_n "$ngpu" "$work/nccl_allreduce" $((1 << 28)) 20 | tee "$work/allreduce.txt"
grep -q "sum check OK" "$work/allreduce.txt" || { echo "FAIL: no sum check OK"; failed=1; }

section "4. bootstrap from exec to the NCCL ID: gpuhelper_init vs MPI_Bcast ($ngpu ranks, 7 runs each)"
cc "${W[@]}" -o "$work/stamp" bench/c/stamp.c || failed=1
cc "${W[@]}" -Ilib -Ibench/c -o "$work/gh_init" bench/c/gh_init.c $(pkg-config --cflags --libs pmix) \
	-L"$B" -Wl,--no-as-needed -lgpuhelper -lnccl -Wl,-rpath,"$B" || failed=1
mpicc "${W[@]}" -Ibench/c -o "$work/mpi_bcast" bench/c/mpi_bcast.c -Wl,--no-as-needed -lnccl || failed=1
for i in 1 2 3 4 5 6 7; do
	for prog in gh_init mpi_bcast; do
		mpirun_n "$ngpu" "$work/stamp" "$work/$prog" 2>&1 | awk -v p=$prog '$1=="TIME"{if($3>m)m=$3} END{print p, m*1000}'
	done
done | tee "$work/boot.txt"
python3 - "$work/boot.txt" <<'EOF'
import statistics, sys
v = {}
for line in open(sys.argv[1]):
    p, ms = line.split()
    v.setdefault(p, []).append(float(ms))
g, m = statistics.median(v["gh_init"]), statistics.median(v["mpi_bcast"])
print("median slowest rank, exec -> NCCL ID: gpuhelper_init %.1f ms, MPI_Bcast bootstrap %.1f ms, ratio %.2f" % (g, m, g / m))
EOF

section "5. isolate: each rank may open only its own GPU (cgroup v2 BPF, the plugin's code)"
gcc "${W[@]}" -D_GNU_SOURCE -Ispank/frontend/cgroup -Irule tests/cgroup/csrc/cgtool.c spank/frontend/cgroup/*.c \
	rule/*.c -o "$work/cgtool" || failed=1
minors=$(awk '/Device Minor/{print $3}' /proc/driver/nvidia/gpus/*/information | sort -n | paste -sd,)
# rank i (local rank) takes the i-th GPU in PCI order, as gpuhelper_init does without the plugin;
# the wrapper names it by UUID so CUDA's numbering inside the cgroup cannot mislead.
cat >"$work/isolated.sh" <<EOF
#!/usr/bin/env bash
r=\${OMPI_COMM_WORLD_LOCAL_RANK:?}
line=\$(nvidia-smi --query-gpu=pci.bus_id,uuid --format=csv,noheader | sort | sed -n "\$((r % $ngpu + 1))p")
bus=\$(echo "\$line" | cut -d, -f1 | tr -d ' ' | tr A-Z a-z | sed 's/^0000//')
uuid=\$(echo "\$line" | cut -d, -f2 | tr -d ' ')
minor=\$(awk '/Device Minor/{print \$3}' /proc/driver/nvidia/gpus/\$bus/information)
export CUDA_VISIBLE_DEVICES=\$uuid
exec "$work/cgtool" task --version 2 --isolate --job \$PPID --step 0 --task \$r --ntasks $ngpu \
	--step-minors $minors --minors \$minor -- "\$@"
EOF
chmod +x "$work/isolated.sh"
for mode in shared isolate; do
	echo "--- $mode"
	if [ $mode = shared ]; then wrap=(); else wrap=("$work/isolated.sh"); fi
	NCCL_DEBUG=INFO mpirun_n "$ngpu" -x NCCL_DEBUG "${wrap[@]}" "$work/nccl_allreduce" $((1 << 28)) 20 >"$work/$mode.txt" 2>&1
	echo "exit $?"
	grep -E "via (P2P|SHM|NET)|Channel 00.*via|sum check" "$work/$mode.txt" | sed 's/^.*NCCL INFO //' | sort | uniq -c | head -20
	grep -E "^(apply|cleanup) rc" "$work/$mode.txt" | sort | uniq -c
done

section "summary"
cp "$work"/*.txt "$out/" 2>/dev/null
if [ $failed -ne 0 ]; then echo "multi.sh: some checks FAILED"; exit 1; fi
echo "multi.sh: all checks passed"
