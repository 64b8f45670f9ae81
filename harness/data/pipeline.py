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
    from harness.io import check_output_dir

    src = get_source(name)
    template_name, template_text = resolve_template(template)
    check_output_dir(out_dir, "--out")
    jsonl_path, manifest_path = output_paths(out_dir, name)

    rows, described = _read(src, source, revision)
    where = described["source"].get("path") or src.hub_id
    log(f"{name}: read {len(rows)} rows from {where}")
    _check_columns(src, rows, where)
    tally = _Tally()
    entries = _unique_problems(src, rows, tally)
    out_rows, checked_rows = _gradable_rows(entries, template_text, workers, tally)
    if not out_rows:
        raise ValueError(f"{name}: no row left of {len(rows)} ({_counts_text(tally.dropped)}); nothing written")

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
        "counts": tally.counts(len(rows), len(out_rows)),
        "template": {
            "name": template_name,
            "text": template_text,
            "removed_from_source": {part: src.removed_text.get(part, part) for part in sorted(tally.removed)},
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
    log(f"{name}: kept {len(out_rows)} of {len(rows)} rows; dropped: {_counts_text(tally.dropped) or 'none'}")
    return _write_prepared(name, jsonl_path, manifest_path, text, manifest, same_rows, log)


def _check_columns(src: Source, rows: list, where: str) -> None:
    """Refuse a source with no rows, or whose rows lack a column of the hub schema (a file in another schema would
    otherwise lose every row to a misleading reason, such as not_math)."""
    if not rows:
        raise ValueError(f"{src.name}: {where}: no rows; nothing written")
    found = sorted({k for r in rows if isinstance(r, dict) for k in r})
    missing = [f for f in src.fields if f not in found]
    if missing:
        shown = ", ".join(found[:12]) + (" ..." if len(found) > 12 else "")
        raise ValueError(
            f"{src.name}: {where}: no row has the column(s) {', '.join(missing)} (found: {shown or 'none'}); "
            f"{src.name} reads the {src.hub_id} schema ({', '.join(src.fields)}); nothing written"
        )


class _Tally:
    """What ``prepare`` dropped (reason -> count, and the first row of each) and the instruction parts it removed."""

    def __init__(self):
        self.dropped: Counter = Counter()
        self.examples: dict[str, int] = {}
        self.removed: Counter = Counter()

    def drop(self, reason: str, row_index: int) -> None:
        self.dropped[reason] += 1
        self.examples.setdefault(reason, row_index)

    def counts(self, read: int, kept: int) -> dict:
        return {
            "read": read,
            "kept": kept,
            "dropped": dict(sorted(self.dropped.items())),
            "first_dropped_row": dict(sorted(self.examples.items())),
            "instruction_removed": {part: self.removed[part] for part in sorted(self.removed)},
        }


def _unique_problems(src: Source, rows: list, tally: _Tally) -> list[list]:
    """1. extract; 2. normalise; 3. deduplicate (conflicting answers drop the problem): ``[row index, problem,
    answer, extracted]`` per problem kept, in row order."""
    kept: dict[str, list] = {}  # problem key -> [row index, problem, answer, extracted]
    conflicts: dict[str, int] = {}
    for i, row in enumerate(rows):
        ex = src.extract(row if isinstance(row, dict) else {})
        if ex.drop:
            tally.drop(ex.drop, i)
            continue
        tally.removed.update(ex.removed)
        answer = normalise_gold(ex.answer)
        key = " ".join(ex.problem.split())
        if not key:
            tally.drop("unrecognised_prompt", i)
        elif key in conflicts:
            conflicts[key] += 1
        elif key in kept:
            if kept[key][2] == answer:
                tally.drop("duplicate", i)
            else:
                conflicts[key] = 2
                tally.examples.setdefault("conflicting_answer", kept.pop(key)[0])
        else:
            kept[key] = [i, ex.problem, answer, ex]
    for n in conflicts.values():
        tally.dropped["conflicting_answer"] += n
    return list(kept.values())


def _gradable_rows(entries: list[list], template_text: str, workers, tally: _Tally) -> tuple[list[dict], list]:
    """4. the problems whose answer the grader can score, in the template, asking for no other format: the output
    rows and ``(line, prompt, answer)`` for the checks."""
    verdicts = gold_problems([e[2] for e in entries], workers=workers)
    out_rows, checked_rows = [], []
    for (i, problem, answer, ex), verdict in zip(entries, verdicts):
        if verdict:
            tally.drop(verdict, i)
            continue
        prompt = render(template_text, problem)
        if format_problem(prompt):  # the problem itself still asks for another format
            tally.drop("prompt_format", i)
            continue
        out_rows.append({"prompt": prompt, "answer": answer, "data_source": ex.data_source, "index": ex.index})
        checked_rows.append((len(out_rows), prompt, answer))
    return out_rows, checked_rows


def _write_prepared(name, jsonl_path: Path, manifest_path: Path, text: str, manifest: dict, same_rows: bool, log):
    """Write the rows and the manifest; rows already there are kept, and the manifest refreshed only if its story
    (all but ``created``) changed. Returns the manifest on disk."""
    from harness.io import atomic_write_json, atomic_write_text

    if same_rows:
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
