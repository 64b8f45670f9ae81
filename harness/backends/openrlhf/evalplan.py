"""The evaluation plan of an OpenRLHF run: the after-training vLLM engine over the head node's GPUs.

The after-training stage (harness/run/after_training.py) runs in the runner on the head task once OpenRLHF has
exited, so the head node's ``gpus_per_node`` GPUs are free. Per GPU of an engine of TP GPUs (the memory plan's
``vllm_fit``): its budget ``eval.gpu_memory_utilization x openrlhf.gpu_memory_gb``, the weight shard 2 P / TP, the
2 GiB allowance, and a KV cache of 2 x layers x ceil(kv_heads / TP) x head_dim x 2 B per token that must hold one
sequence of ``max_model_len`` tokens (vLLM refuses to start otherwise). ``auto`` (docs/gpu.md "Evaluation plan"):
  max_model_len         openrlhf.max_prompt_len + the longest max_tokens of the stage's protocols
  tensor_parallel_size  the memory plan's rule (the smallest TP whose weights take at most half the budget), or
                        the next TP up that holds a sequence; none holds one: refused at load
  data_parallel_size    the head node's GPUs // TP
A set value is checked against the same numbers and refused at load when it cannot run.
"""

from __future__ import annotations

from harness.backends.openrlhf import memory
from harness.backends.openrlhf.options import OpenRLHFConfigError, options_of
from harness.run.after_training import EngineSettings, planned_work

GiB = memory.GiB
AUTO = "auto"


def applies(cfg) -> bool:
    """The stage runs and may use vLLM: ``eval.after_training`` with ``eval.engine`` vllm, or auto on a CUDA run."""
    ec = cfg.eval
    return bool(ec.after_training) and (
        ec.engine == "vllm" or (ec.engine == AUTO and cfg.train.device.startswith("cuda"))
    )


def plan(cfg) -> EngineSettings | None:
    """The engine settings and the lines of the plan; None where the stage does not use vLLM. Raises
    OpenRLHFConfigError (a ConfigError) naming the key when a set value, or every TP, cannot run."""
    if not applies(cfg):
        return None
    ec, opts = cfg.eval, options_of(cfg)
    work = planned_work(cfg)
    longest = max((w.max_tokens for w in work), default=ec.max_new_tokens or cfg.train.max_new_tokens)
    length = opts.max_prompt_len + longest if ec.max_model_len == AUTO else int(ec.max_model_len)
    if length <= longest:
        raise OpenRLHFConfigError(
            f"eval.max_model_len: {length} leaves no room for a prompt before the stage's {longest} new tokens; "
            f"allowed: more than {longest}, or auto ({opts.max_prompt_len} + {longest})"
        )
    gpus = opts.gpus_per_node
    auto = [k for k in ("tensor_parallel_size", "data_parallel_size", "max_model_len") if getattr(ec, k) == AUTO]
    arch = memory.architecture(str(cfg.model.name))
    if arch is None:
        tp = 1 if ec.tensor_parallel_size == AUTO else int(ec.tensor_parallel_size)
        dp = _data_parallel(ec, gpus, tp)
        head = _head(tp, dp, gpus, opts, length, ec, auto)
        why = f"not checked: {cfg.model.name!r} is neither a local model directory nor a known Qwen2.5 size"
        return EngineSettings(tp, dp, length, ec.gpu_memory_utilization, (head, f"  {why}"))
    tps = memory.tp_candidates(arch, gpus)
    fits = {t: memory.vllm_fit(arch, t, ec.gpu_memory_utilization, opts.gpu_memory_gb, length) for t in tps}
    if ec.tensor_parallel_size == AUTO:
        first = memory.choose_tp(arch, tps, ec.gpu_memory_utilization * opts.gpu_memory_gb * GiB)
        tp = next((t for t in tps if t >= first and fits[t].fits), None)
        if tp is None:
            raise OpenRLHFConfigError(
                f"eval.tensor_parallel_size: no vLLM engine on the head node's {gpus} GPUs holds one sequence of "
                f"{length} tokens of {cfg.model.name} ({_fit_text(fits[tps[-1]], tps[-1], opts.gpu_memory_gb)}); "
                f"lower eval.max_model_len, raise eval.gpu_memory_utilization, or use larger GPUs"
            )
    else:
        tp = int(ec.tensor_parallel_size)
        if tp not in fits:
            raise OpenRLHFConfigError(
                f"eval.tensor_parallel_size: {tp} does not split {cfg.model.name}'s {arch.heads} attention heads "
                f"within the head node's {gpus} GPUs; allowed: {', '.join(map(str, tps))} or auto"
            )
        if not fits[tp].fits:
            bigger = [t for t in tps if t > tp and fits[t].fits]
            raise OpenRLHFConfigError(
                f"eval.tensor_parallel_size: {tp} does not fit {opts.gpu_memory_gb:g} GiB per GPU "
                f"({_fit_text(fits[tp], tp, opts.gpu_memory_gb)}); allowed: "
                f"{', '.join(map(str, bigger)) or 'none: lower eval.max_model_len'} or auto"
            )
    dp = _data_parallel(ec, gpus, tp)
    fit = fits[tp]
    sequences = fit.tokens // length
    generations = sum(w.generations for w in work)
    new_tokens = sum(w.generations * w.max_tokens for w in work)
    lines = (
        _head(tp, dp, gpus, opts, length, ec, auto),
        f"  engine   {_fit_text(fit, tp, opts.gpu_memory_gb)}, {sequences * dp} in all",
        f"  work     {generations} generations ({', '.join(w.label() for w in work) or 'the run task'}), at most "
        f"{new_tokens / 1e6:.1f}M new tokens",
    )
    return EngineSettings(tp, dp, length, ec.gpu_memory_utilization, lines)


def _data_parallel(ec, gpus: int, tp: int) -> int:
    if ec.data_parallel_size == AUTO:
        return max(gpus // tp, 1)
    dp = int(ec.data_parallel_size)
    if dp * tp > gpus:
        raise OpenRLHFConfigError(
            f"eval.data_parallel_size: {dp} engines x tensor_parallel_size {tp} need {dp * tp} GPUs; the "
            f"after-training stage runs on the head node's {gpus} (openrlhf.gpus_per_node); allowed: at most "
            f"{gpus // tp}, or auto"
        )
    return dp


def _head(tp, dp, gpus, opts, length, ec, auto) -> str:
    how = f"rule for {', '.join(auto)}" if auto else "as set"
    return (
        f"eval plan (after training, estimate per GPU; docs/gpu.md 'Evaluation plan'): vLLM TP {tp} x DP {dp} on the "
        f"head node's {gpus} GPUs (of {opts.nodes} x {opts.gpus_per_node}), max_model_len {length}, "
        f"gpu_memory_utilization {ec.gpu_memory_utilization:g} ({how})"
    )


def _fit_text(fit: memory.VLLMFit, tp: int, gpu_gib: float) -> str:
    return (
        f"TP {tp}: weights {fit.weights / GiB:.1f} + other {fit.other / GiB:.1f} + KV {fit.kv / GiB:.1f} = budget "
        f"{fit.budget / GiB:.1f} GiB per GPU ({fit.budget / GiB / gpu_gib:g} x {gpu_gib:g}): {fit.tokens} tokens = "
        f"{fit.tokens // fit.seq_len} sequences of {fit.seq_len} per engine"
    )
