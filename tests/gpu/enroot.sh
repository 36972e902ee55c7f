# Section 7 of tests/gpu/slurm.sh: pyxis + enroot (srun --container-image) with the GPU.
# Sourced after section 6 (tests/gpu/containers.sh), whose image tree ($rootfs, with the CUDA
# probe, gpubind and the task script /probe/task.sh), driver files ($drvlibs, $smi) and
# helpers (field, norm) it reuses; and it uses slurm.sh's srun, $bundle, $work, $cfg, $plug,
# $out, $gpu_bus, $gpu_uuid, pass, fail, check. GPU_SKIP_CONTAINERS=1 leaves it out.
#
#  7a. pyxis and enroot as slurm-bundle.sh packed them (.gpu/containers: tests/containers/
#      build.sh's install for this Slurm, with the squashfs tools and libraries the machine
#      lacks), unpacked into $enr and relocated there. slurm.sh put $enr/bin on the daemons'
#      PATH in section 1: pyxis runs enroot from slurmstepd's PATH. enroot is set up as at a
#      site without libnvidia-container (this machine has none): its nvidia hook is taken out
#      and the driver's files (libcuda, libnvidia-ml, libnvidia-ptxjitcompiler, nvidia-smi) are
#      bound in by enroot's own mount configuration (mounts.d); /dev is enroot's default, the
#      host's, and only the task's device cgroup restricts it.
#  7b. the image: section 6's tree packed with mksquashfs.
#  7c. steps of root and of nobody (enroot in a user namespace, pyxis's seccomp filter), with
#      gpubind after pyxis in plugstack.conf (docs/containers.md's order) and before it:
#      closest, closest,uuid, closest,isolate and plugstack containers=yes. Each step runs
#      outside and inside a container: inside, CUDA sees exactly the task's GPU (bus id and
#      UUID of the mapping line), nvidia-smi -L and whereami name it, CUDA_VISIBLE_DEVICES,
#      the bus ids and the device nodes the task can open are those outside, and the task is
#      in the cgroup Slurm gave it (enroot's cgroup namespace is rooted there).
#  7d. a step without GPUs opens no GPU in an enroot container: ConstrainDevices holds (on
#      cgroup v2, root's runc containers of section 6 do not keep it).
#  7e. an admin's plugstack default=closest mode=enforce: a GPU step that asked for nothing is
#      bound in the container as outside, --gpu-bind=none and a CPU-only step are left alone.
#
# The local run (tests/gpu/containers-local.sh, fake GPUs) sets GPU_ENROOT_FROM (an installed
# prefix to copy instead of the bundle's archive), GPU_PLUGSTACK and GPU_ENROOT_MOUNTS (the
# fake device nodes and the fixture, bound into the container at the same paths).

section "7. pyxis + enroot (srun --container-image) with the carried enroot"
enr=${GPU_ENROOT_DIR:-$work/enroot}
plugfile=${GPU_PLUGSTACK:-$cfg/plugstack.conf}
devdir=${GPU_OCI_DEVDIR:-/dev}
whereami_args=${GPU_OCI_WHEREAMI:-}

# ---- 7a. enroot and pyxis
echo "--- 7a. enroot and pyxis, relocated to $enr"
mkdir -p "$enr"
if [[ -n ${GPU_ENROOT_FROM:-} ]]; then
	from=$GPU_ENROOT_FROM
	cp -a "$from"/. "$enr/"
else
	from=$(cat "$bundle/containers/prefix")
	tar -xzf "$bundle/containers/enroot-pyxis.tar.gz" -C "$enr"
fi
chmod 755 "$enr"
# The install names its prefix in its scripts and configuration (enroot's own `make install`
# rewrites them the same way for DESTDIR).
grep -rlI -- "$from" "$enr" | while read -r f; do sed -i "s;$from;$enr;g" "$f"; done
rm -f "$enr/etc/enroot/hooks.d/98-nvidia.sh"
{
	echo "# The driver's files, as nvidia-container-cli would mount them (tests/gpu/enroot.sh)."
	for d in "${drvlibs[@]}"; do echo "${d%%:*} ${d#*:} none x-create=file,bind,ro,nosuid,nodev,private"; done
	[[ -n ${smi:-} ]] && echo "$smi /usr/bin/nvidia-smi none x-create=file,bind,ro,nosuid,nodev,private"
} >"$enr/etc/enroot/mounts.d/90-gpubind-nvidia-driver.fstab"
cat "$enr/etc/enroot/mounts.d/90-gpubind-nvidia-driver.fstab"
if ! "$enr/bin/enroot" version >"$work/enroot-version" 2>&1; then
	fail "enroot: $enr/bin/enroot does not run: $(head -3 "$work/enroot-version")"
	return 0 2>/dev/null || exit 1
