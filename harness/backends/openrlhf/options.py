"""What the OpenRLHF backend owns in a run config: the typed ``openrlhf:`` section. The backend's ``validate``
(harness/backends/openrlhf/__init__.py) types it and runs every launch check when the config is loaded."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.errors import ConfigError, suggestion


def _resource(default):
    """A field that does not change what a run measures (cluster layout, paths): not part of the run id."""
    return field(default=default, metadata={"measures": False})


def _late_resource(default):
    """A non-measuring field added after run ids were published: dropped from the run id (harness.kernel.fields.opt)."""
    return field(default=default, metadata={"measures": False, "late": True})


REWARDS = ("math", "code")  # both graded by reward.py (harness graders)
REHEARSAL_ATTENTION = ("eager", "sdpa")  # attention kernels that run on a CPU


class OpenRLHFConfigError(ConfigError):
    """A run config the OpenRLHF backend cannot run; the message names the key and what is allowed."""


@dataclass
class OpenRLHFOptions:
    """The ``openrlhf:`` section of a run config (cluster layout and OpenRLHF-only settings)."""

    nodes: int = _resource(1)  # actor (and ref) nodes
    gpus_per_node: int = _resource(8)  # actor GPUs per node
    vllm_engines: int | None = None  # default: nodes * gpus_per_node // vllm_tp (colocated hybrid engine)
    vllm_tp: int | str = _resource(1)  # vLLM tensor parallel size; auto: the memory rule (memory.py)
    vllm_gpu_memory_utilization: float = 0.6
    colocate: bool = True  # --train.colocate_all + sleep mode (actor, ref, vLLM share GPUs)
    # ZeRO stage and Adam offload change no number in exact arithmetic: not in the run id. auto: the memory rule
    zero_stage: int | str = _resource(2)
    adam_offload: bool | str = _late_resource(False)  # --ds.adam_offload (optimizer states on the host)
    gpu_memory_gb: float = _late_resource(80.0)  # GiB per GPU; the memory plan must fit it (memory.py)
    param_dtype: str = "bf16"
    attn_implementation: str = "flash_attention_2"
    gradient_checkpointing: bool = True
    rollout_micro_batch_size: int | None = None  # forward-only micro-batch (log-probs); default: train.micro_batch_size
    max_prompt_len: int = 2048  # --data.max_len = max_prompt_len + train.max_new_tokens
    input_key: str = "prompt"
    label_key: str = "answer"
    apply_chat_template: bool = True
    input_template: str | None = None
    reward: str = "math"  # math | code (harness graders) or a path to a reward_func .py file
    kl_coef: float = 0.0  # >0 adds a reference model; only as a loss (kl_use_loss) here
    kl_use_loss: bool = False
    kl_estimator: str = "k3"
    log_entropy: bool = True  # --actor.entropy_coef 0: entropy computed and logged (costs memory)
    seed_offset_per_rank: bool = True  # Clip-Cov draws: generator seeded with seed + rank
    extra_flags: dict = field(default_factory=dict)  # {"--dotted.flag": value | [values] | true}
    eval_dataset: str | None = None  # JSONL {prompt, answer, datasource}: in-loop eval -> eval/step_N.json
    env: dict = field(default_factory=dict)  # extra environment for the launcher and every worker
    # CPU rehearsal: upstream's loop with CPU stand-ins for vLLM/CUDA (cpu_rehearsal.py); a late measuring field: in
    # the run id only when true
    rehearsal: bool = field(default=False, metadata={"late": True})
    python: str | None = _resource(None)  # interpreter for the launcher (default: this one)


def parse_options(section: Mapping | None) -> OpenRLHFOptions:
    """Validate the ``openrlhf:`` mapping: unknown keys and bad values raise OpenRLHFConfigError."""
    section = dict(section or {})
    fields = {f.name: f for f in dataclasses.fields(OpenRLHFOptions)}
    for key in section:
        if key not in fields:
            raise OpenRLHFConfigError(
                f"openrlhf.{key}: unknown key.{suggestion(key, fields, cutoff=0.4)} Allowed: {', '.join(fields)}"
            )
    opts = OpenRLHFOptions(**section)
    ints = ("nodes", "gpus_per_node", "vllm_tp", "zero_stage", "max_prompt_len")
    for name in ints:
        v = getattr(opts, name)
        auto = name in ("vllm_tp", "zero_stage")  # auto: the memory rule (memory.py)
        if auto and v == "auto":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "zero_stage" else 1):
            raise OpenRLHFConfigError(
                f"openrlhf.{name}: expected a positive integer{' or auto' if auto else ''}, got {v!r}"
            )
    for name in ("vllm_engines", "rollout_micro_batch_size"):
        v = getattr(opts, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise OpenRLHFConfigError(f"openrlhf.{name}: expected a positive integer or null, got {v!r}")
    if opts.zero_stage not in (0, 1, 2, 3, "auto"):
        raise OpenRLHFConfigError(f"openrlhf.zero_stage: {opts.zero_stage!r} is not allowed. Allowed: 0, 1, 2, 3, auto")
    if opts.adam_offload != "auto" and not isinstance(opts.adam_offload, bool):
        raise OpenRLHFConfigError(
            f"openrlhf.adam_offload: {opts.adam_offload!r} is not allowed. Allowed: true, false, auto"
        )
    gb = opts.gpu_memory_gb
    if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb < float("inf"):
        raise OpenRLHFConfigError(f"openrlhf.gpu_memory_gb: expected a number > 0 (GiB per GPU), got {gb!r}")
    if opts.param_dtype not in ("bf16", "fp16"):
        raise OpenRLHFConfigError(f"openrlhf.param_dtype: {opts.param_dtype!r} is not allowed. Allowed: bf16, fp16")
    if opts.kl_estimator not in ("k1", "k2", "k3"):
        raise OpenRLHFConfigError(f"openrlhf.kl_estimator: {opts.kl_estimator!r} is not allowed. Allowed: k1, k2, k3")
    if not isinstance(opts.kl_coef, (int, float)) or isinstance(opts.kl_coef, bool) or opts.kl_coef < 0:
        raise OpenRLHFConfigError(f"openrlhf.kl_coef: expected a number >= 0, got {opts.kl_coef!r}")
    if opts.kl_coef > 0 and not opts.kl_use_loss:
        raise OpenRLHFConfigError(
            "openrlhf.kl_coef > 0 needs openrlhf.kl_use_loss: true. KL as a reward penalty would be folded into "
            "OpenRLHF's returns, which the harness advantage replaces; allowed: kl_coef: 0, or kl_use_loss: true"
        )
    if not 0 < float(opts.vllm_gpu_memory_utilization) <= 1:
        raise OpenRLHFConfigError(
            f"openrlhf.vllm_gpu_memory_utilization: expected 0 < x <= 1, got {opts.vllm_gpu_memory_utilization!r}"
        )
    if opts.reward not in REWARDS and not str(opts.reward).endswith(".py"):
        raise OpenRLHFConfigError(
            f"openrlhf.reward: {opts.reward!r} is not allowed. Allowed: "
            f"{', '.join(REWARDS)}, or a path to a .py file defining reward_func"
        )
    for name in ("extra_flags", "env"):
        if not isinstance(getattr(opts, name), dict):
            raise OpenRLHFConfigError(f"openrlhf.{name}: expected a mapping, got {getattr(opts, name)!r}")
    if opts.rehearsal and opts.attn_implementation not in REHEARSAL_ATTENTION:
        raise OpenRLHFConfigError(
            f"openrlhf.attn_implementation: {opts.attn_implementation!r} needs a GPU; the CPU rehearsal "
            f"(openrlhf.rehearsal: true) allows {', '.join(REHEARSAL_ATTENTION)}"
        )
    for flag in opts.extra_flags:
        if not str(flag).startswith("--") or " " in str(flag):
            raise OpenRLHFConfigError(f"openrlhf.extra_flags: {flag!r} is not a flag; write it as '--group.name'")
    return opts


def type_section(cfg) -> None:
    """Replace the ``openrlhf:`` mapping of ``cfg`` by its validated OpenRLHFOptions."""
    section = cfg.openrlhf
    cfg.openrlhf = parse_options(section if isinstance(section, Mapping) else dataclasses.asdict(section))
