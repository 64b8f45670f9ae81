"""Which differences a leaderboard marks (bold): one family-wise rule for every mark of a table.

A table's comparisons are its Δ-vs-baseline tests (each non-baseline row against its block's baseline) and its
best-vs-runner-up tests (each block's top row against the second, per column). Every such test of the table is one
family: a mark needs its two-sided t test (paired on same-seed differences, Welch's when the seeds do not match;
``stats.difference_test``) to stay below ``ALPHA`` after Holm's step-down adjustment over the whole family
(``stats.holm``), and at least ``MIN_SEEDS`` seeds in each arm (fewer: the test is not run, so it neither marks nor
counts in the family). A test shown in several columns (the same two rows on the same per-seed values, e.g. the
suite and both averages of a one-suite table, or a best-vs-runner-up that is also a Δ vs the baseline) counts
once. The ± intervals a table prints stay per comparison (unadjusted).

Before issue 35 a mark needed only the unadjusted 95% interval to exclude zero, at any n ≥ 2: with 3 seeds and
12 comparisons, the quickstart's marks changed completely on another CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import stats

ALPHA = 0.05  # family-wise error rate of a table's marks
MIN_SEEDS = 5  # seeds per arm (paired: common seeds) below which no test is run and nothing is marked


@dataclass
class Comparison:
    """One place a mark could go: ``kind`` "delta" (row ``row`` vs the baseline row ``other`` in column ``col``)
    or "best" (top row ``row`` vs the runner-up ``other``); ``a`` and ``b`` are ``{seed: value}``."""

    kind: str
    row: int
    other: int
    col: str
    a: dict
    b: dict
    n: int = 0  # seeds the test would use (paired: common seeds; Welch: the smaller arm)
    p: float = math.nan
    p_holm: float = math.nan
    marked: bool = False


@dataclass
class Family:
    """What the table's notes say about its marks."""

    comparisons: list[Comparison] = field(default_factory=list)
    tests: int = 0  # distinct tests run (the Holm family size m)
    below_min: int = 0  # comparisons with fewer than MIN_SEEDS seeds per arm: no test
    max_seeds: int = 0  # the most seeds any comparison had

    @property
    def marked(self) -> int:
        return sum(c.marked for c in self._distinct())

    @property
    def unadjusted(self) -> int:
        return sum(c.p < ALPHA for c in self._distinct() if math.isfinite(c.p))

    def _distinct(self) -> list[Comparison]:
        seen, out = set(), []
        for c in self.comparisons:
            k = _identity(c)
            if math.isfinite(c.p) and k not in seen:
                seen.add(k)
                out.append(c)
        return out


def _identity(c: Comparison) -> tuple:
    """The data a test reads, whichever way round and in whichever column it is shown (values to 1e-9: a
    one-suite row's sample-weighted average is its suite's score up to the last bits)."""
    side = lambda row, vals: (row, tuple(sorted((str(k), round(float(v), 9)) for k, v in vals.items())))  # noqa: E731
    return tuple(sorted([side(c.row, c.a), side(c.other, c.b)]))


def decide(comparisons: list[Comparison]) -> Family:
    """Run each comparison's test (when each arm has ``MIN_SEEDS`` seeds), Holm over the distinct tests, and set
    ``p``, ``p_holm`` and ``marked`` on every comparison."""
    fam = Family(comparisons=comparisons)
    tests: dict[tuple, list[Comparison]] = {}
    untested = set()
    for c in comparisons:
        iv, p = stats.difference_test(c.a, c.b)
        c.n = iv.n
        fam.max_seeds = max(fam.max_seeds, iv.n)
        if iv.n < MIN_SEEDS or not math.isfinite(p):
            untested.add(_identity(c))
            continue
        c.p = p
        tests.setdefault(_identity(c), []).append(c)
    fam.below_min = len(untested)
    keys = list(tests)
    adjusted = stats.holm([tests[k][0].p for k in keys])
    for k, q in zip(keys, adjusted):
        for c in tests[k]:
            c.p_holm = q
            c.marked = q < ALPHA
    fam.tests = len(keys)
    return fam


def rule(fam: Family) -> str:
    """The csv's ``mark_rule``: the adjustment, its family size and the minimum n, machine-readable."""
    return f"holm;alpha={ALPHA};m={fam.tests};min_seeds={MIN_SEEDS}"


def note(fam: Family) -> str:
    """The notes line naming the adjustment and what it left marked."""
    how = (
        f"bold only when significant after Holm's adjustment over every test of the table (family-wise α = {ALPHA}; "
        "one family: all Δ-vs-baseline tests and all best-vs-runner-up tests; a test shown in several columns "
        "counts once); two-sided t test on the same-seed differences (Welch's t when seeds do not match); "
        f"a test needs at least {MIN_SEEDS} seeds per arm"
    )
    if fam.tests == 0:
        seeds = f"at most {fam.max_seeds} seed(s) per arm" if fam.comparisons or fam.max_seeds else "no comparison"
        return (
            f"MARKS: {how}. This table has {seeds}: no test is run and nothing is marked. The ± intervals are "
            "per comparison (unadjusted 95%)."
        )
    skipped = f"; {fam.below_min} comparison(s) below {MIN_SEEDS} seeds not tested" if fam.below_min else ""
    return (
        f"MARKS: {how}. m = {fam.tests} test(s): {fam.marked} marked ({fam.unadjusted} with unadjusted "
        f"p < {ALPHA}){skipped}. The ± intervals are per comparison (unadjusted 95%)."
    )
