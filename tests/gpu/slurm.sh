#!/usr/bin/env bash
# A real Slurm 26.05 with cgroup/v2 on a GPU node, end to end, in one command (root):
#
#   tests/gpu/slurm-bundle.sh       (on a build machine: Slurm, libraries, plugin -> .gpu/)
#   BUILD=.gpu/build tests/gpu/slurm.sh [OUTDIR]   (on the GPU node: the checkout and .gpu/)
#   GPU_ONLY=python ...             (sections 0, 1 and 4b only)
#   GPU_SKIP_BENCH=1 ...            (every check, without section 5's launch-cost timings)
#   GPU_SKIP_PYTHON=1 ...           (without section 4b, the Python package)
#   GPU_SKIP_CONTAINERS=1 ...       (without sections 6 and 7, the containers)
#   GPU_ONLY=containers ...         (sections 0, 1, 6 and 7 only)
#
# One slurmctld and one slurmd as root, no systemd, no munged (auth/slurm with a generated
# key), CgroupPlugin=cgroup/v2, ConstrainDevices=yes, ConstrainCores=yes,
# TaskPlugin=task/cgroup,task/affinity, ProctrackType=proctrack/cgroup, MpiDefault=pmix,
# jobacct_gather/cgroup, gres.conf AutoDetect=nvidia, and the gpubind plugin in plugstack.conf.
#
#  1. bring Slurm up (and check the node has the GPU as GRES)
#  2. binding: --gpu-bind-topo=verbose against nvidia-smi and CUDA, and Slurm's --gpu-bind=closest; the uuid flag (CUDA_VISIBLE_DEVICES=GPU-..., CUDA finds the GPU)
#  2b. visible=first and visible=localid: CUDA device 0 (first) / device SLURM_LOCALID (localid)
#     is the task's GPU, every step GPU is visible, CUDA IPC between two tasks works; and
#     `gpubind whereami --strict` in the task matches nvidia-smi
#  3. isolation under Slurm's own cgroup v2: CUDA sees the GPU; jobs without GPUs cannot open it;
#     scancel, a time limit and srun --signal reach an isolated task (its SIGTERM/USR1 trap runs,
#     it ends within seconds); sstat accounts it; no plugin cgroup or BPF program is left.
#     With .gpu/old (GPUBIND_OLD_REV in slurm-bundle.sh) the scancel check also runs with the
#     plugin before the fix, to show the failure it fixed.
#  3b. an admin default=closest mode=enforce: CPU-only steps, --gres=none, --gpus=0, exit codes,
#     the batch step and the user's own --gpu-bind/--tres-bind/--gpus-per-task (and none) behave
#     exactly as without the plugin; a GPU step that asked for nothing differs only in the
#     binding variables; set_device(SLURM_LOCALID) (CUDA, and torch where installed) works in
#     every task; a missing or hanging launcher leaves a GPU step as without the plugin, with
#     one warning
#  4. libgpuhelper under Slurm's PMIx: examples/nccl_allreduce with -n1 and -n2 (one-rank groups)
#  4b. the Python package: gpubind.init() against nvidia-smi, gpubind.torch with nccl (n=1) and
#     gloo (n=2), gpubind.nccl_id() starting a real NCCL communicator (tests/gpu/python.sh)
#  6. Slurm's OCI containers (srun --container, oci.conf, the static runc slurm-bundle.sh carries;
#     tests/gpu/containers.sh): what the machine allows (user namespaces, /dev/fuse, overlayfs,
#     cgroup v2); a bundle with the driver's libraries and /dev/nvidia* bound in; CUDA, nvidia-smi
#     and whereami in the container see the task's GPU (bus id and UUID of the mapping line);
#     which cgroup the containerized task is in; a step without GPUs opens none in a container
#  7. pyxis + enroot (srun --container-image; both carried, tests/gpu/enroot.sh), jobs of root and
#     of nobody, gpubind after and before pyxis: CUDA, nvidia-smi and whereami in the container
#     see the task's GPU (the mapping line's), as outside; the task stays in Slurm's cgroup; a
#     step without GPUs opens none in the container
#  5. launch cost with one core per rank: srun -n1/-n8/-n16, no plugin against the plugin
#     without plan cache, a first step and a repeated step (plan cache hit), alternated; and
#     gpuhelper_init against raw PMIx at n = 2, 8, 16 (one core per rank) and 32 (oversubscribed)
# Everything it starts is stopped at the end and its cgroups removed. Exit status 1 on any FAIL.
set -uo pipefail

# A private mount namespace: Debian's PMIx 4 is mounted over the system's PMIx directory for
# Slurm and its tasks only, and disappears with the namespace.
if [[ -z ${GPUBIND_SLURM_NS:-} ]]; then
	exec env GPUBIND_SLURM_NS=1 unshare -m --propagation private bash "$0" "$@"
fi
# shellcheck source=tests/gpu/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bundle=$root/.gpu
B=$(readlink -f "$B")
need "$bundle/slurm.tar.gz" "$bundle/prefix" "$bundle/build/spank_gpubind.so" "$bundle/build/gpubind_engine.so" \
	"$bundle/build/gpubind-launcher" \
	"$B/gpubind" "$B/libgpuhelper.so.1"
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failed=1; }
check() { # check DESCRIPTION COMMAND...: PASS/FAIL by the command's status
	local what=$1
	shift
	if "$@"; then pass "$what"; else fail "$what"; fi
}

section "0. the node"
uname -r
nproc
nvidia-smi --query-gpu=index,pci.bus_id,uuid,name,driver_version --format=csv,noheader | tee "$work/smi.csv"
IFS=', ' read -r gpu_index gpu_bus gpu_uuid _ <"$work/smi.csv"
gpu_bus=$(tr 'A-F' 'a-f' <<<"${gpu_bus: -12}") # 00000000:00:06.0 -> 0000:00:06.0
ngpu=$(wc -l <"$work/smi.csv")
echo "GPU $gpu_index bus $gpu_bus uuid $gpu_uuid"

