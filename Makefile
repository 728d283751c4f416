# `make run` and `make test` are the two commands; both install into .venv first when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-slow test-large test-gpu lint validate schemas coverage clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build of torch first, so nothing pulls the CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[fla,dev]'
	# flashinfer-bench only for the compatibility test: its data models need just these two
	$(BIN)/pip install -q --no-deps flashinfer-bench==0.1.2 safetensors docstring-parser
	touch $(STAMP)

run: install
	$(BIN)/kda-trace run --op-type kda

# The test tiers (markers in pyproject.toml). The CPU tiers hide CUDA, so a GPU host runs them as CI does: their
# kernel tests are Triton-interpreter tests, with bars set for the interpreter's fp32 products.
# test: the fast tier, everything not marked slow, large, gpu or stress: every module, every kernel (forward,
#   backward, gate) under the Triton interpreter, every family's reference against ground truth, the runner's
#   verdicts and one run of its cheats. Measured from a fresh clone on 2 idle CPU cores: about 700 tests in 6 to 16
#   minutes (machines of the same kind differ that much), the runner's runs a third of it. Prints its ten slowest
#   tests.
test: install
	CUDA_VISIBLE_DEVICES= $(BIN)/pytest -q --durations=10

# test-slow: the slow tier on CPU (CI runs it after `make test`; none of the fast tests again): the parametrized
#   sweeps beyond the fast tier's representative cases, long interpreter cases, the runner's other runs (red team,
#   row defects on KDA, shards, host inputs), and the dataset workloads that are CPU-sized
#   (tests/references/conftest.py CPU_MAX_SIZE) against the float64 truths. Measured on 2 CPU cores: about 640
#   tests in 21 to 44 minutes (the same machines), most of it the forward and backward kernels' interpreter
#   cases.
test-slow: install
	CUDA_VISIBLE_DEVICES= $(BIN)/pytest -q -m 'slow and not gpu' --durations=10

# test-large: what is too long for CI's CPU tiers: the rest of the dataset grid (up to 8192 tokens, 2048 for the
#   backward; on a GPU where there is one: minutes, else hours), the forward's launch variants under the Triton
#   interpreter (CUDA hidden, as in the CPU tiers: about 10 minutes) and the sm_90 compilation of the backward kernels.
test-large: install
	CUDA_VISIBLE_DEVICES= $(BIN)/pytest -q -m 'large and not gpu' --durations=10 tests/kernels
	$(BIN)/pytest -q -m 'large and not gpu' --durations=10 tests/references

test-gpu: install
	$(BIN)/pytest -q -m gpu --durations=10

lint: install
	$(BIN)/ruff check kda_trace tests tools benchmarks

validate: install
	$(BIN)/kda-trace validate

schemas: install
	$(BIN)/kda-trace schemas

coverage: install
	$(BIN)/kda-trace coverage

clean:
	rm -rf $(VENV) kda-trace-out .pytest_cache
