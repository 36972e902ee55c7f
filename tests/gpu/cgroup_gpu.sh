#!/usr/bin/env bash
# Real-GPU evidence for per-task device isolation (docs/cgroups.md).
#
# Runs a small program (cgroup_gpu.c: open the GPU's /dev/nvidiaN, nvmlInit,
# cuInit/cuDeviceGetCount, cudaGetDeviceCount; all dlopen'ed, no CUDA headers)
# three times:
#   baseline  where this script runs;
#   denied    in a cgroup made by the plugin's own code (spank/frontend/cgroup/*.c,
#             driven by tests/cgroup/csrc/cgtool.c like slurmstepd would) whose
#             BPF device program allows no GPU minor;
#   allowed   the same, with the GPU's minor allowed.
# PASS when the denied run cannot use the GPU (open EPERM, NVML and CUDA fail or
# see no GPU) and the allowed run can (open OK, NVML and CUDA see it).
#
# Needs: root, cgroup2 (found through /proc/self/mountinfo), gcc, an NVIDIA GPU
# with libnvidia-ml.so.1 and libcuda.so.1. Cleans up everything it makes.
#
# Usage: tests/gpu/cgroup_gpu.sh [/dev/nvidiaN]
#   GPUBIND_CGROUP_GPU_FAKE=1 with a fake node (mknod X c 195 N): checks only the
#   open() oracle (EPERM/ENXIO), for machines without a GPU.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
fake=${GPUBIND_CGROUP_GPU_FAKE:-0}

say() { printf 'gpubind: %s\n' "$*"; }
fail() {
	say "FAIL: $*"
	exit 1
}

[ "$(id -u)" = 0 ] || fail "needs root (creates cgroups and loads BPF programs)"
command -v gcc >/dev/null || fail "needs gcc"
for f in "$root/tests/cgroup/csrc/cgtool.c" "$root/spank/frontend/cgroup/v2.c" "$here/cgroup_gpu.c"; do
	[ -f "$f" ] || fail "missing $f (run from a gpubind checkout)"
done

# cgroup2 mount point: the field after " - cgroup2 " lines' mount point (field 5).
cg2=$(awk '{for (i = 7; i <= NF; i++) if ($i == "-") { if ($(i+1) == "cgroup2") { print $5; exit } break }}' /proc/self/mountinfo)
[ -n "$cg2" ] || fail "cgroup2 is not mounted (see /proc/self/mountinfo)"
cg2=$(printf '%b' "$cg2") # undo mountinfo's \040-style escapes

dev=${1:-}
if [ -z "$dev" ]; then
	dev=$(ls /dev/nvidia[0-9]* 2>/dev/null | sort -V | head -n1 || true)