section "1. Slurm 26.05 with cgroup/v2"
prefix=$(cat "$bundle/prefix")
mkdir -p "$prefix"
tar -xzf "$bundle/slurm.tar.gz" -C "$prefix"
mkdir -p "$work/lib"
for l in "$bundle"/lib/*; do
	so=$(basename "$l")
	ldconfig -p | grep -qE "^[[:space:]]+${so//./\\.} " || cp -a "$l" "$work/lib/"
done
echo "libraries this node lacks, carried: $(ls "$work/lib" | tr '\n' ' ')"
# Debian's PMIx 4 first: Slurm's server and the tasks' clients must be the same library.
export LD_LIBRARY_PATH=$bundle/pmix2/lib:$work/lib
pmixdir=/usr/lib/x86_64-linux-gnu/pmix2
mkdir -p "$pmixdir"
mount --bind "$bundle/pmix2" "$pmixdir" || fail "bind-mount PMIx 4 over $pmixdir"
# Section 7 unpacks enroot and pyxis into $work/enroot: pyxis runs enroot from slurmstepd's
# PATH, which the daemons take from here.
export PATH=$work/enroot/bin:$prefix/bin:$prefix/sbin:$PATH
slurmd -V

# Slurm builds its cgroup tree beside the cgroup it starts in: a fresh one of our own.
cgbase=/sys/fs/cgroup/gpubind-slurm-test
mkdir -p "$cgbase/launch"
echo $$ >"$cgbase/launch/cgroup.procs"
cat /sys/fs/cgroup/cgroup.controllers

host=$(hostname -s)
cfg=$work/etc
mkdir -p "$cfg" "$work/state" "$work/spool" "$work/log" "$work/cache"
chmod 755 "$work" "$work/cache"
head -c 1024 /dev/urandom >"$cfg/slurm.key"
chmod 600 "$cfg/slurm.key"
ncpu=$(nproc)
cat >"$cfg/slurm.conf" <<EOF
ClusterName=gpubindgpu
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/slurm
CredType=auth/slurm
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmdDebug=verbose
PlugStackConfig=$cfg/plugstack.conf
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/cgroup
JobAcctGatherFrequency=1
AccountingStorageType=accounting_storage/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
KillWait=30
MinJobAge=10
NodeName=$host CPUs=$ncpu Gres=gpu:$ngpu State=UNKNOWN
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$cfg/cgroup.conf" <<EOF
CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
EnableControllers=yes
ConstrainDevices=yes
ConstrainCores=yes
EOF
echo "AutoDetect=nvidia" >"$cfg/gres.conf"
# The launcher must be root's and writable only by root, in such a directory (the plugin
# refuses anything else): a copy under $work, whoever owns the bundle.
install -D -o root -g root -m 0755 "$bundle/build/gpubind-launcher" "$work/libexec/gpubind-launcher"
chmod 0755 "$work/libexec"
plug="required $bundle/build/spank_gpubind.so cache_dir=$work/cache launcher=$work/libexec/gpubind-launcher"
echo "$plug" >"$cfg/plugstack.conf"
export SLURM_CONF=$cfg/slurm.conf
cp "$cfg/slurm.conf" "$cfg/cgroup.conf" "$cfg/gres.conf" "$out/" 2>/dev/null

stop_slurm() {
	scancel --full -u root 2>/dev/null
	sleep 2
	pkill -TERM -x slurmctld
	pkill -TERM -x slurmd
	sleep 2
	pkill -KILL -x slurmstepd
	pkill -KILL -x slurmctld
	pkill -KILL -x slurmd
	sleep 1
	# Depth first: Slurm's tree under ours, then ours.
	find "$cgbase" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null
	echo $$ >/sys/fs/cgroup/cgroup.procs 2>/dev/null
	rmdir "$cgbase/launch" "$cgbase" 2>/dev/null
	[[ -d $cgbase ]] && echo "FAIL: $cgbase left behind: $(find "$cgbase" -type d | head)" && failed=1
	umount "$pmixdir" 2>/dev/null
	cp "$work"/log/*.log "$out/" 2>/dev/null
}
trap 'stop_slurm; rm -rf "$work"' EXIT

slurmctld -i
slurmd
for _ in $(seq 60); do
	state=$(sinfo -h -N -o '%T' 2>/dev/null)
	[[ $state == idle ]] && break
	sleep 1
done
sinfo -N -o '%N %T %C %G'
scontrol show node "$host" | grep -E 'Gres=|CfgTRES'
if [[ $state != idle ]]; then
	fail "node not idle ($state)"
	tail -30 "$work/log/slurmd.log" "$work/log/slurmctld.log"
	exit 1
fi
grep -iE 'gpu|gres' "$work/log/slurmd.log" | head -5
cat "$cgbase/cgroup.subtree_control"

# A CUDA probe: how many devices CUDA sees, and each one's bus id and UUID.
cat >"$work/cudaprobe.cu" <<'EOF'
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    printf("CUDA rank=%s CVD=%s count=%d err=%s", getenv("SLURM_PROCID"), getenv("CUDA_VISIBLE_DEVICES") ?
           getenv("CUDA_VISIBLE_DEVICES") : "-", e == cudaSuccess ? n : 0, e == cudaSuccess ? "none" : cudaGetErrorName(e));
    for (int i = 0; e == cudaSuccess && i < n; i++) {
        char bus[32]; cudaDeviceProp p;
        cudaDeviceGetPCIBusId(bus, sizeof(bus), i);
        cudaGetDeviceProperties(&p, i);
        printf(" dev%d=%s/GPU-", i, bus);
        for (int k = 0; k < 16; k++) printf("%02x%s", (unsigned char)p.uuid.bytes[k], (k==3||k==5||k==7||k==9)?"-":"");
    }
    printf("\n");
    return 0;
}
EOF
nvcc -O2 -o "$work/cudaprobe" "$work/cudaprobe.cu" || fail "nvcc cudaprobe"
chmod 755 "$work/cudaprobe"

# Cgroup/BPF state before any step, to find leftovers later.
gcc -O2 -D_GNU_SOURCE -I spank/frontend/cgroup -I rule -o "$work/cgtool" tests/cgroup/csrc/cgtool.c \
	spank/frontend/cgroup/*.c rule/*.c || fail "build cgtool"
leftovers() { # leftovers WHEN: no plugin cgroup, no BPF program of the plugin (gpubind_*)
	local left progs
	sleep 1 # slurmstepd exits after the step's srun returns
	left=$(find /sys/fs/cgroup -name 'gpubind_j*' 2>/dev/null | head -3)
	progs=$("$work/cgtool" prognames | awk '$3 ~ /^gpubind/' | head -5 | tr '\n' ' ')
	if [[ -z $left && -z $progs ]]; then pass "$1: no plugin cgroup and no BPF program of the plugin left"; else
		fail "$1: left behind: cgroups [$left] programs [$progs]"; fi
}

summary() {
	section "summary"
	if ((failed)); then echo "slurm.sh: FAILED"; else echo "slurm.sh: all checks passed"; fi
	exit "$failed"
}
# GPU_ONLY=python: Slurm up (sections 0 and 1), then section 4b alone: a re-check of the Python
# package that fits a short lease.
if [[ ${GPU_ONLY:-} == python ]]; then
	# shellcheck source=tests/gpu/python.sh
	. "$root/tests/gpu/python.sh"
	summary
fi
# GPU_ONLY=containers: Slurm up, the CUDA probe, then sections 6 and 7 alone.
if [[ ${GPU_ONLY:-} == containers ]]; then
	# shellcheck source=tests/gpu/containers.sh
	. "$root/tests/gpu/containers.sh"
	# shellcheck source=tests/gpu/enroot.sh
	. "$root/tests/gpu/enroot.sh"
	summary
fi

section "2. binding: --gpu-bind-topo=verbose against nvidia-smi and CUDA"
out2=$(srun -n1 --gpus=1 --gpu-bind-topo=verbose "$work/cudaprobe" 2>&1)
echo "$out2"
line=$(grep -m1 'gpubind: task 0' <<<"$out2")
check "mapping line names bus $gpu_bus" grep -qi "$gpu_bus" <<<"$line"
check "mapping line names UUID $gpu_uuid" grep -qi "$gpu_uuid" <<<"$line"
check "CUDA in the task sees exactly 1 device, bus $gpu_bus" grep -qiE "count=1 err=none dev0=${gpu_bus}/" <<<"$out2"
echo "--- Slurm's own --gpu-bind=closest, side by side"
srun -n1 --gpus=1 --gpu-bind=closest sh -c 'echo "slurm closest: CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '"$work/cudaprobe"
echo "--- the uuid flag: CUDA_VISIBLE_DEVICES names the task's GPU by UUID, and CUDA finds it"
outu=$(srun -n1 --gpus=1 --gpu-bind-topo=closest,uuid,verbose sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES CD=$GPUBIND_CUDA_DEVICES"; '"$work/cudaprobe" 2>&1)
echo "$outu"
check "uuid: CUDA_VISIBLE_DEVICES is $gpu_uuid, GPUBIND_CUDA_DEVICES 0" grep -qiE "^CVD=${gpu_uuid} CD=0\$" <<<"$outu"
check "uuid: the mapping line lists $gpu_uuid" grep -qiE "gpubind: task 0 \(rank 0\): CUDA_VISIBLE_DEVICES=${gpu_uuid} -> GPU" <<<"$outu"
check "uuid: CUDA in the task sees exactly 1 device, bus $gpu_bus" grep -qiE "count=1 err=none dev0=${gpu_bus}/" <<<"$outu"
echo "--- a job without GPUs"
srun -n1 --gres=none "$work/cudaprobe" | tee "$work/nogpu.txt"
check "a step with --gres=none sees no device" grep -q "count=0" "$work/nogpu.txt"
echo "--- the plan cache: a repeated step shape runs no engine child"
hits0=$(grep -c 'plan cache hit' "$work/log/slurmd.log")
for _ in 1 2; do srun -n2 --gpus=1 --gpu-bind-topo "$work/cudaprobe" >"$work/pc.txt" 2>&1; done
hits1=$(grep -c 'plan cache hit' "$work/log/slurmd.log")
grep -h 'step plan took' "$work/log/slurmd.log" | tail -2
check "the second identical step took its plan from the cache" test $((hits1 - hits0)) -ge 1
check "a task of the cached plan still sees its GPU" grep -qiE "count=1 err=none dev0=${gpu_bus}/" "$work/pc.txt"
leftovers "after binding steps"

section "2b. visible=first|localid: CUDA IPC between tasks, cudaSetDevice(local_rank), whereami"
# Each task: how many devices CUDA sees, whether device GPUBIND_CUDA_DEVICES (its own, per the
# plugin) has the bus id of GPUBIND_PCI_BUS_IDS, cudaSetDevice(SLURM_LOCALID), peer access
# between device 0 and 1, and CUDA IPC: rank 0 allocates on its own device and publishes an
# IPC handle in a file; rank 1 opens it (from its own device) and reads the pattern back.
cat >"$work/ipcprobe.cu" <<'EOF'
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("IPC rank=%d ERR %s: %s\n", rank, #x, cudaGetErrorName(e_)); return 1; } } while (0)
int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : ".";
    int rank = atoi(getenv("SLURM_PROCID")), lid = atoi(getenv("SLURM_LOCALID")), n = 0, own = 0;
    const char *cd = getenv("GPUBIND_CUDA_DEVICES"), *bus = getenv("GPUBIND_PCI_BUS_IDS");
    char got[32] = "", path[4096], done[4096];
    if (cd) own = atoi(cd);
    CK(cudaGetDeviceCount(&n));
    CK(cudaDeviceGetPCIBusId(got, sizeof(got), own));
    for (char *p = got; *p; p++) *p = (*p >= 'A' && *p <= 'F') ? *p - 'A' + 'a' : *p;
    int setl = cudaSetDevice(lid) == cudaSuccess;
    cudaGetLastError();
    int peer = -1;
    if (n > 1) CK(cudaDeviceCanAccessPeer(&peer, 0, 1));
    printf("PROBE rank=%d lid=%d count=%d own=%d ownbus=%s plugin=%s match=%d setdevice_localid=%s peer01=%d\n", rank, lid, n,
           own, got, bus ? bus : "-", bus && strlen(bus) > 5 && strstr(got, bus + 5) != NULL, setl ? "ok" : "invalid", peer);
    CK(cudaSetDevice(own));
    snprintf(path, sizeof(path), "%s/ipc.handle", dir);
    snprintf(done, sizeof(done), "%s/ipc.done", dir);
    if (rank == 0) {
        int *d, h[256];
        cudaIpcMemHandle_t m;
        for (int i = 0; i < 256; i++) h[i] = 1000 + i;
        CK(cudaMalloc(&d, sizeof(h)));
        CK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
        CK(cudaIpcGetMemHandle(&m, d));
        FILE *f = fopen(path, "w");
        fwrite(&m, sizeof(m), 1, f);
        fclose(f);
        for (int t = 0; t < 600 && access(done, F_OK); t++) usleep(100000);
        printf("IPC rank=0 served\n");
    } else if (rank == 1) {
        cudaIpcMemHandle_t m;
        int *d, h[256];
        FILE *f = NULL;
        for (int t = 0; t < 600 && !(f = fopen(path, "r")); t++) usleep(100000);
        if (!f || fread(&m, sizeof(m), 1, f) != 1) { printf("IPC rank=1 ERR no handle\n"); return 1; }
        fclose(f);
        int rc = 0;
        cudaError_t e = cudaIpcOpenMemHandle((void **)&d, m, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            printf("IPC rank=1 ERR cudaIpcOpenMemHandle: %s\n", cudaGetErrorName(e));
            rc = 1;
        } else {
            CK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
            printf("IPC rank=1 %s\n", h[0] == 1000 && h[255] == 1255 ? "ok" : "WRONG DATA");
            CK(cudaIpcCloseMemHandle(d));
        }
        f = fopen(done, "w");
        fclose(f);
        return rc;
    }
    return 0;
}
EOF
if nvcc -O2 -o "$work/ipcprobe" "$work/ipcprobe.cu"; then
	chmod 755 "$work/ipcprobe"
	ipcdir=$(mktemp -d "$work/ipc.XXXX")
	chmod 777 "$ipcdir"
	out2b=$(srun -n2 --gpus="$ngpu" --gpu-bind-topo=closest,visible=first,verbose "$work/ipcprobe" "$ipcdir" 2>&1)
	echo "$out2b"
	check "visible=first: each task sees all $ngpu step GPUs" test "$(grep -c "PROBE .*count=$ngpu " <<<"$out2b")" -eq 2
	check "visible=first: CUDA device 0 is the task's GPU (GPUBIND_CUDA_DEVICES=0, bus as the plugin says)" \
		test "$(grep -c 'PROBE .* own=0 .* match=1 ' <<<"$out2b")" -eq 2
	check "visible=first: the mapping line marks the own entry" grep -q '(visible=first, own entry 0)' <<<"$out2b"
	check "visible=first: CUDA IPC from task 0 to task 1 works" grep -q 'IPC rank=1 ok' <<<"$out2b"
	if [[ $ngpu -gt 1 ]]; then
		check "visible=first: peer access between device 0 and 1 is possible" grep -q 'PROBE rank=0 .*peer01=1' <<<"$out2b"
		rm -f "$ipcdir"/ipc.*
		echo "--- visible=own, side by side (one GPU per task: IPC across the tasks' GPUs is expected to fail)"
		srun -n2 --gpus="$ngpu" --gpu-bind-topo=closest "$work/ipcprobe" "$ipcdir" 2>&1
		rm -f "$ipcdir"/ipc.*
		out2d=$(srun -n"$ngpu" --gpus="$ngpu" --gpu-bind-topo=closest,visible=localid,verbose "$work/ipcprobe" "$ipcdir" 2>&1)
		echo "$out2d"
		check "visible=localid: cudaSetDevice(SLURM_LOCALID) works in every task" \
			test "$(grep -c 'PROBE .*setdevice_localid=ok' <<<"$out2d")" -eq "$ngpu"
		check "visible=localid: device SLURM_LOCALID is the task's GPU" \
			test "$(grep -cE 'PROBE rank=[0-9]+ lid=([0-9]+) count=[0-9]+ own=\1 .* match=1 ' <<<"$out2d")" -eq "$ngpu"
	else
		echo "(one GPU: the two tasks share it; localid and peer access need 2 GPUs: run on nvidia-h200-x2)"
	fi
else
	fail "nvcc ipcprobe"
fi
echo "--- gpubind whereami in a task, against nvidia-smi"
wout=$(srun -n1 --gpus=1 --gpu-bind-topo=closest,nic,visible=first "$bundle/build/gpubind" whereami --strict 2>&1)
wrc=$?
echo "$wout"
srun -n1 --gpus=1 --gpu-bind-topo=closest,visible=first "$bundle/build/gpubind" whereami --json >"$out/whereami.json" 2>&1
check "whereami --strict exits 0 (no warning)" test "$wrc" -eq 0
# The GPU the plugin gave the task, as nvidia-smi (outside the job) numbers and names it.
wbus=$(sed -n 's/^GPUBIND_PCI_BUS_IDS=//p' <<<"$wout")
IFS=', ' read -r w_index _ w_uuid _ < <(grep -i "${wbus#0000:}," "$work/smi.csv")
check "whereami: CUDA device 0 is nvidia-smi's GPU $w_index, bus $wbus, $w_uuid (the plugin's GPU)" \
	grep -qiE "^CUDA device 0: GPU $w_index $wbus $w_uuid .* openable" <<<"$wout"
check "whereami: the task is in Slurm's task cgroup" grep -qE '^cgroup 0::.*/task_0$' <<<"$wout"
check "whereami --json has the issue's keys" python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert all(k in d for k in ("host","rank","local_id","cpus","mems","gpus","cpus_local_to_gpus","nic","env","warnings")); assert all(k in d["gpus"][0] for k in ("visible_index","index","pci_bus_id","uuid","numa","openable"))' "$out/whereami.json"

