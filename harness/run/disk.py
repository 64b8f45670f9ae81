"""A run's disk plan: the bytes it holds at its peak, term by term (docs/gpu.md "Disk plans and retention").

A backend whose runs keep large files builds one (``Backend.disk_plan``) from its checkpoint terms and the two
every backend shares, made here: the after-training stage's generations and the logs. A sweep adds its cells'
plans and refuses a spec whose cell exceeds ``resources.disk_gb`` or whose total exceeds the free space
(harness/sweeps/disk.py). An estimate, not a measurement: each term names how it is counted. Disk is counted in
GB (10^9 bytes), as ``df -H`` and disk vendors count it.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 10**9
# the after-training stage writes each generation twice (<suite>.generations.jsonl with its prompt,
# <suite>.graded.jsonl with its verdict): an allowance of 4 bytes of text per generated token in each (math text
# in a byte-level BPE runs 3-4 characters a token; not measured on the paper's models), plus 1 kB per row for the
# prompt, ids and grading fields
GENERATION_BYTES_PER_TOKEN = 2 * 4
GENERATION_ROW_BYTES = 1000
# logs per training step (metrics.jsonl row, the backend's own log, train.log, in-loop eval results): an allowance.
# The CPU rehearsal wrote a 1.6 kB metrics row and a 3.3 kB step line to openrlhf.log per step, and ~20 kB of
# start-up per launch (docs/gpu.md "Disk plans and retention"); a GPU run's progress bars add more
LOG_BYTES_PER_STEP = 64 * 1024


@dataclass(frozen=True)
class DiskTerm:
    """``copies`` x ``each`` bytes; ``how`` says how one copy is counted."""

    name: str
    copies: int
    each: float
    how: str = ""

    @property
    def total(self) -> float:
        return self.copies * self.each

    def line(self) -> str:
        count = f"{self.copies} x {self.each / GB:.2f} = " if self.copies != 1 else ""
        return f"{self.name:<22} {count}{self.total / GB:.2f} GB" + (f"  ({self.how})" if self.how else "")


@dataclass(frozen=True)
class DiskPlan:
    """The terms of one run at its peak and the retention that sets their counts."""

    terms: tuple[DiskTerm, ...]
    retention: str  # the settings behind the counts, in words

    @property
    def total(self) -> float:
        return sum(t.total for t in self.terms)

    def lines(self) -> list[str]:
        return [
            f"disk plan (estimate at the run's peak; docs/gpu.md 'Disk plans and retention'): {self.total / GB:.1f} GB",
            f"  retention: {self.retention}",
            *(f"  {t.line()}" for t in self.terms),
        ]


def shared_terms(cfg, work) -> tuple[DiskTerm, ...]:
    """The terms every run has: the after-training generations (``work``: ``after_training.planned_work``) and
    the logs of ``train.steps`` steps."""
    generations = sum(w.generations for w in work)
    stage = sum(w.generations * (w.max_tokens * GENERATION_BYTES_PER_TOKEN + GENERATION_ROW_BYTES) for w in work)
    unknown = [w.suite for w in work if w.problems is None]
    how = f"{generations} generations of at most {max((w.max_tokens for w in work), default=0)} tokens, 8 B a token"
    if unknown:
        how += f"; not counted: {', '.join(unknown)} (size unknown before its data loads)"
    return (
        DiskTerm("eval generations", 1, stage, how),
        DiskTerm("logs", 1, cfg.train.steps * LOG_BYTES_PER_STEP, f"{cfg.train.steps} steps x 64 KiB"),
    )
