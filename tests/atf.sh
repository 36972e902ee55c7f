#!/usr/bin/env bash
# Slurm's own python testsuite (the ATF, testsuite/python of the Slurm source) against a
# private 2-node cluster of the matrix Slurm, in three passes: without gpubind, with the
# plugin and default=off, and with default=closest mode=enforce. Not part of `make test`:
# it is long (tens of minutes for the whole suite) and judges Slurm as much as gpubind. Needs
# root, unprompted sudo for root (the ATF asks `sudo -ln`) and the matrix Slurm
# (tests/slurm/build.sh); installs pytest, pexpect and requests (Debian packages) if missing.
#
#   tests/atf.sh [TEST ...]     TEST: files or node ids relative to testsuite/python,
#                               default tests (the whole suite)
#
# Environment:
#   ATF_VERSION   Slurm release (default 24.11.7; its tarball is found as by tests/slurm/build.sh)
#   ATF_PASSES    passes to run, of "none off closest" (default all three)
#   ATF_OUT       work and log folder (default build/atf); per pass PASS.log, PASS.xml (JUnit)
#   ATF_TIMEOUT   seconds a pass may take before it is stopped (default 3600)
#
# The ATF runs in local-config mode (Slurm's testsuite/python/README): it does not change the
# cluster, and skips the tests that need another configuration. The cluster: task/cgroup with
# task/affinity, proctrack/cgroup, ConstrainDevices=yes, 8 fake GPUs per node (device nodes
# 195:N made by tests/cluster), 8 CPUs per node, MinJobAge=300 (Slurm's default: the ATF
# cancels every job it submitted at the end of each file and fails when one was purged). The
# plugin reads the DGX H100 fixture's topology (the fake GPUs have no real PCI tree).
#
# After the passes: the outcome of every test id in each pass (tests/atf-outcomes.py, from the
# JUnit files: passed, failed, error, skipped, +teardown-error), the ids whose outcome differs
# between passes, each of them run again alone in every pass (a fresh cluster per pass), and
# the skips with their reasons. Exit 1 when a test's outcome still differs between the passes
# when it runs alone, or a pass did not complete. Files in ATF_OUT: PASS.log, PASS.xml,
# PASS.outcomes (id, outcome, message), PASS.time, differ.txt, rerun/PASS/*, rerun.txt,
# skips.txt, summary.txt.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${ATF_VERSION:-24.11.7}
passes=${ATF_PASSES:-none off closest}
out=${ATF_OUT:-$root/build/atf}
limit=${ATF_TIMEOUT:-3600}
pytest=/usr/bin/pytest-3
if (($# == 0)); then set -- tests; fi

die() { echo "atf.sh: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (private Slurm cluster)"
missing=$(for p in python3-pytest python3-pexpect python3-requests; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"; done)
if [[ -n $missing ]]; then
	echo "atf.sh: installing" $missing >&2
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >&2
fi
[[ -x $pytest ]] || die "$pytest not found: apt-get install python3-pytest python3-pexpect python3-requests"
command -v sudo >/dev/null || die "the ATF needs sudo: apt-get install sudo"

# The ATF runs its commands through sudo and skips everything without unprompted sudo rights.
# It runs some commands through sudo, which must keep SLURM_CONF (the private cluster).
sudoers="printf 'root ALL=(ALL:ALL) NOPASSWD: ALL\\nDefaults env_keep += \"SLURM_CONF\"\\n' >/etc/sudoers.d/atf-root"
sudo -ln 2>/dev/null | grep -q '(ALL.*) NOPASSWD: ALL' || die "the ATF needs unprompted sudo: apt-get install sudo; $sudoers"
sudo -ln 2>/dev/null | grep -q 'SLURM_CONF' || die "sudo must keep SLURM_CONF: $sudoers"

prefix=$("$root/tests/slurm/build.sh" "$version")
# The testsuite comes from the tarball the build used (tests/slurm/build.sh: SLURM_SRC_DIR,
# default SLURM_CACHE_DIR/src).
src_dir=${SLURM_SRC_DIR:-${SLURM_CACHE_DIR:-/var/cache/gpubind/slurm}/src}
tarball=$src_dir/slurm-$version.tar.gz
[[ -f $tarball ]] || die "no $tarball: set SLURM_SRC_DIR to the folder holding slurm-$version.tar.gz"

mkdir -p "$out"
out=$(cd "$out" && pwd)
src=$out/slurm-$version
if [[ ! -d $src/testsuite/python ]]; then
	tar -xzf "$tarball" -C "$out" "slurm-$version/testsuite"
fi

# The plugin, built for this Slurm, and the cluster tool.
plug=$out/plugin
mkdir -p "$plug"
(cd "$root" && go build -trimpath -buildmode=c-shared -o "$plug/gpubind_engine.so" ./spank/engine &&
	go build -trimpath -tags gpubind_launcher -o "$plug/gpubind-launcher" ./spank/engine &&
	make -s -C spank/frontend BUILD="$plug" SLURM_PREFIX="$prefix" GB_LAUNCHER="$plug/gpubind-launcher" &&
	go build -trimpath -o "$out/testcluster" ./tests/cluster/cmd/testcluster) >"$out/build.log" 2>&1 ||
	die "build failed: $out/build.log"
chmod -R a+rX "$plug"
cache=$out/plancache
mkdir -p "$cache"
plugline="required $plug/spank_gpubind.so root=$root/tests/fixtures/dgxh100-2cpu source=sysfs cache_dir=$cache"

cluster=
stop() {
	if [[ -n $cluster ]]; then "$out/testcluster" stop "$cluster" || true; cluster=; fi
}
trap stop EXIT

# start_cluster PASS: a fresh cluster configured for PASS, its environment exported, and the
# ATF's configuration file for it in $conf.
start_cluster() {
	local extra
	case $1 in
	none) extra=() ;;
	off) extra=(-plugstack "$plugline default=off") ;;
	closest) extra=(-plugstack "$plugline default=closest mode=enforce") ;;
	*) die "unknown pass '$1' (none, off, closest)" ;;
	esac
	echo "==== pass $1: Slurm $version, ${extra[*]:-no plugin}" >&2
	cluster=$(SLURM_PREFIX=$prefix "$out/testcluster" start -nodes 2 -cpus 8 -gpus 8 \
		-task task/cgroup,task/affinity -proctrack proctrack/cgroup -constrain-devices \
		-conf MinJobAge=300 "${extra[@]}")
	eval "$("$out/testcluster" env "$cluster")"
	conf=$out/testsuite-$1.conf
	{
		echo "SlurmSourceDir=$src"
		echo "SlurmBuildDir=$src"
		echo "SlurmInstallDir=$prefix"
		echo "SlurmConfigDir=$(dirname "$SLURM_CONF")"
	} >"$conf"
}

