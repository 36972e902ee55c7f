#!/usr/bin/env bash
# Private Slurm test cluster for humans and scripts (needs root and `make deps`).
#
#   tests/cluster/cluster.sh start [-nodes N] [-cpus N] [-task PLUGIN] [-gpus N]
#                                  [-constrain-devices] [-plugstack LINE]... [-conf LINE]...
#        starts a cluster and prints its directory
#   eval "$(tests/cluster/cluster.sh env DIR)"    point srun/sinfo/... at it
#   tests/cluster/cluster.sh stop DIR              cancel its jobs, end its daemons, remove DIR
#   tests/cluster/cluster.sh list                  clusters in the temp dirs (to find forgotten ones)
#
# Example:
#   dir=$(tests/cluster/cluster.sh start -nodes 2)
#   eval "$(tests/cluster/cluster.sh env "$dir")"; srun -N2 -n4 hostname
#   tests/cluster/cluster.sh stop "$dir"
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$root/build/testcluster

# Build (cached by go) to a private name first: other users of this tree may build at once.
mkdir -p "$root/build"
tmp=$(mktemp "$root/build/.testcluster.XXXXXX")
trap 'rm -f "$tmp"' EXIT
(cd "$root" && go build -trimpath -o "$tmp" ./tests/cluster/cmd/testcluster)
mv -f "$tmp" "$bin"

exec "$bin" "$@"
