# xlb — see README.md. demo, test and bench need root; run as another user
# they re-run themselves through sudo.
GO      ?= go
BIN     := bin/xlb
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# Fuzz budgets are execution counts, not durations: a duration -fuzztime
# races Go 1.26's fuzz coordinator at the deadline and fails with a bare
# "context deadline exceeded" (go.dev/issue/75804). Each is ~10 s here.
FUZZ_CONFIG    ?= 60000x
FUZZ_MAGLEV    ?= 200000x
FUZZ_DATAPLANE ?= 130000x
FUZZ_NAT       ?= 100000x
FUZZ_BACKEND   ?= 140000x
FUZZ_BFD       ?= 400000x

.PHONY: all build generate generate-api check-generated demo test bench lint deps kube \
	root-demo root-test root-bench clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/xlb

# Rebuild the generated files, which are committed:
# - the eBPF objects and their Go bindings (needs clang), so that
#   `go build` needs no clang. The product's are under
#   internal/dataplane/, the benchmark harness's and the lab's XDP_PASS
#   program's beside their Go code;
# - from the Go types of xlb's Kubernetes API and their kubebuilder
#   markers (internal/k8s/api), with controller-gen (a tool of go.mod):
#   the CRDs of deploy/crds, their copies in the chart's crds/ (Helm
#   installs CRDs only from there) and the types' deep-copy code.
GENERATED := internal/dataplane/ bench/internal/lbharness/ bench/internal/natfloor/ testbed/xdppass/
API_TYPES := internal/k8s/api
CRDS      := deploy/crds
CHART_CRDS := deploy/helm/xlb/crds
API_GENERATED := $(CRDS)/ $(CHART_CRDS)/ $(API_TYPES)/zz_generated.deepcopy.go
generate: generate-api
	$(GO) generate $(addprefix ./,$(addsuffix ...,$(GENERATED)))

# The Kubernetes API's files only (no clang needed).
generate-api:
	rm -f $(CRDS)/*.yaml $(CHART_CRDS)/*.yaml
	$(GO) tool controller-gen object paths=./$(API_TYPES)/ \
		crd:headerFile=$(API_TYPES)/crd_header.txt output:crd:dir=$(CRDS)
	cp $(CRDS)/*.yaml $(CHART_CRDS)/

# CI: the committed files must be what their sources generate.
check-generated: generate
	@git diff --quiet -- $(GENERATED) $(API_GENERATED) && [ -z "$$(git ls-files --others --exclude-standard -- $(GENERATED) $(API_GENERATED))" ] || { \
		echo "generated files are stale (eBPF objects, CRDs or deep-copy code): run 'make generate' and commit"; \
		git diff --stat -- $(GENERATED) $(API_GENERATED); git ls-files --others --exclude-standard -- $(GENERATED) $(API_GENERATED); exit 1; }

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); [ -z "$$out" ] || { echo "gofmt would change: $$out"; exit 1; }
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

deps:
	@scripts/as-root.sh scripts/deps.sh

# The Kubernetes control plane of the tests (testbed/k8stest):
# kube-apiserver and kube-controller-manager built from
# test/k8s/controlplane into a cache (see DEVELOPERS.md). The first build
# takes minutes; later runs find it and build nothing.
kube:
	@scripts/kube-build.sh >/dev/null

demo:
	@scripts/as-root.sh $(MAKE) --no-print-directory root-demo
test:
	@scripts/as-root.sh $(MAKE) --no-print-directory root-test
bench:
	@scripts/as-root.sh $(MAKE) --no-print-directory root-bench

root-demo: deps build
	$(BIN) demo

root-test: deps build kube lint check-generated
	$(GO) test -count=1 -timeout 25m ./...
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZ_CONFIG) -fuzzminimizetime 2s ./internal/config/
	$(GO) test -run '^$$' -fuzz '^FuzzBuild$$' -fuzztime $(FUZZ_MAGLEV) -fuzzminimizetime 2s ./internal/maglev/
	$(GO) test -run '^$$' -fuzz '^FuzzLBProgram$$' -fuzztime $(FUZZ_DATAPLANE) -fuzzminimizetime 2s ./internal/dataplane/lb/
	$(GO) test -run '^$$' -fuzz '^FuzzLBNAT$$' -fuzztime $(FUZZ_NAT) -fuzzminimizetime 2s ./internal/dataplane/lb/
	$(GO) test -run '^$$' -fuzz '^FuzzBackendProgram$$' -fuzztime $(FUZZ_BACKEND) -fuzzminimizetime 2s ./internal/dataplane/decap/
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZ_BFD) -fuzzminimizetime 2s ./internal/bfd/

root-bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 20x ./internal/maglev/
	$(GO) run ./bench/lbbench -out bench/results -svg docs/img/bench-lb.svg -doc docs/benchmarks.md
	$(GO) run ./bench/pktbench -out bench/results -doc docs/benchmarks.md
	$(GO) run ./bench/policybench -out bench/results -doc docs/benchmarks.md
	$(GO) run ./bench/httpbench -out bench/results -doc docs/benchmarks.md
	$(GO) run ./bench/ctlbench -out bench/results -svg docs/img/bench-ctl.svg -doc docs/benchmarks.md
	$(GO) run ./bench/bgpbench -out bench/results -svg docs/img/bench-bgp.svg -doc docs/benchmarks.md
	$(GO) run ./bench/l2bench -out bench/results -doc docs/benchmarks.md
	$(GO) run ./bench/k8sbench -out bench/results -svg docs/img/bench-k8s.svg -doc docs/benchmarks.md
	$(GO) run ./bench/survivalbench -out bench/results -doc docs/connection-survival.md

clean:
	rm -rf bin