# run_pytest XML LOG TEST...: pytest in testsuite/python, TEST patterns expanded there
# (with expand=no: TEST is one node id, taken as it is).
expand=yes
run_pytest() {
	local xml=$1 log=$2
	shift 2
	(cd "$src/testsuite/python" && tests=() && if [[ $expand == yes ]]; then
		for a in "$@"; do tests+=($a); done
	else tests=("$@"); fi &&
		SLURM_TESTSUITE_CONF=$conf timeout "$limit" "$pytest" -s -rfEs -v \
			-p no:cacheprovider --disable-warnings --junitxml="$xml" "${tests[@]}") >"$log" 2>&1
}

outcomes="$root/tests/atf-outcomes.py"
ran=()
# run_pass PASS TEST...: one pass of the suite on its own cluster; PASS.rc is pytest's exit.
run_pass() {
	local pass=$1 rc=0 t0
	shift
	start_cluster "$pass"
	t0=$(date +%s)
	run_pytest "$out/$pass.xml" "$out/$pass.log" "$@" || rc=$?
	echo $(($(date +%s) - t0)) >"$out/$pass.time"
	echo "$rc" >"$out/$pass.rc"
	stop
	echo "pass $pass: pytest exit $rc in $(cat "$out/$pass.time") s; $(grep -E '^=+ .*(passed|failed|skipped|error).* in ' "$out/$pass.log" | tail -1)" >&2
}
# One pass after the other: a cluster with cgroups holds the machine-wide lock of tests/cluster
# (Slurm names its cgroups after the node), so passes cannot overlap, and while a pass runs
# every other cgroup test cluster on the machine waits.
for pass in $passes; do run_pass "$pass" "$@"; done
for pass in $passes; do
	rc=$(cat "$out/$pass.rc" 2>/dev/null || echo 255)
	grep -E '^(FAILED|ERROR) ' "$out/$pass.log" | sed 's/ - .*//' | sort -u >"$out/$pass.failed" || true
	# 0: all passed, 1: some failed; else pytest did not run the tests (or timeout stopped it).
	if ((rc > 1)); then bad=1; echo "pass $pass: pytest did not complete (exit $rc): $out/$pass.log" >&2; fi
	if [[ -s $out/$pass.xml ]]; then
		"$outcomes" outcomes "$out/$pass.xml" >"$out/$pass.outcomes"
		ran+=("$pass=$out/$pass.outcomes")
	fi
