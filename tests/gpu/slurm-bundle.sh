#!/usr/bin/env bash
# Prepares what tests/gpu/slurm.sh needs on the GPU machine, which has no Slurm, no munged and
# no network: a Slurm 26.05 install (tests/slurm/build.sh, stripped), the libraries it links,
# Debian's PMIx 4 (Slurm's mpi/pmix_v4 requires the major version it was built with; the GPU
# machine has PMIx 5), the plugin built against that Slurm, a static runc (section 6), and pyxis
# with enroot (section 7; CONTAINERS_SRC_DIR as for tests/containers/build.sh). Everything goes to .gpu/
# (ignored by git), which the device run carries.
#
#   tests/gpu/slurm-bundle.sh [VERSION]      default 26.05.3
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
version=${1:-26.05.3}
prefix=$(tests/slurm/build.sh "$version")
out=$root/.gpu
rm -rf "$out"
mkdir -p "$out/lib" "$out/build" "$out/include"

# Slurm, without headers, docs and static parts, stripped: about 18 MB, 6 MB compressed.
echo "$prefix" >"$out/prefix"
tar -C "$prefix" -cf "$out/slurm.tar" --exclude=include --exclude=share --exclude='*.la' --exclude='*.a' \
	--exclude=.gpubind-built bin sbin lib
mkdir -p "$out/strip" && tar -C "$out/strip" -xf "$out/slurm.tar"
find "$out/strip" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-unneeded {} + 2>/dev/null || true
tar -C "$out/strip" -czf "$out/slurm.tar.gz" . && rm -rf "$out/strip" "$out/slurm.tar"

