"""Gold answers for the grader: normalisation, and the self-check that the grader can verify an answer at all.

The prepared answer is the grader's own normalisation (``harness.evals.math_grader.normalize_answer``: ``$..$``,
``\\boxed{}``, thousands separators, zero padding, integral floats) of the source's ground truth with its whitespace
collapsed (Eurus matrices hold newlines; LaTeX reads a newline as a space).

An answer is ungradable (``gold_problem`` returns the reason) when:

- ``empty_answer``: nothing is left (Eurus-2-RL-Data at the pinned commit has rows whose ground truth is null);
- ``unboxable``: ``\\boxed{answer}`` does not read back as the answer (unbalanced braces), so no response can box it;
- ``grader_rejects``: the grader marks ``\\boxed{answer}`` wrong against the answer itself;
- ``unparseable``: math-verify finds no mathematical object in it (only the raw string comes back), so only a
  character-identical box could score and no equivalent form ever would. The parse is the one ``grade_math`` does
  for the gold (``LatexExtractionConfig`` on ``\\boxed{gold}``, then expression + LaTeX on the bare text).

A plain ``grade_math(f"\\boxed{{{a}}}", a)`` alone would accept nearly everything: the grader compares normalised
strings before it parses, so a gold always equals itself as text. The parse is what tells a gradable answer apart.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence

PARSE_TIMEOUT_S = 5
_PLAIN_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")  # math-verify always parses these: skip the ~4 ms parse
REASONS = {
    "empty_answer": "empty",
    "unboxable": "\\boxed{answer} does not read back as the answer (unbalanced braces)",
    "grader_rejects": "the grader marks \\boxed{answer} wrong against the answer itself",
    "unparseable": "math-verify finds no mathematical expression in it, so only a character-identical answer scores",
}


def _grader():
    try:
        from harness.evals import math_grader
    except ImportError as e:  # math-verify is in the eval extra
        raise ValueError(
            f"harness data needs the math grader's dependencies ({e.name or e}): pip install 'entropy-harness[eval]'"
        ) from None
    return math_grader


def normalise_gold(raw) -> str:
    """The answer as the prepared file holds it ('' for a missing one)."""
    if raw is None:
        return ""
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    text = " ".join(str(raw).split())
    return _grader().normalize_answer(text).strip() if text else ""


def gold_problem(answer: str) -> str | None:
    """None when the grader can verify ``answer``; else a key of ``REASONS``."""
    if not answer or not answer.strip():
        return "empty_answer"
    mg = _grader()
    boxed = "\\boxed{" + answer + "}"
    if mg.extract_last_boxed(boxed) != answer.strip():
        return "unboxable"
    if not mg.grade_math(boxed, answer).correct:
        return "grader_rejects"
    norm = mg.normalize_answer(answer)
    if not _PLAIN_NUMBER.match(norm) and not _parses_to_math(norm):
        return "unparseable"
    return None


def _parses_to_math(gold: str) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    timeout = PARSE_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None  # SIGALRM
    try:
        found = parse("\\boxed{" + gold + "}", [LatexExtractionConfig()], parsing_timeout=timeout)
        if not found:
            found = parse(gold, [ExprExtractionConfig(), LatexExtractionConfig()], parsing_timeout=timeout)
    except BaseException as e:  # math-verify's TimeoutException subclasses BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return False
    return any(not isinstance(x, str) for x in found)


def gold_problems(answers: Sequence[str], workers: int | None = None, chunk: int = 256) -> list[str | None]:
    """``gold_problem`` of every answer, in order; in worker processes (forked, so math-verify's SIGALRM timeouts
    work there) when there are many."""
    workers = max(1, workers or os.cpu_count() or 1)
    if workers == 1 or len(answers) <= 2 * chunk:
        return [gold_problem(a) for a in answers]
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    _grader()  # import (and fail clearly) before forking
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context(method)) as pool:
        return list(pool.map(gold_problem, answers, chunksize=chunk))
