# Section 6 of tests/gpu/slurm.sh (sourced there; uses its srun, $bundle, $work, $cfg, $out,
# $gpu_bus, $gpu_uuid, $work/cudaprobe, $B, pass, fail, check): Slurm's OCI containers
# (srun --container=BUNDLE, oci.conf beside slurm.conf) with the runc that slurm-bundle.sh
# carries (.gpu/oci/runc.gz, static). GPU_SKIP_CONTAINERS=1 leaves it out.
#
#  6a. what the machine allows: user namespaces, /dev/fuse, overlayfs, cgroup v2 and its
#      delegation (reported as PROBE: lines; only what the section needs is a check)
#  6b. the bundle: a small rootfs (sh, the CUDA probe, gpubind and the C/C++ libraries they
#      link), the driver's libraries (libcuda, libnvidia-ml, libnvidia-ptxjitcompiler) and
#      nvidia-smi bind-mounted from the host, /dev/nvidia* bind-mounted, a device rule for
#      them, as nvidia-container-cli would set up (the machine has none); runc runs it directly
#  6c. srun --container with --gpu-bind-topo=closest,verbose and closest,uuid,verbose: in the
#      container CUDA sees exactly the task's GPU, whose bus id and UUID are the mapping line's;
#      nvidia-smi -L and gpubind whereami there name it too
#  6d. which cgroup the containerized task is in, next to the same step outside a container,
#      and whether a step without GPUs can open the GPU in a container, against what
#      docs/containers.md says for jobs of root (v1: below the task's cgroup, nothing more
#      opens; v2: beside it, runc's device rule replaces Slurm's); isolate is refused there
#
# Run locally (no GPU): tests/gpu/containers-local.sh runs 6a-6d on a private cluster with fake
# GPUs and stops, with a FAIL, where CUDA would be needed.

section "6. Slurm OCI containers (srun --container) with the carried runc"
oci=$work/oci
mkdir -p "$oci"
chmod 755 "$oci"
# The carried runc is compressed (slurm-bundle.sh); GPU_OCI_RUNC names another.
runc=${GPU_OCI_RUNC:-$oci/runc}
if [[ -z ${GPU_OCI_RUNC:-} ]]; then
	gzip -dc "$bundle/oci/runc.gz" >"$runc" && chmod 755 "$runc" || fail "oci: cannot unpack $bundle/oci/runc.gz"
fi

# ---- 6a. what the machine allows
echo "--- 6a. what this machine allows"
if unshare -U -r true 2>/dev/null; then echo "PROBE: user namespaces: yes (unshare -U -r)"; else
	echo "PROBE: user namespaces: no ($(unshare -U -r true 2>&1 | head -1))"; fi
echo "PROBE: max_user_namespaces=$(cat /proc/sys/user/max_user_namespaces 2>/dev/null || echo -)" \
	"unprivileged_userns_clone=$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null || echo -)"
if [[ -c /dev/fuse ]]; then echo "PROBE: /dev/fuse: $(stat -c '%A %t:%T' /dev/fuse)"; else echo "PROBE: /dev/fuse: missing"; fi
mkdir -p "$oci/ovl/l" "$oci/ovl/u" "$oci/ovl/w" "$oci/ovl/m"
if mount -t overlay overlay -o lowerdir="$oci/ovl/l",upperdir="$oci/ovl/u",workdir="$oci/ovl/w" "$oci/ovl/m" 2>/dev/null; then
	echo "PROBE: overlayfs: yes (as root)"
	umount "$oci/ovl/m"
else echo "PROBE: overlayfs: no"; fi
cgfs=$(stat -fc %T /sys/fs/cgroup)
echo "PROBE: /sys/fs/cgroup is $cgfs; mount options: $(awk '$2 == "/sys/fs/cgroup" {print $4}' /proc/mounts)"
if [[ $cgfs == cgroup2fs ]]; then
	echo "PROBE: cgroup v2 controllers at the root: $(cat /sys/fs/cgroup/cgroup.controllers)"
	echo "PROBE: this shell's cgroup: $(cat /proc/self/cgroup)"
	grep -q nsdelegate /proc/mounts && echo "PROBE: cgroup2 nsdelegate: yes" || echo "PROBE: cgroup2 nsdelegate: no"
fi
for t in fusermount fusermount3 squashfuse fuse-overlayfs mksquashfs runc crun nvidia-container-cli enroot; do
	command -v "$t" >/dev/null && echo "PROBE: $t: $(command -v "$t")"
