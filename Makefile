# agentihooks-swarm: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CLUSTER := $(PY) -m tests.tools.cluster
PYTEST_ARGS ?=
# Material for MkDocs prints a notice about its future on every build; the notice is not a warning
# of this site, so it is turned off for lint's output.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
NODE ?= kwok
SOAK_ARGS ?=
SOAK_OUT ?= soak-reports

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# One line per stage; pip's output goes to $(VENV)/install.log (its tail is printed on failure).
$(STAMP): pyproject.toml
	@set -e; source tests/support/progress.sh; \
	progress_begin $(VENV)/install.log 3; \
	progress_say "install: $(VENV) with the package and its test tools (about a minute); details in $(VENV)/install.log"; \
	progress_stage "python -m venv $(VENV)" $(PYTHON) -m venv $(VENV); \
	progress_stage "pip install --upgrade pip" $(PY) -m pip install --upgrade pip; \
	progress_stage "pip install -e '.[dev]'" $(PY) -m pip install -e '.[dev]'; \
	touch $(STAMP)

.PHONY: install
install: $(STAMP) ## Create .venv with the package and its test tools

.PHONY: system-deps-kwok
system-deps-kwok: ## Install the Debian packages the kwok cluster, Redis and the demo need when absent: redis-server, openssl (needs root)
	@tests/support/system-deps.sh kwok

.PHONY: system-deps
system-deps: ## Install every Debian package the tests use when absent: system-deps-kwok's, redis-sentinel, the real node's containerd/runc/CNI/nftables, the image tools, promtool (needs root)
	@tests/support/system-deps.sh all

.PHONY: binaries
binaries: ## Build kube-apiserver, etcd, kwok, kubectl, helm… from source, once, into ~/.cache/agentihooks-swarm (first run: about 12 min on 2 free cores)
	@tests/tools/binaries/build.sh

.PHONY: binaries-compat
binaries-compat: ## Build the oldest Kubernetes the chart allows (1.34: kube-apiserver, kube-controller-manager, kube-scheduler) from source, once (first run: about 10 min on 2 free cores)
	@tests/tools/binaries/build.sh --for compat >/dev/null

