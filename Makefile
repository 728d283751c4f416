# `make run` and `make test` are the two commands; both install into .venv first when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-slow test-gpu lint validate schemas coverage clean

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

# the fast tier is the CPU / Triton-interpreter tier (what CI runs): CUDA hidden, so a GPU host runs it as CI does
test: install
	CUDA_VISIBLE_DEVICES= $(BIN)/pytest -q --durations=10

test-slow: install
	$(BIN)/pytest -q -m slow --durations=10

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