section "3. isolation under Slurm's cgroup v2"
out3=$(srun -n1 --gpus=1 --gpu-bind-topo=isolate,verbose sh -c "cat /proc/self/cgroup; $work/cudaprobe" 2>&1)
echo "$out3"
check "isolate: CUDA sees its GPU" grep -qiE "count=1 err=none dev0=${gpu_bus}/" <<<"$out3"
check "isolate: the task stays in Slurm's task cgroup (no gpubind_* child)" \
	bash -c "grep -q '^0::.*/task_0\$' <<<\"\$1\"" _ "$out3"
leftovers "after the isolate step"

echo "--- a job holding the GPU, and two jobs without GPUs beside it"
sbatch -n1 --gpus=1 --gpu-bind-topo=isolate --wrap "sleep 60" >/dev/null
sleep 2
for opt in --gpus=0 --gres=none; do
	r=$(srun -n1 "$opt" sh -c "if (exec 3<>/dev/nvidia$gpu_index) 2>/dev/null; then echo opened; else echo denied; fi" 2>&1)
	echo "srun $opt: /dev/nvidia$gpu_index: $r"
	check "a job with $opt cannot open the GPU another job holds" grep -q denied <<<"$r"
done
scancel --full -u root
sleep 3

# A task that traps SIGTERM and USR1, prints when, and exits on SIGTERM.
trapper='trap "echo TRAP-TERM \$(date +%s.%N); exit 0" TERM; trap "echo TRAP-USR1 \$(date +%s.%N)" USR1; echo STARTED $(date +%s.%N); while :; do sleep 0.1; done'
signal_test() { # signal_test LABEL PLUGSTACK-LINE: scancel reaches an isolated task
	local label=$1 line=$2 log=$work/sig-$1.txt t0 t1 end
	echo "$line" >"$cfg/plugstack.conf"
	srun -n1 --gpus=1 --gpu-bind-topo=isolate bash -c "$trapper" >"$log" 2>&1 &
	local srun_pid=$!
	for _ in $(seq 50); do grep -q STARTED "$log" && break; sleep 0.2; done
	local job
	job=$(squeue -h -o %A | head -1)
	t0=$(date +%s.%N)
	scancel "$job"
	wait "$srun_pid"
	t1=$(date +%s.%N)
	end=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
	echo "[$label] srun ended $end s after scancel; task output:"
	sed 's/^/    /' "$log"
	if grep -q TRAP-TERM "$log" && awk -v e="$end" 'BEGIN{exit !(e < 10)}'; then
		pass "[$label] scancel: the isolated task's SIGTERM trap ran and it ended in $end s"
	else
		fail "[$label] scancel: trap ran: $(grep -c TRAP-TERM "$log"), ended after $end s (KillWait is 30 s)"
	fi
	echo "$plug" >"$cfg/plugstack.conf"
}
if [[ -f $bundle/old/spank_gpubind.so ]]; then
	echo "--- before the fix: the plugin of $(cat "$bundle/old/REV") (moves the task into task_0/gpubind_*)"
	prev=$failed
	signal_test before "required $bundle/old/spank_gpubind.so cache_dir=$work/cache"
	# The old plugin is expected to fail: that is the evidence, not a failure of this run.
	((failed)) && echo "EXPECTED-FAIL: [before] is the defect this run shows fixed"
	failed=$prev
