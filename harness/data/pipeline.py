"""``prepare(name, out_dir, ...)``: a training source -> ``<out_dir>/<name>.jsonl`` + ``<name>.manifest.json``.

Steps: read the rows (hub at a pinned revision, the shipped sample, or a local file in the hub schema); keep the
math rows; take the source's own answer instruction off the problem (the exact texts are in the manifest);
normalise the answer for the grader; drop duplicate problems (same text after whitespace collapse; a problem seen
with two different answers is dropped entirely: ``conflicting_answer``) and ungradable answers (``gold.py``); put
the problem into the template (default: the paper's); check the result (``check.py``: every prompt asks for
``\\boxed{}``, a seeded sample of gold answers self-verifies); write both files atomically, the manifest last.
Nothing is written when a check fails or no row is left.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from harness.provenance import file_sha256

from .check import DEFAULT_SAMPLE, DEFAULT_SEED, check_rows
from .gold import gold_problems, normalise_gold
from .sources import Source, get_source, hub_rows, read_file_rows, sha256_rows
from .templates import format_problem, render, resolve_template

MANIFEST_SCHEMA = 1


def output_paths(out_dir: str | Path, name: str) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    return out_dir / f"{name}.jsonl", out_dir / f"{name}.manifest.json"


def manifest_of(jsonl_path: str | Path) -> dict | None:
    """The manifest ``prepare`` wrote next to a training file (None when there is none)."""
    path = Path(jsonl_path)
    m = path.with_name(path.name.removesuffix(".jsonl") + ".manifest.json")
    return json.loads(m.read_text()) if m.is_file() else None


def _read(src: Source, source: str, revision: str | None) -> tuple[list[dict], dict]:
    """Rows and the manifest's ``source`` + ``input`` description."""
    if source == "hub":
        rev = revision or src.revision
        rows = hub_rows(src.hub_id, revision=rev, split=src.split)
        where = {"kind": "hub", "hub_id": src.hub_id, "split": src.split, "revision": rev}
        where["revision_note"] = src.revision_note if rev == src.revision else "given with --revision"
        return rows, {"source": where, "input": {"sha256": sha256_rows(rows), "hashed": "rows as canonical JSON"}}
    path = src.sample if source == "sample" else Path(source)
    rows = read_file_rows(path)
    kind = "sample" if source == "sample" else "file"
    where = {"kind": kind, "hub_id": src.hub_id, "path": str(path), "revision": revision}
    where["revision_note"] = (
        "as stated with --revision"
        if revision
        else ("the project's shipped sample in the hub schema, not hub data" if kind == "sample" else "not given")
    )
    return rows, {"source": where, "input": {"sha256": file_sha256(path), "hashed": "file bytes"}}


