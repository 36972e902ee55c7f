#!/usr/bin/env bash
# Build the container runtimes of the container tests, pyxis (a SPANK plugin, against a given
# Slurm) and enroot, from their source tarballs, and install both into one prefix in a cache
# keyed by the tarballs' sha256 and the Slurm headers, so that a second call returns at once.
#
#   tests/containers/build.sh [SLURM_PREFIX]            prints the install prefix as its last line
#   tests/containers/build.sh --prefix [SLURM_PREFIX]   only print where it is (or would be)
#
# SLURM_PREFIX is a Slurm install prefix (tests/slurm/build.sh prints one) whose
# include/slurm/spank.h pyxis is compiled against; empty or "system": the system's Slurm
# headers (/usr/include/slurm, Debian's libslurm-dev). A SPANK plugin must be built against
# the Slurm that loads it.
#
# The prefix holds bin/enroot (and its helpers), etc/enroot, lib/enroot, share/enroot, and
# lib/slurm/spank_pyxis.so with share/pyxis/pyxis.conf. docs/containers.md says how the
# tests use them.
#
# Environment:
#   CONTAINERS_SRC_DIR    folder holding pyxis-VERSION.tar.gz and enroot-VERSION.tar.gz
#                         (default: CONTAINERS_CACHE_DIR/src): the tags vVERSION of
#                         github.com/NVIDIA/pyxis and github.com/NVIDIA/enroot (enroot with its
#                         deps/makeself and deps/linux-headers submodules filled in), packed
#                         with the top directories pyxis-VERSION/ and enroot-VERSION/. Only
#                         needed for a build: a cached build is found without them.
#   CONTAINERS_CACHE_DIR  where builds are kept (default /var/cache/gpubind/containers)
#
# Each tarball must match the checksum tests/containers/SHA256SUMS gives for it (committed
# here, so a folder of tarballs cannot vouch for itself).
#   PYXIS_VERSION         default 0.24.0
#   ENROOT_VERSION        default 4.1.2
#
# enroot is built with FORCE_GLIBC=1 (its default links its helpers statically against a musl
# it builds itself; the tarball has no musl source). Its helpers call strlcpy/strlcat, which
# glibc has only since 2.38: on an older glibc (Debian 12 has 2.36) they get libbsd's, added
# through the environment (the Makefile's own flags must stay: a make command-line variable
# would replace them). Log of the build: PREFIX.log.
set -euo pipefail

