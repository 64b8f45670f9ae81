"""Run config -> OpenRLHF 0.11.2 dotted CLI flags, environment and plugin config (pure Python, no OpenRLHF).

The flags alone already describe the closest *built-in* OpenRLHF run (GRPO -> ``group_norm``, clip-higher ->
``--actor.eps_clip_low_high``, entropy bonus -> ``--actor.entropy_coef``), so the printed command stays readable;
the Ray hook then swaps in the harness method object for the loss and the advantages (``plugin.py``), which is
what makes Clip-Cov/KL-Cov and the selection scope possible. Every problem is reported before Ray starts.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PLUGIN_ENV = "HARNESS_OPENRLHF_PLUGIN"  # JSON plugin config, read in every Ray worker
REHEARSAL_ENV = "HARNESS_OPENRLHF_REHEARSAL"  # openrlhf.rehearsal: true (harness/backends/openrlhf/rehearsal/cpu.py)
HOOK = "harness.backends.openrlhf.hook.install"
REWARD_FILE = str(Path(__file__).with_name("reward.py"))
EXTRA = "pip install 'entropy-harness[openrlhf]' (GPU: also vllm==0.29.0 and flash-attn==2.8.3, or the [gpu] extra)"

# harness advantage -> the closest OpenRLHF built-in estimator (the printed command's reading; the plugin
# replaces the advantages with the method's): W-REINFORCE has no baseline, like OpenRLHF's `reinforce`; QAE's
# quantile baseline stands in for the group mean of `group_norm`
ESTIMATORS = {"grpo": "group_norm", "rloo": "rloo", "w_reinforce": "reinforce", "qae": "group_norm"}
ORL_EXTRAS: tuple[str, ...] = ("entropy",)  # advantage-estimator extras this backend produces
# OpenRLHF flags an ``openrlhf:`` option sets (present or absent): refused in extra_flags, one source of truth
OPTION_FLAGS = {
    "--ds.packing_samples": "openrlhf.packing_samples",
    "--train.dynamic_batch_enable": "openrlhf.max_tokens_per_gpu",
    "--train.max_tokens_per_gpu": "openrlhf.max_tokens_per_gpu",
    "--rollout.max_tokens_per_gpu": "openrlhf.max_tokens_per_gpu",
}
BUILTIN_EQUIVALENT = ("grpo", "rloo", "clip_higher", "clip_low", "entropy_bonus", "gspo")
UPSTREAM_EPS_CLIP = 0.2  # OpenRLHF's own --actor.eps_clip_low_high, shown for a method without a PPO clip
# method -> (OpenRLHF --actor.policy_loss_type, when the method equals it); tests/openrlhf/test_agreement.py
# a method OpenRLHF computes natively, and when its native loss equals ours (else our plug-in loss runs): GSPO's
# sequence level under seq-mean-token-mean, with no dual clip or log-ratio clamp and empty rows skipped as upstream
NATIVE_LOSS = {
    "gspo": (
        "gspo",
        lambda m: (
            m.level == "sequence"
            and m.agg == "seq-mean-token-mean"
            and not m.clip_ratio_c
            and not m.log_ratio_clamp
            and m.empty_rows in ("auto", "skip")
            and m.correction is None  # upstream's GSPO takes its ratio against the rollout, with no weight
        ),
    )
}
from harness.backends.openrlhf import evalset, memory, upstream_correction  # noqa: E402
from harness.backends.openrlhf.options import (  # noqa: E402,F401  (re-exported: the launcher's names)
    REWARDS,
    OpenRLHFConfigError,
    OpenRLHFOptions,
    options_of,
    parse_options,
)
from harness.io import jsonl_lines  # noqa: E402


# ------------------------------------------------------------------------------------------- config access
def as_dict(cfg) -> dict:
    """A RunConfig (harness.run.config) or a plain mapping, as a plain dict."""
    if isinstance(cfg, Mapping):
        return dict(cfg)
    if hasattr(cfg, "to_dict"):
        return cfg.to_dict()
    return dataclasses.asdict(cfg)


def typed(config):
    """The typed RunConfig of ``config``: a plain mapping is loaded (the shared schema's validation and defaults,
    then the backend's checks); a RunConfig is used as it is; any other resolved config (``to_dict()``) is typed
    by the shared schema. Every value the launch reads is then a field of it (``cfg.train.lr``), never a default
    written here."""
    from harness.run.config import RunConfig, build_config, load_config

    if isinstance(config, Mapping):
        return load_config(config)
    if isinstance(config, RunConfig):
        return config
    return build_config(as_dict(config))


def build_method(method_section: Mapping):
    """The harness method object of the config (errors from the method API are user errors)."""
    import harness

    section = copy.deepcopy(dict(method_section))
    if not section.get("name"):
        raise OpenRLHFConfigError("method.name: required (see `harness methods`)")
    return harness.get_method(section.pop("name"), **section)


# ------------------------------------------------------------------------------------------------- plan
@dataclass
class LaunchPlan:
    argv: list[str]  # OpenRLHF flags (what train_ppo_ray parses)
    env: dict[str, str]  # environment of the launcher (and, through Ray's runtime_env, every worker)
    plugin: dict  # the plugin config (also JSON in env[PLUGIN_ENV])
    python: str
    memory: memory.Resolved | None = None  # the memory plan behind zero_stage / adam_offload / vllm_tp


def _flag_value(v) -> list[str]:
    if isinstance(v, bool):
        return []
    if isinstance(v, (list, tuple)):
        return [_num(x) for x in v]
    return [_num(v)]


def _num(x) -> str:
    return repr(x) if isinstance(x, float) else str(x)


def method_flags(method, opts: OpenRLHFOptions) -> list[str]:
    """The OpenRLHF flags that express ``method`` with built-ins (exact for BUILTIN_EQUIVALENT methods)."""
    aux = method.auxiliary_model()
    if aux is not None:
        raise OpenRLHFConfigError(
            f"method {method.name} with advantage: {method.advantage} is not supported on the OpenRLHF backend: the "
            f"estimator's auxiliary model ({aux.name}, e.g. PRIME's implicit PRM) is a second trainable model that "
            f"OpenRLHF 0.11.2 has no role for (see docs/openrlhf.md, 'PRIME'). Run it with backend: pocket."
        )
    rollout_extras = [e for e in method.estimator_extras() if e not in ORL_EXTRAS]
    if rollout_extras:
        raise OpenRLHFConfigError(
            f"method.advantage: {method.advantage!r} needs the rollout's {', '.join(rollout_extras)} per token, which "
            f"the OpenRLHF backend does not pass to the advantage estimator. Run it with backend: pocket."
        )
    if "entropy" in method.estimator_extras() and not opts.log_entropy:
        raise OpenRLHFConfigError(
            f"method.advantage: {method.advantage!r} needs the rollout's entropy per token, which the OpenRLHF "
            f"backend measures in the old-log-prob forward only with openrlhf.log_entropy: true"
        )
    if method.needs_old_entropy and not opts.log_entropy:
        raise OpenRLHFConfigError(
            f"method {method.name} needs the old policy's entropy per token, which the OpenRLHF backend measures in "
            f"the old-log-prob forward only with openrlhf.log_entropy: true"
        )
    if method.has_step_state and not opts.log_entropy:
        raise OpenRLHFConfigError(
            f"method {method.name} carries state across steps, updated from each step's rollout measures (the "
            f"rollout entropy among them), which the OpenRLHF backend measures only with openrlhf.log_entropy: true"
        )
    estimator = base_estimator(method)
    from harness.kernel.ops import GLOBAL_NORMALISED_MODES as AGG_MODES  # what OpenRLHF's aggregate_loss implements

    if method.agg not in AGG_MODES:
        raise OpenRLHFConfigError(
            f"method.agg: {method.agg!r} is not supported on the OpenRLHF backend (its "
            f"aggregate_loss has no such mode). Allowed: {', '.join(AGG_MODES)}"
        )
    loss_type, native = NATIVE_LOSS[method.name] if method.name in NATIVE_LOSS else ("ppo", None)
    flags = [
        "--algo.advantage.estimator",
        estimator,
        "--actor.policy_loss_type",
        loss_type if native is None or native(method) else "ppo",
        "--actor.eps_clip_low_high",  # upstream's clip (its native losses; our plug-in carries its own)
        *(_num(float(getattr(method, eps, UPSTREAM_EPS_CLIP))) for eps in ("eps_low", "eps_high")),
        "--actor.loss_agg_mode",
        method.agg,
    ]
    # any entropy_coef (even 0) makes OpenRLHF's training forward return the differentiable entropy the plugin
    # hands to the loss; an entropy bonus shows its coefficient (the plugin zeroes upstream's term per step)
    coef = method.coef if method.needs_entropy and hasattr(method, "coef") else None
    if isinstance(coef, float):
        flags += ["--actor.entropy_coef", _num(coef)]
    elif method.needs_entropy or opts.log_entropy:
        flags += ["--actor.entropy_coef", "0"]
    return flags + upstream_correction.flags(method)


def base_estimator(method) -> str:
    """The OpenRLHF ``--algo.advantage.estimator`` closest to the method's estimator (``base`` for one that
    shapes another estimator's advantages, e.g. entropy_advantage)."""
    options = method.estimator_options()
    name = method.advantage if method.advantage in ESTIMATORS else options.get("base")
    if name not in ESTIMATORS:
        raise OpenRLHFConfigError(
            f"method.advantage: {method.advantage!r} is not supported on the OpenRLHF backend. "
            f"Allowed: {', '.join(ESTIMATORS)} (or an estimator shaping one of them)"
        )
    if name == "grpo" and "std_normalize" in options and not options["std_normalize"]:
        return "dr_grpo"
    return ESTIMATORS[name]


# ------------------------------------------------------------------------------------------ check, then build
@dataclass(frozen=True)
class _Layout:
    """What both the checks and the launch derive from the typed config (each refusal raised while deriving)."""

    opts: OpenRLHFOptions
    method: object
    world: int  # actor GPUs
    train_batch: int  # sequences per optimizer step
    mem: memory.Resolved
    engines: int  # vLLM engines
    in_loop: bool  # OpenRLHF evaluates in its loop (openrlhf.eval_dataset or eval.suites)


def _layout(cfg) -> _Layout:
    opts = options_of(cfg)
    method = build_method(cfg.method)
    train = cfg.train
    n, updates, micro = int(train.samples_per_prompt), int(train.updates_per_rollout), int(train.micro_batch_size)
    if train.optimizer != "adamw":
        raise OpenRLHFConfigError(
            f"train.optimizer: {train.optimizer!r} is not supported on the OpenRLHF backend (DeepSpeed's Adam "
            f"with weight decay); allowed here: adamw"
        )
    if train.old_log_probs != "rollout":
        raise OpenRLHFConfigError(
            "train.old_log_probs: 'recompute' is pocket's exact pass; OpenRLHF recomputes old log-probs in its own "
            "pass (make_experience, its own micro-batches; docs/openrlhf.md): allowed here: rollout"
        )
    world = opts.nodes * opts.gpus_per_node
    if n < 2:
        raise OpenRLHFConfigError(f"train.samples_per_prompt: {n}; group advantages on OpenRLHF need at least 2")
    rollout = int(train.prompts_per_step) * n
    if rollout % updates:
        raise OpenRLHFConfigError(
            f"train.updates_per_rollout: {updates} does not divide prompts_per_step * "
            f"samples_per_prompt = {rollout}; OpenRLHF needs equal mini-batches"
        )
    train_batch = rollout // updates
    if train_batch % (micro * world):
        raise OpenRLHFConfigError(
            f"train.micro_batch_size: mini-batch of {train_batch} sequences is not a multiple of micro_batch_size "
            f"({micro}) x actor GPUs ({world} = openrlhf.nodes x openrlhf.gpus_per_node); DeepSpeed needs "
            f"mini-batch = micro x grad-accumulation x GPUs"
        )
    mem = memory.resolve(  # `auto` -> the memory rule; a plan that cannot fit is refused (docs/gpu.md)
        opts,
        model=str(cfg.model.name),
        micro=micro,
        seq_len=opts.max_prompt_len + int(train.max_new_tokens),
        entropy="grad" if method.needs_entropy else "forward" if opts.log_entropy else "none",
    )
    tp = mem.vllm_tp
    engines = opts.vllm_engines if opts.vllm_engines is not None else max(world // tp, 1)
    if opts.colocate and engines * tp != world:
        raise OpenRLHFConfigError(
            f"openrlhf.vllm_engines: colocated runs need vllm_engines x vllm_tp == actor GPUs "
            f"({engines} x {tp} != {world}); set colocate: false or fix the counts"
        )
    in_loop = bool(opts.eval_dataset) or evalset.requested(dataclasses.asdict(cfg.eval))
    return _Layout(opts, method, world, train_batch, mem, engines, in_loop)


def check(config) -> None:
    """Every refusal of the OpenRLHF backend, before anything is built: OpenRLHFConfigError (a ConfigError) naming
    the field and what is allowed. ``config``: a loaded RunConfig (or a plain mapping, loaded first)."""
    cfg = typed(config)
    if cfg.backend != "openrlhf":
        raise OpenRLHFConfigError(f"backend: {cfg.backend!r}; the OpenRLHF launcher needs backend: openrlhf")
    lay = _layout(cfg)
    opts, method = lay.opts, lay.method
    extra_keys = {str(k) for k in opts.extra_flags}
    owned = sorted(extra_keys & set(OPTION_FLAGS))
    if owned:
        raise OpenRLHFConfigError(
            f"openrlhf.extra_flags: {owned[0]} is set by {OPTION_FLAGS[owned[0]]}; use that key instead"
        )
    if method.needs_global_plan:
        bad = extra_keys & {"--ds.ring_attn_size", "--ds.tensor_parallel_size"}
        if bad:
            raise OpenRLHFConfigError(
                f"method.scope: global selection plans over fixed micro-batch windows; it "
                f"cannot be combined with {', '.join(sorted(bad))} (use scope: micro_batch)"
            )
    if method.has_mini_batch_hook and opts.max_tokens_per_gpu is not None:
        raise OpenRLHFConfigError(
            f"method {method.name} weighs each micro-batch by its share of the optimizer-step window, which "
            f"dynamic batching (openrlhf.max_tokens_per_gpu) hides from the plug-in; leave max_tokens_per_gpu unset"
        )
    unsupported = extra_keys & {
        "--train.async_enable",
        "--train.agent_func_path",
        "--reward.model_name_or_path",
        "--algo.advantage.estimator",
        "--critic.model_name_or_path",
    }
    if unsupported:
        raise OpenRLHFConfigError(
            f"openrlhf.extra_flags: {', '.join(sorted(unsupported))} is not supported by the "
            f"harness backend (it replaces the advantages, rewards and step loop); allowed: "
            f"any other OpenRLHF flag"
        )
    ignored = {"--actor.dual_clip"} & extra_keys
    if ignored:
        raise OpenRLHFConfigError(
            f"openrlhf.extra_flags: {', '.join(sorted(ignored))} changes OpenRLHF's built-in "
            f"PolicyLoss, which the harness method replaces (the method's loss would silently "
            f"ignore it); express it as a method instead"
        )
    if cfg.train.entropy_after_update:
        raise OpenRLHFConfigError(
            "train.entropy_after_update: true is pocket-only (a no-grad forward of the trained batch after the "
            "update); the OpenRLHF backend logs entropy/delta between steps instead. Allowed here: false"
        )
    if opts.reward not in REWARDS and not os.path.exists(opts.reward):
        raise OpenRLHFConfigError(f"openrlhf.reward: file not found: {opts.reward}")
    method_flags(method, opts)
    max_new = int(cfg.train.max_new_tokens)
    if opts.eval_dataset:
        check_eval(cfg.eval, max_new)
    elif lay.in_loop:
        evalset.check(dataclasses.asdict(cfg.eval), opts.reward, max_new)
        check_eval(cfg.eval, max_new)
    _merge_extra(_launcher_argv(cfg, lay, "run-dir")[0], opts.extra_flags)  # an extra flag the launcher sets


def check_eval(ev, max_new: int) -> None:
    """OpenRLHF samples eval answers with the rollout's top_p and max tokens, so ``eval.top_p`` must be 1.0 and
    ``eval.max_new_tokens`` empty or equal to ``train.max_new_tokens``."""
    if float(ev.top_p) != 1.0:
        raise OpenRLHFConfigError(f"eval.top_p: {ev.top_p!r}; OpenRLHF evaluates with the rollout top_p 1.0")
    if ev.max_new_tokens not in (None, max_new):
        raise OpenRLHFConfigError(
            f"eval.max_new_tokens: {ev.max_new_tokens!r}; OpenRLHF evaluates with the "
            f"rollout length, train.max_new_tokens = {max_new} (leave it empty or equal)"
        )


def build_plan(config, run_dir: str | os.PathLike) -> LaunchPlan:
    """Validate ``config`` for this backend and build the launch (argv, env, plugin config). Starts nothing.
    ``config``: a loaded RunConfig or a plain mapping (loaded first: the shared schema's validation and defaults)."""
    cfg = typed(config)
    check(cfg)
    return to_plan(cfg, run_dir)


def to_argv(cfg, run_dir: str | os.PathLike) -> list[str]:
    """The OpenRLHF flags of a checked, typed config (``openrlhf.extra_flags`` last)."""
    return to_plan(cfg, run_dir).argv


def to_plan(cfg, run_dir: str | os.PathLike) -> LaunchPlan:
    """The launch of a config that passed :func:`check`: every value a typed field of ``cfg`` (or of its
    ``openrlhf:`` options), none defaulted here."""
    lay = _layout(cfg)
    opts = lay.opts
    run_dir = os.path.abspath(os.fspath(run_dir))
    argv, eval_spec = _launcher_argv(cfg, lay, run_dir)
    argv = _merge_extra(argv, opts.extra_flags)
    seed = int(cfg.seed)
    plugin = {
        "method": lay.method.to_config(),
        "run_dir": run_dir,
        "seed": seed,
        "steps": int(cfg.train.steps),
        "seed_offset_per_rank": opts.seed_offset_per_rank,
        "max_gen_batches": int(cfg.train.max_gen_batches) if cfg.train.dynamic_filtering else None,
        "log_entropy": opts.log_entropy,
        "reward": opts.reward,
        "run_id": cfg.run_id(),
        "eval": eval_spec,
        "config": {"model": {"name": cfg.model.name}, "task": {"name": cfg.task.name}, "seed": seed},
        "keep_hf_checkpoints": opts.keep_hf_checkpoints,
    }
    env = {str(k): str(v) for k, v in opts.env.items()}
    if opts.rehearsal:  # CPU stand-ins for vLLM/CUDA in every process (cpu_rehearsal.py); refused where CUDA is
        env[REHEARSAL_ENV] = "1"
        separate = 0 if opts.colocate else lay.engines * opts.vllm_tp + (lay.world if opts.kl_coef else 0)
        # Ray's logical GPUs for upstream's bundles; the CPU kernel the models load (packing forces flash-attention)
        plugin["rehearsal"] = {"logical_gpus": lay.world + separate, "attn_implementation": opts.attn_implementation}
    env[PLUGIN_ENV] = json.dumps(plugin, sort_keys=True, default=str)
    return LaunchPlan(argv=argv, env=env, plugin=plugin, python=opts.python or sys.executable, memory=lay.mem)


def _launcher_argv(cfg, lay: _Layout, run_dir: str) -> tuple[list[str], dict | None]:
    """The flags the launcher sets from the run config (before ``openrlhf.extra_flags``) and the in-loop eval
    protocol recorded with them."""
    argv = [
        *_data_flags(cfg, lay),
        *_batch_flags(cfg, lay),
        *_optimizer_flags(cfg),
        *_algorithm_flags(cfg, lay),
        *_placement_flags(cfg, lay),
        *_checkpoint_flags(cfg, lay, run_dir),
    ]
    argv_eval, eval_spec = _in_loop_eval(cfg, lay, run_dir)
    argv += argv_eval
    from harness.backends.openrlhf.logger import logger_flags

    # TensorBoard; W&B entity, project, group, run name
    argv += logger_flags(dataclasses.asdict(cfg.logging), run_dir)
    return argv, eval_spec


def _data_flags(cfg, lay: _Layout) -> list[str]:
    """The policy and the prompt set: model, dataset, its keys and template, the prompt + response length."""
    opts = lay.opts
    return [
        "--actor.model_name_or_path",
        str(cfg.model.name),
        "--data.prompt_dataset",
        str(cfg.task.name),
        "--data.input_key",
        opts.input_key,
        "--data.label_key",
        opts.label_key,
        *(["--data.apply_chat_template"] if opts.apply_chat_template else []),
        *(["--data.input_template", opts.input_template] if opts.input_template else []),
        "--data.max_len",
        str(opts.max_prompt_len + int(cfg.train.max_new_tokens)),
    ]


def _batch_flags(cfg, lay: _Layout) -> list[str]:
    """The rollout and the batches: episodes, seed, prompts and samples per step, sampling, micro-batches."""
    opts, train = lay.opts, cfg.train
    steps, prompts, micro = int(train.steps), int(train.prompts_per_step), int(train.micro_batch_size)
    max_gen = int(train.max_gen_batches) if train.dynamic_filtering else 1
    return [
        # passes over the prompt set: enough for `steps` (the plugin stops the run there)
        "--train.num_episodes",
        str(episodes_needed(str(cfg.task.name), steps * prompts * max_gen, steps * max_gen)),
        "--train.seed",
        str(int(cfg.seed)),
        "--rollout.batch_size",
        str(prompts),
        "--rollout.n_samples_per_prompt",
        str(int(train.samples_per_prompt)),
        "--rollout.max_new_tokens",
        str(int(train.max_new_tokens)),
        "--rollout.temperature",
        _num(float(train.temperature)),
        "--rollout.top_p",
        "1.0",
        "--rollout.micro_batch_size",
        str(opts.rollout_micro_batch_size or micro),
        "--train.batch_size",
        str(lay.train_batch),
        "--train.micro_batch_size",
        str(micro),
        *_dynamic_batch_flags(opts.max_tokens_per_gpu),
        "--train.max_epochs",
        "1",
    ]


def _dynamic_batch_flags(max_tokens: int | None) -> list[str]:
    """Dynamic batching (``openrlhf.max_tokens_per_gpu``): training and old-log-prob micro-batches of at most that
    many tokens per GPU, as the official scripts' ``ppo_max_token_len_per_gpu`` / ``log_prob_max_token_len_per_gpu``
    (the same budget for both)."""
    if max_tokens is None:
        return []
    budget = str(int(max_tokens))
    return [
        "--train.dynamic_batch_enable",
        "--train.max_tokens_per_gpu",
        budget,
        "--rollout.max_tokens_per_gpu",
        budget,
    ]


def _optimizer_flags(cfg) -> list[str]:
    """Adam at a constant learning rate, its weight decay and the gradient clip."""
    train = cfg.train
    return [
        "--actor.adam.lr",
        _num(float(train.lr)),
        "--actor.adam.weight_decay",
        _num(float(train.weight_decay)),
        "--actor.adam.betas",
        "0.9",
        "0.999",
        "--actor.lr_scheduler",
        "constant",
        "--actor.lr_warmup_ratio",
        "0.0",
        "--actor.max_norm",
        _num(float(train.grad_clip) or 1e9),  # grad_clip 0 disables clipping
    ]


def _algorithm_flags(cfg, lay: _Layout) -> list[str]:
    """The method's flags, the KL penalty, the reward and dynamic filtering."""
    opts = lay.opts
    return [
        *method_flags(lay.method, opts),
        "--algo.kl.init_coef",
        _num(float(opts.kl_coef)),
        *(["--algo.kl.use_loss", "--algo.kl.estimator", opts.kl_estimator] if opts.kl_use_loss else []),
        "--reward.remote_url",
        REWARD_FILE if opts.reward in REWARDS else os.path.abspath(opts.reward),
        *(
            ["--algo.dynamic_filtering_enable", "--algo.dynamic_filtering_range", "0.0", "1.0"]
            if cfg.train.dynamic_filtering
            else []
        ),
    ]


def _placement_flags(cfg, lay: _Layout) -> list[str]:
    """Where and how the models run: nodes and GPUs, vLLM engines, colocation, DeepSpeed's stage and dtype."""
    opts, mem = lay.opts, lay.mem
    # model.dtype picks the DeepSpeed dtype when it is a half type; float32 (the pocket default) -> openrlhf.param_dtype
    half = {"bfloat16": "bf16", "float16": "fp16"}
    param_dtype = half[cfg.model.dtype] if cfg.model.dtype in half else opts.param_dtype
    return [
        "--actor.num_nodes",
        str(opts.nodes),
        "--actor.num_gpus_per_node",
        str(opts.gpus_per_node),
        "--ref.num_nodes",
        str(opts.nodes),
        "--ref.num_gpus_per_node",
        str(opts.gpus_per_node),
        "--vllm.num_engines",
        str(lay.engines),
        "--vllm.tensor_parallel_size",
        str(mem.vllm_tp),
        "--vllm.gpu_memory_utilization",
        _num(float(opts.vllm_gpu_memory_utilization)),
        *(["--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep"] if opts.colocate else []),
        "--ds.zero_stage",
        str(mem.zero_stage),
        *(["--ds.adam_offload"] if mem.adam_offload and "--ds.adam_offload" not in opts.extra_flags else []),
        "--ds.param_dtype",
        param_dtype,
        "--ds.attn_implementation",
        opts.attn_implementation,
        *(["--ds.packing_samples"] if opts.packing_samples else []),
        *(["--actor.gradient_checkpointing_enable"] if opts.gradient_checkpointing else []),
    ]


def _checkpoint_flags(cfg, lay: _Layout, run_dir: str) -> list[str]:
    """Checkpoints (resumed from, kept, the final HF export) and logging; no in-loop eval unless one is set."""
    ckpt_every = int(cfg.train.checkpoint_every)
    return [
        "--ckpt.path",
        os.path.join(run_dir, "checkpoints", "openrlhf"),
        "--ckpt.output_dir",
        os.path.join(run_dir, "checkpoints", "final"),
        "--ckpt.save_steps",
        str(ckpt_every if ckpt_every > 0 else -1),
        "--ckpt.max_num",
        str(lay.opts.keep_checkpoints),
        "--ckpt.load_enable",
        *(["--ckpt.save_hf"] if lay.opts.keep_hf_checkpoints else []),  # rotated by the plug-in (retention.py)
        "--logger.logging_steps",
        "1",
        *([] if lay.in_loop else ["--eval.steps", "-1"]),
    ]


def _in_loop_eval(cfg, lay: _Layout, run_dir: str) -> tuple[list[str], dict | None]:
    """The in-loop eval's flags and protocol: ``openrlhf.eval_dataset`` when given, else ``eval.suites``
    rendered into the run dir by the launcher (evalset.py); none without either."""
    ev, max_new = cfg.eval, int(cfg.train.max_new_tokens)
    if lay.opts.eval_dataset:  # an explicit eval JSONL overrides eval.suites for the in-loop eval
        return eval_flags(lay.opts.eval_dataset, ev, max_new)
    if not lay.in_loop:
        return [], None
    dataset = evalset.eval_path(run_dir)
    argv_eval, eval_spec = eval_flags(dataset, ev, max_new)
    eval_spec.update(
        dataset=dataset,
        suites=list(ev.suites),
        fixtures=bool(ev.fixtures),
        data_dir=ev.data_dir,
        limit=ev.max_problems,
        counts=None,  # known once the launcher wrote the file (bridge.eval_payload reads it)
    )
    return argv_eval, eval_spec


def eval_flags(dataset: str, ev, max_new: int) -> tuple[list[str], dict]:
    """OpenRLHF's in-loop evaluation from the typed ``eval:`` section (checked by :func:`check_eval`), and the
    protocol recorded with it; greedy accuracy is not computed."""
    every, n = int(ev.every), int(ev.n_samples)
    argv = [
        "--eval.dataset",
        dataset,
        "--eval.steps",
        str(every if every > 0 else -1),
        "--ckpt.best_metric_key",
        "none",  # no extra "best" DeepSpeed checkpoints
        "--eval.temperature",
        _num(float(ev.temperature)),
        "--eval.n_samples_per_prompt",
        str(n),
    ]
    spec = {
        "n_samples": n,
        "temperature": float(ev.temperature),
        "top_p": 1.0,
        "max_tokens": max_new,
        "counts": datasource_counts(dataset),
    }
    return argv, spec


def episodes_needed(dataset: str, prompts_needed: int, fallback: int) -> int:
    """Passes over a local JSONL prompt set that supply ``prompts_needed`` prompts (+1 for prompts OpenRLHF may
    drop); ``fallback`` for a hub dataset. Each pass past the stop costs upstream's fit() only an empty loop."""
    if not (dataset.endswith(".jsonl") and os.path.isfile(dataset)):
        return fallback
    with open(dataset) as f:
        rows = sum(1 for line in f if line.strip())
    return min(fallback, -(-prompts_needed // max(rows, 1)) + 1)


def datasource_counts(path: str) -> dict | None:
    """Problems per ``datasource`` in a local JSONL eval set (None for a hub dataset or another format)."""
    if not (path.endswith(".jsonl") and os.path.isfile(path)):
        return None
    counts: dict[str, int] = {}
    for _, row in jsonl_lines(path):
        ds = row["datasource"] if "datasource" in row else "default"  # a row's field, not the config's
        counts[ds] = counts[ds] + 1 if ds in counts else 1
    return counts


def _merge_extra(argv: list[str], extra: Mapping) -> list[str]:
    """Append ``openrlhf.extra_flags``; a flag the launcher already sets is an error (one source of truth)."""
    have = {a for a in argv if a.startswith("--")}
    out = list(argv)
    for flag, value in extra.items():
        flag = str(flag)
        if flag in have:
            raise OpenRLHFConfigError(
                f"openrlhf.extra_flags: {flag} is set by the launcher from the run config; "
                f"change the run config key instead of overriding it"
            )
        if value is False or value is None:
            continue
        out += [flag, *_flag_value(value)]
    return out


def launch_command(config, run_dir) -> str:
    """The exact shell command (environment included) that `train` runs; for --dry-run."""
    plan = build_plan(config, run_dir)
    return format_command(plan, run_dir)


def format_command(plan: LaunchPlan, run_dir) -> str:
    env = " \\\n  ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(plan.env.items()))
    lines = [
        f"env {env} \\",
        f"  {shlex.quote(plan.python)} -m harness.backends.openrlhf.launch "
        f"{shlex.quote(os.path.abspath(os.fspath(run_dir)))} --",
    ]
    i, argv = 0, plan.argv
    while i < len(argv):
        j = i + 1
        while j < len(argv) and not argv[j].startswith("--"):
            j += 1
        lines[-1] += " \\"
        lines.append("    " + " ".join(_quote(a) for a in argv[i:j]))
        i = j
    lines += [f"# {line}" for line in (plan.memory.lines() if plan.memory else [])]
    return "\n".join(lines)


def _quote(a: str) -> str:
    return a if a == "${WANDB_API_KEY}" else shlex.quote(a)
