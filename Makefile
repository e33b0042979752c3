# vrnicd — a user-space RoCEv2 NIC. `make test` is the test command CI runs.
GO        ?= go
FUZZTIME  ?= 20000x
PKGS      := ./...
# staticcheck is pinned here (v0.8.2, i.e. 2026.2.2), installed into
# GOPATH/bin when missing and run from there, so that it is not a
# dependency in go.mod.
STATICCHECK_VERSION := v0.8.2
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck
# checklocks (gVisor's) checks the +checklocks annotations; pinned in .ci/run
# likewise. Inferred-lock hints are off: they are suggestions, not findings.
CHECKLOCKS_VERSION := v0.0.0-20260905035102-160fafc42237
CHECKLOCKS ?= $(shell $(GO) env GOPATH)/bin/checklocks
# VERSION is what every program's --version, vrnicd's ready line and
# vrnicd_build_info say: the git description of the tree built (Go's own
# VCS stamp is off where GOFLAGS has -buildvcs=false).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
GOLDFLAGS := -X github.com/vrnic/vrnicd/cmd/internal/version.version=$(VERSION)

.PHONY: all demo binaries build test check vet fmt staticcheck checklocks unit long fuzz bench clean interop install install-check perf

all: build

build:
	$(GO) build $(PKGS)

# binaries: the daemon and the tools, in ./bin.
binaries: cabi
	$(GO) build -ldflags "$(GOLDFLAGS)" -o bin/ ./cmd/vrnicd ./cmd/vrnicctl ./cmd/vrnic-pingpong ./cmd/vrnic-rping \
		./cmd/vrnic-ucmatose ./cmd/vrnic-udaddy ./cmd/vrnic-mckey ./cmd/vrnic-rdma-server ./cmd/vrnic-rdma-client ./cmd/vrnic-cmtime \
		./cmd/vrnic-run ./cmd/vrnic-linkbench $(wildcard ./cmd/vrnic-perf)

# demo: two daemons in two network namespaces, an RC ping-pong, an rping
# over rdma_cm and an RDMA WRITE bandwidth run between them (root).
demo: binaries
	./scripts/demo.sh

# perf: the link's capacity for vrnicd's frames (vrnic-linkbench), then
# vrnic-perf between two daemons in network namespaces (raw mode at MTU
# 9000 and 1500, 1 % loss, TAP mode), one table of each figure beside the
# link's (root; a few minutes). Figures are printed, never judged.
perf: cabi
	$(GO) build -ldflags "$(GOLDFLAGS)" -o bin/ ./cmd/vrnicd ./cmd/vrnicctl ./cmd/vrnic-perf ./cmd/vrnic-linkbench ./cmd/vrnic-run
	./scripts/perf.sh

# test: formatting, vet, then every test under the race detector. Tests that
# need root (network namespaces, TAP) skip with a message when not root.
test: check unit long systemd-check install-check cabi-test cabi-sanitize

check: fmt vet staticcheck checklocks

fmt:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	@[ -x "$(STATICCHECK)" ] || { echo "installing staticcheck $(STATICCHECK_VERSION) into $$($(GO) env GOPATH)/bin"; \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }
	$(STATICCHECK) $(PKGS)

checklocks:
	@[ -x "$(CHECKLOCKS)" ] || { echo "installing checklocks $(CHECKLOCKS_VERSION) into $$($(GO) env GOPATH)/bin"; \
		$(GO) install gvisor.dev/gvisor/tools/checklocks/cmd/checklocks@$(CHECKLOCKS_VERSION); }
	$(CHECKLOCKS) -inferred=false $(PKGS)

# The kernel interop suite boots VMs; it runs in `make interop`, not here.
# unit needs the drop-in library built: cabi/'s tests run Debian's programs on it.
unit: cabi
	VRNICD_INTEROP=0 $(GO) test -race -count=1 $(PKGS)

# long: the transport's fault-injection runs at full size; under -race they
# run shrunk, so they also run once without it.
long:
	$(GO) test -count=1 -run 'UnderFaults|Lossless|SeedScenario' ./transport/

# fuzz: every Fuzz target for FUZZTIME each (an execution count by default:
# a duration races the go1.26 fuzz coordinator, see scripts/fuzz.sh).
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# bench: every benchmark once; each figure prints beside its baseline.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# interop: vrnicd against the Linux kernel's rdma_rxe in QEMU guests (root).
# Builds the guest image first (cached outside the repo, in
# /var/cache/vrnicd-interop; seconds when nothing changed).
# The harness's own tests run first so that the suite's summary, figures
# and failure digests end the log (CI shows its tail); scripts/failtail
# repeats what any failed test logged after them.
interop: cabi
	./interop/vm/build
	scripts/failtail $(GO) test -count=1 -v -timeout 5m ./interop/rxepeer/
	scripts/failtail $(GO) test -count=1 -v -timeout 20m ./interop/

