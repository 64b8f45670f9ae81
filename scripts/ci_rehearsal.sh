#!/usr/bin/env bash
# The CPU rehearsal of the paper sweep (issue 22; docs/gpu.md "The CPU rehearsal"): sweeps/rehearsal.yaml (4
# methods x 2 seeds, the shape of sweeps/paper_qwen25.yaml) through OpenRLHF 0.11.2's real trainer loop on a CPU,
# from prepared data to results/rehearsal/leaderboard.md, with one cell killed mid-run and resumed.
#
#   1. build .venv-openrlhf (scripts/setup_openrlhf.sh; a no-op when it is up to date)
#   2. harness data prepare dapo-math-17k --source sample      -> .cache/rehearsal/dapo-math-17k.jsonl
#   3. the rehearsal model (rehearsal_assets.py)               -> .cache/rehearsal/model (reused when unchanged)
#   4. one cell (grpo__s0) through `harness sweep --only`, SIGKILLed with all its processes after step 2's checkpoint
#   5. harness sweep sweeps/rehearsal.yaml                      (resumes the killed cell, trains the other 7, two at a
#      time, in one shared local Ray cluster)
#   6. harness status, harness table -> results/rehearsal/leaderboard.md
#   7. rehearsal_check verify: every cell completed with its metrics, in-loop evals, after-training scores and
#      final model; the killed cell resumed from its DeepSpeed checkpoint; a scored row per method
#
# Usage: scripts/ci_rehearsal.sh      (env: OPENRLHF_VENV, REHEARSAL_RUNS=runs/rehearsal,
#                                      REHEARSAL_RESULTS=results/rehearsal, REHEARSAL_SPEC=sweeps/rehearsal.yaml)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${OPENRLHF_VENV:-.venv-openrlhf}"
SPEC="${REHEARSAL_SPEC:-sweeps/rehearsal.yaml}"
RUNS="${REHEARSAL_RUNS:-runs/rehearsal}"
RESULTS="${REHEARSAL_RESULTS:-results/rehearsal}"
ASSETS=.cache/rehearsal
scripts/setup_openrlhf.sh "$VENV"
export PATH="$PWD/$VENV/bin:$PATH" RAY_DEDUP_LOGS=0 RAY_USAGE_STATS_ENABLED=0
t0=$(date +%s)
stamp() { echo "rehearsal: $(( $(date +%s) - t0 )) s: $*"; }

harness data prepare dapo-math-17k --source sample --out "$ASSETS"
python -m harness.backends.openrlhf.rehearsal.assets --train "$ASSETS/dapo-math-17k.jsonl" --out "$ASSETS" >/dev/null
stamp "data and model ready ($ASSETS)"

rm -rf "$RUNS"  # the rehearsal always trains (a finished cell would be skipped by the sweep)
mkdir -p "$RESULTS"
python -m harness.backends.openrlhf.rehearsal.check interrupt --spec "$SPEC" --runs-dir "$RUNS" --cell grpo__s0 \
  --after-step 2 --out "$RESULTS/interrupted.json" --log "$ASSETS/interrupted.log"
stamp "grpo__s0 killed after its step-2 checkpoint"

# One local Ray cluster for the sweep (each cell's launcher joins it through RAY_ADDRESS instead of starting and
# stopping its own, ~25 s a cell here): logical GPUs for upstream's {"GPU": 1} placement groups, two cells at a time
# (sweeps/rehearsal.yaml array_parallelism: 2). Held by a small driver in a session of its own and stopped with it
# on exit (not `ray start`/`ray stop`: those leave a machine-wide default cluster file, and `ray stop` stops every
# Ray of this user on the machine).
setsid python -c '
import time, ray
ray.init(num_gpus=2, num_cpus=8, include_dashboard=False, object_store_memory=512 * 1024**2)
print("RAY_ADDRESS=" + ray.get_runtime_context().gcs_address, flush=True)
time.sleep(24 * 3600)
' > "$ASSETS/ray_head.log" 2>&1 &
RAY_PID=$!
stop_ray() { kill -TERM -- "-$RAY_PID" 2>/dev/null || true; sleep 3; kill -KILL -- "-$RAY_PID" 2>/dev/null || true; }
trap stop_ray EXIT
for _ in $(seq 120); do grep -q "^RAY_ADDRESS=" "$ASSETS/ray_head.log" && break; sleep 1; done
grep -q "^RAY_ADDRESS=" "$ASSETS/ray_head.log" || { cat "$ASSETS/ray_head.log"; exit 1; }
export RAY_ADDRESS="$(grep -m1 "^RAY_ADDRESS=" "$ASSETS/ray_head.log" | cut -d= -f2)"
stamp "Ray cluster up at $RAY_ADDRESS"

harness sweep "$SPEC" --runs-dir "$RUNS" --no-progress
stamp "sweep finished"
harness status "$RUNS"
harness table "$RUNS" --out "$RESULTS/leaderboard.md"
python -m harness.backends.openrlhf.rehearsal.check verify --spec "$SPEC" --runs-dir "$RUNS" \
  --leaderboard "$RESULTS/leaderboard.md" --resumed "$RESULTS/interrupted.json" --out "$RESULTS/rehearsal.json"
cat "$RESULTS/leaderboard.md"
stamp "done (wall time $(( $(date +%s) - t0 )) s)"
