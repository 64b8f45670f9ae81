#!/usr/bin/env bash
# Build the TRL environment that benchmarks/bench_pocket.py compares the pocket backend against.
#
# Creates .venv-trl/ with torch 2.13.0 (CPU wheel), transformers/accelerate from constraints.txt, TRL 1.16.0
# and this project in editable mode (the benchmark's TRL side imports the pocket tokenizer, task and model
# sizes from it). Idempotent: a stamp file records the inputs; a rerun with unchanged inputs does nothing.
# Usage: scripts/setup_trl.sh [VENV_DIR]        (env: PYTHON, default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-trl}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.trl-installed"
KEY="$(cat "$0" pyproject.toml constraints.txt | sha256sum | cut -c1-16)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$KEY" ]]; then
  echo "setup_trl: $VENV is up to date"; exit 0
fi
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q -c constraints.txt)
"$VENV/bin/python" -m pip install -q --upgrade pip
"${PIP[@]}" torch==2.13.0   # the CPU wheel, as in the Makefile's setup
"${PIP[@]}" trl==1.16.0 transformers accelerate datasets
"${PIP[@]}" -e .
echo "$KEY" > "$STAMP"
echo "setup_trl: ready: $VENV"
