# Two entry points: `make demo` (set up, run the default comparative study) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# A CPU-only machine gets the CPU build of torch (no multi-GB CUDA download); a machine with
# an NVIDIA GPU gets the default CUDA build from PyPI.
TORCH_CPU_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: setup browser demo test test-all clean

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

# The browser tests (tests/reports/test_browser.py) drive Debian's Chromium; where it is missing
# and we may install packages, install it, else say the tests will be skipped. Never fails.
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

demo: setup
	$(BIN)/python -m study sweep study=demo

test: setup browser
	$(BIN)/python -m pytest -q

test-all: setup browser
	$(BIN)/python -m pytest -q -m ""

clean:
	rm -rf $(VENV) runs
