# Packages and the install pieces they share with `make install`: Debian packages
# (`make deb`), RPMs (`make rpm`), man pages, the CMake package of libgpuhelper and the
# plugstack.conf.d snippet. Included by the top-level Makefile.
#
#   make deb [SLURM_PREFIX=/opt/slurm] [DEB_DIR=build/deb]
#
# SLURM_PREFIX is the Slurm to build the plugin against (headers in $(SLURM_PREFIX)/include).
# With the system Slurm (/usr) the plugin package depends on the exact Debian version of
# that Slurm; with a private one there is no such package and no dependency.

SLURM_PREFIX     ?= /usr
BUILD            ?= build
SLURM_SYSCONFDIR ?= $(if $(filter /usr,$(SLURM_PREFIX)),/etc/slurm,$(SLURM_PREFIX)/etc)
DEB_DIR          ?= $(BUILD)/deb
DEB_TOOLS        := debhelper dpkg-dev fakeroot
# The Slurm headers we compile against: the system ones need no -I.
SLURM_CFLAGS     := $(if $(filter /usr,$(SLURM_PREFIX)),,-I$(SLURM_PREFIX)/include)

# The environment of dpkg-buildpackage and rpmbuild: this make's MAKEFLAGS are dropped (a
# caller's `make deb PREFIX=...` must not reach the package's own make), the Slurm settings
# are passed on when given, and the caller's Go caches are kept.
PKG_ENV = GOCACHE=$$($(GO) env GOCACHE) GOMODCACHE=$$($(GO) env GOMODCACHE) GOFLAGS=-buildvcs=false \
          SLURM_PREFIX=$(SLURM_PREFIX) \
          $(foreach v,SLURM_PLUGINDIR SLURM_SYSCONFDIR,$(if $(filter command line environment,$(origin $(v))),$(v)=$($(v))))

.PHONY: deb rpm install-plugstack-snippet pkg-tools-deb pkg-tools-rpm install-man install-cmake

RPM_DIR          ?= $(BUILD)/rpm
RPM_TOOLS        := rpm cpio
# Slurm's PluginDir on RPM systems (SchedMD's slurm.spec); a private Slurm's default.
RPM_SLURM_PLUGINDIR ?= $(if $(filter /usr,$(SLURM_PREFIX)),$(shell rpm --eval '%{_libdir}' 2>/dev/null || echo /usr/lib64)/slurm,$(SLURM_PREFIX)/lib/slurm)
# The package version (debian/changelog holds the same).
PKG_VERSION      := 1.0.0
# The release of the Slurm headers we build against: SLURM_VERSION_NUMBER 0x160508 is 22.05.8.
SLURM_HEADER_VERSION = $(shell v=$$(sed -n 's/^\#define SLURM_VERSION_NUMBER //p' $(SLURM_PREFIX)/include/slurm/slurm_version.h 2>/dev/null); \
                         [ -n "$$v" ] && printf '%d.%02d.%d' $$(($$v>>16&255)) $$(($$v>>8&255)) $$(($$v&255)))

# The header's GPUHELPER_VERSION_* macros are the library's one version number.
GPUHELPER_VERSION := $(shell sed -n 's/^\#define GPUHELPER_VERSION_[A-Z]* *//p' lib/gpuhelper.h | paste -sd.)
CMAKEDIR         ?= $(LIBDIR)/cmake/gpuhelper

MANDIR           ?= $(PREFIX)/share/man
# Every call of gpuhelper(3) gets a page that sources the one page describing them all.
GPUHELPER_CALLS  := gpuhelper_init gpuhelper_finalize gpuhelper_strerror gpuhelper_last_error \
                    gpuhelper_version gpuhelper_set_nccl_get_unique_id gpuhelper_scalable_count \
                    gpuhelper_scalable_ids gpuhelper_group_id gpuhelper_nvl_cliques

# `make install` installs these too.
install: install-man install-cmake

install-man:
	install -d $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man8
	install -m 0644 man/gpubind.1 $(DESTDIR)$(MANDIR)/man1/gpubind.1
	install -m 0644 man/spank-gpubind.8 $(DESTDIR)$(MANDIR)/man8/spank-gpubind.8
	install -m 0644 man/gpuhelper.3 $(DESTDIR)$(MANDIR)/man3/gpuhelper.3
	for f in $(GPUHELPER_CALLS); do echo '.so man3/gpuhelper.3' > $(DESTDIR)$(MANDIR)/man3/$$f.3; done

