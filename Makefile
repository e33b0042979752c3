# vrnicd — a user-space RoCEv2 NIC. `make test` is the test command CI runs.
GO        ?= go
FUZZTIME  ?= 20000x
PKGS      := ./...
# staticcheck is pinned in .ci/run (go install ...@v0.8.2, i.e. 2026.2.2) and
# run from GOPATH/bin so that it is not a dependency in go.mod.
STATICCHECK ?= $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: all demo binaries build test check vet fmt staticcheck unit long fuzz bench clean interop

all: build

build:
	$(GO) build $(PKGS)

# binaries: the daemon and the tools, in ./bin.
binaries:
	$(GO) build -o bin/ ./cmd/vrnicd ./cmd/vrnicctl ./cmd/vrnic-pingpong ./cmd/vrnic-rping $(wildcard ./cmd/vrnic-perf)

# demo: two daemons in two network namespaces, an RC ping-pong, an rping
# over rdma_cm and an RDMA WRITE bandwidth run between them (root).
demo: binaries
	./scripts/demo.sh

# test: formatting, vet, then every test under the race detector. Tests that
# need root (network namespaces, TAP) skip with a message when not root.
test: check unit long systemd-check

check: fmt vet staticcheck

fmt:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

staticcheck:
	@[ -x "$(STATICCHECK)" ] || { echo "staticcheck missing: go install honnef.co/go/tools/cmd/staticcheck@v0.8.2"; exit 1; }
	$(STATICCHECK) $(PKGS)

# The kernel interop suite boots VMs; it runs in `make interop`, not here.
unit:
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
# and failure digests end the log (CI shows its tail).
interop:
	./interop/vm/build
	$(GO) test -count=1 -v -timeout 5m ./interop/rxepeer/
	$(GO) test -count=1 -v -timeout 20m ./interop/

# systemd-check: systemd-analyze verify on every unit in systemd/, failing on
# any output (it exits 0 on warnings); skipped when systemd-analyze is absent.
systemd-check:
	GO=$(GO) ./systemd/verify

clean:
	$(GO) clean -testcache
