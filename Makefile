# Two entry points: `make demo` (set up, run the default comparative study) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU-only machine gets the CPU build of torch (no multi-GB CUDA download); a machine with
# an NVIDIA GPU gets the default CUDA build from PyPI.
TORCH_CPU_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup demo test test-all clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "GPU found: installing the CUDA build of torch"; \
		$(BIN)/pip install -q "torch>=2.4"; \
	elif $(BIN)/pip install -q --no-index --no-deps "torch==$(TORCH_CPU_VERSION)" 2>/dev/null; then \
		echo "found a local CPU build of torch $(TORCH_CPU_VERSION)"; \
		$(BIN)/pip install -q "torch==$(TORCH_CPU_VERSION)"; \
	else \
		echo "installing the CPU build of torch"; \
		$(BIN)/pip install -q "torch>=2.4" --index-url $(TORCH_CPU_INDEX); \
	fi
	$(BIN)/pip install -q -e ".[test]"
	touch $@

demo: setup
	$(BIN)/python -m study sweep study=demo

test: setup
	$(BIN)/python -m pytest -q

test-all: setup
	$(BIN)/python -m pytest -q -m ""

clean:
	rm -rf $(VENV) runs