fi
echo "enroot $(cat "$work/enroot-version"), pyxis $(ls "$enr"/lib/slurm/spank_pyxis.so)"
check "enroot: the daemons' PATH finds this enroot ($(command -v enroot)), and unsquashfs and mksquashfs run" \
	bash -c "test '$(command -v enroot)' = '$enr/bin/enroot' && unsquashfs -help >/dev/null 2>&1 && mksquashfs -version >/dev/null"
pyxis_run=$work/pyxis-run
mkdir -p "$pyxis_run" && chmod 755 "$pyxis_run"
pyxis="required $enr/lib/slurm/spank_pyxis.so runtime_path=$pyxis_run"

# ---- 7b. the image
echo "--- 7b. the image"
img=$work/enroot-image.sqsh
mksquashfs "$rootfs" "$img" -noappend -all-root -quiet >"$work/mksquashfs.txt" 2>&1 ||
	fail "enroot: mksquashfs $rootfs: $(tail -2 "$work/mksquashfs.txt")"
chmod 644 "$img"
ls -l "$img"

# enroot's paths per user (its defaults follow $HOME and XDG_*, which pyxis passes on from the
# job's environment), owned by that user. The steps run without an NVIDIA_VISIBLE_DEVICES of
# the caller's (the GPU machine's own environment sets one): containers=yes keeps a job's
# value (TestPyxis checks that), so it would hide what the plugin sets.
enroot_env() { # enroot_env USER: the environment of that user's steps, as env(1) arguments
	local u=$1 base v d
	base=$work/enroot-home-$u
	mkdir -p "$base" && chmod 755 "$base"
	echo -n "-u NVIDIA_VISIBLE_DEVICES HOME=$base"
	for v in XDG_DATA_HOME XDG_CACHE_HOME XDG_CONFIG_HOME XDG_RUNTIME_DIR; do
		d=$base/${v,,}
		mkdir -p "$d" && chmod 700 "$d"
		echo -n " $v=$d"
	done
	chown -R "$u" "$base"
}
declare -A enroot_envs=([root]="$(enroot_env root)" [nobody]="$(enroot_env nobody)")
[[ -n ${NVIDIA_VISIBLE_DEVICES+set} ]] &&
	echo "this environment sets NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES: section 7's steps run without it"
as_user() { # as_user USER COMMAND...: as root, or through setpriv from /tmp
	local u=$1
	shift
	# shellcheck disable=SC2086 # the environment is words
	if [[ $u == root ]]; then
		env ${enroot_envs[root]} "$@"
	else
		(cd /tmp && setpriv --reuid="$(id -u "$u")" --regid="$(id -g "$u")" --init-groups env ${enroot_envs[$u]} "$@")
	fi
}

# ---- 7c. the steps
echo "--- 7c. srun --container-image=$img"
enroot_step() { # enroot_step NAME USER ORDER PLUGSTACK-ARGS SRUN-ARGS...: FILE.out outside, FILE.in inside
	local name=$1 user=$2 order=$3 gbargs=$4
	shift 4
	local gb="$plug${gbargs:+ $gbargs}"
	if [[ $order == after ]]; then printf '%s\n%s\n' "$pyxis" "$gb"; else printf '%s\n%s\n' "$gb" "$pyxis"; fi >"$plugfile"
	f=$work/enroot-$name
	as_user "$user" env PATH="$rootfs/usr/bin:$PATH" srun "$@" /bin/sh "$oci/task.sh" "$devdir" "$whereami_args" >"$f.out" 2>&1
	as_user "$user" srun --container-image="$img" ${GPU_ENROOT_MOUNTS:+--container-mounts=$GPU_ENROOT_MOUNTS} "$@" \
		/bin/sh /probe/task.sh "$devdir" "$whereami_args" >"$f.in" 2>&1
	echo "- $name ($user, gpubind $order pyxis${gbargs:+, plugstack $gbargs}): srun $*"
	echo "  outside:" && sed 's/^/    /' "$f.out" && echo "  inside:" && sed 's/^/    /' "$f.in"
}
enroot_gpu_case() { # enroot_gpu_case NAME USER ORDER PLUGSTACK-ARGS FLAGS
	local name=$1 user=$2 order=$3 gbargs=$4 flags=$5 what
	what="enroot $name ($user, gpubind $order pyxis)"
	enroot_step "$name" "$user" "$order" "$gbargs" -n1 --gpus=1 --gpu-bind-topo="$flags"
	check_gpu_task_inside "$what" "$f"
}
for u in root nobody; do
	enroot_gpu_case "closest-$u" "$u" after "" closest,verbose
	# enroot gives the container a cgroup namespace rooted at the cgroup of the task that
	# created it: "/" inside is the task's own cgroup, where Slurm put it (every hierarchy).
	cin=$(field "$f.in" cgroup)
	check "enroot closest-$u: the containerized task is in the cgroup Slurm gave it (inside: $cin; outside: $(field "$f.out" cgroup))" \
		test -n "$cin" -a "$(tr ';' '\n' <<<"$cin" | grep -vc ':/$')" = 0
