"""The after-training stage of a run (``eval.after_training: true``): export → score ``eval.suites`` → attach.

Every backend alike: the backend's ``export`` gives a Hugging Face model directory of the final policy; the
suites are scored by ``harness eval``'s pipeline (resumable generations, real graders) into
``RUN/eval/after_training/`` with each suite's own protocol (the paper's: AIME/AMC avg@32 at T = 0.6, the rest
greedy) or, with ``eval.protocol: section``, the ``eval:`` section's; the results join ``result.json``'s
``eval`` at the final step, so the run's leaderboard row carries them under its method and seed.
``eval.suites: []`` scores the run's own task (pocket: its held-out split, the suite its export names).

Differs from the paper's pipeline: the official scripts evaluate inside the trainer every few steps; this stage
scores the final policy once, with the same protocol, so a GPU sweep never ends without scores.

The vLLM engine takes the backend's evaluation plan (``Backend.eval_plan``: tensor and data parallel sizes over the
run's GPUs, ``max_model_len``, memory utilisation; docs/gpu.md "Evaluation plan"), else the ``eval:`` section's
values (``auto``: 1 engine of 1 GPU, vLLM's own context length). A stage that fails after training succeeded
leaves the run finished: result.json gets ``eval_status: failed``, the error and ``eval_retry``, the command that
retries only this stage (``harness train RUN/config.yaml --run-dir RUN --eval-only``; ``retry_eval.py``).
"""

from __future__ import annotations

import importlib.util
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

STAGE_DIR = ("eval", "after_training")
EVAL_COMPLETED, EVAL_FAILED = "completed", "failed"  # result.json eval_status of a run with this stage
EVAL_FIELDS = ("eval_status", "eval_error", "eval_traceback", "eval_retry")  # what a failed stage adds


@dataclass(frozen=True)
class EngineSettings:
    """What the after-training vLLM engine gets (``make_engine("vllm", ...)``) and the plan behind it."""

    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    max_model_len: int | None = None  # None: vLLM's choice (the model's context length)
    gpu_memory_utilization: float = 0.85
    lines: tuple[str, ...] = ()  # the backend's evaluation plan in words (dry runs, train.log)

    def engine_kwargs(self) -> dict:
        return {
            "tensor_parallel_size": self.tensor_parallel_size,
            "data_parallel_size": self.data_parallel_size,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
        }


def engine_settings(cfg, backend) -> EngineSettings:
    """The backend's evaluation plan (``Backend.eval_plan``), else the eval section as given (``auto``: 1 x 1,
    vLLM's own context length)."""
    plan = backend.eval_plan(cfg)
    if plan is not None:
        return plan
    ec = cfg.eval

    def given(value, auto):
        return auto if value == "auto" else value

    return EngineSettings(
        given(ec.tensor_parallel_size, 1),
        given(ec.data_parallel_size, 1),
        given(ec.max_model_len, None),
        ec.gpu_memory_utilization,
    )


@dataclass(frozen=True)
class SuiteWork:
    """What the stage generates for one suite: problems (None: unknown before its data loads) x samples, each
    at most ``max_tokens`` new tokens."""

    suite: str
    problems: int | None
    n_samples: int
    max_tokens: int

    @property
    def generations(self) -> int:
        return (self.problems or 0) * self.n_samples

    def label(self) -> str:
        return f"{self.suite} {self.problems if self.problems is not None else '?'}x{self.n_samples}"


def planned_work(cfg) -> list[SuiteWork]:
    """The generations of the after-training stage, suite by suite, without loading any data ([] when the config
    has no such stage; ``eval.suites: []``, the run's own task, is named by the export and not planned)."""
    if not cfg.eval.after_training or not cfg.eval.suites:
        return []
    from harness.evals.suites import resolve_suites

    overrides = protocol_overrides(cfg)
    if "n" in overrides:  # evaluate()'s name for the protocol's n_samples
        overrides["n_samples"] = overrides.pop("n")
    out = []
    for suite in resolve_suites(cfg.eval.suites):
        protocol = suite.protocol.with_overrides(**overrides)
        n = suite.planned_size(cfg.eval.data_dir, cfg.eval.fixtures)
        if n is not None and cfg.eval.max_problems:
            n = min(n, cfg.eval.max_problems)
        out.append(SuiteWork(suite.name, n, protocol.n_samples, protocol.max_tokens))
    return out


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
    if engine_name == "hf":
        kwargs = {"device": None if cfg.train.device == "auto" else cfg.train.device, "threads": cfg.train.threads}
    else:
        settings = engine_settings(cfg, backend)
        kwargs = {"seed": cfg.seed, **settings.engine_kwargs()}
        for line in settings.lines:
            log(line)
    engine = make_engine(engine_name, str(model_dir), **kwargs)
    log(f"after training: scoring {', '.join(names)} on {model_dir} ({engine_name} engine)")
    try:
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
    finally:
        engine.close()  # its workers and GPUs, before result.json is written
    step = (read_model_run(model_dir) or {}).get("step", cfg.train.steps)
    return {"step": step, "suites": {n: summary["suites"][n] for n in names}, "model": str(model_dir)}


def attach(fields: dict, stage: dict) -> dict:
    """``fields`` (a run's result fields) with the stage's suites joined into its ``eval`` at the final step
    and ``eval_status: completed`` (a failed attempt's error dropped); a suite scored both in the loop and after
    training keeps the after-training result (the final policy's)."""
    ev = dict(fields.get("eval") or {})
    suites = dict(ev.get("suites") or {})
    suites.update({n: {**r, "stage": "after_training"} for n, r in stage["suites"].items()})
    fields["eval"] = {**ev, "step": stage["step"], "suites": suites}
    for key in EVAL_FIELDS:
        fields.pop(key, None)
    fields["eval_status"] = EVAL_COMPLETED
    return fields


def retry_command(run_dir) -> str:
    """The shell command that retries only the after-training stage of the finished run in ``run_dir``."""
    from harness.backends.base import harness_train_command

    return f"{harness_train_command(os.path.abspath(run_dir))} --eval-only"


def failed(fields: dict, error: BaseException, run_dir) -> dict:
    """``fields`` of a run whose training finished and whose after-training stage raised ``error``: the run stays
    finished, its evaluation is marked failed with the error, its traceback's tail and the retry command."""
    fields.update(
        eval_status=EVAL_FAILED,
        eval_error=f"{type(error).__name__}: {error}",
        eval_traceback="".join(traceback.format_exception(error))[-4000:],
        eval_retry=retry_command(run_dir),
    )
    return fields
