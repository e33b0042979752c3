# vrnicd — a user-space RoCEv2 NIC. `make test` is the test command CI runs.
GO        ?= go
FUZZTIME  ?= 3s
PKGS      := ./...

.PHONY: all build test check vet fmt unit fuzz bench clean

all: build

build:
	$(GO) build $(PKGS)

# test: formatting, vet, then every test under the race detector. Tests that
# need root (network namespaces, TAP) skip with a message when not root.
test: check unit

check: fmt vet

fmt:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test -race -count=1 $(PKGS)

# fuzz: every Fuzz target for FUZZTIME each (CI runs this after test).
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# bench: every benchmark once; each figure prints beside its baseline.
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	$(GO) clean -testcache