# Every library Slurm and PMIx link, but glibc's: slurm.sh copies those the machine lacks.
pmix=/usr/lib/x86_64-linux-gnu/pmix2
{
	find "$prefix" -type f \( -perm -u+x -o -name '*.so*' \) -print0 | xargs -0 ldd 2>/dev/null
	ldd "$pmix"/lib/libpmix.so.2 "$pmix"/lib/pmix/*.so
} | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
	grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux[^/]*)\.so' |
	grep -v "^$prefix" | while read -r l; do cp -L "$l" "$out/lib/"; done
cp -a "$pmix" "$out/pmix2"
rm -f "$out"/pmix2/lib/*.a
cp -a /usr/include/pmix*.h "$out/include/" 2>/dev/null || cp -a "$pmix"/include/* "$out/include/"

# The plugin pair built for this Slurm; the old one (before the in-place cgroup v2 fix) when
# GPUBIND_OLD_REV names a revision, for the before/after comparison of the signal tests.
make -s -C spank/frontend BUILD="$out/build" SLURM_PREFIX="$prefix"
go build -trimpath -ldflags "-s -w" -buildmode=c-shared -o "$out/build/gpubind_engine.so" ./spank/engine
rm -f "$out/build/gpubind_engine.h"
# The program slurmstepd starts to plan (slurm.sh installs a root-owned copy and names it).
go build -trimpath -ldflags "-s -w" -tags gpubind_launcher -o "$out/build/gpubind-launcher" ./spank/engine
# The CLI and the helper from `make build` (build/), so that only .gpu/ needs to travel.
cp build/gpubind build/libgpuhelper.so.1 build/nvmlcost "$out/build/"
# Without their debug sections (about 6 MB): what travels is limited to 64 MiB.
strip --strip-debug "$out/build/gpubind" "$out/build/libgpuhelper.so.1" "$out/build/nvmlcost"
# The link name too, so that tests/gpu/run.sh can build against the bundle (BUILD=.gpu/build).
ln -sf libgpuhelper.so.1 "$out/build/libgpuhelper.so"
if [[ -n ${GPUBIND_OLD_REV:-} ]]; then
	old=$(mktemp -d)
	git worktree add -q --detach "$old/src" "$GPUBIND_OLD_REV"
	mkdir -p "$out/old"
	make -s -C "$old/src/spank/frontend" BUILD="$out/old" CFLAGS="-O2 -g -I$prefix/include" 2>&1 |
		grep -v 'ignoring\|^$' || true
	(cd "$old/src" && go build -trimpath -ldflags "-s -w" -buildmode=c-shared -o "$out/old/gpubind_engine.so" ./spank/engine)
	rm -f "$out/old/gpubind_engine.h"
	echo "$GPUBIND_OLD_REV $(git rev-parse --short "$GPUBIND_OLD_REV")" >"$out/old/REV"
	git worktree remove --force "$old/src"
	rm -rf "$old"
fi
# The scale harness's programs (tests/gpu/scale.sh runs bench/scale.sh with SCALE_PREBUILT):
# built here against Debian's PMIx 4 (the one the bundle carries), found beside each other
# ($ORIGIN), and the cluster harness's command.
sc=$out/scale
mkdir -p "$sc"
W=(-Wall -Wextra -Werror -O2 -g -I"$root/bench/c" -Wl,-rpath,'$ORIGIN')
cc "${W[@]}" -shared -fPIC -Wl,-soname,libnccl.so.2 -o "$sc/libnccl.so.2" tests/stubnccl/csrc/stubnccl.c
ln -sf libnccl.so.2 "$sc/libnccl.so"
cp build/libgpuhelper.so.1 "$sc/" && ln -sf libgpuhelper.so.1 "$sc/libgpuhelper.so"
cc "${W[@]}" -o "$sc/stamp" bench/c/stamp.c
# shellcheck disable=SC2046
cc "${W[@]}" -I"$root/lib" -o "$sc/gh_init" bench/c/gh_init.c $(pkg-config --cflags --libs pmix) \
	-L"$sc" -Wl,--no-as-needed -lgpuhelper -lnccl
# shellcheck disable=SC2046
cc "${W[@]}" -o "$sc/raw_pmix" bench/c/raw_pmix.c $(pkg-config --cflags --libs pmix) -L"$sc" -Wl,--no-as-needed -lnccl
rm -f "$sc/libnccl.so" "$sc/libgpuhelper.so"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$sc/testcluster" ./tests/cluster/cmd/testcluster
pkg-config --modversion pmix >"$sc/pmix-version"

# Slurm's OCI containers (section 6, tests/gpu/containers.sh): the GPU machine has no container
# runtime. runc 1.1.5 (Debian 12's version) built static from its Go module, without the
# seccomp build tag: Debian's runc links libseccomp, and runc's init (which it re-executes with
# an environment of its own, no LD_LIBRARY_PATH) would not find a carried copy. The test bundle
# sets no seccomp profile.
mkdir -p "$out/oci"
GOFLAGS=-mod=mod CGO_ENABLED=1 GOBIN="$out/oci" go install -trimpath -tags "netgo osusergo" \
	-ldflags "-s -w -X main.version=1.1.5 -extldflags -static" github.com/opencontainers/runc@v1.1.5
file "$out/oci/runc" | grep -q 'statically linked' || { echo "slurm-bundle.sh: $out/oci/runc is not static" >&2; exit 1; }
# Compressed (11 MB -> 4 MB): the carried folder must stay within the device run's 64 MiB.
gzip -9 -f "$out/oci/runc"

# pyxis + enroot (section 7, tests/gpu/enroot.sh): tests/containers/build.sh's install for this
# Slurm, relocatable (enroot.sh rewrites the prefix in its scripts, as enroot's own install does
# for DESTDIR), with what the GPU machine lacks: the squashfs tools (enroot create unpacks the
# image with unsquashfs; the test makes it with mksquashfs) and the libraries they and enroot's
# helpers link (libbsd: build.sh links it for strlcpy), found through an rpath ($ORIGIN): pyxis
# passes enroot no LD_LIBRARY_PATH.
if ! command -v patchelf >/dev/null; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf >/dev/null
fi
cprefix=$(tests/containers/build.sh "$prefix" | tail -1)
stage=$out/containers/stage
mkdir -p "$stage"
cp -a "$cprefix"/. "$stage/"
rm -f "$stage/.gpubind-built"
cp -L /usr/bin/mksquashfs /usr/bin/unsquashfs "$stage/bin/"
carried=$stage/lib/gpubind-carried
mkdir -p "$carried"
for f in "$stage"/bin/* "$stage"/libexec/enroot/* "$stage"/lib/enroot/*; do
	[[ -f $f ]] && file "$f" | grep -q 'ELF .*dynamically linked' || continue
	ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
		grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
		while read -r l; do cp -L "$l" "$carried/"; done
	rel=$(realpath --relative-to="$(dirname "$f")" "$carried")
	patchelf --set-rpath "\$ORIGIN/$rel" "$f"
done
echo "$cprefix" >"$out/containers/prefix"
tar -C "$stage" -czf "$out/containers/enroot-pyxis.tar.gz" . && rm -rf "$stage"

rm -rf "$out/build/frontend-obj" "$out/old/frontend-obj"
du -sh "$out"
