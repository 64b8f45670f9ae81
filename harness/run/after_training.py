"""The after-training stage of a run (``eval.after_training: true``): export → score ``eval.suites`` → attach.

Every backend alike: the backend's ``export`` gives a Hugging Face model directory of the final policy; the
suites are scored by ``harness eval``'s pipeline (resumable generations, real graders) into
``RUN/eval/after_training/`` with each suite's own protocol (the paper's: AIME/AMC avg@32 at T = 0.6, the rest
greedy) or, with ``eval.protocol: section``, the ``eval:`` section's; the results join ``result.json``'s
``eval`` at the final step, so the run's leaderboard row carries them under its method and seed.
``eval.suites: []`` scores the run's own task (pocket: its held-out split, the suite its export names).

Differs from the paper's pipeline: the official scripts evaluate inside the trainer every few steps; this stage
scores the final policy once, with the same protocol, so a GPU sweep never ends without scores.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

STAGE_DIR = ("eval", "after_training")


def describe(cfg) -> str:
    """One line for the dry runs: the in-loop eval and the after-training stage of this run."""
    ec = cfg.eval
    names = ", ".join(ec.suites) or "the run's own task"
    from harness.backends import get_backend

    loop = get_backend(cfg.backend).in_loop_eval(cfg)
    proto = "each suite's own protocol" if ec.protocol == "suite" else f"n={ec.n_samples}, T={ec.temperature}"
    engine = "vLLM on a CUDA node with vLLM, else HF" if ec.engine == "auto" else ec.engine
    after = f"after training: {names} ({proto}; engine {engine})" if ec.after_training else "no after-training eval"
    return f"eval: in loop {loop}; {after}"


def engine_for(cfg) -> str:
    """``eval.engine``; ``auto`` = vLLM where it can run (CUDA training device and vllm importable), else HF."""
    if cfg.eval.engine != "auto":
        return cfg.eval.engine
    on_gpu = cfg.train.device.startswith("cuda")
    return "vllm" if on_gpu and importlib.util.find_spec("vllm") is not None else "hf"


def protocol_overrides(cfg) -> dict:
    """``evaluate``'s protocol overrides: none for the suites' own protocols, the eval section's otherwise."""
    if cfg.eval.protocol == "suite":
        return {}
    ec = cfg.eval
    return {
        "n": ec.n_samples,
        "temperature": ec.temperature,
        "top_p": ec.top_p,
        "max_tokens": ec.max_new_tokens or cfg.train.max_new_tokens,
    }


def run_stage(cfg, run_dir: Path, backend, log=print) -> dict:
    """Export, score and return ``{"step", "suites", "model"}`` (the suites as ``harness eval`` reports them)."""
    from harness.backends import register_model_suite
    from harness.evals.engines import make_engine
    from harness.evals.evaluate import evaluate
    from harness.evals.suites import SUITES, resolve_suites
    from harness.run.records import read_model_run

    run_dir = Path(run_dir)
    model_dir = backend.export(cfg, run_dir)
    own = register_model_suite(SUITES, model_dir)  # a pocket export brings its task as a suite
    names = list(cfg.eval.suites) or ([own] if own else [])
    if not names:
        raise ValueError(
            f"eval.after_training: eval.suites is empty and the {cfg.backend} export names no task suite; "
            f"list the suites to score (harness eval --list-suites)"
        )
    engine_name = engine_for(cfg)
    kwargs = {"device": None if cfg.train.device == "auto" else cfg.train.device, "threads": cfg.train.threads}
    engine = make_engine(engine_name, str(model_dir), **(kwargs if engine_name == "hf" else {"seed": cfg.seed}))
    log(f"after training: scoring {', '.join(names)} on {model_dir} ({engine_name} engine)")
    summary = evaluate(
        engine,
        resolve_suites(names),
        run_dir.joinpath(*STAGE_DIR),
        data_dir=cfg.eval.data_dir,
        fixtures=cfg.eval.fixtures,
        limit=cfg.eval.max_problems,
        seed=cfg.seed,
        progress=cfg.logging.progress,
        **protocol_overrides(cfg),
    )
    step = (read_model_run(model_dir) or {}).get("step", cfg.train.steps)
    return {"step": step, "suites": {n: summary["suites"][n] for n in names}, "model": str(model_dir)}


def attach(fields: dict, stage: dict) -> dict:
    """``fields`` (a run's result fields) with the stage's suites joined into its ``eval`` at the final step; a
    suite scored both in the loop and after training keeps the after-training result (the final policy's)."""
    ev = dict(fields.get("eval") or {})
    suites = dict(ev.get("suites") or {})
    suites.update({n: {**r, "stage": "after_training"} for n, r in stage["suites"].items()})
    fields["eval"] = {**ev, "step": stage["step"], "suites": suites}
    return fields