fi
signal_test after "$plug"

echo "--- a step time limit (srun -t 1 inside salloc) reaches an isolated task"
cat >"$work/limits.sh" <<EOF
srun -n1 --gpus=1 -t 1 --gpu-bind-topo=isolate bash -c '$trapper' >$work/limit.txt 2>&1
date +%s >$work/limit.end
EOF
lim_start=$(date +%s)
salloc -n1 --gpus=1 -t 5 bash "$work/limits.sh" >/dev/null 2>&1
lim_end=$(cat "$work/limit.end" 2>/dev/null || date +%s)
sed 's/^/    limit: /' "$work/limit.txt"
check "step time limit: the isolated task's SIGTERM trap ran" grep -q TRAP-TERM "$work/limit.txt"
check "step time limit: the step ended $((lim_end - lim_start)) s after start (limit 60 s, Slurm checks every 30 s; KillWait 30 s more would show)" \
	test $((lim_end - lim_start)) -lt 100

usr1_test() { # usr1_test LABEL OPTION: srun --signal=USR1@175 with -t 3 (USR1 after ~5 s + Slurm's resolution)
	local log=$work/usr1-$1.txt
	srun -n1 --gpus=1 -t 3 --signal=USR1@175 --gpu-bind-topo="$2" bash -c "$trapper" >"$log" 2>&1 &
	local p=$! t0=$SECONDS
	for _ in $(seq 100); do grep -q TRAP-USR1 "$log" && break; sleep 1; done
	scancel --full -u root
	wait "$p" 2>/dev/null
	sed "s/^/    usr1 $1: /" "$log"
	if grep -q TRAP-USR1 "$log"; then pass "srun --signal=USR1 ($1): the task's USR1 trap ran after $((SECONDS - t0)) s"
	else fail "srun --signal=USR1 ($1): no USR1 within 100 s"; fi
}
echo "--- srun --signal=USR1 reaches an isolated task"
usr1_test isolate isolate
grep -q TRAP-USR1 "$work/usr1-isolate.txt" || usr1_test "control, no isolate" closest
sleep 2

