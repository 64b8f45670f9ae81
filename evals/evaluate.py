"""Evaluate a model on suites: generate (appending to JSONL, resumable) -> grade -> metrics -> result files.

Output directory (``--out DIR``)::

    DIR/<suite>.protocol.json     model, engine, protocol: a rerun with a different one is refused
    DIR/<suite>.generations.jsonl one line per (problem, sample) as it is generated; a rerun continues here
    DIR/<suite>.graded.jsonl      generations + correct/status/detail (rewritten atomically)
    DIR/results.json              {"model", "engine", "suites": {<suite>: <contract §4 result>}, "provenance"}

``score_suite`` (grading + metrics from responses already in hand) is the entry point the training
backends use for in-loop evals.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from harness import provenance
from harness.evals.result import SuiteResult
from harness.io import atomic_write_json, read_jsonl, write_jsonl

from .metrics import answer_key, summarize
from .suites import Protocol, Suite


def grade_items(
    kind: str,
    items: list[dict],
    *,
    workers: int | None = None,
    sandbox=None,
    math_timeout_s: float = 10.0,
    progress: bool = False,
    boxes: str = "last",
) -> list[dict]:
    """Verdicts for items of one kind (math: {response, answer}; code: see code_grader; pocket). ``boxes``: the
    math response rule (``last``: the official last box; ``joined``: every box of the final answer, math-verify's)."""
    if not items:
        return []
    if kind == "math":
        from .math_grader import grade_math_many

        return grade_math_many(
            [(it.get("response", ""), it["answer"]) for it in items],
            workers=workers,
            timeout_s=math_timeout_s,
            progress=progress,
            boxes=boxes,
        )
    if kind == "code":
        from .code_grader import grade_code_many
        from .sandbox import Sandbox

        own = sandbox is None
        sb = sandbox or Sandbox(workers=workers)
        try:
            return grade_code_many(items, sb, progress=progress)
        finally:
            if own:
                sb.close()
    raise ValueError(f"unknown grader kind {kind!r}; allowed: math, code, or a suite with its own grader")


def score_suite(
    suite: Suite,
    problems: list[dict],
    responses: dict[str, list[str]],
    protocol: Protocol,
    *,
    workers: int | None = None,
    sandbox=None,
    progress: bool = False,
) -> tuple[dict, list[dict]]:
    """Grade ``responses[id] = [sample_0, ...]`` and return (contract §4 result, graded rows)."""
    rows = []
    for p in problems:
        samples = responses.get(p["id"])
        if samples is None or len(samples) != protocol.n_samples:
            raise ValueError(
                f"suite {suite.name}: problem {p['id']} has {0 if samples is None else len(samples)} "
                f"samples, protocol says {protocol.n_samples}"
            )
        for s, text in enumerate(samples):
            rows.append({**_grading_fields(p), "id": p["id"], "sample": s, "response": text})
    if suite.grader is not None:  # a backend's task suite: its own exact verifier
        verdicts = suite.grader(rows)
    else:
        verdicts = grade_items(suite.kind, rows, workers=workers, sandbox=sandbox, progress=progress)
    per: dict[str, dict] = defaultdict(lambda: {"correct": [], "answers": []})
    graded = []
    for row, v in zip(rows, verdicts):
        row = {**row, **v}
        graded.append(row)
        per[row["id"]]["correct"].append(bool(v["correct"]))
        if suite.exact_answers:  # a backend's task suite: its own verifier's canonical answer
            per[row["id"]]["answers"].append(v.get("pred"))
        elif suite.kind == "math":
            per[row["id"]]["answers"].append(answer_key(v.get("pred")))
    per_problem = [per[p["id"]] for p in problems]
    if suite.kind == "math" and protocol.n_samples > 1:  # maj@k over equivalence classes, not strings
        from .math_grader import merge_equivalent_answers

        merge_equivalent_answers(per_problem, workers=workers)
    if suite.kind == "code":
        for d in per_problem:
            d.pop("answers")
    metrics = summarize(per_problem, k=protocol.n_samples)
    if protocol.n_samples == 1:
        metrics["greedy" if protocol.temperature == 0 else "avg@1"] = metrics["avg@1"]
    result = SuiteResult(
        suite=suite.name,
        n_problems=len(problems),
        n_samples=protocol.n_samples,
        temperature=protocol.temperature,
        top_p=protocol.top_p,
        max_tokens=protocol.max_tokens,
        metrics=metrics,
        primary=protocol.primary,
    ).to_dict()
    return result, graded


def _grading_fields(problem: dict) -> dict:
    skip = {"prompt_text", "problem", "template"}
    return {k: v for k, v in problem.items() if k not in skip}


def evaluate(
    engine,
    suites: Sequence[Suite],
    out_dir: str | Path,
    *,
    n: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    data_dir: str | None = None,
    fixtures: bool = False,
    limit: int | None = None,
    template: str | None = None,
    seed: int = 0,
    workers: int | None = None,
    sandbox=None,
    progress: bool = True,
) -> dict:
    """Run the whole pipeline for each suite; returns the ``results.json`` object."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    summary = json.loads(results_path.read_text()) if results_path.exists() else {}
    summary.setdefault("suites", {})
    desc = engine.describe()
    for key in ("engine", "model"):
        if summary.get(key) not in (None, desc.get(key)):
            raise ValueError(
                f"{results_path} holds results of {key} {summary[key]!r}, not {desc.get(key)!r}; "
                "use another --out directory"
            )
    summary.update(desc)
    datasets = _previous_datasets(summary)  # provenance: one entry per suite in this file, the latest read
    for suite in suites:
        protocol = suite.protocol.with_overrides(
            n_samples=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens
        )
        problems = suite.load(data_dir=data_dir, fixtures=fixtures, limit=limit, template=template)
        datasets[suite.name] = suite_dataset_entry(suite, problems, data_dir=data_dir, fixtures=fixtures)
        ident = {
            "suite": suite.name,
            **engine.describe(),
            "protocol": protocol.__dict__,
            "seed": seed,
            "template": template or suite.template,
            "problem_ids": [p["id"] for p in problems],
        }
        ident_path = out / f"{suite.name}.protocol.json"
        if ident_path.exists():  # same protocol required; the problem set may grow (--limit 10, then all)
            old = json.loads(ident_path.read_text())
            diff = sorted(k for k in set(old) | set(ident) if k != "problem_ids" and old.get(k) != ident.get(k))
            if diff:
                raise ValueError(
                    f"{out} already holds {suite.name} generations made with a different "
                    f"{', '.join(diff)}; use another --out directory (or delete "
                    f"{suite.name}.* there) instead of mixing protocols"
                )
            known = list(old.get("problem_ids", []))
            ident["problem_ids"] = known + [i for i in ident["problem_ids"] if i not in set(known)]
        atomic_write_json(ident_path, ident)
        gen_path = out / f"{suite.name}.generations.jsonl"
        done = _existing(gen_path, problems, protocol)
        by_id = {p["id"]: p for p in problems}
        from .engines import Request

        todo = [
            Request((p["id"], s), p["prompt_text"])
            for p in problems
            for s in range(protocol.n_samples)
            if (p["id"], s) not in done
        ]
        t0 = time.time()
        if todo:
            with (
                open(gen_path, "a") as f,
                tqdm(total=len(todo), desc=f"{suite.name}: generating", disable=not progress) as bar,
            ):
                for req, text in engine.generate(todo, protocol, seed=seed):
                    pid, s = req.key
                    line = {"id": pid, "sample": s, "prompt": req.prompt, "response": text}
                    f.write(json.dumps(line) + "\n")
                    f.flush()
                    done[(pid, s)] = text
                    bar.update(1)
        gen_time = time.time() - t0
        responses = {pid: [done[(pid, s)] for s in range(protocol.n_samples)] for pid in by_id}
        result, graded = score_suite(
            suite, problems, responses, protocol, workers=workers, sandbox=sandbox, progress=progress
        )
        result["generation_s"] = round(gen_time, 2)
        result["resumed_samples"] = len(problems) * protocol.n_samples - len(todo)
        if suite.kind == "math":  # what the official last-box rule costs: verdicts the joined-boxes rule changes
            from .math_grader import compare_box_rules

            b = result["box_rules"] = compare_box_rules(graded, workers=workers)
            if progress:
                tqdm.write(
                    f"{suite.name}: last box vs joined boxes: {b['changed']} of {b['rows']} verdicts differ "
                    f"({b['gained']} wrong -> right, {b['lost']} right -> wrong under joined boxes)"
                )
        write_jsonl(out / f"{suite.name}.graded.jsonl", graded)
        summary["suites"][suite.name] = result
        summary["provenance"] = provenance.collect(datasets=[d for k, d in datasets.items() if k in summary["suites"]])
        atomic_write_json(results_path, summary)
    return summary


def suite_dataset_entry(suite: Suite, problems: list[dict], *, data_dir=None, fixtures: bool = False) -> dict:
    """Provenance of a suite's data: where it came from, the hub revision when read from the hub (a local file
    is identified by its hash alone), and the sha256 of the problems as evaluated (``dataset_entry`` rows)."""
    from .suites import FIXTURE_DIR, find_local

    revision = None
    if fixtures:
        source = str(find_local(FIXTURE_DIR, suite.name))
    elif data_dir:
        source = str(find_local(Path(data_dir), suite.name))
    elif suite.loader is not None:
        source = f"generated:{suite.name}"
    else:
        source = "hub:" + ":".join(x for x in (suite.hf_id, suite.hf_config, suite.split) if x)
        revision = getattr(suite, "revision", None)
    return provenance.dataset_entry(suite.name, problems, revision=revision, source=source, role="eval")


def _previous_datasets(summary: dict) -> dict[str, dict]:
    prov = summary.get("provenance")
    entries = prov.get("datasets") if isinstance(prov, dict) else None
    return {d["name"]: d for d in entries or [] if isinstance(d, dict) and d.get("name") and d.get("sha256")}


def _existing(path: Path, problems: list[dict], protocol: Protocol) -> dict[tuple, str]:
    """(id, sample) -> response already generated; a line whose response is not a string (null: a hand-edited or
    foreign file) does not count, so that sample is generated again."""
    ids = {p["id"] for p in problems}
    done = {}
    rows = read_jsonl(path)
    for r in rows:
        ok = isinstance(r.get("response"), str) and isinstance(r.get("sample"), int)
        if ok and r.get("id") in ids and r["sample"] < protocol.n_samples:
            done[(r["id"], r["sample"])] = r["response"]
    if rows and path.read_text() and not path.read_text().endswith("\n"):  # torn last line: rewrite cleanly
        write_jsonl(path, [r for r in rows])
    return done
