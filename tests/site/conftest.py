"""A runs folder for the site tests: run directories in the contract layout (docs/contracts.md §2-4) with
hand-chosen final scores, and graded samples made by the real evaluation pipeline (``score_suite`` with the
pocket countdown task's own verifier) on hand-written responses.

Final countdown avg@2 (fractions), worked out by hand in the tests:

    pocket-0.3m  grpo    seed 0: 0.50  seed 1: 0.60   -> 55.0 ± 63.5 (n=2)   [t(0.975, 1) = 12.706, sd 7.071]
    pocket-0.3m  kl_cov  seed 0: 0.70  seed 1: 0.60   -> 65.0 ± 63.5 (n=2);  Δ vs grpo paired: +20, 0 -> +10.0 ± 127.1
    pocket-1m    grpo    seed 0: 0.40                  -> 40.0 (n=1)
    pocket-1m    kl_cov  seed 0: 0.45                  -> 45.0 (n=1);         Δ +5.0
    pocket-1m    clip_cov seed 0: no result.json (unfinished)

Every result also holds pass@2 = avg@2 + 0.10 (e.g. 0.3m grpo: 60, 70 -> 65.0 ± 63.5 (n=2)) and standard errors
over problems avg@2_stderr = 0.05, pass@2_stderr = 0.04 (5.0 and 4.0 points); no maj@2: the metric switch offers
avg@k and pass@k.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

FINAL = {
    ("pocket-0.3m", "grpo", 0): 0.50,
    ("pocket-0.3m", "grpo", 1): 0.60,
    ("pocket-0.3m", "kl_cov", 0): 0.70,
    ("pocket-0.3m", "kl_cov", 1): 0.60,
    ("pocket-1m", "grpo", 0): 0.40,
    ("pocket-1m", "kl_cov", 0): 0.45,
}
PARAMS = {"pocket-0.3m": 333_056, "pocket-1m": 1_075_712}
N_PROBLEMS = 6  # graded problems per run with samples


def suite_result(value: float) -> dict:
    return {
        "suite": "countdown",
        "n_problems": 125,
        "n_samples": 2,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_tokens": 8,
        "metrics": {"avg@2": value, "avg@2_stderr": 0.05, "pass@2": round(value + 0.1, 10), "pass@2_stderr": 0.04},
        "primary": "avg@2",
    }


def write_run(root: Path, model: str, method: str, seed: int, final: float | None) -> Path:
    d = root / f"{model}__{method}__s{seed}"
    (d / "eval").mkdir(parents=True)
    cfg = {
        "backend": "pocket",
        "seed": seed,
        "method": {"name": method},
        "model": {"name": model},
        "task": {"name": "countdown"},
    }
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    lines = []
    for t in range(1, 5):
        lines.append(
            json.dumps({"step": t, "entropy": 1.0 / t, "reward/mean": 0.1 * t, "cov/term": 0.01 * t, "cov/mean": 0.002})
        )
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    (d / "eval" / "step_0.json").write_text(json.dumps({"step": 0, "suites": {"countdown": suite_result(0.2)}}))
    if final is None:
        return d
    ev = {"step": 4, "suites": {"countdown": suite_result(final)}}
    (d / "eval" / "step_4.json").write_text(json.dumps(ev))
    result = {
        "schema_version": 1,
        "run_id": f"{abs(hash((model, method, seed))) % 16**12:012x}",
        "status": "completed",
        "backend": "pocket",
        "method": method,
        "advantage": "grpo",
        "method_config": {"name": method},
        "model": model,
        "model_params": PARAMS[model],
        "task": "countdown",
        "seed": seed,
        "steps": 4,
        "wall_time_s": 1.5,
        "summary": {},
        "eval": ev,
        "timing": {},
        "provenance": {"git": {"commit": "0123abc", "dirty": False}},
    }
    (d / "result.json").write_text(json.dumps(result))
    return d


def write_graded(run_dir: Path, right: list[bool]) -> list[dict]:
    """Grade 2 hand-written responses per problem with the real pipeline: sample 0 is the gold answer when
    ``right[i]``, else ``1+1``; sample 1 is always ``1+1``. Writes what ``harness eval --out`` writes."""
    from harness.evals.evaluate import score_suite
    from harness.evals.suites import resolve_suites
    from harness.io import write_jsonl

    (suite,) = resolve_suites("pocket_countdown")
    problems = suite.load(limit=len(right))
    protocol = suite.protocol.with_overrides(n_samples=2, temperature=0.6)
    responses = {p["id"]: [p["answer"] if ok else "1+1", "1+1"] for p, ok in zip(problems, right)}
    result, graded = score_suite(suite, problems, responses, protocol)
    out = run_dir / "eval" / "samples"
    out.mkdir(parents=True)
    write_jsonl(out / f"{suite.name}.graded.jsonl", graded)
    (out / "results.json").write_text(json.dumps({"suites": {suite.name: result}, "engine": "hf"}))
    return graded


def make_runs_folder(root: Path) -> Path:
    """The runs folder of the module docstring under ``root``."""
    for (model, method, seed), v in FINAL.items():
        write_run(root, model, method, seed, v)
    write_run(root, "pocket-1m", "clip_cov", 0, None)
    write_graded(root / "pocket-0.3m__grpo__s0", [True, True, False, True, False, False])
    write_graded(root / "pocket-0.3m__kl_cov__s0", [False, True, True, False, False, False])
    return root


@pytest.fixture
def runs_folder(tmp_path) -> Path:
    return make_runs_folder(tmp_path / "sweep_runs")


class Node:
    """An element of a parsed page: tag, attrs, children (Nodes and strings)."""

    def __init__(self, tag: str, attrs: dict, parent: Node | None = None):
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    def classes(self) -> set:
        return set((self.attrs.get("class") or "").split())

    def iter(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list[Node]:
        return [
            n
            for n in self.iter()
            if (tag is None or n.tag == tag)
            and (cls is None or cls in n.classes())
            and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def find(self, *a, **k) -> Node:
        found = self.find_all(*a, **k)
        assert found, f"no element {a} {k}"
        return found[0]


VOID = {"meta", "link", "br", "img", "input", "hr", "col", "source"}


def parse_page(text: str) -> Node:
    """A small tree of the page (stdlib html.parser; the site's own markup is well formed)."""
    from html.parser import HTMLParser

    root = Node("#root", {})

    class P(HTMLParser):
        cur = root

        def handle_starttag(self, tag, attrs):
            n = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
            self.cur.children.append(n)
            if tag not in VOID:
                self.cur = n

        def handle_endtag(self, tag):
            n = self.cur
            while n is not root and n.tag != tag:
                n = n.parent
            if n is not root:
                self.cur = n.parent

        def handle_data(self, data):
            self.cur.children.append(data)

    p = P(convert_charrefs=True)
    p.feed(text)
    return root


@pytest.fixture(scope="session")
def read_page():
    """``read_page(path)`` -> the parsed page."""
    return lambda path: parse_page(Path(path).read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def make_runs():
    """``make_runs(root)`` writes the runs folder of the module docstring (for module-scoped fixtures)."""
    return make_runs_folder