done
enroot_gpu_case uuid-root root after "" closest,uuid,verbose
check "enroot uuid-root: CUDA_VISIBLE_DEVICES in the container is $gpu_uuid" test "$(field "$f.in" CVD)" = "$gpu_uuid"
enroot_gpu_case before-root root before "" closest,verbose
enroot_gpu_case before-uuid-nobody nobody before "" closest,uuid,verbose
enroot_gpu_case isolate-root root after "" closest,isolate,verbose
enroot_gpu_case containers-nobody nobody after containers=yes closest,verbose
check "enroot containers-nobody: plugstack containers=yes: NVIDIA_VISIBLE_DEVICES is the step's GPU by UUID and CUDA_VISIBLE_DEVICES its UUID, in the container as outside" \
	test "$(field "$f.in" NVD) $(field "$f.in" CVD) $(field "$f.out" NVD)" = "$gpu_uuid $gpu_uuid $gpu_uuid"

# ---- 7d. a step without GPUs
echo "--- 7d. a step without GPUs in an enroot container"
for u in root nobody; do
	enroot_step "nogpu-$u" "$u" after "" -n1 --gres=none
	check "enroot nogpu-$u: a step without GPUs ran in the container and opens no GPU there (ConstrainDevices holds)" \
		grep -q '^OCI rank=0 where=inside .*opens=- ' "$f.in"
	[[ -x ${oci_cudaprobe:-} ]] && grep -m1 '^CUDA' "$f.in"
done

# ---- 7e. an admin's default=
echo "--- 7e. plugstack default=closest mode=enforce: steps that asked for nothing, in a container as outside"
dflt="default=closest mode=enforce"
enroot_step default-gpu root after "$dflt" -n1 --gpus=1
check "enroot default-gpu: a GPU step that asked for nothing is bound in the container as outside ($(field "$f.out" CVD) $(field "$f.out" BUS))" \
	test "$(field "$f.in" CVD) $(field "$f.in" BUS) $(field "$f.in" opens)" = "$(field "$f.out" CVD) $(field "$f.out" BUS) $(field "$f.out" opens)" -a "$(field "$f.in" BUS)" != -
if [[ -x ${oci_cudaprobe:-} ]]; then
	check "enroot default-gpu: CUDA in the container sees the step's GPU, bus $gpu_bus" \
		grep -qiE "count=1 err=none dev0=${gpu_bus}/${gpu_uuid}\$" "$f.in"
fi
enroot_step default-nobind nobody after "$dflt" -n1 --gpus=1 --gpu-bind=none
check "enroot default-nobind: --gpu-bind=none is left alone in the container as outside (no GPUBIND_PCI_BUS_IDS; CUDA_VISIBLE_DEVICES $(field "$f.out" CVD))" \
	test "$(field "$f.in" CVD) $(field "$f.in" BUS) $(field "$f.in" opens)" = "$(field "$f.out" CVD) - $(field "$f.out" opens)" -a "$(field "$f.out" BUS)" = -
enroot_step default-cpu nobody after "$dflt" -n1 --gres=none
check "enroot default-cpu: a CPU-only step runs in the container as outside, and opens no GPU" \
	grep -q '^OCI rank=0 where=inside .*opens=- ' "$f.in"
echo "$plug" >"$plugfile"
cp "$enr/etc/enroot/mounts.d/90-gpubind-nvidia-driver.fstab" "$out/" 2>/dev/null
[[ $(type -t leftovers) == function ]] && leftovers "after the enroot steps"
