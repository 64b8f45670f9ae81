"""What the OpenRLHF backend owns in a run config: the typed ``openrlhf:`` section. The backend's ``validate``
(harness/backends/openrlhf/__init__.py) types it and runs every launch check when the config is loaded."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from harness.errors import ConfigError
from harness.kernel.fields import build, opt

REWARDS = ("math", "code")  # both graded by reward.py (harness graders)
REHEARSAL_ATTENTION = ("eager", "sdpa")  # attention kernels that run on a CPU


class OpenRLHFConfigError(ConfigError):
    """A run config the OpenRLHF backend cannot run; the message names the key and what is allowed."""


@dataclass
class OpenRLHFOptions:
    """The ``openrlhf:`` section of a run config (cluster layout and OpenRLHF-only settings). Resources (layout,
    paths, memory plan) do not change what a run measures: ``measures=False``, not in the run id."""

    nodes: int = opt(1, "actor (and ref) nodes", kind=int, low=1, measures=False)
    gpus_per_node: int = opt(8, "actor GPUs per node", kind=int, low=1, measures=False)
    vllm_engines: int | None = opt(None, "default: nodes * gpus_per_node // vllm_tp (colocated)", kind="int?", low=1)
    vllm_tp: int | str = opt(1, "vLLM tensor parallel size; auto: the memory rule (memory.py)", measures=False)
    vllm_gpu_memory_utilization: float = opt(0.6, kind=float, low=0.0, low_open=True, high=1.0)
    colocate: bool = opt(True, "--train.colocate_all + sleep mode (actor, ref, vLLM share GPUs)", kind=bool)
    # ZeRO stage and Adam offload change no number in exact arithmetic: not in the run id. auto: the memory rule
    zero_stage: int | str = opt(2, "DeepSpeed ZeRO stage 0-3 or auto", measures=False)
    adam_offload: bool | str = opt(False, "--ds.adam_offload (optimizer states on the host)", measures=False, late=True)
    gpu_memory_gb: float = opt(
        80.0,
        "GiB per GPU; the memory plan must fit it (memory.py)",
        kind=float,
        low=0.0,
        low_open=True,
        measures=False,
        late=True,
    )
    param_dtype: str = opt("bf16", kind=str, choices=("bf16", "fp16"))
    attn_implementation: str = opt("flash_attention_2", kind=str)
    gradient_checkpointing: bool = opt(True, kind=bool)
    # packing removes padding from the model's forwards only: per-sample log-probs, masks and the loss are unchanged
    # (tests/openrlhf/test_packing.py), so it is not in the run id; upstream packs with flash-attention's varlen kernel
    packing_samples: bool = opt(True, "--ds.packing_samples: micro-batches without padding", measures=False, late=True)
    # a token budget changes which sequences share a micro-batch, hence Clip-Cov/KL-Cov's per-micro-batch selection
    max_tokens_per_gpu: int | None = opt(
        None,
        "dynamic batching: micro-batches of at most this many tokens per GPU (null: train.micro_batch_size sequences)",
        kind="int?",
        low=1,
        late=True,
    )
    rollout_micro_batch_size: int | None = opt(
        None, "forward-only micro-batch (log-probs); default: train.micro_batch_size", kind="int?", low=1
    )
    max_prompt_len: int = opt(2048, "--data.max_len = max_prompt_len + train.max_new_tokens", kind=int, low=1)
    input_key: str = opt("prompt", kind=str)
    label_key: str = opt("answer", kind=str)
    apply_chat_template: bool = opt(True, kind=bool)
    input_template: str | None = opt(None, kind="str?")
    reward: str = opt("math", "math | code (harness graders) or a path to a reward_func .py file", kind=str)
    kl_coef: float = opt(0.0, ">0 adds a reference model; only as a loss (kl_use_loss) here", kind=float, low=0.0)
    kl_use_loss: bool = opt(False, kind=bool)
    kl_estimator: str = opt("k3", kind=str, choices=("k1", "k2", "k3"))
    log_entropy: bool = opt(True, "--actor.entropy_coef 0: entropy computed and logged (costs memory)", kind=bool)
    seed_offset_per_rank: bool = opt(True, "Clip-Cov draws: generator seeded with seed + rank", kind=bool)
    extra_flags: dict = opt({}, '{"--dotted.flag": value | [values] | true}', kind=dict)
    eval_dataset: str | None = opt(
        None, "JSONL {prompt, answer, datasource}: in-loop eval -> eval/step_N.json", kind="str?"
    )
    env: dict = opt({}, "extra environment for the launcher and every worker", kind=dict)
    # CPU rehearsal: upstream's loop with CPU stand-ins for vLLM/CUDA (cpu_rehearsal.py); a late measuring field: in
    # the run id only when true
    rehearsal: bool = opt(False, kind=bool, late=True)
    python: str | None = opt(None, "interpreter for the launcher (default: this one)", kind="str?", measures=False)
    # retention (docs/gpu.md "Disk plans and retention"): resources, never in the run id
    keep_checkpoints: int = opt(
        2,
        "DeepSpeed checkpoints kept (--ckpt.max_num; the newest is what a resume loads)",
        kind=int,
        low=1,
        measures=False,
        late=True,
    )
    keep_hf_checkpoints: int = opt(
        2,
        "Hugging Face copies <ckpt.path>/global_step<N>_hf kept (0: none written); the final model is always kept",
        kind=int,
        low=0,
        measures=False,
        late=True,
    )


def parse_options(section: Mapping | None) -> OpenRLHFOptions:
    """Validate the ``openrlhf:`` mapping: unknown keys and bad values raise OpenRLHFConfigError."""
    opts = build(OpenRLHFOptions, dict(section or {}), "openrlhf", OpenRLHFConfigError)
    for name, lowest in (("vllm_tp", 1), ("zero_stage", 0)):  # an integer or auto (the memory rule, memory.py)
        v = getattr(opts, name)
        if v != "auto" and (isinstance(v, bool) or not isinstance(v, int) or v < lowest):
            raise OpenRLHFConfigError(f"openrlhf.{name}: expected a positive integer or auto, got {v!r}")
    if opts.zero_stage not in (0, 1, 2, 3, "auto"):
        raise OpenRLHFConfigError(f"openrlhf.zero_stage: {opts.zero_stage!r} is not allowed. Allowed: 0, 1, 2, 3, auto")
    if opts.adam_offload != "auto" and not isinstance(opts.adam_offload, bool):
        raise OpenRLHFConfigError(
            f"openrlhf.adam_offload: {opts.adam_offload!r} is not allowed. Allowed: true, false, auto"
        )
    if opts.kl_coef > 0 and not opts.kl_use_loss:
        raise OpenRLHFConfigError(
            "openrlhf.kl_coef > 0 needs openrlhf.kl_use_loss: true. KL as a reward penalty would be folded into "
            "OpenRLHF's returns, which the harness advantage replaces; allowed: kl_coef: 0, or kl_use_loss: true"
        )
    if opts.reward not in REWARDS and not str(opts.reward).endswith(".py"):
        raise OpenRLHFConfigError(
            f"openrlhf.reward: {opts.reward!r} is not allowed. Allowed: "
            f"{', '.join(REWARDS)}, or a path to a .py file defining reward_func"
        )
    if opts.packing_samples and not opts.rehearsal and "flash_attention" not in opts.attn_implementation:
        raise OpenRLHFConfigError(
            f"openrlhf.packing_samples: true needs a flash_attention kernel (OpenRLHF would switch "
            f"attn_implementation {opts.attn_implementation!r} to flash_attention_2 silently); set "
            f"attn_implementation: flash_attention_2, or packing_samples: false"
        )
    if opts.max_tokens_per_gpu is not None and not opts.packing_samples:
        raise OpenRLHFConfigError(
            "openrlhf.max_tokens_per_gpu: dynamic batches are packed (OpenRLHF turns packing_samples on for them); "
            "set packing_samples: true, or max_tokens_per_gpu: null"
        )
    if opts.rehearsal and opts.attn_implementation not in REHEARSAL_ATTENTION:
        raise OpenRLHFConfigError(
            f"openrlhf.attn_implementation: {opts.attn_implementation!r} needs a GPU; the CPU rehearsal "
            f"(openrlhf.rehearsal: true) allows {', '.join(REHEARSAL_ATTENTION)}"
        )
    for flag in opts.extra_flags:
        if not str(flag).startswith("--") or " " in str(flag):
            raise OpenRLHFConfigError(f"openrlhf.extra_flags: {flag!r} is not a flag; write it as '--group.name'")
    return opts


def options_of(cfg) -> OpenRLHFOptions:
    """The ``openrlhf:`` section of ``cfg`` checked again (typed by ``load_config``, or still a mapping)."""
    section = cfg.openrlhf
    return parse_options(dataclasses.asdict(section) if isinstance(section, OpenRLHFOptions) else section)
