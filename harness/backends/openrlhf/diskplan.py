"""The disk plan of an OpenRLHF run: the checkpoints it keeps, its final model, its generations and logs.

Counted from the model's shape (``memory.architecture``) and the resolved memory plan's ZeRO stage; formulas and
measured sizes in docs/gpu.md "Disk plans and retention":
  DeepSpeed checkpoint  12 B/param (fp32 master weights + Adam m, v, across ranks) + 2 B/param at ZeRO 0-2 (the
                        bf16 module, written once by rank 0; ZeRO-3 ranks write a placeholder): measured 14.00 and
                        12.00 B/param with DeepSpeed 0.19.6, bf16; upstream keeps ``--ckpt.max_num`` of them
  HF copy               2 B/param (bf16 safetensors) + tokenizer and config files; ``retention.peak`` of them
  final model           one HF copy (``--ckpt.output_dir``, checkpoints/final), always kept
"""

from __future__ import annotations

from harness.backends.openrlhf import memory, retention
from harness.run.after_training import planned_work
from harness.run.disk import DiskPlan, DiskTerm, shared_terms

HF_FILES_BYTES = 16 * 10**6  # allowance per HF copy for tokenizer and config files (Qwen2.5's: ~11 MB)
MODULE_BYTES = 2  # bf16/fp16 parameters


def saves(steps: int, every: int) -> int:
    """Checkpoints written over a run: every ``every`` steps and at the last step (the plug-in adds it); none when
    ``train.checkpoint_every`` is 0 (``--ckpt.save_steps -1``)."""
    return 0 if every <= 0 else steps // every + (1 if steps % every else 0)


def deepspeed_bytes(params: int, zero_stage: int) -> int:
    """One DeepSpeed checkpoint of the policy, all ranks together."""
    return params * (memory.ADAM_BYTES + (0 if zero_stage == 3 else MODULE_BYTES))


def plan(cfg, resolved: memory.Resolved) -> DiskPlan:
    """The run's disk plan; ``resolved``: its memory plan (the ZeRO stage and the architecture behind it)."""
    from harness.backends.openrlhf.options import options_of

    opts = options_of(cfg)
    n = saves(cfg.train.steps, cfg.train.checkpoint_every)
    ds = min(opts.keep_checkpoints, n)
    hf = min(retention.peak(opts.keep_hf_checkpoints), n)
    retention_line = (
        f"{n} saves (every {cfg.train.checkpoint_every} steps and the last); keep the newest "
        f"{opts.keep_checkpoints} DeepSpeed checkpoints (openrlhf.keep_checkpoints) and "
        f"{opts.keep_hf_checkpoints} Hugging Face copies (openrlhf.keep_hf_checkpoints; {hf} on disk while the "
        f"next is written); the final model always"
    )
    shared = shared_terms(cfg, planned_work(cfg))
    arch = resolved.plan.arch if resolved.plan is not None else None
    if arch is None:
        return DiskPlan(shared, retention_line + f"; checkpoints not counted: {resolved.how}")
    copy = MODULE_BYTES * arch.params + HF_FILES_BYTES
    each_ds = deepspeed_bytes(arch.params, resolved.zero_stage)
    per_param = each_ds / arch.params
    terms = (
        DiskTerm("DeepSpeed checkpoints", ds, each_ds, f"ZeRO-{resolved.zero_stage}: {per_param:g} B/param"),
        DiskTerm("HF copies", hf, copy, "bf16 2 B/param + 16 MB files"),
        DiskTerm("final model", 1, copy, "checkpoints/final"),
    )
    return DiskPlan(terms + shared, retention_line)
