# Sourced by tests/gpu/run.sh and tests/gpu/multi.sh: the checkout as working directory, the
# build outputs in $B, the output folder in $out (first argument, else $OUT, else a new one),
# a scratch folder in $work removed at exit, and `section`/`run`/`need`. `run` prints the
# command on stderr (so stdout can be redirected to a file) and records a failure in $failed.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
B=${BUILD:-$root/build}
out=${1:-${OUT:-$(mktemp -d /tmp/gpubind-gpu.XXXXXX)}}
mkdir -p "$out"
work=$(mktemp -d /tmp/gpubind-gpu-work.XXXXXX)
trap 'rm -rf "$work"' EXIT
# NVLink multicast stays off on shared machines (it can take the host's GPUs out of service).
export NCCL_NVLS_ENABLE=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH=$PATH:/usr/local/cuda/bin
failed=0
section() { printf '\n==== %s\n' "$*"; }
run() {
	printf '$ %s\n' "$*" >&2
	"$@"
	local rc=$?
	[ $rc -eq 0 ] || { echo "FAIL: '$*' exited $rc"; failed=1; }
	return $rc
}
need() {
	local f
	for f in "$@"; do
		[ -e "$f" ] || { echo "$(basename "$0"): missing $f (make build)"; exit 2; }
	done
}
