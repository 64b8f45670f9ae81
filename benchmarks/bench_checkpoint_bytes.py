"""Bytes per parameter of a DeepSpeed checkpoint (bf16 model, Adam) at ZeRO-2 and ZeRO-3, with and without optimizer
offload: what the disk plan counts (harness/backends/openrlhf/diskplan.py; docs/gpu.md "Disk plans and retention").

Needs DeepSpeed (the OpenRLHF venv: ``.venv-openrlhf/bin/python benchmarks/bench_checkpoint_bytes.py``); runs on a CPU
(DeepSpeed's CPU accelerator, one gloo rank: ZeRO shards sum to the same bytes over more ranks). Each setting runs in
a process of its own: a 7.1M-parameter Qwen2 takes one optimizer step, then ``save_checkpoint``; prints one row per
setting with the bytes of each file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SETTINGS = [(2, False), (2, True), (3, False), (3, True)]


def measure(stage: int, offload: bool, port: int) -> dict:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    import deepspeed
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        hidden_size=256,
        intermediate_size=704,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=8192,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    zero = {"stage": stage, **({"offload_optimizer": {"device": "cpu"}} if offload else {})}
    ds_config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    }
    deepspeed.init_distributed(dist_backend="gloo")
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    x = torch.randint(0, cfg.vocab_size, (1, 16))
    engine.backward(engine(input_ids=x, labels=x).loss)
    engine.step()
    out = Path(tempfile.mkdtemp(prefix="ds_ckpt_bytes_"))
    engine.save_checkpoint(str(out / "_actor"), tag="global_step1")
    files = {p.name: p.stat().st_size for p in (out / "_actor" / "global_step1").iterdir()}
    return {"stage": stage, "offload": offload, "params": params, "files": files}


def main() -> int:
    if len(sys.argv) == 4:  # one setting, in its own process
        print(json.dumps(measure(int(sys.argv[1]), sys.argv[2] == "offload", int(sys.argv[3]))))
        return 0
    print("| ZeRO | optimizer offload | params | files (bytes) | bytes / param |")
    print("|---|---|---|---|---|")
    for i, (stage, offload) in enumerate(SETTINGS):
        cmd = [sys.executable, __file__, str(stage), "offload" if offload else "no", str(29600 + i)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        row = json.loads(out)
        files = ", ".join(f"{k} {v:,}" for k, v in sorted(row["files"].items()))
        per = sum(row["files"].values()) / row["params"]
        print(f"| {stage} | {'on' if offload else 'off'} | {row['params']:,} | {files} | {per:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