echo "--- accounting: sstat of an isolated busy task"
srun -n1 --gpus=1 --gpu-bind-topo=isolate bash -c 'end=$((SECONDS+6)); x=0; while ((SECONDS<end)); do x=$((x+1)); done' &
acct_pid=$!
sleep 4
job=$(squeue -h -o %A | head -1)
sstat -a -j "$job" -o JobID,NTasks,AveCPU,MaxRSS -P | tee "$work/sstat.txt"
wait "$acct_pid"
check "sstat accounts the isolated task (NTasks 1, CPU time > 0)" \
	awk -F'|' '$1 ~ /\.0$/ && $2 == 1 && $3 != "00:00:00" && $3 != "" {ok=1} END {exit !ok}' "$work/sstat.txt"
leftovers "after the signal and accounting steps"

section "3b. default=closest mode=enforce: jobs that did not ask see what they see without the plugin"
# The same job twice, without the plugin and with an admin default (issue 23): exit status,
# stderr and every task's environment (less the variables that change from job to job) and
# what CUDA sees must agree, except in a GPU step that asked for no binding, and there only in
# CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and GPUBIND_*.
dump='env | LC_ALL=C sort | sed "s/^/E $SLURM_PROCID /"; echo "C $SLURM_PROCID $('"$work"'/cudaprobe 2>&1 | tr "\n" " ")"'
volatile='^E [0-9]+ (SLURM_(JOB_ID|JOBID|JOB_SLUID|[A-Z_]*_SLUID|ARRAY_JOB_ID|HET_JOB_ID|JOB_START_TIME|JOB_END_TIME|TASK_PID|SRUN_COMM_PORT|STEP_LAUNCHER_PORT|LAUNCH_NODE_IPADDR|SRUN_COMM_HOST|SPANK_[A-Z_]*|PMIXP_[A-Z_]*)|PMI[A-Za-z0-9_]*|OMPI_[A-Za-z0-9_]*|TMPDIR|OLDPWD|_|SHLVL)='
bindvars='^E [0-9]+ (CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|GPUBIND_[A-Z_]*)='
sd_run() { # sd_run FILE ARGS...: one job, normalised
	local f=$1 rc
	shift
	"$@" >"$f.out" 2>"$f.err"
	rc=$?
	{ echo "status $rc"; grep -vE 'job [0-9]+|StepId=|Granted|Relinquish|queued|allocated resources' "$f.err"
	  grep -vE "$volatile" "$f.out" | sed -E 's/(dev0=[^ ]*).*/\1/'; } | LC_ALL=C sort >"$f"
}
sd_case() { # sd_case LABEL BOUND ARGS...: BOUND=1 for a GPU step the default binds
	# sd_extra: more plugstack arguments; sd_warn=1: the plugin fails, and the step must
	# run as without it with exactly one "gpubind: warning:" line on stderr.
	local label=$1 bound=$2 a=$work/sd-off b=$work/sd-on n
	shift 2
	echo "" >"$cfg/plugstack.conf"
	sd_run "$a" "$@"
	local line="$plug default=closest mode=enforce ${sd_extra:-}"
	# A launcher= in sd_extra replaces the one in $plug (a key may be given once).
	[[ ${sd_extra:-} == *launcher=* ]] && line=${line/launcher=$work\/libexec\/gpubind-launcher /}
	echo "$line" >"$cfg/plugstack.conf"
	sd_run "$b" "$@"
	echo "$plug" >"$cfg/plugstack.conf"
	if ((${sd_warn:-0})); then
		n=$(grep -c '^gpubind: warning: ' "$b")
		((n == 1)) || fail "[$label] $n gpubind warnings on stderr, want 1"
		grep -v '^gpubind: warning: ' "$b" >"$b.x"; mv "$b.x" "$b"
	fi
	if ((bound)); then
		grep -q ' GPUBIND_PCI_BUS_IDS=' "$b" || fail "[$label] the default bound no task"
		grep -vE "$bindvars" "$a" >"$a.x"; grep -vE "$bindvars" "$b" >"$b.x"; mv "$a.x" "$a"; mv "$b.x" "$b"
	fi
	if diff "$a" "$b" >"$work/sd.diff"; then
		pass "[$label] same as without the plugin"
	else
		fail "[$label] differs from the same job without the plugin:"
		sed 's/^/    /' "$work/sd.diff" | head -20
	fi
}
sd_case "CPU-only step" 0 srun -n2 sh -c "$dump"
sd_case "--gres=none" 0 srun -n2 --gres=none sh -c "$dump"
sd_case "--gpus=0 in a GPU job" 0 salloc -n1 --gpus=1 srun -n1 --gpus=0 sh -c "$dump"
sd_case "exit code" 0 srun -n2 sh -c 'exit $((3 + SLURM_PROCID))'
sd_case "batch step" 0 sh -c "sbatch --wait -n1 --gpus=1 -o $work/sd-batch.out --wrap '$dump' >/dev/null; cat $work/sd-batch.out; rm -f $work/sd-batch.out"
sd_case "user's --gpu-bind=map_gpu:0" 0 srun -n1 --gpus=1 --gpu-bind=map_gpu:0 sh -c "$dump"
sd_case "user's --tres-bind=gres/gpu:map:0" 0 srun -n1 --gpus=1 --tres-bind=gres/gpu:map:0 sh -c "$dump"
sd_case "--gpus-per-task=1" 0 srun -n1 --gpus-per-task=1 sh -c "$dump"
sd_case "GPU step that asked for nothing" 1 srun -n1 --gpus=1 sh -c "$dump"
# Issue 33: the jobs that fill GPU clusters, under cgroup v2 on a real GPU.
# set_device(SLURM_LOCALID) (Megatron, NeMo, Lightning, DDP scripts): one task per GPU, each
# calls cudaSetDevice(SLURM_LOCALID) and allocates there; with the default every task still
# sees every step GPU (visible=localid), so each succeeds as it does without the plugin.
cat >"$work/setdev.cu" <<'EOF'
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    const char *l = getenv("SLURM_LOCALID");
    int dev = l ? atoi(l) : 0;
    void *p = NULL;
    cudaError_t e = cudaSetDevice(dev);
    if (e == cudaSuccess) e = cudaMalloc(&p, 1 << 20);
    if (e == cudaSuccess) e = cudaFree(p);
    printf("SETDEV rank=%s device=%d %s\n", getenv("SLURM_PROCID"), dev, e == cudaSuccess ? "ok" : cudaGetErrorName(e));
    return e != cudaSuccess;
}
EOF
nvcc -O2 -o "$work/setdev" "$work/setdev.cu" || fail "nvcc setdev"
chmod 755 "$work/setdev"
sd_case "set_device(SLURM_LOCALID): $ngpu tasks, $ngpu GPUs" 1 srun -n"$ngpu" --gpus="$ngpu" sh -c "$dump; $work/setdev"
echo "$plug default=closest mode=enforce" >"$cfg/plugstack.conf"
srun -n"$ngpu" --gpus="$ngpu" "$work/setdev" >"$work/setdev.txt" 2>&1
echo "$plug" >"$cfg/plugstack.conf"
cat "$work/setdev.txt"
check "set_device(SLURM_LOCALID) succeeds in all $ngpu tasks under the default" test "$(grep -c ' ok$' "$work/setdev.txt")" -eq "$ngpu"
if python3 -c 'import torch' 2>/dev/null; then
	cat >"$work/setdev.py" <<'EOF'
