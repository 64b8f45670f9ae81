"""Eval suites of the pocket backend's synthetic tasks, registered through ``PocketBackend.register_suites``:
``pocket_<task>`` (the task's deterministic test split, default options, ``test_size=200``) and, for a model
directory exported from a run (``harness_task.json``), the run's own task under the run's eval name. Each suite
carries its grader: the task's own exact verifier. Prompts are the raw task prompts (``37+48=``).
"""

from __future__ import annotations

from harness.evals.suites import GREEDY, Protocol, Suite
from harness.run.records import MODEL_SUITE_FILE  # written by `harness export` into the model directory

_registered = False
TEST_SIZE = 200


def make_task(task_name: str, test_size: int = TEST_SIZE, options: dict | None = None):
    from harness.backends.pocket import tasks

    return tasks.make_task(task_name, test_size, options or {})


def _loader(task_name: str, test_size: int = TEST_SIZE, options: dict | None = None, max_problems: int | None = None):
    def load(suite: Suite) -> list[dict]:
        task = make_task(task_name, test_size, options)
        test = task.test[:max_problems] if max_problems else task.test
        return [
            {
                "id": f"{task_name}-{i}",
                "problem": p["prompt"],
                "prompt_text": p["prompt"],
                "answer": p["answer"],
                "pocket_task": task_name,
                "pocket_options": dict(options or {}),
                "pocket_test_size": test_size,
                "problem_data": p,
            }
            for i, p in enumerate(test)
        ]

    return load


def register_model_suite(registry, model_dir) -> str | None:
    """The suite of an exported run (``harness export``): the run's own task options, test split and eval protocol,
    named as the run's training eval names it (``countdown``), so both land in one leaderboard column.
    Returns the suite name, or None when ``model_dir`` is no export."""
    import json
    from pathlib import Path

    path = Path(str(model_dir)) / MODEL_SUITE_FILE
    if not path.is_file():
        return None
    spec = json.loads(path.read_text())
    name, pr = spec["suite"], spec["protocol"]
    protocol = Protocol(
        n_samples=int(pr["n_samples"]),
        temperature=float(pr["temperature"]),
        top_p=float(pr["top_p"]),
        max_tokens=int(pr["max_tokens"]),
    )
    suite = Suite(
        name,
        "pocket",
        "(generated)",
        "test",
        lambda r, i: r,
        template="raw",
        protocol=protocol,
        fields="prompt, answer",
        note=f"task {spec['task']!r} of run {spec.get('run_id')} (options {spec.get('options') or {}})",
        loader=_loader(spec["task"], int(spec["test_size"]), spec.get("options") or {}, spec.get("max_problems")),
        grader=grade_pocket,
        exact_answers=True,
    )
    if name in registry:
        if registry.get(name).kind != "pocket":
            raise ValueError(f"{path}: suite name {name!r} is already a benchmark suite; rename the task file")
        registry.unregister(name)  # another export's suite of the same name: this model's own takes its place
    registry.register(name, suite)
    return name


def register_all(registry) -> None:
    """``pocket_<task>`` for every registered task (once)."""
    global _registered
    if _registered:
        return
    from harness.backends.pocket import tasks

    _registered = True
    for name in tasks.TASKS.names():
        sname = f"pocket_{name}"
        if sname in registry:
            continue
        registry.register(
            sname,
            Suite(
                sname,
                "pocket",
                "(generated)",
                "test",
                lambda r, i: r,
                template="raw",
                protocol=GREEDY.with_overrides(max_tokens=32),
                fields="prompt, answer",
                note=f"pocket task {name!r} test split",
                loader=_loader(name),
                grader=grade_pocket,
                exact_answers=True,
            ),
        )


def grade_pocket(items: list[dict]) -> list[dict]:
    """Grade with each task's exact verifier (cheap: in-process, no pool)."""
    import json

    cache: dict[str, object] = {}
    out = []

    for it in items:
        name = it["pocket_task"]
        key = json.dumps([name, it.get("pocket_options") or {}], sort_keys=True)
        if key not in cache:  # the item's own task options (an exported run's), the defaults otherwise
            cache[key] = make_task(name, it.get("pocket_test_size", TEST_SIZE), it.get("pocket_options"))
        task = cache[key]
        ok = bool(task.verify(it.get("response", ""), it["problem_data"]))
        out.append(
            {"correct": ok, "pred": it.get("response", "").strip()[:200], "reason": "correct" if ok else "wrong"}
        )
    return out
