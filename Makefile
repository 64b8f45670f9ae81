# Fresh machine: `make quickstart` (main job) and `make test` (test suite) do all the set-up themselves.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/python -m pip
STAMP   := $(VENV)/.installed
EXTRAS  ?= test,eval,log

.PHONY: setup quickstart test test-all bench clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

setup: $(STAMP)

quickstart: setup
	$(BIN)/harness sweep sweeps/quickstart.yaml --runs-dir runs/quickstart --results-dir results/quickstart

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/bench_methods.py

clean:
	rm -rf $(VENV) runs .pytest_cache