import os, torch
d = int(os.environ["SLURM_LOCALID"])
torch.cuda.set_device(d)
torch.ones(1, device="cuda")
print("TORCH", os.environ["SLURM_PROCID"], d, "ok")
EOF
	sd_case "torch.cuda.set_device(SLURM_LOCALID): $ngpu tasks, $ngpu GPUs" 1 srun -n"$ngpu" --gpus="$ngpu" sh -c "$dump; python3 $work/setdev.py"
else
	echo "no torch for python3: the torch set_device case is not run"
fi
if ((ngpu > 1)); then
	sd_case "1 task and all $ngpu GPUs (torchrun's shape): left alone" 0 srun -n1 --gpus="$ngpu" sh -c "$dump"
fi
sd_case "user's --gpu-bind=none" 0 srun -n1 --gpus=1 --gpu-bind=none sh -c "$dump"
sd_case "user's --tres-bind=gres/gpu:none" 0 srun -n1 --gpus=1 --tres-bind=gres/gpu:none sh -c "$dump"
# The plugin cannot plan: a CPU-only step is untouched; a GPU step runs as without the plugin
# and its first task warns once (default_mode=optional, the default).
sd_extra="launcher=$work/no-such-launcher" sd_case "launcher missing: CPU-only step" 0 srun -n2 sh -c "$dump"
sd_extra="launcher=$work/no-such-launcher" sd_warn=1 sd_case "launcher missing: GPU step" 0 srun -n1 --gpus=1 sh -c "$dump"
printf '#!/bin/sh\nexec sleep 60\n' >"$work/libexec/hang" && chmod 755 "$work/libexec/hang"
sd_extra="launcher=$work/libexec/hang timeout=500" sd_warn=1 sd_case "launcher hanging: GPU step" 0 srun -n1 --gpus=1 sh -c "$dump"
rm -f "$work/cache/launcher-failed"
leftovers "after the default= checks"