# Installs what the package targets need, as `make deps` does for the build.
pkg-tools-deb:
	@missing=$$(for p in $(DEB_TOOLS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | \
	    grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "deb: installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# dpkg-buildpackage writes into the parent of the source tree, so it runs on a copy in
# $(DEB_DIR)/src; the .deb files end up in $(DEB_DIR). The Go caches of the caller are
# passed on (debhelper points HOME elsewhere), so a rebuild takes seconds, not minutes.
deb: pkg-tools-deb
	@test -f $(SLURM_PREFIX)/include/slurm/spank.h || \
	    { echo "deb: $(SLURM_PREFIX)/include/slurm/spank.h not found: SLURM_PREFIX=$(SLURM_PREFIX) is not a Slurm install (libslurm-dev on Debian)" >&2; exit 1; }
	rm -rf $(DEB_DIR)/src && mkdir -p $(DEB_DIR)/src/gpubind
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	    git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -; \
	else tar --exclude=./build -cf - .; fi | tar -C $(DEB_DIR)/src/gpubind -xf -
	cd $(DEB_DIR)/src/gpubind && \
	    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $(PKG_ENV) \
	    dpkg-buildpackage -b -us -uc $(if $(SLURM_CFLAGS),-d)
	mv $(DEB_DIR)/src/*.deb $(DEB_DIR)/src/*.buildinfo $(DEB_DIR)/src/*.changes $(DEB_DIR)/
	rm -rf $(DEB_DIR)/src
	@ls -1 $(DEB_DIR)/*.deb

pkg-tools-rpm:
	@missing=$$(for p in $(RPM_TOOLS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | \
	    grep -q 'install ok installed' || echo $$p; done); \
	if command -v dpkg-query >/dev/null && [ -n "$$missing" ]; then \
	    echo "rpm: installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# rpmbuild on a tarball of the tree, in $(RPM_DIR). The plugin package requires the exact
# Slurm release of the headers when they are the system's (SLURM_PREFIX=/usr), nothing for a
# private Slurm. On a Debian host the build dependencies are not in rpm's database: --nodeps.
rpm: pkg-tools-rpm
	@test -f $(SLURM_PREFIX)/include/slurm/spank.h || \
	    { echo "rpm: $(SLURM_PREFIX)/include/slurm/spank.h not found: SLURM_PREFIX=$(SLURM_PREFIX) is not a Slurm install (slurm-devel)" >&2; exit 1; }
	rm -rf $(RPM_DIR)/BUILD $(RPM_DIR)/SOURCES && mkdir -p $(RPM_DIR)/SOURCES $(RPM_DIR)/tmp $(RPM_DIR)/stage/gpubind-$(PKG_VERSION)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	    git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -; \
	else tar --exclude=./build -cf - .; fi | tar -C $(RPM_DIR)/stage/gpubind-$(PKG_VERSION) -xf -
	tar -C $(RPM_DIR)/stage -czf $(RPM_DIR)/SOURCES/gpubind-$(PKG_VERSION).tar.gz gpubind-$(PKG_VERSION)
	rm -rf $(RPM_DIR)/stage
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $(PKG_ENV) \
	rpmbuild -bb $(if $(wildcard /var/lib/dpkg/status),--nodeps) \
	    --define "_topdir $(abspath $(RPM_DIR))" --define "gpubind_version $(PKG_VERSION)" \
	    --define "_tmppath $(abspath $(RPM_DIR))/tmp" --define "slurm_prefix $(SLURM_PREFIX)" \
	    --define "slurm_plugindir $(RPM_SLURM_PLUGINDIR)" --define "slurm_sysconfdir $(SLURM_SYSCONFDIR)" \
	    $(if $(SLURM_CFLAGS),--define "slurm_cflags $(SLURM_CFLAGS)",--define "slurm_version $(SLURM_HEADER_VERSION)") \
	    packaging/gpubind.spec
	@find $(RPM_DIR)/RPMS -name '*.rpm' | sort

# Commented plugstack.conf.d snippet, installed by the packages (never plugstack.conf itself).
install-plugstack-snippet:
	@test -n "$(SLURM_PLUGINDIR)" || { echo "install-plugstack-snippet: set SLURM_PLUGINDIR" >&2; exit 1; }
	install -d $(DESTDIR)$(SLURM_SYSCONFDIR)/plugstack.conf.d
	sed -e 's|@PLUGINDIR@|$(SLURM_PLUGINDIR)|g; s|@SYSCONFDIR@|$(SLURM_SYSCONFDIR)|g' \
	    packaging/gpubind.conf.in > $(DESTDIR)$(SLURM_SYSCONFDIR)/plugstack.conf.d/gpubind.conf
	chmod 0644 $(DESTDIR)$(SLURM_SYSCONFDIR)/plugstack.conf.d/gpubind.conf

# CMake package: find_package(gpuhelper 1.0 REQUIRED) gives the target gpuhelper::gpuhelper.
install-cmake:
	@test -n "$(GPUHELPER_VERSION)" || { echo "install-cmake: no GPUHELPER_VERSION_* in lib/gpuhelper.h" >&2; exit 1; }
	install -d $(DESTDIR)$(CMAKEDIR)
	sed -e "s|@REL_LIBDIR@|$$(realpath -m --relative-to=$(CMAKEDIR) $(LIBDIR))|g; s|@REL_INCLUDEDIR@|$$(realpath -m --relative-to=$(CMAKEDIR) $(INCLUDEDIR))|g" \
	    packaging/gpuhelperConfig.cmake.in > $(DESTDIR)$(CMAKEDIR)/gpuhelperConfig.cmake
	sed -e 's|@VERSION@|$(GPUHELPER_VERSION)|g; s|@VERSION_MAJOR@|$(firstword $(subst ., ,$(GPUHELPER_VERSION)))|g' \
	    packaging/gpuhelperConfigVersion.cmake.in > $(DESTDIR)$(CMAKEDIR)/gpuhelperConfigVersion.cmake
	chmod 0644 $(DESTDIR)$(CMAKEDIR)/gpuhelperConfig.cmake $(DESTDIR)$(CMAKEDIR)/gpuhelperConfigVersion.cmake
