#!/usr/bin/env bash
# The NCCL ID exchange on many simulated nodes (`make bench-scale`; docs/scale.md).
#
#   bench/scale.sh [ids] [plugin]       (default: ids)
#
#   ids     for each size of SCALE_NODES, SCALE_RPN ranks per node, SCALE_RUNS runs, the
#           variants alternating: libgpuhelper direct / fence (gpuhelper_init's world ID from
#           exec, then SCALE_ITERS times each: 1 and 8 scalable IDs, node group IDs, barrier,
#           allgather), raw PMIx by hand (Put/Commit/Get, and Put/Commit/Fence/Get) and
#           MPI_Bcast (Open MPI under srun --mpi=pmix); the CPU time and read/write syscalls
#           of the root node's slurmstepd (node1, where rank 0 runs) against another node's.
#   plugin  `srun -N N --ntasks-per-node=8 true` with the gpubind plugin (--gpu-bind-topo)
#           and without: step wall time, CPU of every slurmd and slurmstepd, plan cache hits.
#
# One private cluster (tests/cluster) of max(SCALE_NODES) slurmd on this host serves every
# size. Ranks outnumber the cores on any one machine: compare shapes and ratios, not absolute
# times. Raw rows go to bench/results/scale*.csv, the text to bench/results/scale.md (and
# scale_plugin.md), and bench/RESULTS.md is assembled again.
#
# Knobs: SCALE_NODES (default "16 32 64"; the GPU machine runs "16 32 64 128"), SCALE_RPN
# (ranks per node, default 4; 8 for 1,024 ranks on 128 nodes), SCALE_RUNS (default 3),
# SCALE_ITERS (default 3), SCALE_STEP_TIMEOUT (seconds per srun, default 300), SCALE_MPI
# (1: include MPI_Bcast, default 1) up to SCALE_MPI_MAX_NODES nodes (default 16: beyond that,
# Open MPI over loopback TCP between simulated nodes hung on the VM) with its own timeout
# SCALE_MPI_TIMEOUT (default 90 s), SCALE_PLUGIN_NODES (default: max of SCALE_NODES),
# SLURM_PREFIX (the Slurm to run; default Debian's), BENCH_NICE (default -10), SCALE_WARMUP
# (runs thrown away first, default 1), SCALE_DEADLINE (seconds: start no step after it, write
# what was measured; default none), SCALE_RES (where results go, default bench/results),
# SCALE_PREBUILT (a folder with stamp, gh_init, raw_pmix, libnccl.so.2, libgpuhelper.so.1 and
# testcluster built elsewhere: tests/gpu/slurm-bundle.sh), SCALE_AUTH_SLURM=1 (auth/slurm, no
# munge; Slurm 23.11+).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RES=${SCALE_RES:-$ROOT/bench/results}
PREBUILT=${SCALE_PREBUILT:-}
WARMUP=${SCALE_WARMUP:-1}
DEADLINE=${SCALE_DEADLINE:-0}
BUILD=${BUILD:-$ROOT/build}
FIXTURE=$ROOT/tests/fixtures/dgxh100-2cpu
NODES=${SCALE_NODES:-16 32 64}
RPN=${SCALE_RPN:-4}
RUNS=${SCALE_RUNS:-3}
ITERS=${SCALE_ITERS:-3}
STEP_TIMEOUT=${SCALE_STEP_TIMEOUT:-300}
WITH_MPI=${SCALE_MPI:-1}
MPI_MAX_NODES=${SCALE_MPI_MAX_NODES:-16}
MPI_TIMEOUT=${SCALE_MPI_TIMEOUT:-90}
ITEMS=1,8,group,barrier,allgather

