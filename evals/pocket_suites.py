"""Suites ``pocket_<task>`` for the pocket backend's synthetic tasks (``harness.backends.pocket.tasks.TASKS``).

Each suite is the task's deterministic test split (default options, ``test_size=200``), graded by the task's
own exact verifier; prompts are the raw task prompts (``37+48=``: pocket models are not chat models).
The module is imported lazily: without the pocket backend there are simply no pocket suites.
"""

from __future__ import annotations

from .suites import GREEDY, Suite

_registered = False
TEST_SIZE = 200


def _task_module():
    try:
        from harness.backends.pocket import tasks
    except ImportError:
        return None
    return tasks


def make_task(task_name: str):
    tasks = _task_module()
    if tasks is None:
        raise ValueError("pocket suites need harness.backends.pocket (not importable)")
    return tasks.TASKS.get(task_name)(test_size=TEST_SIZE)


def _loader(task_name: str):
    def load(suite: Suite) -> list[dict]:
        task = make_task(task_name)
        return [{"id": f"{task_name}-{i}", "problem": p["prompt"], "prompt_text": p["prompt"],
                 "answer": p["answer"], "pocket_task": task_name, "problem_data": p}
                for i, p in enumerate(task.test)]

    return load


def register_all(registry) -> None:
    global _registered
    if _registered:
        return
    tasks = _task_module()
    _registered = True
    if tasks is None:
        return
    for name in tasks.TASKS.names():
        sname = f"pocket_{name}"
        if sname in registry:
            continue
        registry.register(sname, Suite(sname, "pocket", "(generated)", "test", lambda r, i: r, template="raw",
                                       protocol=GREEDY.with_overrides(max_tokens=32), fields="prompt, answer",
                                       note=f"pocket task {name!r} test split", loader=_loader(name)))


def grade_pocket(items: list[dict]) -> list[dict]:
    """Grade with each task's exact verifier (cheap: in-process, no pool)."""
    cache: dict[str, object] = {}
    out = []
    for it in items:
        name = it["pocket_task"]
        if name not in cache:
            cache[name] = make_task(name)
        task = cache[name]
        ok = bool(task.verify(it.get("response", ""), it["problem_data"]))
        out.append({"correct": ok, "pred": it.get("response", "").strip()[:200],
                    "reason": "correct" if ok else "wrong"})
    return out