done
if ! "$runc" --version >"$oci/runc-version" 2>&1; then
	fail "oci: the carried runc ($runc) does not run: $(head -1 "$oci/runc-version")"
	return 0 2>/dev/null || exit 1
fi
echo "runc: $(tr '\n' ' ' <"$oci/runc-version")"

# ---- 6b. the bundle
echo "--- 6b. the bundle"
rootfs=$oci/bundle/rootfs
mkdir -p "$rootfs"/{bin,usr/bin,usr/lib/x86_64-linux-gnu,lib64,etc,dev,proc,sys,tmp,run/slurm,probe}
chmod 1777 "$rootfs/tmp"
# Programs of the image (copied, as an image would hold them) and the libraries they link.
cp -L /bin/sh "$rootfs/bin/sh"
cp -L /bin/sh "$rootfs/usr/bin/sh"
cp -L "$B/gpubind" "$rootfs/usr/bin/gpubind"
oci_cudaprobe=${oci_cudaprobe:-$work/cudaprobe}
[[ -x $oci_cudaprobe ]] && cp -L "$oci_cudaprobe" "$rootfs/probe/cudaprobe"
# Driver files bound from the host, as nvidia-container-cli would: libcuda, libnvidia-ml,
# libnvidia-ptxjitcompiler (by soname, from ldconfig) and nvidia-smi.
drvlibs=()
for so in libcuda.so.1 libnvidia-ml.so.1 libnvidia-ptxjitcompiler.so.1; do
	p=$(ldconfig -p | awk -v s="$so" '$1 == s && $NF ~ /^\// {print $NF; exit}')
	[[ -n $p ]] && drvlibs+=("$(readlink -f "$p"):/usr/lib/x86_64-linux-gnu/$so")
done
smi=$(command -v nvidia-smi || true)
libsof() { ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' | sort -u; }
deps=$(libsof "$rootfs/bin/sh" "$rootfs/usr/bin/gpubind" ${oci_cudaprobe:+"$rootfs/probe/cudaprobe"} ${smi:+"$smi"} \
	"${drvlibs[@]%%:*}" | grep -vE 'lib(cuda|nvidia-)')
for l in $deps; do
	case $l in
	*/ld-linux-x86-64.so.2) cp -L "$l" "$rootfs/lib64/ld-linux-x86-64.so.2" ;;
	*) cp -L "$l" "$rootfs/usr/lib/x86_64-linux-gnu/" ;;
	esac
