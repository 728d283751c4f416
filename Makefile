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
#   verdicts and one run of its cheats. About 3.5 minutes on 2 idle CPU cores (its tests took 770 s on 2 cores
#   busy with other work, where the whole former fast tier, 16.5 minutes idle, took 3720 s); prints its ten slowest.
test: install
	CUDA_VISIBLE_DEVICES= $(BIN)/pytest -q --durations=10

# test-slow: the slow tier on CPU (CI runs it after `make test`; none of the fast tests again): the parametrized
#   sweeps beyond the fast tier's representative cases, long interpreter cases, the runner's other runs (red team,
#   row defects on KDA, shards, host inputs), and the dataset workloads that are CPU-sized
#   (tests/references/conftest.py CPU_MAX_SIZE) against the float64 truths. About 20 minutes on 2 idle CPU cores
#   (estimated the same way: about 4200 s on the busy machine); CI allows it 40.
test-slow: install
	CUDA_VISIBLE_DEVICES= $(BIN)/pytest -q -m 'slow and not gpu' --durations=10

# test-large: the rest of the dataset grid (up to 8192 tokens, 2048 for the backward) and the sm_90 compilation of the
#   backward kernels: minutes on a GPU, hours on a CPU
test-large: install
	$(BIN)/pytest -q -m 'large and not gpu' --durations=10

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
