#!/usr/bin/env bash
# Issue 35's proof that the typed request changed no plan-cache key: the plugin built at BASE
# (default 5b0094c, the request still text, after the nic fix) and the plugin of this tree
# run the same steps in the spankhost (tests/spankhost/csrc/host.c, slurmstepd's calls) with
# the same test launcher and the same cache_dir, one step at a time from an empty cache. Each
# step must leave the same plan-cache entry: the same file name (p-uUID-HASH of the key) and
# the same bytes (header, key, table). The steps vary everything the key holds: the option
# and where it comes from (--gpu-bind-topo, SLURM_GPU_BIND_TOPO, default=), every plugstack
# setting, task counts and global ids, the job's uid, the step environment (SLURM_STEP_GPUS
# set or not, junk in SLURM_JOB_GPUS, CUDA_/ROCR_VISIBLE_DEVICES, the job's SLURM_CONF and
# slurmstepd's own), and NIC port states under root= for nic and other plans.
#
#   tests/structure/keycompare.sh [BASE]    prints "keycompare: N steps, identical keys" or the diffs
# Needs root (the plan cache is used only by root) and the system Slurm's headers.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
base=${1:-5b0094c}
if [[ $(id -u) -ne 0 ]]; then
	echo "keycompare: needs root (the plan cache is root's)" >&2
	exit 2
fi
work=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$work/base" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
[[ -n ${KEYCOMPARE_KEEP:-} ]] && trap - EXIT && echo "keycompare: work in $work"
chmod 0755 "$work"

git -C "$root" worktree add -q --detach "$work/base" "$base"
make -s -C "$work/base/spank/frontend" BUILD="$work/old" SLURM_PREFIX=/usr GB_LAUNCHER=/nonexistent
make -s -C "$root/spank/frontend" BUILD="$work/new" SLURM_PREFIX=/usr GB_LAUNCHER=/nonexistent
cc=(gcc -Wall -Wextra -Werror -O2)
"${cc[@]}" -rdynamic -o "$work/host" "$root/tests/spankhost/csrc/host.c" -ldl -lpthread
"${cc[@]}" -DGB_TEST_LAUNCHER -DMODE_TABLE -o "$work/launcher" \
	"$root/tests/spankhost/csrc/testengine.c" "$root/spank/engine/launcher.c"

# A plan of N tasks (the test launcher copies it as the table), one per task count.
for n in 1 2 4 8; do
	{
		echo "gpubind-plan 1"
		printf '%s\n' "status ok" "flags -" "rule table" "share 1" "per_task 1" "ntasks $n" \
			"numa 0 0" "numa 1 1" \
			"gpu 0 0 0 0 0000:1b:00.0 GPU-aaaa 0 mlx5_0:1" "gpu 1 1 1 1 0000:43:00.0 GPU-bbbb 0 mlx5_1:1" \
			"gpu 2 2 4 4 0000:9b:00.0 GPU-cccc 1 mlx5_4:1" "gpu 3 3 5 5 0000:c2:00.0 GPU-dddd 1 mlx5_5:1" \
			"numagpus 0 0,1" "numagpus 1 2,3" "fallback 0,2,1,3"
		for ((i = 0; i < n; i++)); do echo "task $i $((i % 4)) -"; done
		echo "end $((16 + n))"
	} >"$work/plan$n"
done
# A root= tree with two IB ports, and a slurm.conf/cgroup.conf/gres.conf directory.
mkdir -p "$work/root/sys/class/infiniband/mlx5_0/ports/1" "$work/root/sys/class/infiniband/mlx5_1/ports/1" \
	"$work/root/proc/driver/nvidia" "$work/etc"
echo "4: ACTIVE" >"$work/root/sys/class/infiniband/mlx5_0/ports/1/state"
echo "1: DOWN" >"$work/root/sys/class/infiniband/mlx5_1/ports/1/state"
echo "NVRM version: 550.54.15" >"$work/root/proc/driver/nvidia/version"
touch "$work/etc/slurm.conf" "$work/etc/cgroup.conf" "$work/etc/gres.conf"

