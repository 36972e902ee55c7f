#!/usr/bin/env bash
# Time from exec to a working torch.distributed process group (gloo, first all_reduce done) at
# n = 2, 8, 16 ranks on one node, phase by phase, for three launches (bench/python_rank.py):
#   gpubind   srun --mpi=pmix -n N python3 python_rank.py gpubind   (gpubind.torch.init_process_group)
#   env       srun --mpi=none -n N with MASTER_ADDR=127.0.0.1 and a hand-picked MASTER_PORT, env://
#   torchrun  python3 -m torch.distributed.run --rdzv_backend=c10d --nproc_per_node=N (outside
#             Slurm: the test cluster's node names do not resolve, and torchrun's c10d hands its
#             workers the agent's host name as MASTER_ADDR)
# Runs alternate between the launches; each figure is the median of REPS runs of the slowest
# rank's phase. Needs a private cluster: BENCH_CLUSTER=DIR (tests/cluster/cluster.sh start),
# else one is started and stopped here.
#
#   bench/python.sh [REPS]      (REPS default 5; SIZES="2 8 16")
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
REPS=${1:-5}
SIZES=${SIZES:-2 8 16}
PY=/usr/bin/python3
make -s -C "$ROOT" -f lib/Makefile.inc BUILD="$BUILD" >/dev/null
CL=${BENCH_CLUSTER:-}
own=
if [[ -z $CL ]]; then
	CL=$("$ROOT/tests/cluster/cluster.sh" start -nodes 1 -cpus 16)
	own=1
fi
cleanup() { [[ -n $own ]] && "$ROOT/tests/cluster/cluster.sh" stop "$CL" >/dev/null 2>&1 || true; }
trap cleanup EXIT
eval "$("$ROOT/tests/cluster/cluster.sh" env "$CL")"
export PYTHONPATH=$ROOT/python GPUBIND_LIBGPUHELPER=$BUILD/libgpuhelper.so.1 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=1
prog=$ROOT/bench/python_rank.py
out=$(mktemp -d)
freeport() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

launch() { # launch MODE N: prints the BENCH lines, with the launch time first
	local mode=$1 n=$2 port
	port=$(freeport)
	echo "T0 $(date +%s.%N)"
	case $mode in
	gpubind) srun -N1 -n"$n" -O --mpi=pmix "$PY" "$prog" gpubind ;;
	env) MASTER_ADDR=127.0.0.1 MASTER_PORT=$port srun -N1 -n"$n" -O --mpi=none "$PY" "$prog" env ;;
	torchrun) env -u SLURM_CONF "$PY" -m torch.distributed.run --nnodes=1 --nproc_per_node="$n" --rdzv_backend=c10d \
		--rdzv_endpoint=127.0.0.1:"$port" --redirects=2 --tee=2 "$prog" torchrun 2>/dev/null ;;
	esac
}

# summarize FILE: the slowest rank's import, helper, rendezvous, exec->pg, and launch->pg (s)
summarize() {
	awk '/^T0/ {t0=$2} /^BENCH/ {n++; if (!e || $4<e) e=$4; if ($5-$4>imp) imp=$5-$4; if ($6-$5>hel) hel=$6-$5;
		if ($7-$6>rdv) rdv=$7-$6; if ($7>pg) pg=$7}
		END {printf "%d %.3f %.3f %.3f %.3f %.3f\n", n, imp, hel, rdv, pg-e, pg-t0}' "$1"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# $(date -u +%FT%TZ) $(getconf _NPROCESSORS_ONLN) cores, $(uname -r), torch $($PY -c 'import torch; print(torch.__version__)'), Slurm $(srun --version), reps $REPS"
for n in $SIZES; do
	for r in $(seq "$REPS"); do
		for mode in gpubind env torchrun; do
			f=$out/$mode-$n-$r
			launch "$mode" "$n" >"$f" 2>"$f.err" || { echo "$mode n=$n run $r failed:" >&2; cat "$f" "$f.err" >&2; exit 1; }
			s=$(summarize "$f")
			[[ ${s%% *} == "$n" ]] || { echo "$mode n=$n: $s ranks reported" >&2; cat "$f" "$f.err" >&2; exit 1; }
			echo "$s" >>"$out/$mode-$n"
		done
	done
done
printf '%-9s %3s %8s %8s %11s %12s %14s\n' launch n import helper rendezvous "exec->pg" "launch->pg"
for n in $SIZES; do
	for mode in gpubind env torchrun; do
		printf '%-9s %3s' "$mode" "$n"
		for col in 2 3 4 5 6; do printf ' %8s' "$(cut -d' ' -f$col "$out/$mode-$n" | median)"; done
		echo
	done
done
rm -rf "$out"
