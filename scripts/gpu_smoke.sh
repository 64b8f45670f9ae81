#!/usr/bin/env bash
# GPU smoke test of the OpenRLHF backend on ONE GPU. Two stages; each says what it ran.
#
#  1. torch + CUDA only (no vLLM needed): the OpenRLHF CPU suite's training-step and agreement tests on CUDA
#     (our loss inside OpenRLHF's real ActorPPOTrainer.training_step, global-scope planning, built-in agreement,
#     the same loss on packed and padded micro-batches).
#  2. only when vllm and flash_attn import: STEPS steps of a small local model through the whole OpenRLHF path
#     (Ray, vLLM rollouts, our reward file, our advantages and loss, DeepSpeed update, weight sync) with
#     METHOD (default kl_cov, scope global), then checks metrics.jsonl / result.json / the HF checkpoint.
#
# Usage: MODEL=/path/to/Qwen2.5-0.5B-Instruct scripts/gpu_smoke.sh
#   env: VENV (default .venv-openrlhf; for stage 2 it needs `pip install -e '.[gpu]'`), MODEL (a local HF model
#   directory: GPU boxes may have no internet), STEPS (3), METHOD (kl_cov), RUN_DIR (runs/gpu_smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-openrlhf}"
PY="$VENV/bin/python"
STEPS="${STEPS:-3}"
METHOD="${METHOD:-kl_cov}"
RUN_DIR="${RUN_DIR:-runs/gpu_smoke}"
test -x "$PY" || scripts/setup_openrlhf.sh "$VENV"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU visible'; print('GPU:', torch.cuda.get_device_name(0))"

echo "== stage 1: plugged loss in OpenRLHF's training_step on CUDA"
HARNESS_OPENRLHF_TEST_DEVICE=cuda "$PY" -m pytest -q -m openrlhf tests/openrlhf/test_training_step.py \
  tests/openrlhf/test_agreement.py
echo "== stage 1b: packed vs padded micro-batches on CUDA (flash_attn's own bert_padding helpers when installed)"
HARNESS_OPENRLHF_TEST_DEVICE=cuda "$PY" -m pytest -q -m openrlhf tests/openrlhf/test_packing.py \
  -k "packed_micro_batch or pad_fraction or dynamic_micro_batch"

if ! "$PY" -c "import vllm, flash_attn" 2>/dev/null; then
  echo "== stage 2 skipped: vllm/flash_attn not importable in $VENV (pip install -e '.[gpu]' for the full path)"
  exit 0
fi
: "${MODEL:?set MODEL to a local HF model directory (e.g. Qwen2.5-0.5B-Instruct)}"
echo "== stage 2: $STEPS steps of $MODEL with $METHOD through OpenRLHF (1 GPU, colocated vLLM)"
mkdir -p "$RUN_DIR"
"$PY" - "$RUN_DIR" "$MODEL" "$STEPS" "$METHOD" <<'PYEOF'
import json, random, sys, time
from pathlib import Path

from harness.run.config import load_config
from harness.run.runner import run

run_dir, model, steps, method = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
rng = random.Random(0)
data = run_dir / "arith.jsonl"
with data.open("w") as f:
    for _ in range(64):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        f.write(json.dumps({"prompt": f"What is {a} + {b}? Put the final answer in \\boxed{{}}.",
                            "answer": str(a + b)}) + "\n")
method_cfg = {"name": method, **({"k_ratio": 0.01, "scope": "global"} if method == "kl_cov" else {})}
cfg = load_config({
    "backend": "openrlhf", "seed": 0, "method": method_cfg,
    "model": {"name": model, "dtype": "bfloat16"}, "task": {"name": str(data)},
    "train": {"steps": steps, "prompts_per_step": 4, "samples_per_prompt": 4, "updates_per_rollout": 2,
              "micro_batch_size": 2, "lr": 1e-6, "max_new_tokens": 128, "checkpoint_every": 0},
    "openrlhf": {"nodes": 1, "gpus_per_node": 1, "vllm_engines": 1, "max_prompt_len": 256,
                 "vllm_gpu_memory_utilization": 0.4},
})
t0 = time.time()
result = run(cfg, run_dir / "run", force=True)
rows = [json.loads(l) for l in (run_dir / "run" / "metrics.jsonl").read_text().splitlines()]
assert result["status"] == "completed", result
assert [r["step"] for r in rows] == list(range(1, steps + 1)), rows
for key in ("reward/mean", "entropy", "clipfrac", "ppo_kl", "cov/term"):
    assert all(key in r for r in rows), key
if method in ("kl_cov", "clip_cov"):
    assert all("selected/frac" in r for r in rows)
assert (run_dir / "run" / "checkpoints" / "final" / "config.json").exists()
print(f"stage 2 ok: {steps} steps in {time.time() - t0:.0f}s")
for r in rows:
    print({k: r.get(k) for k in ("step", "reward/mean", "entropy", "selected/frac", "time/rollout", "time/update")})
PYEOF
