# gpubind: SPANK plugin, Go engine, libgpuhelper and admin CLI.
# `make demo` runs the main job end to end; `make test` runs every test. Both install what they need.

SHELL        := /bin/bash
GO           ?= go
CC           ?= gcc
BUILD        := build
PREFIX       ?= /usr/local
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
BINDIR       ?= $(PREFIX)/bin
# The launcher the plugin runs the engine from: $(LIBEXECDIR)/gpubind/gpubind-launcher, a path
# built into the plugin (the plugstack argument launcher=PATH overrides it).
LIBEXECDIR   ?= $(PREFIX)/libexec
LAUNCHER     := $(LIBEXECDIR)/gpubind/gpubind-launcher
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR      ?=
VERSION      ?= 0.2.0
# The Slurm to build the plugin for and install it into: headers in $(SLURM_PREFIX)/include,
# slurmd in $(SLURM_PREFIX)/sbin. Slurm loads a SPANK plugin only when it was built against the
# same major.minor release, so rebuild for every Slurm upgrade (docs/admin.md).
SLURM_PREFIX ?= /usr
export SLURM_PREFIX
# The Slurm program whose version the plugin must match: slurmd, or srun on a login node
# (clients load SPANK plugins with the same version check).
SLURMD       ?= $(firstword $(wildcard $(SLURM_PREFIX)/sbin/slurmd $(SLURM_PREFIX)/bin/srun))
# Slurm's PluginDir: $(SLURM_PREFIX)/lib/slurm for a Slurm built from source; for the system's,
# as it reports it (Debian: /usr/lib/x86_64-linux-gnu/slurm-wlm).
ifneq ($(filter-out /usr /usr/,$(SLURM_PREFIX)),)
SLURM_PLUGINDIR ?= $(SLURM_PREFIX)/lib/slurm
else
SLURM_PLUGINDIR ?= $(shell scontrol show config 2>/dev/null | awk '$$1=="PluginDir"{print $$3}' | grep . || \
                     dirname $$(ls /usr/lib/*/slurm-wlm/spank*.so /usr/lib*/slurm/*.so 2>/dev/null | head -1) 2>/dev/null)
endif
# The version matrix `make test` runs the integration tests on: "system" is the Slurm in PATH
# (Debian 12's 22.05), the others are built by tests/slurm/build.sh from the tarballs in
# SLURM_SRC_DIR and cached (SLURM_CACHE_DIR, default /var/cache/gpubind/slurm).
SLURM_MATRIX ?= system 24.11.7 26.05.3
INTEGRATION_PKGS := ./tests/cluster/... ./tests/plugin/... ./tests/cgroup/... ./tests/helper/... ./tests/sitedefault/... \
                    ./tests/python/... ./tests/containers/...
# The container tests (tests/containers: pyxis 0.24 and enroot, built for each Slurm of the
# matrix by tests/containers/build.sh) need CONTAINERS_SRC_DIR, the folder of the runtimes'
# source tarballs; without it they skip, and .ci/run fails on that skip.
export CONTAINERS_SRC_DIR
GO_LDFLAGS   := -X github.com/gpubind/gpubind/gpubind.Version=$(VERSION)
GOTESTFLAGS  ?=
# Every go test run of `make test` goes through tests/testreport: the terminal shows what a
# plain go test prints, and $(TEST_REPORT)/RUN.json (RUN: system, 24.11.7, ...) keeps the
# whole -json stream, each skipped test and its message included, for .ci/run's check of the
# skips against tests/allowed-skips.txt.
TEST_REPORT  ?= $(BUILD)/test-report
# How many test packages of one go test run run side by side (go test -p; its default is the
# number of CPUs). The integration packages spend most of their time waiting on Slurm's daemons
# and on timeouts, not computing: on the 2-core CI VM, 8 at a time took the pass of Slurm
# 24.11.7 from 265 s to 161 s (the CPU 60% busy) and the system pass from 364 s to 233 s (88%).
TEST_PKG_JOBS ?= 8
# $(call gotest,RUN,SLURM_PREFIX,PACKAGES): one go test run of `make test`. Without make's
# MAKEFLAGS and SANITIZE: the tests run make themselves (the plugin, the library, packages),
# and `make test SANITIZE=1` must not build every pass's plugin with the sanitizers (make
# exports a variable given on its command line; the sanitizer pass asks for its build through
# GPUBIND_SANITIZE, tests/testbuild).
gotest = set -o pipefail; env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u SANITIZE SLURM_PREFIX=$(2) $(GO) test -json -p $(TEST_PKG_JOBS) $(GOTESTFLAGS) -count=1 -timeout 20m $(3) | \
         $(BUILD)/testreport filter $(if $(filter -v -test.v,$(GOTESTFLAGS)),-v) -json $(TEST_REPORT)/$(1).json
# go-nvml's header marks many calls deprecated; those warnings say nothing about our code.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
PMIX_CFLAGS  := $(shell pkg-config --cflags pmix 2>/dev/null)
PMIX_LIBS    := $(shell pkg-config --libs pmix 2>/dev/null)

# Debian packages the build, tests, demo and benchmarks need. The second line: the tools the
# packaging, CMake and man page tests run (rpm includes rpmbuild and rpm2cpio in Debian 12;
# $(DEB_TOOLS) and $(RPM_TOOLS) of packaging/packaging.mk are in it). A test skips when its
# tool is missing, and CI fails on every skip not in tests/allowed-skips.txt: a tool Debian
# has belongs here, not there. clang-14 and its runtimes (libFuzzer, ASan, UBSan): the fuzz
# targets of the C parsers (make fuzz, docs/security.md). runc and crun: Slurm's OCI containers
# (srun --container, tests/containers TestOCI).
DEB_PACKAGES := slurmctld slurmd slurm-client libslurm-dev munge libpmix-dev openmpi-bin \
                libopenmpi-dev pkg-config gcc g++ make procps util-linux psmisc iproute2 \
                libc6-dev hostname mount binutils \
                rpm cpio cmake man-db groff-base debhelper dpkg-dev fakeroot \
                python3 python3-torch python3-pytest \
                clang-14 libclang-rt-14-dev runc crun

.PHONY: all deps build test fuzz slurm-matrix check-slurm-version demo bench bench-scale install clean \
        engine plugin helper cli fmt lint

all: build

# ---- deps -----------------------------------------------------------------------------------
deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | \
	    grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "deps: all Debian packages present"; fi
	@$(GO) mod download

# ---- build ----------------------------------------------------------------------------------
build: cli engine plugin helper

cli:
	@mkdir -p $(BUILD)
	$(GO) build -trimpath -ldflags "$(GO_LDFLAGS) -X main.builtPluginDir=$(SLURM_PLUGINDIR) -X main.builtLauncher=$(LAUNCHER)" -o $(BUILD)/gpubind ./cmd/gpubind
	$(GO) build -trimpath -o $(BUILD)/nvmlcost ./tests/gpu/nvmlcost

# ---- engine + launcher + plugin (SPANK) -----------------------------------------------------
# One Go package, two products: the c-shared engine library (srun, sbatch and salloc load it
# to check the option and print help) and, with the tag gpubind_launcher, the program
# gpubind-launcher that slurmstepd starts to plan a step (docs/architecture.md).
engine:
	@mkdir -p $(BUILD)
	@if [ -d spank/engine ]; then $(GO) build -trimpath -ldflags "$(GO_LDFLAGS)" -buildmode=c-shared \
	    -o $(BUILD)/gpubind_engine.so ./spank/engine && rm -f $(BUILD)/gpubind_engine.h && \
	    $(GO) build -trimpath -ldflags "$(GO_LDFLAGS)" -tags gpubind_launcher \
	    -o $(BUILD)/gpubind-launcher ./spank/engine; fi

plugin: engine
	@if [ -d spank/frontend ]; then $(MAKE) -s -C spank/frontend BUILD=$(abspath $(BUILD)) SLURM_PREFIX=$(SLURM_PREFIX) \
	    GB_LAUNCHER=$(LAUNCHER); fi

# ---- helper library (libgpuhelper) ----------------------------------------------------------
helper:
	@mkdir -p $(BUILD)
	@if [ -f lib/Makefile.inc ]; then $(MAKE) -s -f lib/Makefile.inc BUILD=$(abspath $(BUILD)); fi

# ---- tests ----------------------------------------------------------------------------------
# libFuzzer targets of the C parsers that run as root on input slurmstepd did not write
# (tests/fuzz; docs/security.md): each runs FUZZTIME seconds from its seed corpus
# (tests/fuzz/corpus); a crash, sanitizer report or leak fails. FUZZ_TARGETS: some of table,
# binds, plancache, args (default all), one per CPU at a time (FUZZ_JOBS). `make test` runs
# each for TEST_FUZZTIME seconds.
FUZZTIME      ?= 60
TEST_FUZZTIME ?= 20
FUZZ_TARGETS  ?=
fuzz:
	FUZZTIME=$(FUZZTIME) BUILD=$(abspath $(BUILD)) tests/fuzz/run.sh $(FUZZ_TARGETS)

# SANITIZE=1: `make test` ends with the sanitizer pass (also alone: `make test-sanitize`). The
# C front end (the plugin .so with the rule's rule/*.c) is built with ASan and UBSan
# (every UB report fatal), and the packages SANITIZE_PKGS run with it on the Slurm
# SANITIZE_SLURM: the spankhost (built with ASan itself, so it loads the plugin with the
# runtime first) and, when named, the plugin package on a real cluster, whose slurmd, slurmstepd and srun
# get gcc's libasan preloaded (tests/testbuild SanitizeEnv). The rule package runs with go test
# -asan and UBSan added to its cgo flags (the rule as the CLI and the Go tests call it). A report
# of any process goes to $(SANITIZE_LOGS) (slurmstepd's stderr goes nowhere) and fails the
# pass even when every test passed. CI (.ci/run) runs make test SANITIZE=1. docs/security.md.
SANITIZE       ?=
SANITIZE_SLURM ?= 26.05.3
# tests/plugin is not in the default: under gcc 12's ASan preloaded into slurmstepd, a task
# forked while another slurmstepd thread frees memory can hang for good in ASan's allocator
# lock (seen; docs/security.md section 7). Run it by hand: SANITIZE_PKGS="./tests/spankhost/...
# ./tests/plugin/...".
SANITIZE_PKGS  ?= ./tests/spankhost/...
SANITIZE_LOGS  := $(abspath $(BUILD))/sanitize
SANITIZE_CGO   := -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
.PHONY: test-sanitize test-pass-sanitize
test-sanitize:
	$(GO) build -o $(BUILD)/testreport ./tests/testreport/cmd/testreport
	@mkdir -p $(TEST_REPORT)
	@$(MAKE) --no-print-directory test-pass-sanitize
test-pass-sanitize:
	@rm -rf $(SANITIZE_LOGS) && mkdir -p $(SANITIZE_LOGS)
	@set -e; prefix=$$(tests/slurm/build.sh $(SANITIZE_SLURM)); start=$$(date +%s); \
	echo "==== Slurm $(SANITIZE_SLURM) ($$prefix): sanitizer build (ASan+UBSan): ./rule/... $(SANITIZE_PKGS) ===="; \
	export GPUBIND_SANITIZE=1 ASAN_OPTIONS=log_path=$(SANITIZE_LOGS)/asan \
	    UBSAN_OPTIONS=log_path=$(SANITIZE_LOGS)/ubsan:print_stacktrace=1; \
	rc=0; CGO_CFLAGS="$(CGO_CFLAGS) $(SANITIZE_CGO)" CGO_LDFLAGS="$(SANITIZE_CGO)" \
	    $(GO) test -asan -count=1 ./rule/... || rc=1; \
	$(call gotest,sanitize,$$prefix,$(SANITIZE_PKGS)) || rc=1; \
	if [ -n "$$(ls $(SANITIZE_LOGS))" ]; then \
	    echo "sanitize: FAILED: reports in $(SANITIZE_LOGS):"; head -c 20000 $(SANITIZE_LOGS)/*; rc=1; fi; \
	echo "sanitize: pass took $$(( $$(date +%s) - start )) s, status $$rc"; exit $$rc

# Everything once against the system Slurm, then the integration packages again against each
# other Slurm of SLURM_MATRIX (built on first use, about 4 minutes each on 2 cores, then
# cached); with SANITIZE=1 the sanitizer pass last. First the fuzz targets, TEST_FUZZTIME
# seconds each, side by side (under a minute on 2 CPUs). The passes (test-pass-RUN) run
# TEST_JOBS at a time (make -k -j, each pass's output printed whole when it ends): 1 by
# default. Every test cluster has its own ports, directories and munged, so passes can run
# side by side, but clusters with cgroups take turns (tests/cluster), and on a busy 2-core
# machine 4 passes side by side were slower than one after the other: the CPU was saturated
# and a package ran past go test's 20-minute limit waiting for its turn (notes of issue 34).
# On a machine with more cores, try TEST_JOBS=4.
TEST_PASSES := system $(filter-out system,$(SLURM_MATRIX)) $(if $(SANITIZE),sanitize)
TEST_JOBS   ?= 1
test: deps build
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME) FUZZ_TARGETS=
	$(GO) build -o $(BUILD)/testreport ./tests/testreport/cmd/testreport
	@rm -rf $(TEST_REPORT) && mkdir -p $(TEST_REPORT)
	@echo "==== passes $(TEST_PASSES), $(TEST_JOBS) at a time ===="
	@$(MAKE) --no-print-directory -k -j$(TEST_JOBS) --output-sync=target $(TEST_PASSES:%=test-pass-%)

# One pass of `make test`: go test against one Slurm, its -json stream in $(TEST_REPORT)/RUN.json.
.PHONY: test-pass-system
test-pass-system:
	@echo "==== Slurm system ($$(slurmd -V)): all packages ===="; start=$$(date +%s); rc=0; \
	$(call gotest,system,/usr,./...) || rc=$$?; \
	echo "==== Slurm system: pass took $$(( $$(date +%s) - start )) s, status $$rc"; exit $$rc
test-pass-%:
	@set -e; prefix=$$(tests/slurm/build.sh $*); start=$$(date +%s); rc=0; \
	echo "==== Slurm $* ($$prefix): integration packages ===="; \
	$(call gotest,$*,$$prefix,$(INTEGRATION_PKGS)) || rc=$$?; \
	echo "==== Slurm $*: pass took $$(( $$(date +%s) - start )) s, status $$rc"; exit $$rc

# Build (or find in the cache) every Slurm of the matrix; prints their prefixes.
slurm-matrix:
	@for v in $(filter-out system,$(SLURM_MATRIX)); do tests/slurm/build.sh $$v; done

fmt:
	gofmt -l -w $$(git ls-files '*.go')

# gofmt, go vet and staticcheck (the version pinned here, fetched through the Go module proxy
# on first use): `make test` fails on any finding.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "lint: not formatted by gofmt (make fmt):" $$unformatted; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# ---- demo / bench ---------------------------------------------------------------------------
demo: deps build
	./tests/demo.sh

bench: deps build
	./bench/run.sh

# The NCCL ID exchange and the plugin on many simulated nodes (bench/scale.sh; docs/scale.md).
# SCALE_NODES="16 32 64 128" SCALE_RPN=8 for 1,024 ranks on a machine with the cores for it.
bench-scale: deps build
	./bench/scale.sh ids plugin

# ---- install --------------------------------------------------------------------------------
# Refuses, naming both versions, a slurmd that would not load the plugin just built. A staged
# install (DESTDIR, as package builds do) is checked by the package's exact Slurm dependency.
check-slurm-version: cli plugin
	@if [ -n "$(DESTDIR)" ]; then \
	    echo "install: DESTDIR is set: not checking a slurmd (the package depends on its Slurm)"; \
	elif [ -z "$(SLURMD)" ]; then \
	    echo "install: no slurmd or srun under SLURM_PREFIX=$(SLURM_PREFIX): cannot check that Slurm loads the plugin; set SLURMD=PATH" >&2; exit 1; \
	else $(BUILD)/gpubind version --plugin $(BUILD)/spank_gpubind.so --slurmd $(SLURMD); fi

install: build check-slurm-version
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(BUILD)/gpubind $(DESTDIR)$(BINDIR)/gpubind
	@test -n "$(SLURM_PLUGINDIR)" || { echo "install: cannot find Slurm's PluginDir; set SLURM_PLUGINDIR" >&2; exit 1; }
	install -d $(DESTDIR)$(SLURM_PLUGINDIR)
	install -m 0755 $(BUILD)/spank_gpubind.so $(DESTDIR)$(SLURM_PLUGINDIR)/spank_gpubind.so
	install -m 0755 $(BUILD)/gpubind_engine.so $(DESTDIR)$(SLURM_PLUGINDIR)/gpubind_engine.so
	install -d -m 0755 $(DESTDIR)$(LIBEXECDIR)/gpubind
	install -m 0755 $(BUILD)/gpubind-launcher $(DESTDIR)$(LAUNCHER)
	install -m 0755 $(BUILD)/libgpuhelper.so.1 $(DESTDIR)$(LIBDIR)/libgpuhelper.so.1
	ln -sf libgpuhelper.so.1 $(DESTDIR)$(LIBDIR)/libgpuhelper.so
	install -m 0644 lib/gpuhelper.h $(DESTDIR)$(INCLUDEDIR)/gpuhelper.h
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    lib/gpuhelper.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/gpuhelper.pc

# ---- Python package gpubind (python/gpubind, pure Python over libgpuhelper.so.1) -----------------
# Installed for Debian's /usr/bin/python3: PREFIX=/usr puts it in /usr/lib/python3/dist-packages
# (Debian's directory for packaged modules), another PREFIX in PREFIX/lib/python3.X/dist-packages
# (on sys.path for /usr/local). PYTHONDIR overrides both. The package finds the library through
# the loader, then in GPUBIND_PY_LIBDIR (default LIBDIR, written into gpubind/_config.py; empty
# for a directory the loader searches anyway, as the .deb does).
PYTHON           ?= /usr/bin/python3
PYTHONDIR        ?= $(if $(filter /usr /usr/,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/$(shell $(PYTHON) -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null || echo python3)/dist-packages)
GPUBIND_PY_LIBDIR ?= $(LIBDIR)
PYTHON_FILES     := $(wildcard python/gpubind/*.py) python/gpubind/py.typed

.PHONY: install-python
install: install-python
install-python:
	install -d $(DESTDIR)$(PYTHONDIR)/gpubind
	install -m 0644 $(PYTHON_FILES) $(DESTDIR)$(PYTHONDIR)/gpubind/
	$(if $(GPUBIND_PY_LIBDIR),sed -i 's|^LIBDIR: Optional\[str\] = None$$|LIBDIR: Optional[str] = "$(GPUBIND_PY_LIBDIR)"|' \
	    $(DESTDIR)$(PYTHONDIR)/gpubind/_config.py)

clean:
	rm -rf $(BUILD)

# Packages (deb, rpm), man pages, CMake package: packaging/packaging.mk.
include packaging/packaging.mk