# systemd-check: systemd-analyze verify on every unit in systemd/, failing on
# any output (it exits 0 on warnings); skipped when systemd-analyze is absent.
systemd-check:
	GO=$(GO) ./systemd/verify

clean:
	$(GO) clean -testcache

# install: the binaries, their man pages and shell completions (generated
# by the tools themselves, --generate-man and --generate-completion, from
# the flags they parse), the drop-in C libraries in PREFIX/lib/vrnicd
# (never the system's library directory; vrnic-run finds them as
# ../lib/vrnicd from its own directory, so a BINDIR other than PREFIX/bin
# needs VRNIC_LIBDIR), the systemd units (ExecStart pointed at BINDIR),
# the sysusers snippet and the example config (kept if one is there).
PREFIX        ?= /usr/local
DESTDIR       ?=
SYSCONFDIR    ?= /etc
BINDIR        ?= $(PREFIX)/bin
MANDIR        ?= $(PREFIX)/share/man
BASHCOMPDIR   ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR    ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR   ?= $(PREFIX)/share/fish/vendor_completions.d
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR   ?= $(PREFIX)/lib/sysusers.d
VRNICLIBDIR   := $(PREFIX)/lib/vrnicd
TOOLS         := vrnicd vrnicctl vrnic-perf vrnic-pingpong vrnic-run vrnic-rping vrnic-ucmatose vrnic-udaddy vrnic-mckey vrnic-rdma-server vrnic-rdma-client vrnic-cmtime vrnic-linkbench

install: binaries
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man8 \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR) \
		$(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)$(SYSCONFDIR)/vrnicd \
		$(DESTDIR)$(VRNICLIBDIR)
	install -m 0755 $(CABI_LIBDIR)/libibverbs.so.1 $(wildcard $(CABI_LIBDIR)/librdmacm.so.1) $(DESTDIR)$(VRNICLIBDIR)/
	set -e; for t in $(TOOLS); do \
		install -m 0755 bin/$$t $(DESTDIR)$(BINDIR)/$$t; \
		sec=1; [ $$t = vrnicd ] && sec=8; \
		bin/$$t --generate-man >$(DESTDIR)$(MANDIR)/man$$sec/$$t.$$sec; \
		bin/$$t --generate-completion bash >$(DESTDIR)$(BASHCOMPDIR)/$$t; \
		bin/$$t --generate-completion zsh >$(DESTDIR)$(ZSHCOMPDIR)/_$$t; \
		bin/$$t --generate-completion fish >$(DESTDIR)$(FISHCOMPDIR)/$$t.fish; \
	done
	set -e; for u in systemd/*.service; do \
		sed 's#/usr/bin/vrnicd#$(BINDIR)/vrnicd#g' $$u >$(DESTDIR)$(SYSTEMDUNITDIR)/$$(basename $$u); \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$(basename $$u); \
	done
	install -m 0644 systemd/vrnicd.sysusers $(DESTDIR)$(SYSUSERSDIR)/vrnicd.conf
	@# Into / (no DESTDIR): the vrnicd user and group the units run as.
	if [ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null; then systemd-sysusers $(SYSUSERSDIR)/vrnicd.conf; fi
	@# The example with every key commented out: vrnicd.service starts
	@# nothing until an interface is chosen.
	[ -e $(DESTDIR)$(SYSCONFDIR)/vrnicd/vrnicd.toml ] || { \
		printf '# Every key is commented out: vrnicd.service starts once iface (and, for a TAP, ip) is set.\n\n'; \
		sed -E 's/^([a-z_]+ = )/# \1/' configs/vrnicd.toml; } >$(DESTDIR)$(SYSCONFDIR)/vrnicd/vrnicd.toml

# install-check: make install into a temporary DESTDIR, then check every
# file is there, the man pages render without warnings, the completions
# parse (bash -n) and the units run the installed binary.
install-check:
	./scripts/install-check

include cabi/cabi.mk

# deps: the Debian packages the build and the tests use (what .ci/run
# installs): rdma-core's headers and programs for the drop-in library and
# its tests, nftables for the loss tests, QEMU and friends for make interop.
DEBIAN_DEPS := git make gcc binutils iproute2 nftables iputils-ping tshark qemu-system-x86 xz-utils cpio \
	busybox-static systemd util-linux zsh fish groff-base \
	libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest python3-pyverbs libfabric-bin
.PHONY: deps print-deps
# print-deps: the list, for .ci/run (which installs only what is missing).
print-deps:
	@echo $(DEBIAN_DEPS)
deps:
	apt-get install -y -qq --no-install-recommends $(DEBIAN_DEPS) || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends $(DEBIAN_DEPS); }
