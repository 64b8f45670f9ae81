"""OpenRLHF's in-loop eval dataset built from harness eval suites (``eval.suites``).

OpenRLHF evaluates one JSONL every ``--eval.steps`` (``PPOTrainer.evaluate``: every prompt sampled
``--eval.n_samples_per_prompt`` times at ``--eval.temperature``, graded by the run's reward function, reported per
``datasource``). :func:`check` decides at config load whether the ``eval:`` section can run that way and names why
not; :func:`write` renders each suite's rows with the suite's own template into ``{prompt, answer, datasource}``
(``datasource`` = the suite) in the run directory when the launcher starts (``EVAL_FILE``), so the prompts are
exactly those ``harness eval`` shows a model; the chat template is applied by OpenRLHF as for training prompts. A
staged sweep (``harness stage``) renders each distinct eval set once into the stage (:func:`staged_name`) and
every launch copies it from there instead of rendering (offline compute nodes).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.backends.openrlhf.options import OpenRLHFConfigError

EVAL_FILE = "openrlhf_eval.jsonl"  # in the run directory
STAGED_DIR = "evalsets"  # in a stage directory (harness stage): one file per distinct eval set
REWARD_KIND = {"math": "math", "code": "code"}  # suite kind -> the openrlhf.reward that grades it


def eval_path(run_dir) -> str:
    return os.path.join(os.path.abspath(os.fspath(run_dir)), EVAL_FILE)


def requested(ev: dict) -> bool:
    """Whether the ``eval:`` section asks for an in-loop eval: ``every > 0`` in a section that is not entirely at
    its defaults (a config without an ``eval:`` section gets the pocket-oriented default ``every: 10``, which on
    OpenRLHF, with no suites named, means no in-loop eval; the dry run says so). ``every: 0`` never evaluates."""
    import dataclasses

    from harness.run.config import EvalConfig

    if int(ev.get("every", 0)) <= 0:
        return False
    defaults = dataclasses.asdict(EvalConfig())
    return any(ev.get(k, v) != v for k, v in defaults.items())


def check(ev: dict, reward: str, max_new: int) -> list:
    """The suites of an in-loop eval (``eval.every > 0``, no ``openrlhf.eval_dataset``); OpenRLHFConfigError when
    the section cannot run on OpenRLHF."""
    from harness.evals.suites import resolve_suites

    every = int(ev.get("every", 0))
    names = list(ev.get("suites") or [])
    if not names:
        raise OpenRLHFConfigError(
            f"eval.every: {every} asks for OpenRLHF's in-loop eval, but eval.suites is empty: on this backend the "
            f"run's task is a prompt set without a held-out split. Name the suites (e.g. eval.suites: [math500], "
            f"`harness eval --list-suites`), give openrlhf.eval_dataset, or set eval.every: 0 (no in-loop eval; "
            f"eval.after_training: true scores the final model)"
        )
    try:
        suites = resolve_suites(names)
    except (KeyError, ValueError) as e:
        raise OpenRLHFConfigError(f"eval.suites: {e}") from None
    kinds = sorted({s.kind for s in suites})
    if len(kinds) > 1:
        raise OpenRLHFConfigError(
            f"eval.suites: {', '.join(names)} mix {' and '.join(kinds)} suites; OpenRLHF grades its in-loop eval with "
            f"the run's one reward function (openrlhf.reward). Evaluate them in separate runs or after training"
        )
    if reward in REWARD_KIND.values() and REWARD_KIND[kinds[0]] != reward:
        wrong = [s.name for s in suites if REWARD_KIND[s.kind] != reward]
        raise OpenRLHFConfigError(
            f"eval.suites: {', '.join(wrong)} are {kinds[0]} suites, graded in the loop by the run's reward "
            f"(openrlhf.reward: {reward}); allowed with it: {reward} suites (or set openrlhf.reward: {kinds[0]})"
        )
    if float(ev.get("top_p", 1.0)) != 1.0:
        raise OpenRLHFConfigError(f"eval.top_p: {ev.get('top_p')!r}; OpenRLHF evaluates with the rollout top_p 1.0")
    if ev.get("max_new_tokens") not in (None, max_new):
        raise OpenRLHFConfigError(
            f"eval.max_new_tokens: {ev.get('max_new_tokens')!r}; OpenRLHF evaluates with the rollout length, "
            f"train.max_new_tokens = {max_new} (leave it empty or equal)"
        )
    if int(ev.get("n_samples", 1)) > 1 and float(ev.get("temperature", 0.6)) == 0:
        raise OpenRLHFConfigError(
            f"eval.n_samples: {ev.get('n_samples')} at eval.temperature: 0 are identical samples; set a temperature "
            f"> 0 or n_samples: 1"
        )
    data_dir = ev.get("data_dir")
    if data_dir and not ev.get("fixtures"):
        from harness.evals.suites import find_local

        for s in suites:
            try:
                find_local(Path(data_dir), s.name)
            except (FileNotFoundError, ValueError) as e:
                raise OpenRLHFConfigError(f"eval.data_dir: {e}") from None
    return suites


def rows(spec: dict) -> list[dict]:
    """``{prompt, answer, datasource}`` rows of the spec's suites (``max_problems`` first problems of each)."""
    from harness.evals.evaluate import _grading_fields
    from harness.evals.suites import resolve_suites

    out, seen = [], {}
    for suite in resolve_suites(spec["suites"]):
        fixtures, limit = bool(spec.get("fixtures")), spec.get("limit")
        for p in suite.load(data_dir=spec.get("data_dir"), fixtures=fixtures, limit=limit):
            prompt = p["prompt_text"]
            if prompt in seen:  # OpenRLHF maps prompt -> datasource: a shared prompt would be counted twice
                raise ValueError(
                    f"eval.suites: suites {seen[prompt]} and {suite.name} hold the same prompt ({prompt[:60]!r}...); "
                    f"OpenRLHF's eval cannot tell them apart"
                )
            seen[prompt] = suite.name
            answer = str(p["answer"]) if suite.kind == "math" else json.dumps(_grading_fields(p), default=str)
            out.append({"prompt": prompt, "answer": answer, "datasource": suite.name})
    return out


def render(spec: dict) -> str:
    """The eval dataset's text: one sorted-key JSON row per line."""
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows(spec))


def staged_name(spec: dict) -> str:
    """Where ``harness stage`` puts this eval set, relative to the stage directory: named by what decides its rows
    (the suites, fixtures, the problem limit), so every run of a sweep with the same ones reads one file."""
    import hashlib

    key = {"suites": list(spec["suites"]), "fixtures": bool(spec.get("fixtures")), "limit": spec.get("limit")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"{STAGED_DIR}/{digest}.jsonl"


def write(spec: dict, stage_dir: Path | None = None) -> tuple[Path, str]:
    """The eval dataset into ``spec["dataset"]`` (atomically): copied from the stage when the job is staged and the
    stage holds it (rendered once by ``harness stage``), else rendered here. Returns its path and where it came
    from, in words."""
    from harness.io import atomic_write_text

    path = Path(spec["dataset"])
    staged = Path(stage_dir) / staged_name(spec) if stage_dir else None
    if staged is not None and staged.is_file():
        atomic_write_text(path, staged.read_text())
        return path, f"the staged copy {staged}"
    atomic_write_text(path, render(spec))
    return path, "rendered from " + (spec.get("data_dir") or ("the fixtures" if spec.get("fixtures") else "the hub"))
