# Two entry points: `make demo` (set up, run the default comparative study) and `make test`
# (the fast tier); `make test-all` adds the slow tier.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The torch build: `cpu` on a machine without an NVIDIA driver (no multi-GB CUDA download),
# else the newest CUDA build the installed driver supports (study/core/torch_backend.py);
# TORCH_BACKEND=cpu|cu118|cu121|cu124|cu126|cu128|cu129|cu130 chooses.
override TORCH_BACKEND := $(shell TORCH_BACKEND="$(TORCH_BACKEND)" $(PYTHON) study/core/torch_backend.py)
TORCH_INDEX ?= https://download.pytorch.org/whl/$(TORCH_BACKEND)
TORCH_CPU_VERSION ?= 2.13.0
# `make setup WHEELHOUSE=DIR` installs from the wheels in DIR with no network (compute
# nodes); `make wheelhouse` (on a machine with network) collects them into wheelhouse/.
WHEELHOUSE ?=
WHEELHOUSE_OUT ?= wheelhouse
OFFLINE := $(if $(WHEELHOUSE),--no-index --find-links $(WHEELHOUSE),)
# The installed torch build, as a stamp: another build wanted here (a venv made on a CPU
# machine, then used on a GPU one) reinstalls torch.
TORCH_STAMP := $(VENV)/.torch-$(TORCH_BACKEND)

.PHONY: setup wheelhouse browser slurm demo test test-slow test-all clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(TORCH_STAMP)
	$(BIN)/pip install -q $(OFFLINE) -e ".[test]"
	touch $@

$(TORCH_STAMP):
	@test -n "$(TORCH_BACKEND)" || { echo "error: no torch build chosen (see above)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	rm -f $(VENV)/.torch-*
	$(BIN)/pip uninstall -q -y torch 2>/dev/null || true
	@if [ -n "$(WHEELHOUSE)" ]; then \
		echo "installing torch from $(WHEELHOUSE) (no network)"; \
		$(BIN)/pip install -q $(OFFLINE) torch || exit 1; \
	elif [ "$(TORCH_BACKEND)" != cpu ]; then \
		echo "NVIDIA driver found: installing torch's $(TORCH_BACKEND) build"; \
		$(BIN)/pip install -q "torch>=2.4" --index-url $(TORCH_INDEX) || exit 1; \
	elif $(BIN)/pip install -q --no-index --no-deps "torch==$(TORCH_CPU_VERSION)" 2>/dev/null; then \
		echo "found a local CPU build of torch $(TORCH_CPU_VERSION)"; \
		$(BIN)/pip install -q "torch==$(TORCH_CPU_VERSION)" || exit 1; \
	else \
		echo "installing the CPU build of torch"; \
		$(BIN)/pip install -q "torch>=2.4" --index-url $(TORCH_INDEX) || exit 1; \
	fi
	$(BIN)/python study/core/torch_backend.py --installed $(TORCH_BACKEND)
	touch $@

# Every wheel `make setup` needs, for a machine without network: torch (the build for
# TORCH_BACKEND: give TORCH_BACKEND=cu126 on a login node without a GPU), the package, its
# dependencies and test tools, and the build backend. Then, on the compute node:
#   make setup WHEELHOUSE=wheelhouse
wheelhouse:
	test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	mkdir -p $(WHEELHOUSE_OUT)
	@if [ "$(TORCH_BACKEND)" = cpu ] && $(BIN)/pip download -q --no-index --no-deps \
			-d $(WHEELHOUSE_OUT) "torch==$(TORCH_CPU_VERSION)" 2>/dev/null; then \
		echo "found a local CPU build of torch $(TORCH_CPU_VERSION)"; \
	else \
		$(BIN)/pip download -q -d $(WHEELHOUSE_OUT) "torch>=2.4" --index-url $(TORCH_INDEX) || exit 1; \
	fi
	ls $(WHEELHOUSE_OUT)/torch-*.whl | sed 's|.*/torch-\([^-]*\)-.*|torch==\1|' > $(WHEELHOUSE_OUT)/constraints.txt
	$(BIN)/pip wheel -q -w $(WHEELHOUSE_OUT) --find-links $(WHEELHOUSE_OUT) \
		-c $(WHEELHOUSE_OUT)/constraints.txt ".[test]" "setuptools>=64" wheel
	echo $(TORCH_BACKEND) > $(WHEELHOUSE_OUT)/TORCH_BACKEND
	@echo "$$(ls $(WHEELHOUSE_OUT)/*.whl | wc -l) wheels in $(WHEELHOUSE_OUT)/ (torch: $(TORCH_BACKEND)); install with: make setup WHEELHOUSE=$(WHEELHOUSE_OUT)"

# The wheels of every dependency but torch (and what comes with it), for a GPU node whose own
# Python provides torch: `make gpu-check` there needs only these (docs/cluster.md). Run where
# the network is, with the node's Python version; then on the node:
#   $(PYTHON) -m venv --system-site-packages .venv-node
#   .venv-node/bin/pip install --no-index --find-links wheelhouse-notorch -r wheelhouse-notorch/requirements.txt
#   make gpu-check PYTHON=.venv-node/bin/python OUT=DIR
NOTORCH_OUT ?= wheelhouse-notorch
.PHONY: wheelhouse-notorch
wheelhouse-notorch: $(VENV)/.installed
	mkdir -p $(NOTORCH_OUT)
	$(BIN)/python tools/notorch_requirements.py > $(NOTORCH_OUT)/requirements.txt
	$(BIN)/python tools/notorch_requirements.py --pinned > $(NOTORCH_OUT)/pinned.txt
	$(BIN)/pip wheel -q --no-deps -w $(NOTORCH_OUT) -r $(NOTORCH_OUT)/pinned.txt
	@echo "$$(ls $(NOTORCH_OUT)/*.whl | wc -l) wheels in $(NOTORCH_OUT)/, no torch"

# The browser tests (tests/reports/test_browser.py, slow tier) drive Debian's Chromium; where it
# is missing and we may install packages, install it, else say the tests will be skipped. Never fails.
browser:
	@if command -v chromium >/dev/null 2>&1; then \
		:; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser tests"; \
		if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1; then \
			echo "could not install chromium: browser tests will be skipped (apt-get install chromium)"; \
		fi; \
	else \
		echo "chromium not found: browser tests will be skipped (install Debian's chromium package: sudo apt-get install chromium)"; \
	fi

# The SLURM tests (tests/sweep/test_slurm.py, slow tier) start a one-node cluster from Debian's slurm-wlm;
# where it is missing and we may install packages, install it, else say the tests will be
# skipped. Never fails.
slurm:
	@if command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ]; then \
		:; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's slurm-wlm for the SLURM tests"; \
		if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm; } >/dev/null 2>&1; then \
			echo "could not install slurm-wlm: SLURM tests will be skipped (apt-get install slurm-wlm)"; \
		fi; \
	else \
		echo "slurm-wlm not found: SLURM tests will be skipped (they need root and Debian's slurm-wlm: sudo apt-get install slurm-wlm)"; \
	fi