done
ln -sfn usr/lib "$rootfs/lib"
printf 'root:x:0:0:root:/:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"
: >"$rootfs/etc/gpubind-test-image"
# Device nodes: every /dev/nvidia* of the node (enroot's default /dev holds them all too), the
# device rules allow their majors. GPU_OCI_DEVS overrides (the local run: fake nodes).
mapfile -t devs < <(ls -d ${GPU_OCI_DEVS:-/dev/nvidia*} 2>/dev/null; ls /dev/nvidia-caps/* 2>/dev/null)
majors=$(for d in "${devs[@]}"; do [[ -c $d ]] && stat -c '%t' "$d"; done | sort -u | while read -r h; do echo $((16#$h)); done)
echo "device nodes bound: ${devs[*]:-none} (majors $(echo $majors))"
echo "driver files bound: ${drvlibs[*]:-none} ${smi:-no nvidia-smi}"
python3 - "$oci/bundle/config.json" "$majors" "${devs[@]}" -- "${drvlibs[@]}" ${smi:+"$smi:/usr/bin/nvidia-smi"} \
	${GPU_OCI_BINDS:-} <<'EOF'
import json, sys
path, majors = sys.argv[1], sys.argv[2].split()
rest = sys.argv[3:]
cut = rest.index("--")
devs, binds = rest[:cut], rest[cut + 1:]
caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
mounts = [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
    {"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "nosuid", "noexec", "nodev", "ro"]},
]
for d in devs:
    # /dev/nvidiaN inside, whatever the node's path outside (the local run's fake nodes)
    name = d.rsplit("/", 1)[1]
    dest = "/dev/nvidia-caps/" + name if "/nvidia-caps/" in d else "/dev/" + name
    mounts.append({"destination": dest, "type": "none", "source": d, "options": ["bind"]})
for b in binds:
    src, dst = b.split(":", 1) if ":" in b else (b, b)
    mounts.append({"destination": dst, "type": "none", "source": src, "options": ["rbind", "ro"] if src == dst else ["bind", "ro"]})
rules = [{"allow": False, "access": "rwm"}] + [{"allow": True, "type": "c", "major": int(m), "access": "rwm"} for m in majors]
config = {
    "ociVersion": "1.0.2",
    "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/",
                "env": ["PATH=/usr/bin:/bin", "CUDA_VISIBLE_DEVICES=7"],
                "capabilities": {k: caps for k in ("bounding", "effective", "permitted", "ambient")},
                "noNewPrivileges": True},
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "oci",
    "mounts": mounts,
    "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
              "resources": {"devices": rules},
              "maskedPaths": ["/proc/kcore", "/proc/keys", "/sys/firmware"]},
}
json.dump(config, open(path, "w"), indent=1)
EOF
cp "$oci/bundle/config.json" "$out/oci-config.json" 2>/dev/null
# The task script: one line of what the task has, then whereami's GPU and the CUDA probe and
# nvidia-smi where the image has them. $1: the directory of the GPU nodes (outside the local
# run's fake ones), $2: more whereami arguments (the local run: --root FIXTURE).
cat >"$rootfs/probe/task.sh" <<'EOF'
o=; for d in "$1"/nvidia[0-9]*; do if [ -r "$d" ] && [ -w "$d" ]; then o="$o${o:+,}${d##*/}"; fi; done
cg=; while read -r l; do case "$l" in *:devices:*|0::*) cg="$cg${cg:+;}$l";; esac; done </proc/self/cgroup
echo "OCI rank=$SLURM_PROCID where=$(test -e /etc/gpubind-test-image && echo inside || echo outside) CVD=${CUDA_VISIBLE_DEVICES:--} NVD=${NVIDIA_VISIBLE_DEVICES:--} BUS=${GPUBIND_PCI_BUS_IDS:--} opens=${o:--} cgroup=${cg:--}"
gpubind whereami --json --dev "$1" $2 2>&1 | { w=; while read -r l; do w="$w$l"; done; echo "OCIW rank=$SLURM_PROCID $w"; }
if [ -x /probe/cudaprobe ]; then /probe/cudaprobe; fi
if command -v nvidia-smi >/dev/null; then nvidia-smi -L | while read -r l; do echo "SMI $l"; done; fi
EOF
cp "$rootfs/probe/task.sh" "$oci/task.sh"
chmod -R a+rX "$oci/bundle"
# runc directly, outside Slurm: the container starts and sees the node's GPU.
( cd "$oci" && "$runc" --root="$oci/state-direct" run -b "$oci/bundle" gpubind-oci-direct ) </dev/null >"$oci/direct.txt" 2>&1
direct=$(cat "$oci/direct.txt")
echo "$direct" | head -5
if [[ -n ${smi:-} ]]; then
	# the default args (sh) read stdin, which is /dev/null: nvidia-smi through a config with args
	python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["process"]["args"]=["nvidia-smi","-L"]; json.dump(c,open(sys.argv[1],"w"))' "$oci/bundle/config.json"
	( cd "$oci" && "$runc" --root="$oci/state-direct" run -b "$oci/bundle" gpubind-oci-smi ) </dev/null >"$oci/direct-smi.txt" 2>&1
	cat "$oci/direct-smi.txt"
	check "oci: runc runs the bundle outside Slurm, nvidia-smi -L in it lists $gpu_uuid" grep -qi "$gpu_uuid" "$oci/direct-smi.txt"
	cp "$out/oci-config.json" "$oci/bundle/config.json" 2>/dev/null ||
		python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["process"]["args"]=["sh"]; json.dump(c,open(sys.argv[1],"w"))' "$oci/bundle/config.json"
else
	check "oci: runc runs the bundle outside Slurm" test -z "$(grep -i 'error\|fatal' "$oci/direct.txt")"
fi

