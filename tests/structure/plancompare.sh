#!/usr/bin/env bash
# Issue 35's proof that the restructuring changed no answer: `gpubind plan` over every fixture
# snapshot (tests/fixtures/*.json) and a matrix of policies, flags, task counts, task CPU
# layouts and step cpusets, built at BASE (default 755e52f, main before issue 35) and from this
# tree, must print the same bytes: the text lines, --json and --table. The one intended
# difference is removed before comparing: the table's "mode" line, which C never read
# (spank/PROTOCOL.md, "mode" dropped in protocol 1's table by issue 35).
#
#   tests/structure/plancompare.sh [BASE]     prints "plancompare: N cases identical" or the diffs
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
base=${1:-755e52f}
work=$(mktemp -d)
cleanup() {
	git -C "$root" worktree remove --force "$work/base" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

git -C "$root" worktree add -q --detach "$work/base" "$base"
(cd "$work/base" && go build -o "$work/old" ./cmd/gpubind)
(cd "$root" && go build -o "$work/new" ./cmd/gpubind)

# The cases: one line each, the arguments after "plan --snapshot FIXTURE".
python3 - "$root"/tests/fixtures/*.json >"$work/cases" <<'PY'
import json, sys
policies = ["closest", "closest,cpus", "closest,nic", "closest,cpus,nic,verbose", "pack", "spread",
            "single", "per-task:2", "closest,visible=first", "closest,visible=localid,cpus",
            "spread,cpus,visible=first"]
for path in sys.argv[1:]:
    d = json.load(open(path))
    ngpus = len(d.get("gpus", [])) or 1
    numa = [n["cpus"] for n in d.get("numa", []) if n.get("cpus")]
    def first(lst, k):  # the first k CPUs of a CPU list
        out = []
        for part in lst.split(","):
            a, _, b = part.partition("-")
            for c in range(int(a), int(b or a) + 1):
                out.append(c)
        return ",".join(map(str, out[:k]))
    for tasks in sorted({1, 2, ngpus, 2 * ngpus}):
        layouts = [""]
        if numa:
            # tasks spread over the NUMA nodes round robin, 2 CPUs each; and all on node 0
            per = {}
            lay = []
            for t in range(tasks):
                n = numa[t % len(numa)]
                i = per.get(n, 0)
                per[n] = i + 1
                cpus = first(n, 2 * (i + 1)).split(",")[-2:]
                lay.append(",".join(cpus))
            layouts.append(";".join(lay))
            layouts.append(";".join([first(numa[0], 1)] * tasks))
        for pol in policies:
            for lay in layouts:
                args = ["--tasks", str(tasks), "--policy", pol]
                if lay:
                    args += ["--task-cpus", lay]
                print(path + "\t" + " ".join(args))
            if numa:
                print(path + "\t" + " ".join(["--tasks", str(tasks), "--policy", pol, "--step-cpus", numa[0]]))
        print(path + "\t" + " ".join(["--tasks", str(tasks), "--gpus", "0", "--policy", "closest,cpus"]))
        print(path + "\t" + " ".join(["--tasks", str(tasks), "--numbering", "relative", "--policy", "closest,nic"]))
PY

n=0 bad=0
while IFS=$'\t' read -r fixture args; do
	for out in "" --json --table; do
		n=$((n + 1))
		# shellcheck disable=SC2086
		o=$("$work/old" plan --snapshot "$fixture" $args $out 2>&1; echo "rc=$?")
		# shellcheck disable=SC2086
		w=$("$work/new" plan --snapshot "$fixture" $args $out 2>&1; echo "rc=$?")
		if [[ $out == --table ]]; then
			o=$(grep -v '^mode ' <<<"$o" | sed -E 's/^end [0-9]+$/end/')
			w=$(grep -v '^mode ' <<<"$w" | sed -E 's/^end [0-9]+$/end/')
		fi
		if [[ $o != "$w" ]]; then
			bad=$((bad + 1))
			echo "DIFFERS: plan --snapshot $fixture $args $out"
			diff <(echo "$o") <(echo "$w") | head -20
		fi
	done
done <"$work/cases"
if ((bad)); then
	echo "plancompare: $bad of $n cases differ from $base"
	exit 1
fi
echo "plancompare: $n cases identical to $base ($(wc -l <"$work/cases") argument sets x text, --json, --table)"