demo: setup
	$(BIN)/python -m study sweep study=demo

# The notebooks in examples/, executed in place with their outputs (what is committed): the
# smoke runs of examples/smoke.toml first (skipped where finished), then each notebook in a
# fresh kernel that sees those runs only (examples/execute.py).
.PHONY: notebooks
notebooks: setup
	$(BIN)/python -m study sweep study=examples/smoke.toml
	$(BIN)/python examples/execute.py

# The whole GPU path in one check, for a GPU node (docs/cluster.md#checking-a-gpu-node-make-gpu-check):
# the node's Python (PYTHON, with its own torch) runs it, not the venv, with this checkout on
# PYTHONPATH, so it needs no `make setup`. GPU_CHECK adds settings, e.g.
# GPU_CHECK="device=cpu quick=true" for the same check in minutes on a CPU.
GPU_CHECK ?=
.PHONY: gpu-check
gpu-check:
	@test -n "$(OUT)" || { echo "usage: make gpu-check OUT=DIR [GPU_CHECK='device=cpu quick=true ...']"; exit 2; }
	PYTHONPATH="$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH}" $(PYTHON) -m study gpu-check out="$(OUT)" $(GPU_CHECK)

# One pytest worker per core (each test runs torch on one thread: tests/conftest.py); a test
# file stays on one worker, so the runs a file trains once are shared by its tests.
PYTEST_PARALLEL ?= -n auto --dist loadfile

# The fast tier, what to run after a change: unit and fast integration tests at scale=smoke,
# a few minutes on 2 cores (docs/performance.md); needs no root, no apt, no browser, no SLURM.
test: setup
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# The slow tier alone (tests marked `slow`, and `gpu` ones, skipped without a GPU): the SLURM
# cluster, the browser, the notebooks, `reproduce`, every model on every task, installs.
test-slow: setup browser slurm
	$(BIN)/python -m pytest -q -m "slow or gpu" $(PYTEST_PARALLEL)

# Both tiers: the fast one first, then the slow one (what CI runs: .ci/run).
test-all: test test-slow

clean:
	rm -rf $(VENV) runs
