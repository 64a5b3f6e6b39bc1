# agentihooks-swarm: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CLUSTER := $(PY) -m tests.support.cluster
PYTEST_ARGS ?=
NODE ?= kwok
SOAK_ARGS ?=
SOAK_OUT ?= soak-reports

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create .venv with the package and its test tools

.PHONY: system-deps
system-deps: ## Install Debian packages the tests use when absent: redis (server, sentinel, cli), openssl, the real node's containerd/runc/CNI/nftables, the image tools, promtool (needs root)
	@missing=""; \
	for pair in redis-server:redis-server redis-sentinel:redis-sentinel redis-cli:redis-tools openssl:openssl containerd:containerd \
	            runc:runc iptables:iptables nft:nftables mmdebstrap:mmdebstrap buildah:buildah; do \
	  command -v "$${pair%%:*}" >/dev/null || missing="$$missing $${pair##*:}"; \
	done; \
	[ -e /usr/lib/cni/ptp ] || missing="$$missing containernetworking-plugins"; \
	[ -e /bin/busybox ] || missing="$$missing busybox-static"; \
	if [ -n "$$missing" ]; then \
	  echo "system-deps: installing$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@# promtool checks and unit-tests the chart's alerts. Only promtool is wanted from Debian's
	@# prometheus: on a host with systemd the package's own server (port 9090) is stopped and disabled.
	@command -v promtool >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus \
	    && { ! command -v systemctl >/dev/null || systemctl disable --now prometheus >/dev/null 2>&1 || true; }; }
	@command -v go >/dev/null || { echo "Go is needed to build the test cluster (apt-get install golang-go or go.dev)"; exit 1; }

.PHONY: binaries
binaries: ## Build kube-apiserver, etcd, kwok, kubectl, helm… once into ~/.cache/agentihooks-swarm
	@tests/cluster/build.sh

.PHONY: lint
lint: $(STAMP) ## ruff, ruff format --check, mypy --strict, and the CRD drift check
	$(VENV)/bin/ruff check operator tests
	$(VENV)/bin/ruff format --check operator tests
	$(VENV)/bin/mypy
	charts/agentihooks-swarm/hack/check-crds.sh

.PHONY: manifests
manifests: ## Copy manifests/crds into the chart (the one source of the CRDs)
	charts/agentihooks-swarm/hack/sync-crds.sh

.PHONY: test
test: $(STAMP) system-deps binaries lint ## Everything: lint, unit, integration, e2e, faults, chart and the proof
	$(PY) -m pytest -q $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: $(STAMP) ## Unit tests only (no cluster, no Redis)
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

.PHONY: cluster-up
cluster-up: $(STAMP) system-deps ## Start the local cluster (NODE=kwok, default; NODE=real: containerd + kubelet, root)
	$(CLUSTER) up --node $(NODE)

.PHONY: cluster-down
cluster-down: $(STAMP) ## Stop the local control plane and remove its state
	$(CLUSTER) down

.PHONY: cluster-status
cluster-status: $(STAMP) ## Is the local control plane running?
	$(CLUSTER) status

.PHONY: demo
demo: $(STAMP) system-deps binaries ## Plant a refused worker, run the operator, print the stored evidence
	$(PY) -m tests.support.demo

.PHONY: run
run: $(STAMP) ## Run the operator locally against KUBECONFIG (kopf run), e.g. after cluster-up
	$(PY) -m agentihooks_swarm run --namespace "$${AGENTIHOOKS_SWARM_NAMESPACE:-default}" --standalone

.PHONY: bench
bench: $(STAMP) system-deps binaries ## Benchmarks: capture vs baseline at N = 100, 500, 2000, three runs each (docs/benchmarks.md); AOF cost (docs/benchmarks-aof.md)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m tests.bench
	$(PY) -m tests.bench.aof --out docs/benchmarks-aof.md

.PHONY: bench-history
bench-history: $(STAMP) system-deps binaries ## Memory against history: 2,000 in flight + up to 20,000 Done Executions; restart to Ready
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m tests.bench.history

.PHONY: soak
soak: $(STAMP) system-deps binaries ## Seeded chaos soak, judged by an independent checker (tests/soak): 10,000 Executions under mixed faults; NODE=real: ~300 real workers (root); SOAK_ARGS="--quick", "--seed N", "--duration S"
	$(PY) -m tests.soak --node $(NODE) --out $(SOAK_OUT) $(SOAK_ARGS)

.PHONY: clean
clean: ## Remove the virtualenv and caches (not the control-plane binaries)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