fi
[ -n "$dev" ] && [ -c "$dev" ] || fail "no GPU device node (/dev/nvidiaN); pass one as the argument"
major=$((16#$(stat -c %t "$dev")))
minor=$((16#$(stat -c %T "$dev")))
[ "$major" = 195 ] || fail "$dev is c $major:$minor, not an NVIDIA GPU node (major 195)"
[ "$minor" -le 253 ] || fail "$dev has minor $minor: not a GPU (254 is nvidia-modeset, 255 nvidiactl)"

self=$(awk -F: '$1 == "0" && $2 == "" {print $3; exit}' /proc/self/cgroup)
[ -n "$self" ] || fail "no cgroup2 line (0::PATH) in /proc/self/cgroup"
here_cg="${cg2%/}${self%/}"
[ -d "$here_cg" ] || fail "this shell's cgroup $here_cg is not visible under $cg2"
probe_dir="$here_cg/gpubind_probe_$$"
if ! mkdir "$probe_dir" 2>/dev/null; then
	fail "cannot create a cgroup under $here_cg ($(mkdir "$probe_dir" 2>&1 | sed 's/.*: //')); run on the host or in a container with a writable cgroup2 mount"
fi
rmdir "$probe_dir"

work=$(mktemp -d /tmp/gpubind-cgroup-gpu.XXXXXX)
cleanup() {
	local rc=$?
	rm -rf "$work"
	for d in "$here_cg"/gpubind_j$$_*; do
		[ -d "$d" ] && rmdir "$d" 2>/dev/null && say "removed left-over $d"
	done
	exit $rc
}
trap cleanup EXIT

say "machine: $(uname -srm); cgroup2 at $cg2; this shell in $self; GPU node $dev (c 195:$minor)"
gcc -Wall -Wextra -Werror -O2 -D_GNU_SOURCE -I "$root/spank/frontend/cgroup" -I "$root/rule" \
	"$root/tests/cgroup/csrc/cgtool.c" "$root"/spank/frontend/cgroup/*.c "$root"/rule/*.c \
	-o "$work/cgtool" ||
	fail "building cgtool"
gcc -Wall -Wextra -Werror -O2 "$here/cgroup_gpu.c" -o "$work/cgroup_gpu" -ldl || fail "building cgroup_gpu"

run_probe() { timeout 180 "$work/cgroup_gpu" "$dev" 2>&1 || echo "cgroup_gpu exit $?"; }

say "== baseline: where this script runs"
base=$(run_probe)
printf '%s\n' "$base" | sed 's/^/    /'

# One plugin run: $1 = label, $2 = step id, $3 = allowed minors ("-" for none).
plugin_run() {
	"$work/cgtool" task --version 2 --isolate --job $$ --step "$2" --step-minors "$minor" \
		--minors "$3" -- timeout 180 "$work/cgroup_gpu" "$dev" 2>&1 || echo "cgtool exit $?"
}

say "== denied: the plugin's BPF device program allows no GPU minor (isolate, task without this GPU)"
deny=$(plugin_run denied 0 -)
printf '%s\n' "$deny" | sed 's/^/    /'
say "== allowed: the same program with minor $minor allowed (isolate, the task's own GPU)"
allow=$(plugin_run allowed 1 "$minor")
printf '%s\n' "$allow" | sed 's/^/    /'

ok=1
check() { # $1 = text, $2 = pattern (grep -E), $3 = what it proves
	if printf '%s\n' "$1" | grep -Eq -- "$2"; then
		say "ok: $3"
	else
		say "NOT OK: $3 (no line matching /$2/)"
		ok=0
	fi
}
for r in "$deny" "$allow"; do
	check "$r" '^apply rc=0 ' "the plugin applied its program"
	check "$r" '^cleanup rc=0 ' "the plugin removed its cgroup at task exit"
	check "$r" '^fini rc=0 ' "the plugin released its BPF objects"
done
check "$deny" "^open $dev: EPERM" "denied: open($dev) gives EPERM"
if [ "$fake" = 1 ]; then
	check "$allow" "^open $dev: (OK|error \(No such device)" "allowed: open($dev) passes the cgroup (ENXIO on a fake node)"
else
	check "$deny" '^verdict nvml=no cuda=no' "denied: neither NVML nor CUDA can use the GPU"
	check "$deny" '^nvmlInit_v2: [1-9]|^nvmlDeviceGetCount_v2: .* count=0' "denied: nvmlInit fails (or sees no GPU)"
	check "$allow" "^open $dev: OK" "allowed: open($dev) succeeds"
	check "$allow" '^verdict nvml=yes' "allowed: NVML sees the GPU"
	if printf '%s\n' "$allow" | grep -q '^cuda driver: loaded'; then
		check "$allow" '^verdict nvml=yes cuda=yes' "allowed: CUDA sees the GPU"
	else
		say "note: no libcuda.so.1 here; CUDA not checked"
	fi
	check "$base" '^verdict nvml=yes' "baseline: NVML sees the GPU outside the plugin's cgroup"
fi

# Nothing left: no plugin cgroup, none of the BPF objects the runs reported.
left=$(ls -d "$here_cg"/gpubind_j$$_* 2>/dev/null || true)
[ -z "$left" ] && say "ok: no plugin cgroup left under $here_cg" || {
	say "NOT OK: left behind: $left"
	ok=0
}
objs=$(printf '%s\n%s\n' "$deny" "$allow" | awk '$1 == "bpf" {print $2, $3}')
for i in $(seq 1 50); do
	live=$("$work/cgtool" progs)
	still=$(printf '%s\n' "$objs" | while read -r o; do [ -n "$o" ] && printf '%s\n' "$live" | grep -qx "$o" && echo "$o"; done || true)
	[ -z "$still" ] && break
	sleep 0.2
done
[ -z "$still" ] && say "ok: all $(printf '%s\n' "$objs" | grep -c .) BPF objects of the runs are gone" || {
	say "NOT OK: BPF objects still loaded: $(echo $still)"
	ok=0
}

[ "$ok" = 1 ] && say "RESULT: PASS" || fail "RESULT: see NOT OK lines above"