section "4. libgpuhelper under Slurm's PMIx, with ConstrainDevices"
mkdir -p "$work/pc"
sed -e "s|@PREFIX@|$root|; s|@LIBDIR@|$B|; s|@INCLUDEDIR@|$root/lib|" lib/gpuhelper.pc.in >"$work/pc/gpuhelper.pc"
if command -v nvcc >/dev/null && [[ -e /usr/include/nccl.h ]]; then
	mkdir -p "$work/ghlib" && ln -sf "$(readlink -f "$B/libgpuhelper.so.1")" "$work/ghlib/libgpuhelper.so"
	nvcc -O2 -I lib -o "$work/nccl_allreduce" examples/nccl_allreduce.cu -L"$work/ghlib" -lgpuhelper -lnccl \
		-Xlinker -rpath -Xlinker "$B" || fail "nvcc nccl_allreduce"
	for n in 1 2; do
		echo "--- srun --mpi=pmix -n$n --gpu-bind-topo nccl_allreduce"
		GPUHELPER_EXAMPLE_GROUP=rank srun --mpi=pmix -n$n --gpus=1 --gpu-bind-topo "$work/nccl_allreduce" 2>&1 |
			tee "$work/ar$n.txt"
		check "n=$n: every rank's sum check OK" test "$(grep -c 'sum check OK' "$work/ar$n.txt")" -eq $n
		check "n=$n: the helper reports the bus id CUDA uses ($gpu_bus)" grep -qi "bus $gpu_bus (helper said cuda_device 0 bus $gpu_bus" "$work/ar$n.txt"
	done
else
	fail "no nvcc or nccl.h: section 4 not run"
fi

# 4b. the Python package gpubind with the machine's PyTorch and NCCL (tests/gpu/python.sh);
# GPU_SKIP_PYTHON=1 leaves it out (a short lease that re-checks the plugin only).
# shellcheck source=tests/gpu/python.sh
[[ -n ${GPU_SKIP_PYTHON:-} ]] || . "$root/tests/gpu/python.sh"

