"""Refusal checks for a training file of ``{prompt, answer}`` rows (what both backends read).

``check_training_file(path)`` refuses, with one line naming the count and an example:

1. prompts that do not ask for the format the reward reads (the last ``\\boxed{}``), or that ask for another one
   (``harness.data.templates.format_problem``; every row is checked);
2. gold answers the grader cannot verify against themselves (``harness.data.gold.gold_problem``), on a seeded sample
   of ``sample`` rows (all rows when ``sample`` is 0 or at least the row count).

The OpenRLHF backend calls it at config load; ``harness data check FILE`` runs it by hand; ``harness data prepare``
runs it on what it is about to write.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.io import jsonl_lines

from .gold import REASONS as GOLD_REASONS
from .gold import gold_problems
from .templates import FORMAT_REASONS, format_problem

DEFAULT_SAMPLE = 256
DEFAULT_SEED = 0


class TrainingDataError(ValueError):
    """A training set the reward cannot score; the message is one line with the count and an example."""


@dataclass
class CheckSummary:
    path: str
    rows: int
    sha256: str | None
    gold_checked: int
    gold_seed: int
    input_key: str = "prompt"
    label_key: str = "answer"

    def to_dict(self) -> dict:
        return asdict(self)


def prompt_text(prompt) -> str | None:
    """The text a prompt shows the model: a string, or the contents of a list of chat messages."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in prompt):
        return "\n".join(m["content"] for m in prompt)
    return None


def _snippet(text: str, width: int = 90) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def check_rows(
    rows: Sequence[tuple[int, str, str]],
    where: str,
    *,
    sample: int = DEFAULT_SAMPLE,
    seed: int = DEFAULT_SEED,
    workers: int | None = 1,
) -> int:
    """Run both checks on ``(line, prompt text, answer)`` rows; raise ``TrainingDataError``; return how many gold
    answers were checked."""
    if not rows:
        raise TrainingDataError(f"{where}: no rows")
    bad = [(ln, text, r) for ln, text, _ in rows if (r := format_problem(text))]
    if bad:
        other = sum(1 for *_, r in bad if r == "other_format")
        ln, text, reason = bad[0]
        raise TrainingDataError(
            f"{where}: {len(bad)} of {len(rows)} prompts do not ask for the answer in \\boxed{{}}, the only format "
            f"the reward reads ({other} ask for another format); e.g. line {ln} {FORMAT_REASONS[reason]}: "
            f"{_snippet(text)!r}. Convert the data with `harness data prepare`"
        )
    picked = list(range(len(rows)))
    if 0 < sample < len(rows):
        picked = sorted(random.Random(seed).sample(picked, sample))
    verdicts = gold_problems([rows[i][2] for i in picked], workers=workers)
    failed = [(rows[i][0], rows[i][2], v) for i, v in zip(picked, verdicts) if v]
    if failed:
        ln, answer, reason = failed[0]
        raise TrainingDataError(
            f"{where}: {len(failed)} of {len(picked)} sampled gold answers (seed {seed}) cannot be verified by the "
            f"grader against themselves; e.g. line {ln}: answer {_snippet(answer)!r} ({GOLD_REASONS[reason]}). "
            f"`harness data prepare` drops such rows"
        )
    return len(picked)


def read_training_rows(path: Path, input_key: str, label_key: str) -> list[tuple[int, str, str]]:
    """``(line, prompt text, answer)`` of a JSONL file; a malformed line is an error naming it."""
    out = []
    try:
        lines = jsonl_lines(path)
    except ValueError as e:
        raise TrainingDataError(str(e)) from None
    for ln, row in lines:
        if not isinstance(row, dict) or input_key not in row or label_key not in row:
            raise TrainingDataError(f"{path}:{ln}: needs the fields {input_key!r} and {label_key!r}")
        text = prompt_text(row[input_key])
        if text is None:
            what = "a string or a list of {role, content} messages"
            raise TrainingDataError(f"{path}:{ln}: {input_key!r} must be {what}")
        answer = row[label_key]
        out.append((ln, text, "" if answer is None else str(answer)))
    return out


def check_training_file(
    path: str | Path,
    *,
    input_key: str = "prompt",
    label_key: str = "answer",
    sample: int = DEFAULT_SAMPLE,
    seed: int = DEFAULT_SEED,
    workers: int | None = 1,
) -> CheckSummary:
    """Check a JSONL training file (see the module docstring); raise ``TrainingDataError`` (a ``ValueError``) with
    one line, or return what was checked."""
    from harness.provenance import file_sha256

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"training file not found: {path}")
    if not path.name.lower().endswith((".jsonl", ".json")):
        raise TrainingDataError(f"{path}: the check reads JSONL files of {{{input_key}, {label_key}}} rows")
    rows = read_training_rows(path, input_key, label_key)
    checked = check_rows(rows, str(path), sample=sample, seed=seed, workers=workers)
    return CheckSummary(str(path), len(rows), file_sha256(path), checked, seed, input_key, label_key)
