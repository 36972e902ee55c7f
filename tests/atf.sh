#!/usr/bin/env bash
# Slurm's own python testsuite (the ATF, testsuite/python of the Slurm source) against a
# private 2-node cluster of the matrix Slurm, in three passes: without gpubind, with the
# plugin and default=off, and with default=closest mode=enforce. Not part of `make test`:
# it is long (minutes per pass) and judges Slurm as much as gpubind. Needs root,
# /usr/bin/pytest-3 (Debian: apt-get install python3-pytest python3-pexpect python3-requests),
# unprompted sudo for root (the ATF asks `sudo -ln`) and the matrix Slurm (tests/slurm/build.sh).
#
#   tests/atf.sh [TEST ...]     TEST: files or node ids relative to testsuite/python,
#                               default tests/test_116_*.py (srun) and tests/test_144_*.py (GRES)
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
# cancels every job it submitted at the end of each file and fails when one was purged). The plugin reads the DGX H100 fixture's
# topology (the fake GPUs have no real PCI tree). At the end: passed/failed counts per pass,
# the failing tests, and whether default=closest fails the same tests as Slurm alone.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${ATF_VERSION:-24.11.7}
passes=${ATF_PASSES:-none off closest}
out=${ATF_OUT:-$root/build/atf}
limit=${ATF_TIMEOUT:-3600}
pytest=/usr/bin/pytest-3
if (($# == 0)); then set -- 'tests/test_116_*.py' 'tests/test_144_*.py'; fi

die() { echo "atf.sh: $*" >&2; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (private Slurm cluster)"
[[ -x $pytest ]] || die "$pytest not found: apt-get install python3-pytest python3-pexpect python3-requests"

# The ATF runs its commands through sudo and skips everything without unprompted sudo rights.
# It runs some commands through sudo, which must keep SLURM_CONF (the private cluster).
sudoers="printf 'root ALL=(ALL:ALL) NOPASSWD: ALL\\nDefaults env_keep += \"SLURM_CONF\"\\n' >/etc/sudoers.d/atf-root"
sudo -ln 2>/dev/null | grep -q '(ALL.*) NOPASSWD: ALL' || die "the ATF needs unprompted sudo: apt-get install sudo; $sudoers"
sudo -ln 2>/dev/null | grep -q 'SLURM_CONF' || die "sudo must keep SLURM_CONF: $sudoers"

prefix=$("$root/tests/slurm/build.sh" "$version")
src_dir=${SLURM_SRC_DIR:-}
if [[ -z $src_dir ]]; then
	for d in "$root/../shared/slurm" /work/shared/slurm; do
		if [[ -f $d/slurm-$version.tar.gz ]]; then src_dir=$d; break; fi
	done
fi
tarball=$src_dir/slurm-$version.tar.gz
[[ -f $tarball ]] || die "slurm-$version.tar.gz not found (set SLURM_SRC_DIR)"

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

for pass in $passes; do
	case $pass in
	none) extra=() ;;
	off) extra=(-plugstack "$plugline default=off") ;;
	closest) extra=(-plugstack "$plugline default=closest mode=enforce") ;;
	*) die "unknown pass '$pass' (none, off, closest)" ;;
	esac
	echo "==== pass $pass: Slurm $version, ${extra[*]:-no plugin}" >&2
	cluster=$(SLURM_PREFIX=$prefix "$out/testcluster" start -nodes 2 -cpus 8 -gpus 8 \
		-task task/cgroup,task/affinity -proctrack proctrack/cgroup -constrain-devices \
		-conf MinJobAge=300 "${extra[@]}")
	eval "$("$out/testcluster" env "$cluster")"
	conf=$out/testsuite-$pass.conf
	{
		echo "SlurmSourceDir=$src"
		echo "SlurmBuildDir=$src"
		echo "SlurmInstallDir=$prefix"
		echo "SlurmConfigDir=$(dirname "$SLURM_CONF")"
	} >"$conf"
	rc=0
	# The TEST patterns are expanded in testsuite/python, as pytest reads them there.
	(cd "$src/testsuite/python" && set -f && tests=() && set +f && for a in "$@"; do tests+=($a); done &&
		SLURM_TESTSUITE_CONF=$conf timeout "$limit" "$pytest" -s -rfEs -v \
			-p no:cacheprovider --disable-warnings --junitxml="$out/$pass.xml" "${tests[@]}") >"$out/$pass.log" 2>&1 || rc=$?
	stop
	echo "pass $pass: pytest exit $rc; $(grep -E '^=+ .*(passed|failed|skipped|error).* in ' "$out/$pass.log" | tail -1)" >&2
	grep -E '^(FAILED|ERROR) ' "$out/$pass.log" | sed 's/ - .*//' | sort -u >"$out/$pass.failed" || true
	sed 's/^/  /' "$out/$pass.failed" >&2
	# 0: all passed, 1: some failed; else pytest did not run the tests (or timeout stopped it).
	if ((rc > 1)); then bad=1; echo "pass $pass: pytest did not complete (exit $rc): $out/$pass.log" >&2; fi
done
if ((${bad:-0})); then exit 1; fi

if [[ -f $out/none.failed && -f $out/closest.failed && " $passes " == *" none "* && " $passes " == *" closest "* ]]; then
	if cmp -s "$out/none.failed" "$out/closest.failed"; then
		echo "default=closest fails the same tests as Slurm without the plugin" >&2
	else
		echo "default=closest fails other tests than Slurm without the plugin:" >&2
		diff "$out/none.failed" "$out/closest.failed" | grep '^[<>]' | sed 's/^</  only without the plugin:/; s/^>/  only with default=closest:/' >&2
		exit 1
	fi
fi