# 6. Slurm's OCI containers (tests/gpu/containers.sh) and 7. pyxis + enroot
# (tests/gpu/enroot.sh); GPU_SKIP_CONTAINERS=1 leaves them out.
if [[ -z ${GPU_SKIP_CONTAINERS:-} ]]; then
	# shellcheck source=tests/gpu/containers.sh
	. "$root/tests/gpu/containers.sh"
	# shellcheck source=tests/gpu/enroot.sh
	. "$root/tests/gpu/enroot.sh"
fi

# GPU_SKIP_BENCH=1: every check above, not the timings below (a short lease).
[[ -n ${GPU_SKIP_BENCH:-} ]] && summary

section "5. launch cost, one core per rank (alternated, median of 9)"
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
steptime() { local t0 t1; t0=$(date +%s%N); srun "$@" true >/dev/null 2>&1; t1=$(date +%s%N); echo $(((t1 - t0) / 1000)); }
lastplan() { grep -h 'step plan took' "$work/log/slurmd.log" | tail -1 | sed 's/.*took \([0-9.]*\) ms.*/\1/'; }
# Variants, alternated in every round: no plugin; the plugin with plan_cache=0 (the engine
# every step, as before the plan cache); the first step of a shape (plans/ emptied);
# a repeated step (a plan cache hit). With .gpu/old (GPUBIND_OLD_REV) also oldnocache: that
# plugin with plan_cache=0, for the launcher against the forked engine child side by side.
variants="none nocache first repeat"
[[ -f $bundle/old/spank_gpubind.so ]] && variants+=" oldnocache"
for n in 1 8 16; do
	for v in $variants; do : >"$work/t.$v.$n"; : >"$work/p.$v.$n"; done
	for i in $(seq 0 9); do
		for v in $variants; do
			case $v in
			none) : >"$cfg/plugstack.conf" ;;
			nocache) echo "$plug plan_cache=0" >"$cfg/plugstack.conf" ;;
			oldnocache) echo "required $bundle/old/spank_gpubind.so cache_dir=$work/cache plan_cache=0" >"$cfg/plugstack.conf" ;;
			first) echo "$plug" >"$cfg/plugstack.conf" && rm -rf "$work/cache/plans" ;;
			repeat) echo "$plug" >"$cfg/plugstack.conf" ;;
			esac
			if [[ $v == none ]]; then
				t=$(steptime -n"$n" --gpus=1)
			else
				t=$(steptime -n"$n" --gpus=1 --gpu-bind-topo)
			fi
			((i > 0)) && echo "$t" >>"$work/t.$v.$n" && [[ $v != none ]] && lastplan >>"$work/p.$v.$n"
		done
	done
	mo=$(median <"$work/t.none.$n")
	for v in ${variants#none }; do
		mw=$(median <"$work/t.$v.$n")
		echo "LAUNCH n=$n $v ${mw} us, none ${mo} us, ratio $(awk -v a="$mw" -v b="$mo" 'BEGIN{printf "%.3f", a/b}'), step plan took median $(median <"$work/p.$v.$n") ms"
	done
done
echo "$plug" >"$cfg/plugstack.conf"

echo "--- gpuhelper_init against raw PMIx (bench/c), median of 9 of the slowest rank, ms"
# One core per rank (n = 2, 8, 16: Slurm gives each task its own CPU), and oversubscribed
# (n = 32 with --overcommit on the 16 cores), where the time is CPU-bound and the Go runtime's
# own start sets a floor (bench/RESULTS.md, libgpuhelper 1.3). The two programs alternate
# (their order flips every round); round 0 warms up. Goal (issue 26): INIT ratio <= 1.10.
: >"$cfg/plugstack.conf"
W=(-O2 -I bench/c -I lib -I "$bundle/include")
gcc "${W[@]}" -o "$work/stamp" bench/c/stamp.c &&
	gcc "${W[@]}" -o "$work/raw_pmix" bench/c/raw_pmix.c -L"$bundle/pmix2/lib" -lpmix -lnccl &&
	gcc "${W[@]}" -o "$work/gh_init" bench/c/gh_init.c -L"$bundle/pmix2/lib" -lpmix "$B/libgpuhelper.so.1" -lnccl \
		-Wl,-rpath,"$B" || fail "build the init benchmarks"
for n in 2 8 16 32; do
	extra=()
	((n > 16)) && extra=(--overcommit)
	for p in gh_init raw_pmix; do : >"$work/init.$p.$n"; : >"$work/cpu.$p.$n"; done
	for i in $(seq 0 9); do
		progs=(gh_init raw_pmix)
		((i % 2)) && progs=(raw_pmix gh_init)
		for p in "${progs[@]}"; do
			out=$(srun --mpi=pmix -n"$n" "${extra[@]}" "$work/stamp" "$work/$p" 2>/dev/null)
			t=$(awk '$1=="TIME" {print $3*1000}' <<<"$out" | sort -g | tail -1)
			c=$(awk '$1=="TIME" {print $6*1000}' <<<"$out" | median)
			((i > 0)) && [[ -n $t ]] && echo "$t" >>"$work/init.$p.$n" && echo "$c" >>"$work/cpu.$p.$n"
		done
	done
	g=$(median <"$work/init.gh_init.$n")
	r=$(median <"$work/init.raw_pmix.$n")
	label=INIT
	((n > 16)) && label=INIT-OVERSUBSCRIBED
	echo "$label n=$n gpuhelper_init ${g} ms, raw PMIx ${r} ms, ratio $(awk -v a="$g" -v b="$r" 'BEGIN{printf "%.3f", a/b}'), CPU per rank $(median <"$work/cpu.gh_init.$n") vs $(median <"$work/cpu.raw_pmix.$n") ms"
done
echo "$plug" >"$cfg/plugstack.conf"

summary