SHELL_SCRIPTS := $(wildcard tests/*/*.sh tests/tools/*/*.sh charts/*/hack/*.sh) .ci/run

.PHONY: lint
lint: $(STAMP) ## ruff, ruff format --check, mypy --strict, shellcheck, the CRD, docs and version drift checks, mkdocs build --strict
	$(VENV)/bin/ruff check operator tests
	$(VENV)/bin/ruff format --check operator tests
	$(VENV)/bin/mypy
	$(VENV)/bin/shellcheck -x $(SHELL_SCRIPTS)
	charts/agentihooks-swarm/hack/check-crds.sh
	$(PY) -m tests.tools.docs --check
	$(PY) -m tests.tools.version --check
	$(MKDOCS) build --strict --quiet

.PHONY: docs
docs: $(STAMP) ## Regenerate the docs' reference pages (CRDs, settings, Helm values, metrics, runbooks' index) from the code
	$(PY) -m tests.tools.docs

.PHONY: docs-serve
docs-serve: $(STAMP) ## Serve the documentation site at http://127.0.0.1:8000, rebuilt on each edit
	$(MKDOCS) serve

.PHONY: version
version: $(STAMP) ## Write pyproject.toml's version into Chart.yaml (version, appVersion) and the docs' image tags
	$(PY) -m tests.tools.version

.PHONY: lock
lock: $(STAMP) ## Re-lock the image's runtime dependencies and build backend, with hashes, for Python 3.11 on Linux (requirements.lock, requirements-build.lock; needs PyPI)
	$(PY) -m tests.tools.lock

# pip-audit checks every pinned version against PyPI's vulnerability data (SCAN_ARGS=
# "--vulnerability-service osv" asks OSV instead) and the lock's hashes against PyPI's. --strict:
# a package it could not check fails the scan, so a scan that reached no service never reports
# "No known vulnerabilities found" (without it, pip-audit does, having skipped every package).
SCAN_ARGS ?=
.PHONY: scan
scan: $(STAMP) ## Check the locked versions (the image's Python packages) for known vulnerabilities with pip-audit (needs the vulnerability service; not part of make test)
	$(VENV)/bin/pip-audit --requirement requirements.lock --requirement requirements-build.lock \
	  --require-hashes --strict --timeout 30 --progress-spinner off $(SCAN_ARGS)

.PHONY: manifests
manifests: ## Copy manifests/crds into the chart (the one source of the CRDs)
	charts/agentihooks-swarm/hack/sync-crds.sh

# The tests that back docs/compatibility.md on the oldest Kubernetes the chart allows: the smoke
# test and those marked compat (the chart's install, the Executions' selection by phase, the
# end-to-end launch and cleanup).
COMPAT_PYTEST := AGENTIHOOKS_SWARM_KUBERNETES=compat $(PY) -m pytest -q -m "smoke or compat" tests/integration tests/e2e tests/chart

.PHONY: test
test: $(STAMP) system-deps binaries binaries-compat lint ## Everything CI runs: lint, unit, integration, e2e, faults, chart and the proof, then test-compat (about 20 min warm on 2 cores)
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)
	$(COMPAT_PYTEST)

.PHONY: test-compat
test-compat: $(STAMP) system-deps binaries-compat ## The smoke test, the chart's install and the e2e launch and cleanup on the oldest Kubernetes the chart allows (docs/compatibility.md)
	$(COMPAT_PYTEST) $(PYTEST_ARGS)

.PHONY: check
check: $(STAMP) system-deps-kwok lint ## The edit-test loop (under 2 min warm): lint, unit tests, and the smoke test on the real API server
	@tests/tools/binaries/build.sh --for kwok >/dev/null
	$(PY) -m pytest -q -m "smoke or not integration" tests/unit tests/integration $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: $(STAMP) ## Unit tests only (no cluster, no Redis)
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

.PHONY: cluster-up
cluster-up: $(STAMP) $(if $(filter real,$(NODE)),system-deps,system-deps-kwok) ## Start the local cluster (NODE=kwok, default; NODE=real: containerd + kubelet, root)
	$(CLUSTER) up --node $(NODE)

.PHONY: cluster-down
cluster-down: $(STAMP) ## Stop the local control plane and remove its state
	$(CLUSTER) down

.PHONY: cluster-status
cluster-status: $(STAMP) ## Is the local control plane running?
	$(CLUSTER) status

.PHONY: demo
demo: demo-intro $(STAMP) system-deps-kwok ## Plant a refused worker, run the operator, print the stored evidence (first run: builds the control plane from source, about 10 to 15 min)
	@tests/tools/binaries/build.sh --for kwok >/dev/null
	@$(PY) -m tests.tools.demo

# Says up front what the first run costs (make runs a target's prerequisites in order).
.PHONY: demo-intro
demo-intro:
	@if tests/tools/binaries/build.sh --for kwok --check >/dev/null; then \
	  echo "make demo: about half a minute"; \
	else \
	  echo "make demo: the first run builds the control plane (Kubernetes, etcd, kwok) from source: about 10 to 15 min on 2 free cores, once (cached in $${AGENTIHOOKS_SWARM_CACHE:-~/.cache/agentihooks-swarm}); later runs take about half a minute"; \
	fi

.PHONY: run
run: $(STAMP) ## Run the operator locally against KUBECONFIG (python -m agentihooks_swarm run), e.g. after cluster-up
	$(PY) -m agentihooks_swarm run --namespace "$${AGENTIHOOKS_SWARM_NAMESPACE:-default}"

.PHONY: bench
bench: $(STAMP) system-deps-kwok binaries ## Benchmarks: capture vs baseline at N = 100, 500, 2000, three runs each (docs/benchmarks.md); AOF cost (docs/benchmarks-aof.md); a leader killed mid-burst (docs/benchmarks-takeover.md)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m tests.bench
	$(PY) -m tests.bench.aof --out docs/benchmarks-aof.md
	$(PY) -m tests.bench.takeover --out docs/benchmarks-takeover.md

.PHONY: bench-history
bench-history: $(STAMP) system-deps-kwok binaries ## Memory against history: 2,000 in flight + up to 20,000 Done Executions; restart to Ready
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) -m tests.bench.history

.PHONY: soak
soak: $(STAMP) system-deps binaries ## Seeded chaos soak, judged by an independent checker (tests/soak): 10,000 Executions under mixed faults; NODE=real: ~300 real workers (root); SOAK_ARGS="--quick", "--seed N", "--duration S"
	$(PY) -m tests.soak --node $(NODE) --out $(SOAK_OUT) $(SOAK_ARGS)

.PHONY: clean
clean: ## Remove the virtualenv and caches (not the control-plane binaries)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site