# The steps: "HOSTENV|HOST FLAGS|PLUGSTACK ARGS" (space separated within each field).
S="-e SLURM_STEP_GPUS=0,1,2,3"
cases=()
for n in 1 2 4 8; do
	for opt in closest closest,nic closest,verbose closest,cpus,nic,verbose pack spread map:0,1,2,3 \
		single:2 per-task:2 closest,visible=first closest,visible=localid,uuid closest,isolate; do
		cases+=("|-n $n $S -o $opt|")
	done
	# default= binds a step only where each task gets a GPU (docs/admin.md "default="): as many
	# step GPUs as tasks.
	D="-e SLURM_STEP_GPUS=$(seq -s, 0 $((n > 4 ? 3 : n - 1)))"
	cases+=("|-n $n $S -o -|" "|-n $n $S -e SLURM_GPU_BIND_TOPO=spread,nic|"
		"|-n $n $D|default=closest" "|-n $n $D|default=closest,nic mode=optional"
		"|-n $n $S -g 7 -o closest|" "|-n $n $S -g 7 -U 1234 -o closest,nic|")
done
for args in "mode=optional" "default_mode=enforce" "source=sysfs" "root=$work/root" "gres_conf=$work/etc/gres.conf" \
	"isolate=force" "cpus=never" "isolate=never cpus=force" "nics=mlx5_1,mlx5_0" "timeout=5000" \
	"plan_cache=5" "root=$work/root nics=mlx5_0" "default=spread mode=optional default_mode=enforce"; do
	cases+=("|-n 2 $S -o closest|$args" "|-n 2 $S -o closest,nic|$args")
done
cases+=(
	"|-n 2 $S -e SLURM_JOB_GPUS=junk,0,1 -o closest|"
	"|-n 2 -e SLURM_JOB_GPUS=0,1 -o closest|"
	"|-n 2 -e SLURM_JOB_GPUS=0,1 -e CUDA_VISIBLE_DEVICES=0,1 -o closest|"
	"|-n 2 $S -e CUDA_VISIBLE_DEVICES=3,2,1,0 -e ROCR_VISIBLE_DEVICES=0 -o closest|"
	"|-n 2 $S -e SLURM_CONF=$work/etc/slurm.conf -o closest|"
	"SLURM_CONF=$work/etc/slurm.conf|-n 2 $S -e SLURM_CONF=/elsewhere/slurm.conf -o closest|"
	"SLURM_CONF=|-n 2 $S -o closest|"
	"|-n 2 -e SLURM_STEP_GPUS= -e SLURM_JOB_GPUS=0 -o closest|"
	"|-n 2 $S -e SLURM_GPU_BIND_TOPO=closest,nic -o pack|root=$work/root"
	"|-n 2 $S -e SLURMD_NODENAME=node-7 -o closest|"
)

cache=$work/cache
run() { # run PLUGIN N HOSTENV FLAGS ARGS -> the entries in $cache/plans
	local plugin=$1 n=$2 henv=$3 flags=$4 args=$5
	rm -rf "$cache"
	# shellcheck disable=SC2086
	env $henv "$work/host" -q $flags "$plugin" "launcher=$work/launcher" "snapshot=$work/plan$n" \
		"cache_dir=$cache" $args >"$work/out" 2>&1 || true
}
i=0 diffs=0 entries=0
for c in "${cases[@]}"; do
	IFS='|' read -r henv flags args <<<"$c"
	n=$(sed -E 's/.*-n ([0-9]+).*/\1/' <<<"$flags")
	for side in old new; do
		run "$work/$side/spank_gpubind.so" "$n" "$henv" "$flags" "$args"
		mkdir -p "$work/$side-$i"
		cp "$work/out" "$work/$side-$i.log"
		[[ -d $cache/plans ]] && cp -p "$cache"/plans/p-* "$work/$side-$i/" 2>/dev/null || true
	done
	if ! diff -r "$work/old-$i" "$work/new-$i" >"$work/diff" 2>&1; then
		echo "keycompare: step $i ($c) differs:"
		cat "$work/diff"
		diffs=$((diffs + 1))
	elif [[ -z $(ls "$work/new-$i") ]]; then
		# A step whose plan is not cached (plan_cache=0 aside, none here) proves nothing.
		echo "keycompare: step $i ($c) left no entry:"
		tail -5 "$work/new-$i.log"
		diffs=$((diffs + 1))
	else
		entries=$((entries + $(ls "$work/new-$i" | wc -l)))
	fi
	i=$((i + 1))
done
if ((diffs)); then
	echo "keycompare: $diffs of $i steps differ or left no entry"
	exit 1
fi
echo "keycompare: $i steps, $entries entries, identical keys and entries (base $base)"