# ---- 6c. srun --container
echo "--- 6c. srun --container=$oci/bundle"
ocistate=$oci/state
mkdir -p "$ocistate" && chmod 1777 "$ocistate"
rt="$runc --rootless=true --root=$ocistate/%U/"
oci_conf=$cfg/oci.conf
cat >"$oci_conf" <<EOF
MountSpoolDir=/run/slurm
RunTimeQuery="$rt state %n.%u.%j.%s.%t"
RunTimeKill="$rt kill -a %n.%u.%j.%s.%t"
RunTimeDelete="$rt delete --force %n.%u.%j.%s.%t"
RunTimeRun="$rt run %n.%u.%j.%s.%t -b %b"
EOF
cp "$oci_conf" "$out/" 2>/dev/null
oci_step() { # oci_step FILE SRUN-ARGS...: the step outside (FILE.out) and inside (FILE.in)
	local f=$1
	shift
	PATH=$rootfs/usr/bin:$PATH srun "$@" /bin/sh "$oci/task.sh" "${GPU_OCI_DEVDIR:-/dev}" "${GPU_OCI_WHEREAMI:-}" >"$f.out" 2>&1
	srun --container="$oci/bundle" "$@" /bin/sh /probe/task.sh /dev "${GPU_OCI_WHEREAMI:-}" >"$f.in" 2>&1
	echo "- outside:" && cat "$f.out" && echo "- inside:" && cat "$f.in"
}
field() { sed -n "s/.*$2=\([^ ]*\).*/\1/p" <<<"$(grep -m1 "^OCI rank=0 " "$1")"; }
# check_gpu_task_inside WHAT FILE: task 0 of a one-GPU step (FILE.out outside, FILE.in inside)
# ran in the container and sees there what it sees outside; whereami, the mapping line, CUDA
# and nvidia-smi inside name the step's GPU. Sections 6 and 7 share it.
check_gpu_task_inside() {
	local what=$1 f=$2 line
	line=$(grep -m1 'gpubind: task 0' "$f.in")
	check "$what: the task ran in the container" grep -q '^OCI rank=0 where=inside' "$f.in"
	check "$what: CUDA_VISIBLE_DEVICES and GPUBIND_PCI_BUS_IDS in the container are those outside ($(field "$f.out" CVD) $(field "$f.out" BUS))" \
		test "$(field "$f.in" CVD) $(field "$f.in" BUS)" = "$(field "$f.out" CVD) $(field "$f.out" BUS)" -a "$(field "$f.in" BUS)" != -
	check "$what: the device nodes the task can open in the container are those outside ($(field "$f.out" opens))" \
		test "$(field "$f.in" opens)" = "$(field "$f.out" opens)" -a "$(field "$f.in" opens)" != -
	check "$what: gpubind whereami in the container names bus $gpu_bus, openable" \
		grep -qiE "^OCIW rank=0 .*\"pci_bus_id\": ?\"$gpu_bus\", ?\"uuid\": ?\"[^\"]*\", ?\"numa\": ?-?[0-9]+, ?\"openable\": ?true" "$f.in"
	check "$what: the mapping line names bus $gpu_bus and UUID $gpu_uuid" grep -qiE "$gpu_bus $gpu_uuid" <<<"$line"
	if [[ -x ${oci_cudaprobe:-} ]]; then
		check "$what: CUDA in the container sees exactly 1 device, bus $gpu_bus, UUID $gpu_uuid (the mapping line's)" \
			grep -qiE "count=1 err=none dev0=${gpu_bus}/${gpu_uuid}\$" "$f.in"
	else
		fail "$what: no CUDA probe (no GPU here): the CUDA check did not run"
	fi
	if [[ -n ${smi:-} ]]; then
		check "$what: nvidia-smi -L in the container lists $gpu_uuid" grep -qi "^SMI .*$gpu_uuid" "$f.in"
	fi
}
for opt in closest uuid; do
	f=$oci/step-$opt
	flags=closest,verbose
	[[ $opt == uuid ]] && flags=closest,uuid,verbose
	echo "--- --gpu-bind-topo=$flags"
	oci_step "$f" -n1 --gpus=1 --gpu-bind-topo=$flags
	check_gpu_task_inside "oci $opt" "$f"
	check "oci $opt: the bundle's CUDA_VISIBLE_DEVICES=7 did not reach the task" test "$(field "$f.in" CVD)" != 7
	[[ $opt == uuid ]] && check "oci uuid: CUDA_VISIBLE_DEVICES in the container is $gpu_uuid" test "$(field "$f.in" CVD)" = "$gpu_uuid"
done

