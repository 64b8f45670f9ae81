"""(entropy, score) points for the entropy law, from run metrics or from exported CSV logs (W&B, TensorBoard).

Score choice (``score_key``): ``auto`` uses the validation score ``eval/<suite>/<primary metric>`` on eval steps
when the runs have a validation curve (at least 3 eval steps in some run; first suite in name order), else the
training reward ``reward/mean`` on every step;
any metrics.jsonl key can be named instead. The entropy is the ``entropy`` key of the same step.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.run.metrics import COMPLETED, EVAL_PREFIX, eval_key
from harness.run.metrics import ENTROPY as ENTROPY_KEY
from harness.run.metrics import ENTROPY_GENERATED as GENERATED_KEY  # noqa: F401  (re-exported)
from harness.run.metrics import ENTROPY_UPDATE_DELTA as UPDATE_DELTA_KEY  # noqa: F401  (re-exported)
from harness.run.metrics import REWARD_MEAN as REWARD_KEY

from .collect import Collection


def resolve_score_key(col: Collection, score_key: str = "auto") -> str:
    """The metrics column to use as the score R (see the module docstring)."""
    cols = set(col.metrics.columns)
    ev = col.evals.dropna(subset=["metric"])
    in_evals = {eval_key(s, m) for s, m in zip(ev["suite"], ev["metric"])}
    if score_key != "auto":
        if score_key not in cols and score_key not in in_evals:
            known = sorted(c for c in cols if "/" in c or c == ENTROPY_KEY)
            raise ValueError(f"score key {score_key!r} is not in any metrics.jsonl; keys present: {', '.join(known)}")
        return score_key
    for suite, metric in sorted(set(zip(ev["suite"], ev["metric"]))):
        key = eval_key(suite, metric)  # a validation curve: at least 3 eval steps in some run
        series = score_series(col, key, include_incomplete=True)
        if not series.empty and series.groupby("run_dir").size().max() >= 3:
            return key
    evals_logged = sorted(c for c in cols if c.startswith(EVAL_PREFIX) and col.metrics[c].notna().any())
    if evals_logged:
        return evals_logged[0]
    if REWARD_KEY in cols:
        return REWARD_KEY
    raise ValueError(f"no score to fit: the runs logged neither eval/<suite>/<metric> nor {REWARD_KEY}")


_IDENT = ["run_dir", "model", "model_params", "task", "label", "seed", "status"]


def score_series(col: Collection, score_key: str, include_incomplete: bool = False) -> pd.DataFrame:
    """(ident..., step, score) for every step that has the score. For ``eval/<suite>/<metric>`` the eval files
    are read too, so the eval before training (``eval/step_0.json``) is included."""
    m = col.metrics
    parts = []
    if score_key in m.columns:
        parts.append(m[["run_dir", "step", score_key]].rename(columns={score_key: "score"}))
    elif not score_key.startswith(EVAL_PREFIX):
        raise ValueError(f"score key {score_key!r} is not in any metrics.jsonl")
    if score_key.startswith(EVAL_PREFIX) and score_key.count("/") >= 2:
        suite, metric = score_key[len(EVAL_PREFIX) :].rsplit("/", 1)
        ev = col.evals[(col.evals["suite"] == suite) & (col.evals["metric"] == metric)]
        parts.append(ev[["run_dir", "step", "value"]].rename(columns={"value": "score"}))
    if not parts:
        raise ValueError(f"score key {score_key!r} is in no metrics.jsonl and no eval result")
    scores = pd.concat(parts, ignore_index=True).dropna(subset=["score"])
    scores = scores.drop_duplicates(["run_dir", "step"], keep="first")
    scores = scores.merge(col.runs[_IDENT], on="run_dir", how="left")
    if not include_incomplete:
        scores = scores[scores["status"] == COMPLETED]
    return scores.sort_values(["run_dir", "step"]).reset_index(drop=True)


def run_points(
    col: Collection, score_key: str, entropy_key: str = ENTROPY_KEY, include_incomplete: bool = False
) -> pd.DataFrame:
    """Rows (run_dir, model, model_params, label, seed, step, entropy, score) with both values, in step order.

    Each score is paired with the entropy of the same policy. ``entropy`` and ``reward/mean`` on step t are
    measured on step t's rollout, before step t's update: they pair on the same step. An eval logged at step t
    scores the policy after t updates, whose entropy is logged on step t+1: eval scores pair with the next
    step's entropy (so the eval before training pairs with step 1, and the final eval has no partner)."""
    m = col.metrics
    if entropy_key not in m.columns:
        raise ValueError(f"entropy key {entropy_key!r} is not in any metrics.jsonl")
    scores = score_series(col, score_key, include_incomplete)
    ent = m[["run_dir", "step", entropy_key]].rename(columns={entropy_key: "entropy"}).dropna()
    if score_key.startswith(EVAL_PREFIX):
        ent = ent.assign(step=ent["step"] - 1)  # entropy of the policy after step-1 updates
    pts = scores.merge(ent, on=["run_dir", "step"], how="inner")
    return pts.sort_values(["run_dir", "step"]).reset_index(drop=True)


def _step_column(df: pd.DataFrame, step_col: str | None, path: Path) -> str:
    if step_col:
        if step_col not in df.columns:
            raise ValueError(f"{path}: no step column {step_col!r}; columns: {', '.join(map(str, df.columns))}")
        return step_col
    for c in ("step", "Step", "_step", "global_step", "trainer/global_step"):
        if c in df.columns:
            return c
    raise ValueError(f"{path}: no step column found (tried step, Step, _step, global_step); pass --step-col")


def csv_points(paths: list[str | Path], entropy_col: str, score_col: str, step_col: str | None = None) -> pd.DataFrame:
    """Merge one or more exported CSVs on their step column and return (step, entropy, score) rows.

    W&B exports one wide CSV (columns like ``train_entropy/all``, ``val/score-all``). TensorBoard exports one
    ``Wall time,Step,Value`` CSV per scalar: give both files; a column name present in several files is then
    renamed ``<file stem>/<column>`` (e.g. ``entropy/Value``)."""
    frames = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise FileNotFoundError(f"no such CSV file: {p}")
        df = pd.read_csv(p)
        sc = _step_column(df, step_col, p)
        frames.append((p, df.rename(columns={sc: "__step"})))
    counts: dict[str, int] = {}
    for _, df in frames:
        for c in df.columns:
            counts[c] = counts.get(c, 0) + 1
    merged = None
    for p, df in frames:
        df = df.rename(columns={c: f"{p.stem}/{c}" for c in df.columns if c != "__step" and counts[c] > 1})
        df = df.groupby("__step", as_index=False).last()
        merged = df if merged is None else merged.merge(df, on="__step", how="outer")
    for want, flag in ((entropy_col, "--entropy-col"), (score_col, "--score-col")):
        if want not in merged.columns:
            avail = ", ".join(str(c) for c in merged.columns if c != "__step")
            raise ValueError(f"{flag} {want!r} is not a column of {', '.join(map(str, paths))}; columns: {avail}")
    out = merged[["__step", entropy_col, score_col]].rename(
        columns={"__step": "step", entropy_col: "entropy", score_col: "score"}
    )
    out["entropy"] = pd.to_numeric(out["entropy"], errors="coerce")
    out["score"] = pd.to_numeric(out["score"], errors="coerce")
    kept = out.dropna().sort_values("step").reset_index(drop=True)
    dropped = out[out[["entropy", "score"]].isna().any(axis=1)]
    kept.attrs["dropped_steps"] = sorted(dropped["step"].tolist())  # rows left out: no number in a column
    return kept