only_prefix=no
if [[ ${1:-} == --prefix ]]; then only_prefix=yes; shift; fi
slurm=${1:-}
if [[ $slurm == system ]]; then slurm=; fi
pyxis_v=${PYXIS_VERSION:-0.24.0}
enroot_v=${ENROOT_VERSION:-4.1.2}
for v in "$pyxis_v" "$enroot_v"; do
	if [[ ! $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
		echo "containers/build.sh: version '$v' is not of the form MAJOR.MINOR.PATCH (PYXIS_VERSION, ENROOT_VERSION)" >&2
		exit 2
	fi
done

if [[ -n $slurm ]]; then
	spank_h=$slurm/include/slurm/spank.h
else
	spank_h=/usr/include/slurm/spank.h
fi
if [[ ! -f $spank_h ]]; then
	echo "containers/build.sh: no $spank_h: give a Slurm install prefix (tests/slurm/build.sh VERSION prints one), or install the system's Slurm headers (libslurm-dev)" >&2
	exit 2
fi

sums=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/SHA256SUMS
sum_of() { # the checksum tests/containers/SHA256SUMS gives file $1
	awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$sums"
}
want_p=$(sum_of "pyxis-$pyxis_v.tar.gz")
want_e=$(sum_of "enroot-$enroot_v.tar.gz")
for f in "pyxis-$pyxis_v.tar.gz:$want_p" "enroot-$enroot_v.tar.gz:$want_e"; do
	if [[ -z ${f#*:} ]]; then
		echo "containers/build.sh: $sums lists no ${f%%:*} (it knows: $(awk '{print $2}' "$sums" | paste -sd, -))" >&2
		exit 2
	fi
done

# The Slurm side of the key: the SPANK header pyxis compiles against, and Slurm's version.
slurm_key=$(cat "$spank_h" "$(dirname "$spank_h")/slurm_version.h" 2>/dev/null | sha256sum | cut -c1-12)
cache=${CONTAINERS_CACHE_DIR:-/var/cache/gpubind/containers}
# The recipe number changes whenever the build steps below do: a new prefix, a new build.
recipe=1
prefix=$cache/pyxis-$pyxis_v-enroot-$enroot_v-${want_p:0:8}${want_e:0:8}-slurm-$slurm_key-r$recipe
if [[ $only_prefix == yes ]]; then echo "$prefix"; exit 0; fi
stamp="$want_p $want_e $slurm_key"

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9 # one build at a time; a second caller waits, then finds it done
if [[ -f $prefix/.gpubind-built && $(cat "$prefix/.gpubind-built") == "$stamp" ]]; then
	echo "$prefix"
	exit 0
fi

src_dir=${CONTAINERS_SRC_DIR:-$cache/src}
for f in "pyxis-$pyxis_v.tar.gz:$want_p" "enroot-$enroot_v.tar.gz:$want_e"; do
	if [[ ! -f $src_dir/${f%%:*} ]]; then
		echo "containers/build.sh: no $src_dir/${f%%:*} to build from: set CONTAINERS_SRC_DIR to the folder holding pyxis-$pyxis_v.tar.gz and enroot-$enroot_v.tar.gz (see the head of this script)" >&2
		exit 2
	fi
	got=$(sha256sum "$src_dir/${f%%:*}" | awk '{print $1}')
	if [[ $got != "${f#*:}" ]]; then
		echo "containers/build.sh: $src_dir/${f%%:*} has sha256 $got, $sums says ${f#*:}" >&2
		exit 1
	fi
done

# Build needs, and what enroot runs at run time (squashfs images, fuse mounts, jq, pigz).
install_missing() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if ((${#missing[@]})); then
		echo "containers/build.sh: installing ${missing[*]}" >&2
		apt-get update -qq >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
	fi
}
cc_has_strlcpy() {
	printf '#include <string.h>\nint main(void) { char b[2]; return (int) strlcpy(b, "a", sizeof(b)); }\n' |
		gcc -x c -o /dev/null - >/dev/null 2>&1
}
install_missing gcc make squashfs-tools squashfuse fuse-overlayfs jq pigz
bsd_cflags= bsd_ldflags=
if ! cc_has_strlcpy; then
	install_missing libbsd-dev
	# -include needs _GNU_SOURCE first, or glibc's headers go without the GNU parts the
	# sources ask for later; -l:libbsd.so, since enroot's own static libbsd.a (which lacks
	# strlcpy) sits first in the library path.
	bsd_cflags="-D_GNU_SOURCE -include bsd/string.h"
	bsd_ldflags="-Wl,--no-as-needed -l:libbsd.so"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/containers-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$prefix.log
rm -rf "$prefix"
echo "containers/build.sh: building enroot $enroot_v and pyxis $pyxis_v (against $spank_h) into $prefix (log: $log); about 2 minutes on 2 cores" >&2
start=$(date +%s)
{
	# set -e does not apply inside a group run with ||, hence the && chain.
	tar -xzf "$src_dir/enroot-$enroot_v.tar.gz" -C "$work" &&
		tar -xzf "$src_dir/pyxis-$pyxis_v.tar.gz" -C "$work" &&
		cd "$work/enroot-$enroot_v" &&
		CFLAGS=$bsd_cflags LDFLAGS=$bsd_ldflags make FORCE_GLIBC=1 prefix="$prefix" &&
		CFLAGS=$bsd_cflags LDFLAGS=$bsd_ldflags make FORCE_GLIBC=1 prefix="$prefix" install &&
		cd "$work/pyxis-$pyxis_v" &&
		CPPFLAGS=${slurm:+-I$slurm/include} make prefix="$prefix" &&
		make prefix="$prefix" install
} >"$log" 2>&1 || {
	echo "containers/build.sh: the build failed; last lines of $log:" >&2
	tail -n 30 "$log" >&2
	exit 1
}
for f in bin/enroot bin/enroot-mount bin/enroot-switchroot bin/enroot-nsenter lib/slurm/spank_pyxis.so; do
	if [[ ! -e $prefix/$f ]]; then
		echo "containers/build.sh: the build installed no $prefix/$f (log: $log)" >&2
		exit 1
	fi
done
"$prefix/bin/enroot" version >/dev/null
echo "$stamp" >"$prefix/.gpubind-built"
echo "containers/build.sh: built in $(($(date +%s) - start)) s" >&2
echo "$prefix"