log() { printf '[scale %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
isnum() { [[ $1 =~ ^[0-9]+$ && $1 -ge 1 ]]; }

for v in $NODES; do isnum "$v" && ((v <= 256)) || die "SCALE_NODES: '$v': expected node counts 1..256"; done
isnum "$RPN" || die "SCALE_RPN=$RPN: expected a positive integer"
isnum "$RUNS" || die "SCALE_RUNS=$RUNS: expected a positive integer"
isnum "$ITERS" || die "SCALE_ITERS=$ITERS: expected a positive integer"
isnum "$STEP_TIMEOUT" || die "SCALE_STEP_TIMEOUT=$STEP_TIMEOUT: expected seconds"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "SCALE_WARMUP=$WARMUP: expected a number of runs (0 or more)"
[[ $DEADLINE =~ ^[0-9]+$ ]] || die "SCALE_DEADLINE=$DEADLINE: expected seconds (0: none)"
((DEADLINE == 0)) || DEADLINE=$((SECONDS + DEADLINE))
isnum "$MPI_MAX_NODES" || die "SCALE_MPI_MAX_NODES=$MPI_MAX_NODES: expected a node count"
isnum "$MPI_TIMEOUT" || die "SCALE_MPI_TIMEOUT=$MPI_TIMEOUT: expected seconds"
MAXN=$(tr ' ' '\n' <<<"$NODES" | sort -n | tail -1)
PLUGIN_NODES=${SCALE_PLUGIN_NODES:-$MAXN}
isnum "$PLUGIN_NODES" || die "SCALE_PLUGIN_NODES=$PLUGIN_NODES: expected a node count"
((MAXN >= PLUGIN_NODES)) || MAXN=$PLUGIN_NODES
[[ $(id -u) == 0 ]] || die "needs root (the private Slurm cluster runs slurmd as root)"
BENCH_NICE=${BENCH_NICE:--10}
if [[ $BENCH_NICE != 0 && -z ${BENCH_RENICED:-} ]]; then
	export BENCH_RENICED=1
	exec nice -n "$BENCH_NICE" "$ROOT/bench/scale.sh" "$@"
fi

median() {
	sort -g | awk '{v[NR]=$1} END{if(NR==0){print "nan"; exit}
		if(NR%2) printf "%.3f\n", v[(NR+1)/2]; else printf "%.3f\n", (v[NR/2]+v[NR/2+1])/2}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if(a=="nan"||b=="nan"||b==0)print "nan"; else printf "%.2f\n", a/b}'; }
col() { awk -F, -v f="$3" "NR>1 && ($2) {print \$f}" "$1"; }

