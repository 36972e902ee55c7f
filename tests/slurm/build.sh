#!/usr/bin/env bash
# Build one Slurm release from the source tarballs of the version matrix and install it into a
# cache keyed by the tarball's sha256, so that a second call returns at once.
#
#   tests/slurm/build.sh VERSION            e.g. 26.05.3; prints the install prefix on stdout
#   tests/slurm/build.sh --prefix VERSION   only print where VERSION is (or would be) installed
#
# Environment:
#   SLURM_SRC_DIR      folder holding slurm-VERSION.tar.gz (default: SLURM_CACHE_DIR/src):
#                      SchedMD's release tag slurm-MAJOR-MINOR-PATCH-1 of github.com/SchedMD/slurm,
#                      packed with its top directory named slurm-VERSION/ (the generated configure
#                      included). Only needed for a build: a cached build is found without it.
#   SLURM_CACHE_DIR    where builds are kept (default /var/cache/gpubind/slurm)
#
# The tarball must match the checksum tests/slurm/SHA256SUMS gives for it (committed here, so
# a folder of tarballs cannot vouch for itself).
#   SLURM_BUILD_JOBS   make -j (default: number of CPUs)
#
# Configured for tests on one host: --enable-multiple-slurmd (several slurmd on one machine),
# --with-pmix (srun --mpi=pmix), cgroup/v2 with BPF, auth/munge and auth/slurm (JWT library;
# the GPU machine runs without munged), and JSON (json-c): 26.05's clients load data_parser,
# which needs serializer/json, and die without it ("could not find plugin for application/json"). Everything else that configure would pick up on its own
# (REST daemon, X11, sview, PAM, HDF5, ...) is switched off: it costs build time and is not used.
# Log of the build: PREFIX.log.
set -euo pipefail

only_prefix=no
if [[ ${1:-} == --prefix ]]; then only_prefix=yes; shift; fi
version=${1:-}
if [[ ! $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	echo "slurm/build.sh: VERSION '${version}' is not of the form MAJOR.MINOR.PATCH (e.g. 26.05.3)" >&2
	exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sums=$here/SHA256SUMS
want=$(awk -v f="slurm-$version.tar.gz" '$2 == f || $2 == "*" f { print $1 }' "$sums")
if [[ -z $want ]]; then
	echo "slurm/build.sh: $sums lists no slurm-$version.tar.gz (it knows: $(awk '{print $2}' "$sums" | paste -sd, -))" >&2
	exit 2
fi
cache=${SLURM_CACHE_DIR:-/var/cache/gpubind/slurm}
# The recipe number changes whenever the configure line below does: a new prefix, a new build.
recipe=2
prefix=$cache/$version-${want:0:16}-r$recipe
if [[ $only_prefix == yes ]]; then echo "$prefix"; exit 0; fi

mkdir -p "$cache"
exec 9>"$cache/.lock-$version"
flock 9 # one build of a version at a time; a second caller waits, then finds it done
if [[ -f $prefix/.gpubind-built && $(cat "$prefix/.gpubind-built") == "$want" ]]; then
	echo "$prefix"
	exit 0
fi

src_dir=${SLURM_SRC_DIR:-$cache/src}
tarball=$src_dir/slurm-$version.tar.gz
if [[ ! -f $tarball ]]; then
	echo "slurm/build.sh: no $tarball to build Slurm $version from: set SLURM_SRC_DIR to a folder holding slurm-$version.tar.gz (see the head of this script)" >&2
	exit 2
fi
got=$(sha256sum "$tarball" | awk '{print $1}')
if [[ $got != "$want" ]]; then
	echo "slurm/build.sh: $tarball has sha256 $got, $sums says $want" >&2
	exit 1
fi

# Debian packages configure needs for the features above, and nothing more.
need=(libmunge-dev munge libjwt-dev libjson-c-dev libdbus-1-dev libhwloc-dev libpmix-dev linux-libc-dev pkg-config gcc make)
missing=()
for p in "${need[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "slurm/build.sh: installing ${missing[*]}" >&2
	apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/slurm-build-$version.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$prefix.log
rm -rf "$prefix"
echo "slurm/build.sh: building Slurm $version into $prefix (log: $log); about 10 minutes on 2 cores" >&2
start=$(date +%s)
{
	# set -e does not apply inside a group run with ||, hence the && chain.
	tar -xzf "$tarball" -C "$work" &&
		cd "$work/slurm-$version" &&
		pmix_dir=$(pkg-config --variable=prefix pmix) &&
		./configure --prefix="$prefix" --sysconfdir="$prefix/etc" \
		--enable-multiple-slurmd --with-pmix="$pmix_dir" --enable-cgroupv2 \
		--with-munge --with-jwt --with-json --with-hwloc \
		--disable-static --disable-debug --disable-slurmrestd --disable-x11 --disable-sview \
		--without-hdf5 --without-rrdtool --without-lua --without-nvml --without-ucx \
		--without-freeipmi --without-rdkafka --without-yaml \
		--without-libhttp-parser &&
		make -j"${SLURM_BUILD_JOBS:-$(nproc)}" &&
		make install
} >"$log" 2>&1 || {
	echo "slurm/build.sh: building Slurm $version failed; last lines of $log:" >&2
	tail -n 30 "$log" >&2
	exit 1
}
# Test installs need no static archives, libtool files or docs.
find "$prefix" \( -name '*.la' -o -name '*.a' \) -delete
rm -rf "$prefix/share/man" "$prefix/share/doc"
echo "$want" >"$prefix/.gpubind-built"
echo "slurm/build.sh: Slurm $version built in $(($(date +%s) - start)) s" >&2
echo "$prefix"
