# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install lint bench bench-deps clean

run: install
	mkdir -p data
	$(BIN)/nsqd --config configs/nsqd.toml

test: install
	$(BIN)/ruff check .
	$(BIN)/pytest -q

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml setup.cfg
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

lint: install
	$(BIN)/ruff check .

bench: install
	$(BIN)/python bench/run_bench.py

# Debian packages the benchmarks use (wrk for HTTP load); needs root, as on this project's machines.
bench-deps:
	command -v wrk >/dev/null || (apt-get update && apt-get install -y wrk)

clean:
	rm -rf $(VENV) build *.egg-info
