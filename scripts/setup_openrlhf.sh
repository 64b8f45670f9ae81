#!/usr/bin/env bash
# Build the partial CPU OpenRLHF 0.11.2 environment used by the `openrlhf` test suite.
#
# Creates .venv-openrlhf/ (python3.11) with torch 2.13.0 (CPU), transformers 5.15.0, openrlhf 0.11.2
# installed WITHOUT its GPU deps (flash-attn, vllm; they do not build on CPU), the light deps its trainer
# modules import, a pure-Python deepspeed 0.19.6, and this project in editable mode. Idempotent: a stamp
# file records the inputs; a rerun with unchanged inputs does nothing.
# Usage: scripts/setup_openrlhf.sh [VENV_DIR]     (env: PYTHON=python3.11; default: the first of 3.11/3.12/3.10)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-openrlhf}"
if [[ -z "${PYTHON:-}" ]]; then  # OpenRLHF 0.11.2 ships cp310-cp312 wheels only
  for candidate in python3.11 python3.12 python3.10 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 12))'; then
      PYTHON="$candidate"; break
    fi
  done
fi
PYTHON="${PYTHON:-python3.11}"
STAMP="$VENV/.openrlhf-installed"
KEY="$(cat "$0" pyproject.toml constraints.txt | sha256sum | cut -c1-16)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$KEY" ]]; then
  echo "setup_openrlhf: $VENV is up to date"; exit 0
fi
command -v "$PYTHON" >/dev/null || { echo "setup_openrlhf: $PYTHON not found (OpenRLHF 0.11.2 ships cp310-cp312 wheels only)" >&2; exit 1; }
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q -c constraints.txt)
"$VENV/bin/python" -m pip install -q --upgrade pip setuptools wheel
"${PIP[@]}" torch==2.13.0
"${PIP[@]}" --no-deps openrlhf==0.11.2
# What openrlhf's trainer modules import at module level (reference note §16.2), minus flash-attn and vllm
# (stubbed by harness.backends.openrlhf.rehearsal.stubs in the tests).
"${PIP[@]}" transformers==5.15.0 ray==2.55.0 peft pylatexenc sympy aiohttp datasets torchdata pillow \
  einops jsonlines tensorboard "pytest>=8" "pytest-timeout>=2.3"
"${PIP[@]}" --no-build-isolation deepspeed==0.19.6
"${PIP[@]}" -e ".[test]"
# math grading for the reward function (the eval extra minus lm-eval, which the OpenRLHF suite does not need)
"${PIP[@]}" "math-verify==0.9.0" "antlr4-python3-runtime==4.13.2" || echo "setup_openrlhf: math-verify not installed; math reward tests will fail with a clear error" >&2
# DeepSpeed's CPU ops (fused Adam, shared-memory comm) are JIT-compiled on first use (C++ compiler needed; ~2 min):
# build them now into the venv's own cache, where the CPU rehearsal's workers look (harness/backends/openrlhf/launch.py)
DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$VENV/torch_extensions" "$VENV/bin/python" - <<'PY' || echo "setup_openrlhf: DeepSpeed CPU ops not prebuilt; the CPU rehearsal builds them on first use" >&2
import os, socket, torch, deepspeed
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
deepspeed.init_distributed()
model = torch.nn.Linear(4, 4)
cfg = {"train_batch_size": 1, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True},
       "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
print("setup_openrlhf: DeepSpeed CPU ops built")
PY
echo "$KEY" > "$STAMP"
echo "setup_openrlhf: ready: $VENV"