def prepare(
    name: str,
    out_dir: str | Path,
    *,
    source: str = "hub",
    revision: str | None = None,
    template: str = "paper",
    force: bool = False,
    workers: int | None = None,
    sample: int = DEFAULT_SAMPLE,
    seed: int = DEFAULT_SEED,
    log: Callable[[str], None] = lambda s: None,
) -> dict:
    """Prepare ``name`` into ``out_dir``; return the manifest. Raises ``ValueError`` (bad input, a failed check)
    or ``FileNotFoundError`` (missing source) before writing anything."""
    from harness.io import atomic_write_json, atomic_write_text, check_output_dir

    src = get_source(name)
    template_name, template_text = resolve_template(template)
    check_output_dir(out_dir, "--out")
    jsonl_path, manifest_path = output_paths(out_dir, name)

    rows, described = _read(src, source, revision)
    log(f"{name}: read {len(rows)} rows from {described['source'].get('path') or src.hub_id}")
    dropped: Counter = Counter()
    examples: dict[str, int] = {}
    removed: Counter = Counter()

    def drop(reason: str, row_index: int) -> None:
        dropped[reason] += 1
        examples.setdefault(reason, row_index)

    # 1. extract; 2. normalise; 3. deduplicate (conflicting answers drop the problem)
    kept: dict[str, list] = {}  # problem key -> [row index, problem, answer, extracted]
    conflicts: dict[str, int] = {}
    for i, row in enumerate(rows):
        ex = src.extract(row if isinstance(row, dict) else {})
        if ex.drop:
            drop(ex.drop, i)
            continue
        removed.update(ex.removed)
        answer = normalise_gold(ex.answer)
        key = " ".join(ex.problem.split())
        if not key:
            drop("unrecognised_prompt", i)
        elif key in conflicts:
            conflicts[key] += 1
        elif key in kept:
            if kept[key][2] == answer:
                drop("duplicate", i)
            else:
                conflicts[key] = 2
                examples.setdefault("conflicting_answer", kept.pop(key)[0])
        else:
            kept[key] = [i, ex.problem, answer, ex]
    for n in conflicts.values():
        dropped["conflicting_answer"] += n

    # 4. ungradable answers
    entries = list(kept.values())
    verdicts = gold_problems([e[2] for e in entries], workers=workers)
    out_rows, checked_rows = [], []
    for (i, problem, answer, ex), verdict in zip(entries, verdicts):
        if verdict:
            drop(verdict, i)
            continue
        prompt = render(template_text, problem)
        if format_problem(prompt):  # the problem itself still asks for another format
            drop("prompt_format", i)
            continue
        out_rows.append({"prompt": prompt, "answer": answer, "data_source": ex.data_source, "index": ex.index})
        checked_rows.append((len(out_rows), prompt, answer))
    if not out_rows:
        raise ValueError(f"{name}: no row left of {len(rows)} ({_counts_text(dropped)}); nothing written")

    # 5. the refusal checks on exactly what is written (line numbers of the output file)
    gold_checked = check_rows(checked_rows, str(jsonl_path), sample=sample, seed=seed, workers=workers)

    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out_rows)
    out_sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    same_rows = jsonl_path.exists() and file_sha256(jsonl_path) == out_sha
    if jsonl_path.exists() and not same_rows and not force:
        raise ValueError(f"--out {out_dir}: {jsonl_path.name} exists with other content; pass --force to replace it")

    manifest = {
        "schema_version": MANIFEST_SCHEMA,
        "name": name,
        "description": src.description,
        **described,
        "output": {"path": jsonl_path.name, "rows": len(out_rows), "sha256": out_sha, "hashed": "file bytes"},
        "counts": {
            "read": len(rows),
            "kept": len(out_rows),
            "dropped": dict(sorted(dropped.items())),
            "first_dropped_row": dict(sorted(examples.items())),
            "instruction_removed": {part: removed[part] for part in sorted(removed)},
        },
        "template": {
            "name": template_name,
            "text": template_text,
            "removed_from_source": {part: src.removed_text.get(part, part) for part in sorted(removed)},
        },
        "answer": "source ground truth, whitespace collapsed, then harness.evals.math_grader.normalize_answer",
        "check": {
            "gold_sample": sample,
            "gold_seed": seed,
            "gold_checked": gold_checked,
            "prompts_checked": len(out_rows),
        },
        "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    log(f"{name}: kept {len(out_rows)} of {len(rows)} rows; dropped: {_counts_text(dropped) or 'none'}")
    if same_rows:  # the rows are there already: keep the file; refresh the manifest only if its story changed
        old = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
        if {**old, "created": None} == {**manifest, "created": None}:
            log(f"{name}: {jsonl_path} and its manifest are up to date; nothing rewritten")
            return old
        atomic_write_json(manifest_path, manifest)
        log(f"{name}: {jsonl_path} is up to date; rewrote {manifest_path.name}")
        return manifest
    atomic_write_text(jsonl_path, text)
    atomic_write_json(manifest_path, manifest)
    log(f"{name}: wrote {jsonl_path} and {manifest_path.name}")
    return manifest


def _counts_text(counts: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
