#!/usr/bin/env bash
# helper_variants.sh: gpuhelper_init of several library builds against hand-written PMIx, under a
# private Slurm cluster (srun --mpi=pmix), programs alternated run by run.
#
#   bench/helper_variants.sh [-n RANKS] [-r RUNS] [-c] NAME=REV [NAME=REV ...]
#
# REV is a git revision of this repository, or "." for the working tree. For each, the library
# is built from that revision (lib/Makefile.inc) and bench/c/gh_init.c (of the working tree) is
# linked against it, as bench/run.sh links it; bench/c/raw_pmix.c is the baseline. Every run
# launches `srun --mpi=pmix -O -N1 -n RANKS stamp PROG` for each program, in an order that
# rotates every run; run 0 warms up. Figure: the slowest rank's exec -> NCCL ID time (TIME line
# of benchtime.h), median over runs, and its ratio to raw PMIx's median; also the median rank's
# CPU time. -c adds callgrind: one `srun -n1` of each program under valgrind --tool=callgrind,
# instructions of the whole process (all threads) up to its exit, and their ratio (Go's
# asynchronous preemption off: its signals trip callgrind 3.19).
# Defaults: -n 1 -r 9. Prints a Markdown table; the machine and its load go with it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
N=1 RUNS=9 CALLGRIND=0
while getopts "n:r:c" o; do
	case $o in
	n) N=$OPTARG ;;
	r) RUNS=$OPTARG ;;
	c) CALLGRIND=1 ;;
	*) echo "usage: $0 [-n RANKS] [-r RUNS] [-c] NAME=REV ..." >&2 && exit 2 ;;
	esac
done
shift $((OPTIND - 1))
(($# > 0)) || { echo "usage: $0 [-n RANKS] [-r RUNS] [-c] NAME=REV ..." >&2 && exit 2; }
log() { echo "helper_variants: $*" >&2; }

WORK=$(mktemp -d /tmp/gpubind-variants-XXXXXX)
chmod 755 "$WORK"
CLUSTER=""
cleanup() {
	local rc=$?
	[[ -n $CLUSTER ]] && { "$WORK/testcluster" stop "$CLUSTER" || log "warning: cluster stop failed: $CLUSTER"; }
	for d in "$WORK"/src.*; do [[ -d $d ]] && git worktree remove --force "$d" 2>/dev/null; done
	rm -rf "$WORK"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

B=$WORK/bin
mkdir -p "$B"
W=(-Wall -Wextra -Werror -O2 -g -I"$ROOT/bench/c")
cc "${W[@]}" -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$B/libnccl.so.2" tests/stubnccl/csrc/stubnccl.c
ln -sf libnccl.so.2 "$B/libnccl.so"
cc "${W[@]}" -o "$B/stamp" bench/c/stamp.c
# shellcheck disable=SC2046
cc "${W[@]}" -o "$B/raw_pmix" bench/c/raw_pmix.c $(pkg-config --cflags --libs pmix) \
	-L"$B" -Wl,--no-as-needed -lnccl -Wl,-rpath,"$B"
PROGS=()
for v in "$@"; do
	name=${v%%=*} rev=${v#*=}
	[[ $name != "$v" && -n $name && -n $rev ]] || { echo "$v: expected NAME=REV" >&2 && exit 2; }
	src=$ROOT
	if [[ $rev != . ]]; then
		src=$WORK/src.$name
		git worktree add --detach -q "$src" "$rev"
	fi
	log "building $name from $rev"
	(cd "$src" && make -s -f lib/Makefile.inc BUILD="$WORK/lib.$name" >/dev/null)
	mkdir -p "$B/$name"
	cp "$WORK/lib.$name/libgpuhelper.so.1" "$B/$name/"
	ln -sf libgpuhelper.so.1 "$B/$name/libgpuhelper.so"
	# shellcheck disable=SC2046
	cc "${W[@]}" -I"$WORK/lib.$name/include" -o "$B/gh_$name" bench/c/gh_init.c $(pkg-config --cflags --libs pmix) \
		-L"$B/$name" -L"$B" -Wl,--no-as-needed -lgpuhelper -lnccl -Wl,-rpath,"$B/$name" -Wl,-rpath,"$B"
	PROGS+=("gh_$name")
done
PROGS+=(raw_pmix)

go build -trimpath -o "$WORK/testcluster" ./tests/cluster/cmd/testcluster
CLUSTER=$("$WORK/testcluster" start -nodes 1 -cpus 2)
eval "$("$WORK/testcluster" env "$CLUSTER")"
export SLURM_CONF GPUBIND_TEST_CLUSTER

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
np=${#PROGS[@]}
for ((run = 0; run <= RUNS; run++)); do
	for ((i = 0; i < np; i++)); do
		p=${PROGS[$(((i + run) % np))]}
		out=$(srun --mpi=pmix -O -N1 -n"$N" "$B/stamp" "$B/$p" 2>&1) || { echo "$p failed:" >&2 && echo "$out" >&2 && exit 1; }
		n=$(awk '$1=="TIME"' <<<"$out" | wc -l)
		((n == N)) || { echo "$p: $n TIME lines, expected $N:" >&2 && echo "$out" >&2 && exit 1; }
		((run == 0)) && continue
		awk '$1=="TIME" {print $3*1000}' <<<"$out" | sort -g | tail -1 >>"$WORK/t.$p"
		awk '$1=="TIME" {print $6*1000}' <<<"$out" | median >>"$WORK/c.$p"
	done
done
if ((CALLGRIND)); then
	for p in "${PROGS[@]}"; do
		GODEBUG=asyncpreemptoff=1 srun --mpi=pmix -N1 -n1 valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$p" "$B/$p" >/dev/null 2>"$WORK/cg.$p.log" ||
			{ grep -v "^==" "$WORK/cg.$p.log" | tail -40 >&2; head -30 "$WORK/cg.$p.log" >&2; exit 1; }
		sed -n 's/.*Collected : *\([0-9]*\).*/\1/p' "$WORK/cg.$p.log" | head -1 >"$WORK/ir.$p"
	done
fi
raw=$(median <"$WORK/t.raw_pmix")
rawir=$( ((CALLGRIND)) && cat "$WORK/ir.raw_pmix" || echo 0)
echo "n=$N, $RUNS runs (+1 warm-up), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
echo
echo "| program | slowest rank, median (ms) | / raw PMIx | CPU per rank (ms) | instructions | / raw PMIx |"
echo "|---|---|---|---|---|---|"
for p in "${PROGS[@]}"; do
	t=$(median <"$WORK/t.$p")
	c=$(median <"$WORK/c.$p")
	ir=- irr=-
	if ((CALLGRIND)); then
		ir=$(cat "$WORK/ir.$p")
		irr=$(awk -v a="$ir" -v b="$rawir" 'BEGIN{printf "%.3f", a/b}')
	fi
	printf "| %s | %.2f | %.3f | %.2f | %s | %s |\n" "$p" "$t" "$(awk -v a="$t" -v b="$raw" 'BEGIN{print a/b}')" "$c" "$ir" "$irr"
done
echo
for p in "${PROGS[@]}"; do echo "runs $p: $(tr '\n' ' ' <"$WORK/t.$p")"; done
