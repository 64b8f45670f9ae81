#!/usr/bin/env bash
# CI for the OpenRLHF backend on a CPU machine: build the partial OpenRLHF 0.11.2 venv (idempotent), then run
# the `openrlhf` suite (real OpenRLHF modules, local Ray workers) and the pure-Python launcher tests with it, and
# `harness doctor --cpu` in that venv (GPU checks skipped; the stack, `ray` on PATH and disk must pass).
# Usage: scripts/ci_openrlhf.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPENRLHF_VENV:-.venv-openrlhf}"
scripts/setup_openrlhf.sh "$VENV"
# RAY_* keep the local Ray cluster small on shared CI machines; the suite shuts Ray down itself.
export RAY_DEDUP_LOGS=0 RAY_USAGE_STATS_ENABLED=0
"$VENV/bin/python" -m pytest -q -m openrlhf tests/openrlhf "$@"
"$VENV/bin/python" -m pytest -q tests/openrlhf_launcher "$@"
PATH="$(cd "$VENV/bin" && pwd):$PATH" "$VENV/bin/python" -m harness doctor --cpu --need-gb 1 --json "${TMPDIR:-/tmp}/doctor-cpu.json"
