"""The metrics.jsonl contract in one place (docs/contracts.md §3): key names, run statuses, the start/end window.

Producers (the backends' trainers, ``harness.run.tracking``) write these keys; consumers (``harness.run.records``,
``harness.results``, ``harness.site``) read them. The values are the on-disk names: never change one, or every
metrics.jsonl already written stops being readable. No torch, no pandas: importable from anywhere.

**The start / end window.** A run's start (end) value of a per-step metric is the mean over its first (last)
``edge_steps(N)`` logged steps, N = the number of logged steps: a tenth of them rounded down, at least 1, at most
``EDGE_MAX`` = 5 (quickstart's 50 steps -> 5; 25 -> 2; the mechanism's 500 -> 5, its registered window,
docs/mechanism_prereg.md). result.json's ``summary``, ``harness mechanism`` and the leaderboard's entropy columns
all use it, so they give one number for one run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# ---------------------------------------------------------------- metrics.jsonl keys (one row per step)
STEP = "step"  # the optimizer step the row describes (1-based; eval rows: the number of updates made)
ENTROPY = "entropy"  # official policy entropy: T = 1, token mean per response, mean over the trained responses
ENTROPY_GENERATED = "entropy/generated"  # the same over every generated response, before dynamic filtering
ENTROPY_DELTA = "entropy/delta"  # entropy minus the previous step's
ENTROPY_AFTER_UPDATE = "entropy/after_update"  # the trained batch's entropy under the updated weights
ENTROPY_UPDATE_DELTA = "entropy/update_delta"  # the trained batch's entropy change across its update
REWARD_MEAN = "reward/mean"  # mean training reward of the step's generated responses
RESPONSE_LENGTH = "response/length"  # mean response length in tokens
UPDATE_SKIPPED = "update/skipped"  # present (true) on a step that made no policy update
EVAL_PREFIX = "eval/"  # eval rows and tracker keys: eval/<suite>/<metric>, e.g. eval/countdown/avg@4


def eval_key(suite: str, metric: str) -> str:
    """``eval/<suite>/<metric>``: an eval score's key in metrics.jsonl rows and trackers."""
    return f"{EVAL_PREFIX}{suite}/{metric}"


def add_eval(row: dict, doc: dict) -> None:
    """A step's eval document's metrics into its metrics row as ``eval/<suite>/<metric>``."""
    for suite, res in doc["suites"].items():
        for mk, mv in res["metrics"].items():
            row[eval_key(suite, mk)] = mv


# ---------------------------------------------------------------- result.json: statuses and the summary
COMPLETED = "completed"
INSUFFICIENT_UPDATES = "insufficient_updates"  # finished with fewer than half the expected updates: shown flagged
FAILED = "failed"
INTERRUPTED = "interrupted"
FINISHED = (COMPLETED, INSUFFICIENT_UPDATES)  # done: read by tables, never retrained or retried

ENTROPY_START, ENTROPY_END = "entropy_start", "entropy_end"
REWARD_START, REWARD_END = "reward_start", "reward_end"
SUMMARY_KEYS = {ENTROPY: (ENTROPY_START, ENTROPY_END), REWARD_MEAN: (REWARD_START, REWARD_END)}

# the paper's methods in its order (Cui et al. 2025, Table 2), then the methods zoo's; tables, plots and the site
# sort rows by it (a method not listed comes after every listed one)
METHOD_ORDER = ["grpo", "rloo", "prime", "entropy_bonus", "clip_higher", "clip_cov", "kl_cov"]
METHOD_ORDER += ["adaptive_entropy", "high_entropy_tokens", "gspo", "cispo", "sapo", "ce_gppo", "w_reinforce"]
METHOD_ORDER += ["entropy_advantage"]


def method_rank(method: str) -> int:
    """A method's place in ``METHOD_ORDER`` (a method not listed: after every listed one)."""
    return METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)


# ---------------------------------------------------------------- the one start / end window
EDGE_MAX = 5


def edge_steps(n_steps: int) -> int:
    """Steps averaged at each end of a run of ``n_steps`` logged steps: a tenth rounded down, at least 1, at most
    ``EDGE_MAX`` (15 -> 1, 25 -> 2, 50 -> 5, 500 -> 5). Rounding down keeps the ends apart in short runs."""
    return min(EDGE_MAX, max(1, int(n_steps) // 10))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def edge_means(values: Sequence, n_steps: int | None = None) -> tuple[float | None, float | None]:
    """(start, end): means of ``values`` (one per logged step, in step order; None = not logged that step, skipped,
    never counted as 0) over the first and last ``edge_steps(n_steps)`` steps (default: ``len(values)``)."""
    n = edge_steps(len(values) if n_steps is None else n_steps)

    def mean(part):
        vals = [v for v in part if _number(v)]
        return sum(vals) / len(vals) if vals else None

    return (mean(values[:n]), mean(values[-n:])) if len(values) else (None, None)


def summarize(rows: Iterable[dict]) -> dict:
    """result.json's ``summary``: ``entropy_start/end``, ``reward_start/end`` of metrics.jsonl rows (rows without a
    ``step`` are not steps and are left out)."""
    rows = [r for r in rows if STEP in r]
    if not rows:
        return {}
    out = {}
    for key, (start, end) in SUMMARY_KEYS.items():
        out[start], out[end] = edge_means([r.get(key) for r in rows])
    return {k: out[k] for k in (ENTROPY_START, ENTROPY_END, REWARD_START, REWARD_END)}


def summary_line(summary: dict) -> str:
    """The runners' closing line: ``entropy a -> b, reward c -> d``."""
    s = summary or {}
    entropy = f"entropy {s.get(ENTROPY_START)} -> {s.get(ENTROPY_END)}"
    return f"{entropy}, reward {s.get(REWARD_START)} -> {s.get(REWARD_END)}"