WORK=$(mktemp -d /tmp/gpubind-scale-XXXXXX)
chmod 755 "$WORK"
CLUSTER=""
WATCH=""
cleanup() {
	local rc=$?
	[[ -n $WATCH ]] && kill "$WATCH" 2>/dev/null
	if [[ -n $CLUSTER ]]; then
		log "stopping cluster $CLUSTER"
		"$WORK/testcluster" stop "$CLUSTER" || log "warning: cluster stop failed: $CLUSTER"
	fi
	rm -rf "$WORK"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

prepare() {
	local B=$WORK/bin W=(-Wall -Wextra -Werror -O2 -g -I"$ROOT/bench/c")
	mkdir -p "$B" "$RES" "$WORK/plugin" "$WORK/cache"
	if [[ -n $PREBUILT ]]; then
		local f
		for f in stamp gh_init raw_pmix libnccl.so.2 libgpuhelper.so.1 testcluster; do
			[[ -f $PREBUILT/$f ]] || die "SCALE_PREBUILT=$PREBUILT: $f missing (tests/gpu/slurm-bundle.sh builds them)"
			cp "$PREBUILT/$f" "$B/"
		done
		mv "$B/testcluster" "$WORK/testcluster"
		ln -sf libnccl.so.2 "$B/libnccl.so"
		ln -sf libgpuhelper.so.1 "$B/libgpuhelper.so"
		chmod -R a+rX "$B"
		WITH_MPI=0
		if [[ -f $BUILD/spank_gpubind.so && -f $BUILD/gpubind_engine.so ]]; then
			cp "$BUILD/spank_gpubind.so" "$BUILD/gpubind_engine.so" "$WORK/plugin/"
			# The launcher slurmstepd runs: root's, writable only by root (the plugin checks).
			[[ -f $BUILD/gpubind-launcher ]] && install -o root -g root -m 0755 "$BUILD/gpubind-launcher" "$WORK/plugin/"
			chmod 755 "$WORK/plugin"
		fi
		return
	fi
	[[ -f $BUILD/libgpuhelper.so.1 ]] || die "build/libgpuhelper.so.1 is not built (make build)"
	cc "${W[@]}" -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$B/libnccl.so.2" tests/stubnccl/csrc/stubnccl.c
	ln -sf libnccl.so.2 "$B/libnccl.so"
	cc "${W[@]}" -o "$B/stamp" bench/c/stamp.c
	cp "$BUILD/libgpuhelper.so.1" "$B/"
	ln -sf libgpuhelper.so.1 "$B/libgpuhelper.so"
	# shellcheck disable=SC2046
	cc "${W[@]}" -I"$ROOT/lib" -o "$B/gh_init" bench/c/gh_init.c $(pkg-config --cflags --libs pmix) \
		-L"$B" -Wl,--no-as-needed -lgpuhelper -lnccl -Wl,-rpath,"$B"
	# shellcheck disable=SC2046
	cc "${W[@]}" -o "$B/raw_pmix" bench/c/raw_pmix.c $(pkg-config --cflags --libs pmix) \
		-L"$B" -Wl,--no-as-needed -lnccl -Wl,-rpath,"$B"
	if ((WITH_MPI)); then
		mpicc "${W[@]}" -o "$B/mpi_bcast" bench/c/mpi_bcast.c -L"$B" -Wl,--no-as-needed -lnccl -Wl,-rpath,"$B"
	fi
	if [[ -f $BUILD/spank_gpubind.so && -f $BUILD/gpubind_engine.so ]]; then
		cp "$BUILD/spank_gpubind.so" "$BUILD/gpubind_engine.so" "$WORK/plugin/"
		# The launcher slurmstepd runs: root's, writable only by root (the plugin checks).
		[[ -f $BUILD/gpubind-launcher ]] && install -o root -g root -m 0755 "$BUILD/gpubind-launcher" "$WORK/plugin/"
		chmod 755 "$WORK/plugin"
	fi
	go build -trimpath -o "$WORK/testcluster" ./tests/cluster/cmd/testcluster
}

start_cluster() {
	log "starting a private cluster of $MAXN simulated nodes ($((RPN > 8 ? RPN : 8)) declared CPUs each; Slurm $(slurm_version))"
	: >"$WORK/plugstack.none"
	echo "required $WORK/plugin/spank_gpubind.so launcher=$WORK/plugin/gpubind-launcher root=$FIXTURE cache_dir=$WORK/cache" >"$WORK/plugstack.plugin"
	local t0=$EPOCHREALTIME
	local auth=()
	[[ ${SCALE_AUTH_SLURM:-0} == 1 ]] && auth=(-auth-slurm)
	CLUSTER=$("$WORK/testcluster" start -nodes "$MAXN" -cpus "$((RPN > 8 ? RPN : 8))" -conf SlurmdDebug=verbose "${auth[@]}")
	eval "$("$WORK/testcluster" env "$CLUSTER")"
	export SLURM_CONF GPUBIND_TEST_CLUSTER
	[[ -n ${SLURM_PREFIX:-} && $SLURM_PREFIX != /usr ]] && export PATH=$SLURM_PREFIX/bin:$SLURM_PREFIX/sbin:$PATH
	log "cluster up in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}') s: $CLUSTER"
	# The slurmd of node1 (rank 0's node) and node2 (another node): their UTS namespaces tell
	# their slurmstepds apart from the other nodes'.
	SLURMD1=$(slurmd_pid node1)
	SLURMD2=$(slurmd_pid node2)
}
slurm_version() { "${SLURM_PREFIX:-/usr}/sbin/slurmd" -V | awk '{print $2}'; }
slurmd_pid() {
	awk -v want="slurmd-$1" '/"name":/{gsub(/[",]/,"",$2); n=$2} /"pid":/{gsub(/,/,"",$2); if(n==want) print $2}' "$CLUSTER/cluster.json"
}
use_plugstack() {
	cp "$WORK/plugstack.$1" "$CLUSTER/plugstack.conf.new" && mv -f "$CLUSTER/plugstack.conf.new" "$CLUSTER/plugstack.conf"
}

# watch_stepd OUT: until killed, samples every 50 ms the step's slurmstepd on node1 and node2
# (CPU ticks utime+stime of all its threads, read and write syscalls) and keeps each one's
# last sample in OUT ("node1 ticks syscr syscw"). It scans /proc only until it has found both
# (the step's other processes are not looked at again); builtins only on the sampling path.
watch_stepd() {
	local out=$1 p cmd st f r w n k v
	declare -A last=() pid=()
	trap 'for n in "${!last[@]}"; do echo "$n ${last[$n]}"; done >"$out"; exit 0' TERM
	while :; do
		if ((${#pid[@]} < 2)); then
			for p in /proc/[0-9]*; do
				read -r -d "" cmd 2>/dev/null <"$p/cmdline" || true
				[[ $cmd == "slurmstepd: ["*"."[0-9]*"]" ]] || continue
				if [[ $p/ns/uts -ef /proc/$SLURMD1/ns/uts ]]; then pid[node1]=$p
				elif [[ $p/ns/uts -ef /proc/$SLURMD2/ns/uts ]]; then pid[node2]=$p; fi
			done
		fi
		for n in "${!pid[@]}"; do
			p=${pid[$n]}
			read -r st 2>/dev/null <"$p/stat" || continue
			st=${st##*) }
			read -ra f <<<"$st"
			r=0 w=0
			while read -r k v; do
				[[ $k == syscr: ]] && r=$v
				[[ $k == syscw: ]] && w=$v
			done 2>/dev/null <"$p/io" || true
			last[$n]="$((f[11] + f[12])) $r $w"
		done
		sleep 0.05
	done
}

# step LABEL NODES RANKS CMD...: runs one step with the stepd watcher; prints
# "wall_ms node1_ms node1_syscr node1_syscw node2_ms node2_syscr node2_syscw" on fd 3 and the
# step's stdout on stdout. Returns non-zero when the step failed or timed out.
step() {
	local label=$1 nodes=$2 ranks=$3 t0 rc=0 hz limit=$STEP_TIMEOUT
	shift 3
	[[ $label == mpi_bcast,* ]] && limit=$MPI_TIMEOUT
	if ((DEADLINE && SECONDS >= DEADLINE)); then
		log "$label: skipped (SCALE_DEADLINE passed)"
		echo "0 nan 0 0 nan 0 0" >&3
		return 3
	fi
	watch_stepd "$WORK/watch" &
	WATCH=$!
	t0=$EPOCHREALTIME
	timeout -k 10 "$limit" srun --mpi="${STEP_MPI:-pmix}" -N"$nodes" -n"$ranks" --ntasks-per-node="$RPN" "$@" 2>"$WORK/stderr" || rc=$?
	local wall
	wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", (b-a)*1000}')
	kill -TERM "$WATCH" 2>/dev/null || true
	wait "$WATCH" 2>/dev/null || true
	WATCH=""
	hz=$(getconf CLK_TCK)
	awk -v hz="$hz" -v wall="$wall" '
		{ms[$1]=$2*1000/hz; r[$1]=$3; w[$1]=$4}
		END{printf "%s %.0f %d %d %.0f %d %d\n", wall, ms["node1"], r["node1"], w["node1"], ms["node2"], r["node2"], w["node2"]}' \
		"$WORK/watch" 2>/dev/null >&3 || echo "$wall nan 0 0 nan 0 0" >&3
	if ((rc != 0)); then
		{
			echo "== $(date -u +%H:%M:%S) $label: srun -N$nodes -n$ranks $* (rc $rc)"
			head -c 3000 "$WORK/stderr"
		} >>"$RES/scale_failures.log"
		log "$label: step failed (rc $rc, see bench/results/scale_failures.log)"
	fi
	return $rc
}

# ---- ids --------------------------------------------------------------------------------------
section_ids() {
	local csv=$RES/scale.csv scsv=$RES/scale_stepd.csv
	local progs="gh_direct gh_fence gh_tree raw_direct raw_fence raw_tree"
	log "ids: nodes {$NODES} x $RPN ranks per node, $RUNS runs, {$progs}, items $ITEMS x $ITERS"
	echo "program,nodes,ranks,run,item,iter,slowest_ms" >"$csv"
	echo "program,nodes,ranks,run,wall_ms,root_stepd_cpu_ms,root_syscr,root_syscw,other_stepd_cpu_ms,other_syscr,other_syscw" >"$scsv"
	local run n ranks p i plist out st
	for n in $NODES; do
		ranks=$((n * RPN))
		read -ra plist <<<"$progs"
		((WITH_MPI && n <= MPI_MAX_NODES)) && plist+=(mpi_bcast)
		for ((run = 1 - WARMUP; run <= RUNS; run++)); do # runs < 1 warm up
			for ((i = 0; i < ${#plist[@]}; i++)); do
				p=${plist[$(((i + run + WARMUP) % ${#plist[@]}))]}
				local cmd=()
				case $p in
				gh_direct) cmd=(env GPUHELPER_EXCHANGE=direct "$WORK/bin/stamp" "$WORK/bin/gh_init" dist "$ITEMS" "$ITERS") ;;
				gh_fence) cmd=(env GPUHELPER_EXCHANGE=fence "$WORK/bin/stamp" "$WORK/bin/gh_init" dist "$ITEMS" "$ITERS") ;;
				# Slurm's fence with data is a ring unless PMIxCollFence (SLURM_PMIX_FENCE) says tree.
				gh_tree) cmd=(env GPUHELPER_EXCHANGE=fence SLURM_PMIX_FENCE=tree "$WORK/bin/stamp" "$WORK/bin/gh_init" dist "$ITEMS" "$ITERS") ;;
				raw_tree) cmd=(env SLURM_PMIX_FENCE=tree "$WORK/bin/stamp" "$WORK/bin/raw_pmix" fence "$ITERS") ;;
				raw_direct) cmd=("$WORK/bin/stamp" "$WORK/bin/raw_pmix" direct "$ITERS") ;;
				raw_fence) cmd=("$WORK/bin/stamp" "$WORK/bin/raw_pmix" fence "$ITERS") ;;
				# Simulated nodes share one host: Open MPI's shared-memory transport between
				# them fails (segments named per host), so TCP over loopback only.
				mpi_bcast) cmd=(env OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
					"$WORK/bin/stamp" "$WORK/bin/mpi_bcast") ;;
				esac
				if ! out=$(step "$p,$n" "$n" "$ranks" "${cmd[@]}" 3>"$WORK/st"); then
					((run > 0)) && echo "$p,$n,$ranks,$run,failed,,,,,," >>"$scsv"
					continue
				fi
				read -r st <"$WORK/st"
				# Slowest rank per (item, iteration) and the init line; checks that every rank
				# reported and holds the same ID (node groups: one ID per node).
				awk -v pre="$p,$n,$ranks,$run" -v np="$ranks" -v nodes="$n" -v keep=$((run > 0)) -v out="$csv" '
					$1=="TIME" {t++; if ($3*1000>init) init=$3*1000; tid[$5]=1}
					$1=="DIST" {key=$3 SUBSEP $4; c[key]++; if ($5*1000>mx[key]) mx[key]=$5*1000; id[key, $6]=1}
					END {
						nt=0; for (x in tid) nt++
						if (t!=np || nt!=1) { printf "scale: %s: %d TIME lines (want %d), %d distinct IDs\n", pre, t, np, nt > "/dev/stderr"; exit 1 }
						if (keep) printf "%s,init,0,%.3f\n", pre, init >> out
						for (key in c) {
							split(key, a, SUBSEP); d=0
							for (x in id) { split(x, b, SUBSEP); if (b[1]==a[1] && b[2]==a[2]) d++ }
							want = a[1]=="group" ? nodes : 1
							if (c[key]!=np || d!=want) { printf "scale: %s: %s iteration %s: %d ranks (want %d), %d distinct IDs (want %d)\n", pre, a[1], a[2], c[key], np, d, want > "/dev/stderr"; exit 1 }
							if (keep) printf "%s,%s,%s,%.3f\n", pre, a[1], a[2], mx[key] >> out
						}
					}' <<<"$out" 2>>"$RES/scale_failures.log" || {
					log "ids: bad output from $p at $n nodes (bench/results/scale_failures.log)"
					((run > 0)) && echo "$p,$n,$ranks,$run,failed,,,,,," >>"$scsv"
					continue
				}
				((run > 0)) && echo "$p,$n,$ranks,$run,${st// /,}" >>"$scsv"
				log "ids: $p N=$n n=$ranks run $run: $(cut -d' ' -f1 <<<"$st") ms"
			done
		done
	done
	ids_report >"$RES/scale.md"
	log "ids: done"
}

ids_report() {
	local csv=$RES/scale.csv scsv=$RES/scale_stepd.csv n ranks p
	med() { col "$csv" "\$1==\"$1\" && \$2==$2 && \$5==\"$3\"" 7 | median; }
	smed() { col "$scsv" "\$1==\"$1\" && \$2==$2 && \$5!=\"failed\"" "$3" | median; }
	fails() { awk -F, -v p="$1" -v n="$2" '$1==p && $2==n && $5=="failed"' "$scsv" | grep -c . || true; }
	three() { echo "$(med "gh_$1" "$2" "$3") / $(med "gh_$4" "$2" "$3") / $(med "gh_$5" "$2" "$3")"; }
	best() { printf '%s\n' "$@" | grep -v nan | sort -g | head -1; }
	echo "## ${SCALE_TITLE:-8. Scale: the NCCL ID on many simulated nodes}"
	echo
	echo "\`make bench-scale\` (\`bench/scale.sh ids\`): one private cluster of $MAXN slurmd on this host"
	echo "(Slurm's multiple-slurmd mode), Slurm $(slurm_version), OpenPMIx ${SCALE_PMIX_VERSION:-$(pkg-config --modversion pmix 2>/dev/null)},"
	echo "$(nproc) cores; $RPN ranks per node (\`srun --mpi=pmix -N N --ntasks-per-node=$RPN\`), $RUNS runs per cell"
	echo "after one warm-up, the programs' order rotating. $(date -u '+%Y-%m-%d %H:%M UTC'), load average at the end"
	echo "$(cut -d' ' -f1-3 /proc/loadavg) (other work shared the machine). **Ranks outnumber cores** ($((MAXN * RPN)) ranks"
	echo "at most on $(nproc) cores): every figure includes waiting for a CPU, so compare shapes and ratios, not absolute times."
	echo
	echo "Programs: \`gh_init dist $ITEMS $ITERS\` (bench/c/gh_init.c) with GPUHELPER_EXCHANGE=direct, =fence"
	echo "(Slurm's default fence: a ring when there is data, see docs/scale.md) and =fence with"
	echo "SLURM_PMIX_FENCE=tree (mpi.conf PMIxCollFence=tree, TreeWidth $(awk '$1=="TreeWidth"{print $3}' <(scontrol show config 2>/dev/null)));"
	echo "\`raw_pmix direct|fence $ITERS\` (bench/c/raw_pmix.c: the same exchange by hand, Put/Commit/Get or"
	echo "Put/Commit/Fence(collect)/Get, ring and tree); \`mpi_bcast\` (MPI_Init + MPI_Bcast of 128 bytes, Open MPI"
	echo "under srun, TCP over loopback; up to $MPI_MAX_NODES nodes). Exchange figures are taken after an untimed"
	echo "collecting fence (all ranks present): the slowest rank per iteration, median over runs x iterations (ms)."
	echo
	echo "World ID (one root), ms:"
	echo
	echo "| nodes | ranks | helper direct | helper fence ring | helper fence tree | raw direct | raw fence ring | raw fence tree | best helper / best raw (goal <= 1.2) |"
	echo "|---|---|---|---|---|---|---|---|---|"
	local a b c d e f
	for n in $NODES; do
		ranks=$((n * RPN))
		a=$(med gh_direct "$n" 1) b=$(med gh_fence "$n" 1) c=$(med gh_tree "$n" 1)
		d=$(med raw_direct "$n" raw) e=$(med raw_fence "$n" raw) f=$(med raw_tree "$n" raw)
		echo "| $n | $ranks | $a | $b | $c | $d | $e | $f | $(ratio "$(best "$a" "$b" "$c")" "$(best "$d" "$e" "$f")") |"
	done
	echo
	echo "The other collectives, ms (direct / fence ring / fence tree; barrier and allgather do not depend on"
	echo "GPUHELPER_EXCHANGE: ring / tree):"
	echo
	echo "| nodes | ranks | 8 scalable IDs | node group IDs | barrier | allgather 8 B |"
	echo "|---|---|---|---|---|---|"
	for n in $NODES; do
		ranks=$((n * RPN))
		echo "| $n | $ranks | $(three direct "$n" 8 fence tree) | $(three direct "$n" group fence tree) |" \
			"$(med gh_fence "$n" barrier) / $(med gh_tree "$n" barrier) | $(med gh_fence "$n" allgather) / $(med gh_tree "$n" allgather) |"
	done
	echo
	echo "From exec to having the world ID, slowest rank (ms), and the whole step (srun's wall time, ms):"
	echo
	echo "| nodes | ranks | init helper direct / ring / tree | init raw direct / ring / tree | init MPI_Bcast | step helper direct / ring / tree | step raw direct / ring / tree | step MPI |"
	echo "|---|---|---|---|---|---|---|---|"
	for n in $NODES; do
		ranks=$((n * RPN))
		echo "| $n | $ranks | $(three direct "$n" init fence tree) | $(med raw_direct "$n" init) / $(med raw_fence "$n" init) / $(med raw_tree "$n" init) |" \
			"$(med mpi_bcast "$n" init) | $(smed gh_direct "$n" 5) / $(smed gh_fence "$n" 5) / $(smed gh_tree "$n" 5) |" \
			"$(smed raw_direct "$n" 5) / $(smed raw_fence "$n" 5) / $(smed raw_tree "$n" 5) | $(smed mpi_bcast "$n" 5) |"
	done
	echo
	echo "The root node's load: CPU time (ms, 10 ms ticks) and read syscalls of the step's slurmstepd on node1"
	echo "(rank 0's node, which holds the world ID's key) against node2's, over the whole step, median over runs,"
	echo "helper direct / ring / tree. Read syscalls count what its PMIx server and the step's I/O took in: a"
	echo "proxy for the requests it served."
	echo
	echo "| nodes | ranks | node1 stepd CPU | node2 stepd CPU | node1 reads | node2 reads | failed steps (helper d/r/t, raw d/r/t, MPI) |"
	echo "|---|---|---|---|---|---|---|"
	for n in $NODES; do
		ranks=$((n * RPN))
		echo "| $n | $ranks | $(smed gh_direct "$n" 6) / $(smed gh_fence "$n" 6) / $(smed gh_tree "$n" 6) |" \
			"$(smed gh_direct "$n" 9) / $(smed gh_fence "$n" 9) / $(smed gh_tree "$n" 9) |" \
			"$(smed gh_direct "$n" 7) / $(smed gh_fence "$n" 7) / $(smed gh_tree "$n" 7) |" \
			"$(smed gh_direct "$n" 10) / $(smed gh_fence "$n" 10) / $(smed gh_tree "$n" 10) |" \
			"$(fails gh_direct "$n")/$(fails gh_fence "$n")/$(fails gh_tree "$n"), $(fails raw_direct "$n")/$(fails raw_fence "$n")/$(fails raw_tree "$n"), $(fails mpi_bcast "$n") |"
	done
	echo
	echo "Raw: \`bench/results/scale.csv\` (per program, size, run, item, iteration), \`bench/results/scale_stepd.csv\`."
}

# ---- plugin -----------------------------------------------------------------------------------
# slurmd_ticks: CPU ticks (utime+stime) of all the cluster's slurmd daemons together.
slurmd_ticks() {
	local p st f t=0
	for p in $(awk '/"name": "slurmd-/{getline; gsub(/[^0-9]/,""); print}' "$CLUSTER/cluster.json"); do
		read -r st 2>/dev/null <"/proc/$p/stat" || continue
		st=${st##*) }
		read -ra f <<<"$st"
		t=$((t + f[11] + f[12]))
	done
	echo "$t"
}
section_plugin() {
	local csv=$RES/scale_plugin.csv n=$PLUGIN_NODES run v i out wall a b hz st
	[[ -f $WORK/plugin/spank_gpubind.so ]] || die "plugin: build/spank_gpubind.so is not built (make build)"
	hz=$(getconf CLK_TCK)
	log "plugin: srun -N$n --ntasks-per-node=8 true, plugin against none, $RUNS runs"
	echo "variant,nodes,ranks,run,wall_ms,slurmd_cpu_ms,node1_stepd_cpu_ms,node2_stepd_cpu_ms,plans,cache_hits" >"$csv"
	local saved_rpn=$RPN
	RPN=8 STEP_MPI=none
	for ((run = 1 - WARMUP; run <= RUNS; run++)); do
		for i in 0 1; do
			v=none
			(((i + run + WARMUP) % 2)) && v=plugin
			use_plugstack "$v"
			local extra=()
			[[ $v == plugin ]] && extra=(--gpu-bind-topo --gpus-per-node=8)
			a=$(slurmd_ticks)
			if ! out=$(step "plugin,$v,$n" "$n" $((n * 8)) "${extra[@]}" true 3>"$WORK/st"); then
				echo "$v,$n,$((n * 8)),$run,failed,,,,," >>"$csv"
				continue
			fi
			b=$(slurmd_ticks)
			read -r st <"$WORK/st"
			read -ra f <<<"$st"
			local plans hits
			plans=$(cat "$CLUSTER"/log/slurmd-node*.log 2>/dev/null | grep -c "step plan took" || true)
			hits=$(cat "$CLUSTER"/log/slurmd-node*.log 2>/dev/null | grep "step plan took" | grep -c "plan cache hit" || true)
			((run > 0)) && echo "$v,$n,$((n * 8)),$run,${f[0]},$(((b - a) * 1000 / hz)),${f[1]},${f[4]},$plans,$hits" >>"$csv"
			log "plugin: $v run $run: ${f[0]} ms"
		done
	done
	RPN=$saved_rpn STEP_MPI=pmix
	local pm nm
	{
		echo "## ${SCALE_PLUGIN_TITLE:-9. The plugin at scale}"
		echo
		echo "\`srun -N$n --ntasks-per-node=8 true\` ($((n * 8)) tasks) on $n simulated nodes (\`bench/scale.sh plugin\`), with the"
		echo "plugin (\`--gpu-bind-topo --gpus-per-node=8\`, DGX H100 fixture, plan cache on) against an empty"
		echo "plugstack, alternating, $RUNS runs after one warm-up, Slurm $(slurm_version), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC')."
		echo "CPU over the step: all $n slurmd together (their own time), and the step's slurmstepd on node1 and"
		echo "on node2 (sampled every 50 ms). Plan cache: the plugin's \"step plan took\" lines in the slurmd logs"
		echo "(one per node and step) and those of them that say \"plan cache hit\", cumulative over the section."
		echo
		echo "| variant | step wall (ms) | slurmd CPU, all nodes (ms) | node1 slurmstepd CPU (ms) | node2 slurmstepd CPU (ms) |"
		echo "|---|---|---|---|---|"
		for v in none plugin; do
			echo "| $v | $(col "$csv" "\$1==\"$v\" && \$5!=\"failed\"" 5 | median) | $(col "$csv" "\$1==\"$v\" && \$5!=\"failed\"" 6 | median) |" \
				"$(col "$csv" "\$1==\"$v\" && \$5!=\"failed\"" 7 | median) | $(col "$csv" "\$1==\"$v\" && \$5!=\"failed\"" 8 | median) |"
		done
		pm=$(col "$csv" "\$1==\"plugin\" && \$5!=\"failed\"" 5 | median)
		nm=$(col "$csv" "\$1==\"none\" && \$5!=\"failed\"" 5 | median)
		echo
		echo "plugin/none step wall time: $(ratio "$pm" "$nm"). Plan cache at the end: $(tail -1 "$csv" | cut -d, -f10) hits of"
		echo "$(tail -1 "$csv" | cut -d, -f9) step plans (the warm-up's first step on each node is a miss). Failed steps: $(grep -c ',failed,' "$csv" || true)."
		echo
		echo "Raw: \`bench/results/scale_plugin.csv\`."
	} >"$RES/scale_plugin.md"
	log "plugin: done"
}

main() {
	local sections=("$@") s
	((${#sections[@]})) || sections=(ids)
	# report: write bench/results/scale.md again from the CSVs (after editing the text).
	if [[ ${sections[*]} == report ]]; then
		ids_report >"$RES/scale.md"
		"$ROOT/bench/run.sh" assemble
		return
	fi
	for s in "${sections[@]}"; do
		case $s in ids | plugin) ;; *) die "unknown section '$s': expected ids or plugin" ;; esac
	done
	prepare
	start_cluster
	for s in "${sections[@]}"; do
		"section_$s"
	done
	[[ -s $RES/scale_failures.log ]] || rm -f "$RES/scale_failures.log"
	# Results kept elsewhere (SCALE_RES) are not this tree's RESULTS.md.
	[[ -n ${SCALE_RES:-} ]] || "$ROOT/bench/run.sh" assemble
}

main "$@"
