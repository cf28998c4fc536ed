.DEFAULT_GOAL := help
GO    ?= go
CLANG ?= clang
WAT   := $(wildcard host/testdata/*.wat testdata/abi/*.wat)
# C fixtures: built with debug info (DWARF 4, the version wazero reads) and
# the compilation directory set to ".", so that the bytes do not depend on
# the checkout's path. clang 14 + lld (Debian 12) built the committed ones.
CFIX  := $(wildcard host/testdata/*.c)

.PHONY: help
help: ## list targets
	@grep -E '^[a-z.-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "%-14s %s\n",$$1,$$2}'

.PHONY: wasm
wasm: ## rebuild every committed .wasm built from WAT or C (needs wabt's wat2wasm, clang and lld)
	@for f in $(WAT); do wat2wasm -o $${f%.wat}.wasm $$f || exit 1; done
	@for f in $(CFIX); do $(CLANG) --target=wasm32 -nostdlib -O2 -g -gdwarf-4 -fdebug-compilation-dir=. \
	  -Wl,--no-entry -o $${f%.c}.wasm $$f || exit 1; done

.PHONY: test
test: ## tests with the race detector
	$(GO) test -race ./...

.PHONY: bench
bench: ## host benchmarks, side by side with the native baseline
	$(GO) test -run '^$$' -bench . -skip CompileCurve -benchmem ./host/

.PHONY: bench-compile
bench-compile: ## wazero's compile cost by module shape, one process per row: the table of docs/security.md
	bench/compilecurve.sh

.PHONY: bench-compare
bench-compare: ## per-part driver and plugin benchmarks of BASE against the work tree, interleaved (BASE=<rev>; ROUNDS, BENCHTIME, MAX)
	@test -n "$(BASE)" || { echo 'usage: make bench-compare BASE=<rev>'; exit 2; }
	bench/compare.sh $(BASE)

.PHONY: bench-doc
bench-doc: ## rerun the benchmarks and rewrite the generated table of the docs (ROUNDS, DOC)
	bench/doc.sh

.PHONY: bench-continuation
bench-continuation: ## continuation after the commit through the gateway: off, on and idle, continued, and the new attempt's own first content, one run
	$(GO) test ./gateway -run '^$$' -bench Continuation -benchmem -benchtime 300x -count 5

.PHONY: bench-gateway
bench-gateway: ## gateway benchmark: direct, bare reverse proxy, retryhost serve, Portkey (loopback; ARGS='-pace 0 -held-streams 2000')
	bench/gateway.sh $(ARGS)

.PHONY: bench-gateway-seq
bench-gateway-seq: ## gateway overhead, sequential client: added p50-p99.9 and CPU per request against a bare Go hop, in rounds (ARGS override)
	bench/gateway.sh -seq 1500 -rounds 10 -pace 0 -closed 10s -conc 64 -upstream-json=default -targets direct,revproxy,retryhost,retryhost-wasm $(ARGS)