# ---- 6d. the cgroup, and a step without GPUs
echo "--- 6d. the containerized task's cgroup; a step without GPUs"
f=$oci/step-closest
cin=$(field "$f.in" cgroup)
cout=$(field "$f.out" cgroup)
norm() { sed -E 's/job_[0-9]+/job_J/g; s/step_[0-9]+/step_S/g; s/gpubind_j[0-9]+_s[0-9]+_p[0-9]+_t/gpubind_t/g; s#/[^/;]+\.[^/;]+\.[0-9]+\.[0-9]+\.[0-9]+#/CONTAINER#g' <<<"$1"; }
echo "outside: $cout"
echo "inside:  $cin"
# Per hierarchy (v1: the devices line; v2 and hybrid: the 0:: line): the same cgroup, or one
# below it (a child inherits v1 rules; on v2 the task cgroup's program runs for its subtree).
cg_where() { # cg_where INSIDE OUTSIDE: same, below or left
	local i o r=same
	IFS=';' read -ra i <<<"$(norm "$1")"
	IFS=';' read -ra o <<<"$(norm "$2")"
	((${#i[@]} == ${#o[@]})) || { echo left; return; }
	for k in "${!i[@]}"; do
		if [[ ${i[k]} == "${o[k]}" ]]; then continue; fi
		if [[ ${i[k]} == "${o[k]%/}"/* ]]; then r=below; else echo left; return; fi
	done
	echo $r
}
# What docs/containers.md says for jobs of root (these are): cgroup v1, below the task's cgroup;
# cgroup v2, beside it (TestOCIRootRuncV2LeavesTaskCgroup), where runc's own device program
# replaces Slurm's. The checks confirm (or refute) that on a real Slurm.
where=$(cg_where "$cin" "$cout")
echo "the containerized task's cgroup is $where the task's"
if [[ $cgfs == cgroup2fs ]]; then
	check "oci (cgroup v2, root): runc put the containerized task beside the task's cgroup ($cin; task: $cout), as TestOCIRootRuncV2LeavesTaskCgroup found" test "$where" = left
else
	check "oci (cgroup v1, root): the containerized task is in (or below) the task's cgroup ($cin; task: $cout)" test "$where" != left
fi
oci_step "$oci/step-nogpu" -n1 --gres=none
check "oci: a step without GPUs opens no GPU outside a container" grep -q '^OCI rank=0 where=outside .*opens=- ' "$oci/step-nogpu.out"
if grep -q '^OCI rank=0 where=inside' "$oci/step-nogpu.in"; then
	nog=$(field "$oci/step-nogpu.in" opens)
	echo "a step without GPUs, in a container: opens $nog"
	if [[ $cgfs == cgroup2fs ]]; then
		# Slurm's ALLOW_OVERRIDE programs are replaced by runc's in runc's own cgroup: the
		# bundle's c 195:* rule decides (docs/containers.md). Confirmed when it opens the GPU.
		check "oci (cgroup v2, root): a step without GPUs opens the GPU in a runc container ($nog): Slurm's ConstrainDevices does not hold there, as docs/containers.md says" test "$nog" != -
		[[ -x $oci_cudaprobe ]] && grep -m1 '^CUDA' "$oci/step-nogpu.in"
	else
		check "oci: a step without GPUs opens no GPU in a container either" test "$nog" = -
	fi
else
	# runc as root below a cgroup v1 device list that denies something cannot start at all
	# (docs/containers.md): nothing was opened.
	check "oci: a step without GPUs: its container did not start ($(grep -m1 -o 'runc run failed.*' "$oci/step-nogpu.in" | cut -c1-100)), so it opened nothing" \
		grep -q 'runc run failed' "$oci/step-nogpu.in"
fi
echo "--- isolate in a container step of root: gpubind refuses it (mode=enforce: the step fails)"
log=${GPU_OCI_SLURMD_LOG:-$work/log/slurmd.log}
n0=$(grep -c "isolate: the step runs in Slurm's OCI containers" "$log")
srun --container="$oci/bundle" -n1 --gpus=1 --gpu-bind-topo=closest,isolate /bin/sh /probe/task.sh /dev >"$oci/step-isolate.in" 2>&1
rc=$?
cat "$oci/step-isolate.in"
n1=$(grep -c "isolate: the step runs in Slurm's OCI containers" "$log")
grep -m1 "isolate: the step runs in Slurm's OCI containers" "$log" | cut -c1-300
check "oci: isolate in root's container step is refused, naming why (srun exit $rc, the refusal in the slurmd log)" test "$rc" -ne 0 -a "$n1" -gt "$n0"
rm -f "$oci_conf"
[[ $(type -t leftovers) == function ]] && leftovers "after the container steps"
