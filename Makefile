# attnlab — the two commands: `make train` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip's notes about local mirror folders it skips are noise
QUIET := 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The torch to install when .venv has none (or one below TORCH_FLOOR). pip's default build
# is a CUDA one: on a CPU-only machine without a local wheel cache, add
# TORCH_INDEX=--extra-index-url=https://download.pytorch.org/whl/cpu for the CPU wheel.
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
# the oldest torch attnlab runs on (pyproject.toml says the same; a test checks both)
TORCH_FLOOR := (2, 7)
STAMP := $(VENV)/.attnlab-installed
# transformers for the export parity tests and attnlab-bench only, in a folder of its own that
# just their processes put on their path: installed in .venv, torchmetrics would import it in
# every process
HF_PARITY := $(VENV)/hf-parity
TRANSFORMERS_SPEC ?= transformers==5.25.0

.PHONY: setup train test test-all lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@# Keep a torch that is already installed and meets the floor in pyproject.toml (for
	@# example the user's CUDA build); otherwise take the pinned CPU wheel, so that the
	@# project install does not pull a CUDA build to satisfy the floor.
	@$(PY) -c "import sys, torch; v = torch.__version__.split('+')[0].split('.'); \
		sys.exit(tuple(map(int, v[:2])) < $(TORCH_FLOOR))" 2>/dev/null \
		|| $(PIP) install -q $(TORCH_INDEX) "$(TORCH_SPEC)" $(QUIET)
	$(PIP) install -q -e ".[dev]" $(QUIET)
	@# its requirements are attnlab's own (huggingface-hub, tokenizers, safetensors, numpy)
	$(PIP) install -q --no-deps --upgrade --target $(HF_PARITY) "$(TRANSFORMERS_SPEC)" $(QUIET)
	@touch $(STAMP)

train: setup
	$(VENV)/bin/attnlab-train $(ARGS)

test: setup
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

test-all: setup
	$(VENV)/bin/python -m pytest -q -m "slow or not slow" $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check src tests

bench: setup
	ATTNLAB_HF_PARITY=$(HF_PARITY) $(VENV)/bin/attnlab-bench --quick --json bench.json

clean:
	rm -rf $(VENV) .pytest_cache
