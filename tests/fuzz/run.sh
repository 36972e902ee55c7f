#!/usr/bin/env bash
# Build the libFuzzer targets of the C parsers that read input slurmstepd did not write
# (tests/fuzz/fuzz_*.c; docs/security.md) with clang, ASan and UBSan, and run each for
# FUZZTIME seconds from its seed corpus (tests/fuzz/corpus/TARGET). A crash, a sanitizer
# report or a leak fails the run; the input that caused it is left in BUILD/fuzz/.
#
#   tests/fuzz/run.sh [TARGET...]     FUZZTIME=15 (seconds each) BUILD=build
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
case $build in /*) ;; *) build=$root/$build ;; esac
out=$build/fuzz
fuzztime=${FUZZTIME:-15}
cc=${FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}
if [[ -z $cc ]]; then
	echo "fuzz: no clang (make deps installs clang-14 and libclang-rt-14-dev)" >&2
	exit 1
fi
fe=$root/spank/frontend rule=$root/rule
# Slurm's headers: a Slurm built from source (SLURM_PREFIX), else the system's in /usr/include.
slurm_inc=
case ${SLURM_PREFIX:-/usr} in /usr | /usr/) ;; *) slurm_inc=-I$SLURM_PREFIX/include ;; esac
flags=(-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
	-fno-omit-frame-pointer -D_GNU_SOURCE -std=gnu11 -Wall -Werror -I"$fe" -I"$rule" $slurm_inc)
# The rule: every .c of rule/, as the front end's Makefile and cgo take it.
rule_c=("$rule"/*.c)
declare -A srcs=(
	[table]="${rule_c[*]}"
	[binds]="${rule_c[*]}"
	[plancache]="$fe/plancache.c $fe/request.c ${rule_c[*]} $root/tests/fuzz/stubs.c"
	[args]="$fe/args.c ${rule_c[*]} $root/tests/fuzz/stubs.c"
)
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(table binds plancache args)
# The targets run side by side, FUZZ_JOBS at a time (default: one per CPU): each is one
# single-threaded process, so the run takes FUZZTIME per round instead of per target.
jobs=${FUZZ_JOBS:-$(nproc)}
mkdir -p "$out"
for t in "${targets[@]}"; do
	[[ -n ${srcs[$t]:-} ]] || { echo "fuzz: no target $t" >&2; exit 2; }
	# shellcheck disable=SC2086
	"$cc" "${flags[@]}" -o "$out/fuzz_$t" "$root/tests/fuzz/fuzz_$t.c" ${srcs[$t]}
	mkdir -p "$out/corpus-$t"
	cp -n "$root/tests/fuzz/corpus/$t"/* "$out/corpus-$t/" 2>/dev/null || true
done
fuzz() { # fuzz TARGET: its exit status in $out/fuzz_TARGET.rc
	local t=$1 st=0
	(cd "$out" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		./fuzz_$t -max_total_time="$fuzztime" -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "corpus-$t" >"$out/fuzz_$t.log" 2>&1) || st=$?
	echo "$st" >"$out/fuzz_$t.rc"
}
echo "fuzz: ${targets[*]} for ${fuzztime}s each, $jobs at a time"
running=0
for t in "${targets[@]}"; do
	if ((running >= jobs)); then
		wait -n || true
		running=$((running - 1))
	fi
	fuzz "$t" &
	running=$((running + 1))
done
wait
rc=0
for t in "${targets[@]}"; do
	if [[ $(cat "$out/fuzz_$t.rc") != 0 ]]; then
		echo "fuzz: $t FAILED; its log: $out/fuzz_$t.log" >&2
		grep -E "ERROR|runtime error|SUMMARY|Test unit written" "$out/fuzz_$t.log" >&2 || tail -20 "$out/fuzz_$t.log" >&2
		rc=1
	else
		echo "fuzz: $t clean: $(grep -E '^stat::number_of_executed_units' "$out/fuzz_$t.log" | awk '{print $2}') runs, $(ls "$out/corpus-$t" | wc -l) inputs in the corpus"
	fi
done
exit $rc
