"""Sample-level metrics: avg@k, unbiased pass@k, maj@k over answer-equivalence classes, with standard errors.

Differences from other harnesses: pass@k is Chen et al.'s unbiased estimator ``1 - C(n-c,k)/C(n,k)`` (not
verl's bootstrap ``best@N``, not KodCode's "any of the first k"), and a k larger than a problem's sample count
is an error instead of being silently dropped (HF ``code_eval``). Standard errors are over problems
(sample std / sqrt(#problems)); for avg@k that treats each problem's mean over its samples as one draw.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples of which ``c`` are correct."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least k={k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for fewer than two values)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def majority_correct(
    answers: Sequence[Hashable | None], correct: Sequence[bool], same: Callable[[object, object], bool] | None = None
) -> bool:
    """maj@k for one problem: is the largest answer-equivalence class a correct one?

    Samples without an extracted answer (None) do not vote. Classes are formed greedily with ``same`` (default
    exact equality of the normalised answer); a tie is broken by the class seen first, as Qwen's
    ``rm_maj_eval`` does. Members of one class share correctness, so the class is correct if its first is."""
    classes: list[list[int]] = []
    for i, a in enumerate(answers):
        if a is None:
            continue
        for cls in classes:
            rep = answers[cls[0]]
            if same(rep, a) if same else rep == a:
                cls.append(i)
                break
        else:
            classes.append([i])
    if not classes:
        return False
    best = max(classes, key=len)  # max keeps the first among equals
    return bool(correct[best[0]])


def summarize(per_problem: Sequence[dict], k: int | None = None) -> dict[str, float]:
    """Metrics over problems. Each entry: ``{"correct": [bool]*n, "answers": [key|None]*n (optional)}``.

    Returns ``avg@k``, ``avg@k_stderr``, ``pass@k``, ``pass@k_stderr``, ``maj@k`` (when answers are given and
    k > 1) and ``pass@1``. ``k`` defaults to the per-problem sample count (which must then be equal)."""
    if not per_problem:
        raise ValueError("no problems to summarise")
    ns = {len(p["correct"]) for p in per_problem}
    if k is None:
        if len(ns) != 1:
            raise ValueError(f"problems have different sample counts {sorted(ns)}; pass k explicitly")
        k = ns.pop()
    avg = [sum(p["correct"]) / len(p["correct"]) for p in per_problem]
    passk = [pass_at_k(len(p["correct"]), sum(p["correct"]), k) for p in per_problem]
    out: dict[str, float] = {}
    out[f"avg@{k}"], out[f"avg@{k}_stderr"] = mean_and_stderr(avg)
    if k > 1:
        out[f"pass@{k}"], out[f"pass@{k}_stderr"] = mean_and_stderr(passk)
        if all("answers" in p for p in per_problem):
            maj = [float(majority_correct(p["answers"], p["correct"])) for p in per_problem]
            out[f"maj@{k}"], out[f"maj@{k}_stderr"] = mean_and_stderr(maj)
    return out


def answer_key(pred: str | None) -> str | None:
    """Equivalence key of an extracted math answer for maj@k: the normalised string without spaces, except the
    one after a list comma (``1, 2`` must not become ``1,2``, which the grader also reads as the number 1.2)."""
    if pred is None:
        return None
    from .math_grader import normalize_answer

    key = re.sub(r",\s+", ", ", normalize_answer(pred))  # a list keeps its ", ": "1,2" reads as a decimal comma
    return re.sub(r"(?<!,)\s+", "", key).replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
