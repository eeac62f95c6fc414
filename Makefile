# attnlab — the two commands: `make train` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip's notes about local mirror folders it skips are noise
QUIET := 2>&1 | { grep -v 'is ignored: it is neither a file nor a directory' || true; }
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The torch to install when .venv has none, one below TORCH_FLOOR, or a CPU-only one on a
# machine with an NVIDIA driver: scripts/torch_for_this_machine.py picks PyPI's CUDA build
# where a driver is present and the CPU wheel (PyTorch's CPU index) on other Linux x86-64
# machines; ATTNLAB_TORCH=cpu|cuda overrides the detection.
TORCH_SPEC ?= torch==2.13.0
# the oldest torch attnlab runs on (pyproject.toml says the same; a test checks both)
TORCH_FLOOR := (2, 7)
STAMP := $(VENV)/.attnlab-installed
DEV_STAMP := $(VENV)/.attnlab-dev-installed
# transformers for the export parity tests and attnlab-bench only, in a folder of its own that
# just their processes put on their path: installed in .venv, torchmetrics would import it in
# every process
HF_PARITY := $(VENV)/hf-parity
TRANSFORMERS_SPEC ?= transformers==5.25.0

.PHONY: setup setup-dev train test test-all lint bench clean

# what training needs: torch for this machine, then attnlab
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/torch_for_this_machine.py
	@test -x $(PY) || python3 -m venv $(VENV)
	@torch_args="$$($(PY) scripts/torch_for_this_machine.py --spec '$(TORCH_SPEC)' \
		--floor '$(TORCH_FLOOR)')" \
		&& { test -z "$$torch_args" || $(PIP) install -q $$torch_args $(QUIET); }
	$(PIP) install -q -e . $(QUIET)
	@touch $(STAMP)

# what the tests, the linter and the benchmarks add: the dev extras, and transformers
setup-dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP)
	$(PIP) install -q -e ".[dev]" $(QUIET)
	@# its requirements are attnlab's own (huggingface-hub, tokenizers, safetensors, numpy)
	$(PIP) install -q --no-deps --upgrade --target $(HF_PARITY) "$(TRANSFORMERS_SPEC)" $(QUIET)
	@touch $(DEV_STAMP)

train: setup
	$(VENV)/bin/attnlab-train $(ARGS)

test: setup-dev
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

test-all: setup-dev
	$(VENV)/bin/python -m pytest -q -m "slow or not slow" $(PYTEST_ARGS)

lint: setup-dev
	$(VENV)/bin/ruff check src tests

bench: setup-dev
	ATTNLAB_HF_PARITY=$(HF_PARITY) $(VENV)/bin/attnlab-bench --quick --json bench.json

clean:
	rm -rf $(VENV) .pytest_cache