done
{
	for pass in $passes; do
		[[ -f $out/$pass.outcomes ]] || continue
		printf '%-8s %4s s ' "$pass" "$(cat "$out/$pass.time")"
		cut -f2 "$out/$pass.outcomes" | sort | uniq -c | awk '{printf " %s %s", $2, $1}'
		echo
	done
} | tee "$out/summary.txt" >&2
"$outcomes" skips "${ran[@]}" >"$out/skips.txt"
echo "skips by reason: $out/skips.txt" >&2

# The tests whose outcome differs between the passes, each run alone in every pass.
"$outcomes" differ "${ran[@]}" >"$out/differ.txt"
echo "$(wc -l <"$out/differ.txt") tests differ between the passes ($out/differ.txt)" >&2
"$outcomes" table "${ran[@]}" <"$out/differ.txt" >"$out/differ-table.txt"
differs_alone=0
if [[ -s $out/differ.txt && ${#ran[@]} -gt 1 ]]; then
	rerun=()
	for pass in $passes; do
		mkdir -p "$out/rerun/$pass"
		start_cluster "$pass"
		n=0
		expand=no
		while IFS= read -r id; do
			n=$((n + 1))
			run_pytest "$out/rerun/$pass/$n.xml" "$out/rerun/$pass/$n.log" "$id" </dev/null || true
		done <"$out/differ.txt"
		expand=yes
		stop
		for x in "$out"/rerun/"$pass"/*.xml; do [[ -s $x ]] && "$outcomes" outcomes "$x"; done >"$out/rerun/$pass.outcomes"
		rerun+=("$pass=$out/rerun/$pass.outcomes")
	done
	"$outcomes" table "${rerun[@]}" <"$out/differ.txt" >"$out/rerun.txt"
	"$outcomes" differ "${rerun[@]}" >"$out/rerun-differ.txt"
	echo "alone, in each pass ($out/rerun.txt):" >&2
	sed 's/^/  /' "$out/rerun.txt" >&2
	if [[ -s $out/rerun-differ.txt ]]; then
		differs_alone=1
		echo "tests whose outcome differs between the passes when run alone:" >&2
		sed 's/^/  /' "$out/rerun-differ.txt" >&2
	else
		echo "run alone, every one of them has the same outcome in every pass" >&2
	fi
fi
if ((${bad:-0} || differs_alone)); then exit 1; fi
