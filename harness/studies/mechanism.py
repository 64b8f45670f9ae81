"""The paper's mechanism analyses from a runs directory: ``harness mechanism RUNS_DIR --out DIR``.

Writes ``mechanism.json`` (shape below, stable; ``null`` = not computable from these runs) and figures.
Definitions (what differs from the paper is said here):

* the entropy H (``entropy_key``): ``auto`` = ``entropy/generated`` when every run logs it — the official entropy
  of all responses generated at the step, before dynamic filtering drops groups (without filtering it equals
  ``entropy``; with filtering ``entropy`` covers only the kept mixed-reward groups, a subset that changes from step
  to step) — else ``entropy``. Every analysis below uses this one key.
* start / end entropy of a run: mean H over its first / last ``edge_steps(N)`` of its N logged steps
  (harness/run/metrics.py, the one window of result.json's summary and the leaderboard: N // 10, at least 1, at most 5;
  5 = ``WINDOW``, the registered window, for every run of 50 or more steps; the paper reads single points of
  smoothed curves); a run needs ``MIN_STEPS`` logged steps; ``grpo_entropy_ratio`` = end / start of the
  baseline's runs, mean ± 95% CI over seeds. ``collapsed`` = ratio ≤ 0.1 and the held-out gain in the last third
  (``late_gain``, T·2/3 → T) below 10% of the total gain (``total_gain``, step 0 → T), both seed means — the
  criterion of issue #11.
  ``late_gain_fraction`` is the per-seed ratio's mean, reported only: a seed whose total gain is near zero or
  negative makes that ratio meaningless (its sign flips), which is why the criterion compares means.
* ``early_fraction``: of the baseline's entropy drop (start → end) and held-out gain (step-0 eval → last eval), the
  part realised by step T/3 (entropy: mean of the ``edge_steps(N)`` steps ending at T/3; score: linear interpolation
  of the eval curve at T/3), per seed, then mean ± CI. Paper: 94% of the drop, > 93% of the gain.
* ``law``: R = -a·exp(H) + b by least squares on the pooled (entropy, held-out score) points of the GRPO-family
  runs (``LAW_FAMILY``) of one size, all seeds (an eval at step t pairs with the entropy logged at step t+1,
  harness.results.points); ``law_by_algorithm`` fits each algorithm alone and gives ``rmse_pooled`` (the pooled
  fit on that algorithm's points) beside ``rmse_own``: close values = one law serves all algorithms.
* ``prediction_rmse``: the law fitted on the pooled points of steps ≤ T/3 predicts each family run's final score
  from its end entropy; RMSE over runs (score units; the paper reports about 1 point).
* ``cov_vs_entropy_change``: per step, the entropy change ΔH of its update against its logged covariance term
  ``cov/term``, all runs; Pearson r and least-squares slope (Theorem 1 predicts r < 0). ΔH (``delta_key``) =
  ``entropy/update_delta`` when every run logs it (``train.entropy_after_update``: the trained batch re-measured
  after the update, same states), else H[t+1] - H[t] of consecutive steps (which also carries the change of
  prompts between two rollouts). Also r per quarter of training (``by_quarter``) and the partial r given the
  states' entropy (``partial_r_given_entropy``: both series regressed on the step's H first; see ``_partial_r``),
  and ``block_r``: r of the two curves after averaging each run's steps in 20 blocks (the paper compares the
  curves over training, where a shared trend dominates). Per method also the means of cov/term, ΔH and ΔH / H
  (the size of one step: the theorem is first order in it).
  ``cov_groups`` = mean covariance of the top-x% tokens (the paper's Table 1 groups) per quarter of training.
* ``final_score_sd``: the spread (sd over runs) of the final scores the prediction is scored on; once every run
  ends near H = 0 the law predicts one score for all, so its RMSE cannot fall below this.
* ``methods``: per method and size, paired (same-seed) ratio of end entropies to the baseline's and paired
  difference of final held-out scores (score units), mean ± 95% Student-t CI (harness.results.stats);
  ``entropy_end_vs_grpo_log``: the same ratio on the log scale (geometric mean, t interval of the mean log ratio
  mapped back: never a negative bound), the one the verdicts and mechanism.md use.
* ``sizes[SIZE]["per_run"]``: the baseline's runs one by one: each run's own law fit (a, R²), the RMSE of a line
  in H minus that of the law (its form: ≈ 0 when exp(H) is linear in H over the run, ``corr_exph_h``), and the
  paper's prediction: the law fitted on the run's own evals of steps ≤ T/3 predicts its final score from its last
  entropy (``prediction_abs_error``), beside the no-change predictor (the score at T/3, ``naive_abs_error``).
* ``cov_vs_entropy_change["per_run"]``: per method and covariance form (``cov/term`` natural-gradient form,
  ``cov/vanilla`` plain-gradient form, ``cov/first_order`` the exact first-order change from the logits, when
  logged), each run's r and slope against ΔH, summarised over runs (r: Fisher z with a t interval), so a run's
  autocorrelated steps count once. The pooled ``pearson_r`` is kept but decides nothing.
* ``selection``: KL-Cov / Clip-Cov nominal fraction (k_ratio / clip_ratio) beside the effective one (mean over
  steps of ``selected/frac``) and the tokens selected per step, per method and size.
* ``verdicts``: the registered claims (docs/mechanism_prereg.md), each decided by code from its tests' intervals
  with Holm's correction within its family (harness.studies.verdicts has the rules).

``mechanism.json``::

    {"score_key", "entropy_key", "delta_key", "baseline", "law_family", "steps", "seeds",
     "sizes": {SIZE: {"model_params", "n_runs", "law": {"a", "b", "r2", "n"},
                      "law_by_algorithm": {ALG: {"a", "b", "r2", "n", "rmse_own", "rmse_pooled"}},
                      "early_fraction": {"entropy_drop": IV, "gain": IV}, "late_gain_fraction": IV,
                      "late_gain": IV, "total_gain": IV,
                      "prediction_rmse", "prediction_n", "final_score_sd", "grpo_entropy_ratio": IV, "collapsed"}},
     "size_trend": {"a_slope", "a_intercept", "a_r2", "b_slope", ...} | null,
     "cov_vs_entropy_change": {"pearson_r", "slope", "n", "partial_r_given_entropy", "by_quarter": [r x 4],
                               "block_r", "block_steps",
                               "by_method": {M: {"pearson_r", "n", "partial_r_given_entropy", "mean_cov",
                                                 "mean_delta_h", "mean_relative_delta_h"}}},
     "cov_groups": {GROUP: [quarter 1..4 means]},
     "methods": {METHOD: {SIZE: {"entropy_end_vs_grpo": IV, "entropy_end_vs_grpo_log": BD,
                                 "score_delta_vs_grpo": IV}}},
     "selection": {METHOD: {SIZE: {"nominal", "hparam", "scope", "effective": IV, "count_per_step": IV}}},
     "verdicts": {"alpha", "min_runs", "correction", "families": {FAMILY: {"size"}},
                  "claims": [{"claim", "cell", "family", "statement", "headline", "verdict", "why",
                              "tests": [{"name", "role", "side", "estimate", "lo", "hi", "n", "p", "null",
                                         "p_holm", "family_size", "outcome", "unit"}]}]}}

with IV = ``{"mean", "ci95", "n"}`` (ci95 = half-width; null when n < 2) and BD = ``{"estimate", "lo", "hi", "n",
"p", "null"}`` (asymmetric bounds; p of the two-sided t test against null).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.results import stats
from harness.results.collect import Collection
from harness.results.fit import fit_entropy_law, fit_size_trend, ols_line
from harness.results.points import (
    ENTROPY_KEY,
    GENERATED_KEY,
    UPDATE_DELTA_KEY,
    resolve_score_key,
    run_points,
    score_series,
)
from harness.run.metrics import EDGE_MAX, edge_steps
from harness.studies.verdicts import Check, Claim, decide, verdict_markdown

WINDOW = EDGE_MAX  # docs/mechanism_prereg.md registers 5: edge_steps(N) of every run of N >= 50 logged steps
MIN_STEPS = 2 * EDGE_MAX  # logged entropy steps a run needs to be analysed
LAW_FAMILY = ("grpo", "rloo", "prime")
COV_GROUPS = ["cov/top_0.02pct", "cov/top_0.2pct", "cov/top_2pct", "cov/top_20pct", "cov/top_50pct", "cov/mean"]
COV_FORMS = ("cov/term", "cov/vanilla", "cov/first_order")  # natural-gradient, plain-gradient, exact first order
SELECTION_HPARAMS = ("k_ratio", "clip_ratio")  # KL-Cov / Clip-Cov: the nominal selected fraction

# Thresholds of the verdicts, registered in docs/mechanism_prereg.md before the confirmatory runs. Scores are
# fractions (0.03 = 3 points).
COLLAPSE_BAR = 0.1  # GRPO end/start entropy below this (issue #11's bar)
FLAT_BAR = 0.03  # "flat": the held-out score gains less than this in the last third
EARLY_QUALITATIVE = 0.5  # more than half of the drop / gain by T/3
EARLY_DROP_PAPER, EARLY_GAIN_PAPER, EARLY_TOLERANCE = 0.94, 0.93, 0.05  # the paper's 94% / 93%, less 5 points
LAW_R2_BAR = 0.8  # a run's own fit of R = -a exp(H) + b explains more than this of its held-out curve
PREDICT_BAR = 0.03  # the per-run early fit predicts the final score within this (mean absolute error)


def _f(v):
    """A finite number as float (numpy integers and floats included), else None."""
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    return float(v) if math.isfinite(float(v)) else None


def _clean(obj):
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _f(float(obj))
    return obj


def _logged_by_every_run(m: pd.DataFrame, done: pd.DataFrame, key: str) -> bool:
    if key not in m.columns:
        return False
    counts = m[m["run_dir"].isin(done["run_dir"])].groupby("run_dir")[key].count()
    return bool(counts.reindex(done["run_dir"]).fillna(0).gt(0).all())


def _entropy_keys(col: Collection, done: pd.DataFrame, entropy_key: str) -> tuple[str, str | None]:
    """(H key, ΔH key or None): see the module docstring."""
    m = col.metrics
    if entropy_key == "auto":
        entropy_key = GENERATED_KEY if _logged_by_every_run(m, done, GENERATED_KEY) else ENTROPY_KEY
    if not _logged_by_every_run(m, done, entropy_key):
        known = sorted(c for c in m.columns if c.startswith("entropy"))
        raise ValueError(
            f"entropy key {entropy_key!r} is not logged by every completed run (the mechanism analyses "
            f"need it); entropy keys present: {', '.join(known) or 'none'}"
        )
    return entropy_key, (UPDATE_DELTA_KEY if _logged_by_every_run(m, done, UPDATE_DELTA_KEY) else None)


def _check(col: Collection, baseline: str) -> pd.DataFrame:
    done = col.completed
    if done.empty:
        detail = "; ".join(f"{r.run_dir} ({r.detail})" for r in col.not_completed.itertuples())
        raise ValueError(f"no completed run to analyse (result.json with status completed): {detail}")
    methods = sorted(done["label"].astype(str).unique())
    if baseline not in methods:
        raise ValueError(f"baseline method {baseline!r} has no completed run; methods present: {', '.join(methods)}")
    if (done["setting"] != "").any():
        raise ValueError(
            "the runs differ in settings that change what they measure ("
            + " | ".join(sorted(set(done["setting"]) - {""}))
            + "); analyse one setting at a time (pass only its run directories)"
        )
    return done


def _run_summaries(col: Collection, done: pd.DataFrame, score_key: str, entropy_key: str) -> pd.DataFrame:
    """One row per completed run: start/end/third entropy, eval curve at 0, T/3, 2T/3, T."""
    m = col.metrics[col.metrics["run_dir"].isin(done["run_dir"])]
    scores = score_series(col, score_key)
    rows = []
    for r in done.itertuples():
        h = m[m["run_dir"] == r.run_dir].dropna(subset=[entropy_key]).sort_values("step")
        h = h.assign(entropy=h[entropy_key])
        s = scores[scores["run_dir"] == r.run_dir].sort_values("step")
        if len(h) < MIN_STEPS or s.empty:
            continue
        w = edge_steps(len(h))
        steps = int(h["step"].max())
        third = steps / 3
        upto = h[h["step"] <= third]
        xs, ys = s["step"].to_numpy(float), s["score"].to_numpy(float)
        interp = (lambda x, xs=xs, ys=ys: float(np.interp(x, xs, ys))) if len(s) >= 2 else (lambda x: math.nan)
        rows.append(
            {
                "run_dir": r.run_dir,
                "model": r.model,
                "model_params": r.model_params,
                "label": r.label,
                "seed": r.seed,
                "steps": steps,
                "h_start": float(h["entropy"].head(w).mean()),
                "h_end": float(h["entropy"].tail(w).mean()),
                "h_third": float(upto["entropy"].tail(w).mean()) if len(upto) else math.nan,
                "h_last": float(h["entropy"].iloc[-1]),
                "s_first": float(s["score"].iloc[0]),
                "s_end": float(s["score"].iloc[-1]),
                "s_third": interp(third),
                "s_two_thirds": interp(2 * third),
                "first_eval_step": int(s["step"].iloc[0]),
            }
        )
    if not rows:
        raise ValueError(
            f"no completed run has at least {MIN_STEPS} logged entropy steps and a {score_key!r} "
            "score; nothing to analyse"
        )
    return pd.DataFrame(rows)


def _fit_quality(h: np.ndarray, s: np.ndarray) -> dict:
    """One run's own law fit beside a straight line in H (same number of parameters): a, R², both RMSEs and
    corr(exp H, H) (near 1: over this range exp(H) is linear in H, so the law's form is not tested)."""
    law = fit_entropy_law(h, s)
    slope, icpt, _ = ols_line(h, s)
    rmse_lin = float(np.sqrt(np.mean((s - (slope * h + icpt)) ** 2)))
    from harness.results.plots import pearson_r

    return {
        "law_a": law.a,
        "law_b": law.b,
        "law_r2": law.r2,
        "rmse_exp": law.rmse,
        "rmse_lin": rmse_lin,
        "corr_exph_h": pearson_r(np.exp(h), h),
    }


def _per_run_fits(runs: pd.DataFrame, pts: pd.DataFrame) -> pd.DataFrame:
    """Columns added per run: its own law fit (``_fit_quality``) and the paper's early-fit prediction: the law
    fitted on the run's own points of steps <= T/3 predicts its final score from its last logged entropy
    (``pred_early``, ``n_early`` points; NaN when fewer than 3)."""
    extra = []
    for r in runs.itertuples():
        p = pts[pts["run_dir"] == r.run_dir].sort_values("step")
        row = {"run_dir": r.run_dir}
        h, s = p["entropy"].to_numpy(float), p["score"].to_numpy(float)
        try:
            row.update(_fit_quality(h, s))
        except ValueError:
            pass
        early = p[p["step"] <= r.steps / 3]
        row["n_early"] = int(len(early))
        try:
            fit = fit_entropy_law(early["entropy"], early["score"])
            row["pred_early"] = float(fit.predict([r.h_last])[0])
        except ValueError:
            row["pred_early"] = math.nan
        extra.append(row)
    return runs.merge(pd.DataFrame(extra), on="run_dir", how="left")


def _frac(num, den):
    return num / den if den and math.isfinite(den) and abs(den) > 1e-12 else math.nan


def _law_dict(fit) -> dict:
    return {"a": fit.a, "b": fit.b, "r2": fit.r2, "n": fit.n_points}


def _size_block(runs: pd.DataFrame, pts: pd.DataFrame, baseline: str, family=LAW_FAMILY) -> dict:
    base = runs[runs["label"] == baseline]
    out: dict = {"model_params": _f(runs["model_params"].max()), "n_runs": int(len(runs))}
    ratio = stats.mean_ci(base["h_end"] / base["h_start"])
    drop = [_frac(r.h_start - r.h_third, r.h_start - r.h_end) for r in base.itertuples()]
    gain = [_frac(r.s_third - r.s_first, r.s_end - r.s_first) for r in base.itertuples()]
    late = [_frac(r.s_end - r.s_two_thirds, r.s_end - r.s_first) for r in base.itertuples()]
    late_gain = stats.mean_ci(base["s_end"] - base["s_two_thirds"])
    total_gain = stats.mean_ci(base["s_end"] - base["s_first"])
    out["grpo_entropy_ratio"] = ratio.to_dict()
    out["early_fraction"] = {"entropy_drop": stats.mean_ci(drop).to_dict(), "gain": stats.mean_ci(gain).to_dict()}
    out["late_gain_fraction"] = stats.mean_ci(late).to_dict()
    out["late_gain"], out["total_gain"] = late_gain.to_dict(), total_gain.to_dict()
    out["collapsed"] = bool(
        math.isfinite(ratio.mean)
        and ratio.mean <= 0.1
        and math.isfinite(late_gain.mean)
        and late_gain.mean < 0.1 * total_gain.mean
    )
    fam = pts[pts["label"].isin(family)].sort_values(["step", "run_dir"])
    out["law"], out["law_by_algorithm"], out["prediction_rmse"], out["prediction_n"] = None, {}, None, 0
    if len(fam) < 3:
        return out
    try:
        pooled = fit_entropy_law(fam["entropy"], fam["score"])
    except ValueError:
        return out
    out["law"] = _law_dict(pooled)
    for alg, g in fam.groupby("label"):
        try:
            own = fit_entropy_law(g["entropy"], g["score"])
        except ValueError:
            continue
        resid = g["score"] - pooled.predict(g["entropy"])
        out["law_by_algorithm"][alg] = {
            **_law_dict(own),
            "rmse_own": own.rmse,
            "rmse_pooled": float(np.sqrt(np.mean(resid**2))),
        }
    steps = runs["steps"].max()
    early = fam[fam["step"] <= steps / 3]
    try:
        early_fit = fit_entropy_law(early["entropy"], early["score"])
    except ValueError:
        return out
    fr = runs[runs["label"].isin(family)]
    err = fr["s_end"] - early_fit.predict(fr["h_last"])
    out["prediction_rmse"] = float(np.sqrt(np.mean(err**2)))
    out["prediction_n"] = int(len(fr))
    out["final_score_sd"] = float(fr["s_end"].std(ddof=0))  # a law of H alone cannot beat this once H ~ 0
    out["prediction_law"] = _law_dict(early_fit)
    return out


def _per_run_block(runs: pd.DataFrame, baseline: str) -> dict:
    """The baseline's per-run numbers of one size: law fits, form check, the per-run early-fit prediction."""
    base = runs[runs["label"] == baseline]
    iv = lambda v: stats.mean_ci(v).to_dict()  # noqa: E731
    err = base["s_end"] - base["pred_early"]
    return {
        "law_a": iv(base["law_a"]),
        "law_r2": iv(base["law_r2"]),
        "rmse_lin_minus_exp": iv(base["rmse_lin"] - base["rmse_exp"]),
        "corr_exph_h": iv(base["corr_exph_h"]),
        "prediction_abs_error": iv(err.abs()),
        "prediction_rmse": _f(float(np.sqrt(np.mean(err.dropna() ** 2)))) if err.notna().any() else None,
        "naive_abs_error": iv((base["s_end"] - base["s_third"]).abs()),
        "early_points": iv(base["n_early"]),
    }


def _partial_r(pairs: pd.DataFrame, h_key: str) -> float | None:
    """Pearson r of cov/term and ΔH after removing from each the part linear in the states' entropy H: both
    scale with H across steps (an early, high-entropy batch has a small covariance and a large drop), which
    the theorem's per-step relation does not describe."""
    from harness.results.plots import pearson_r

    g = pairs.dropna(subset=[h_key])
    if len(g) < 4:
        return None
    h = np.column_stack([np.ones(len(g)), g[h_key].to_numpy(float)])

    def resid(y):
        return y - h @ np.linalg.lstsq(h, y, rcond=None)[0]

    return pearson_r(resid(g["cov/term"].to_numpy(float)), resid(g["delta_h"].to_numpy(float)))


def _cov(col: Collection, done: pd.DataFrame, entropy_key: str, delta_key: str | None) -> tuple[dict | None, dict]:
    from harness.results.plots import NoData, entropy_change_pairs, pearson_r

    m = col.metrics[col.metrics["run_dir"].isin(done["run_dir"])]
    try:
        pairs = entropy_change_pairs(m, entropy_key, delta_key)
    except NoData:
        return None, {}
    slope, _, _ = ols_line(pairs["cov/term"].to_numpy(float), pairs["delta_h"].to_numpy(float))
    h_key = ENTROPY_KEY if delta_key else entropy_key  # the entropy of the states whose change ΔH measures
    steps = m["step"].max()
    quarter = lambda step: np.minimum((step - 1) * 4 // max(steps, 1), 3)  # noqa: E731  (0..3)
    block = max(1, int(steps) // 20)  # the paper compares the two curves over training: 20 blocks per run
    blocks = pairs.groupby(["run_dir", (pairs["step"] - 1) // block])[["cov/term", "delta_h"]].mean()
    res = {
        "pearson_r": pearson_r(pairs["cov/term"], pairs["delta_h"]),
        "slope": slope,
        "n": int(len(pairs)),
        "block_r": pearson_r(blocks["cov/term"], blocks["delta_h"]),
        "block_steps": block,
        "partial_r_given_entropy": _partial_r(pairs, h_key),
        "by_quarter": [pearson_r(g["cov/term"], g["delta_h"]) for _, g in pairs.groupby(quarter(pairs["step"]))],
        "by_method": {
            str(k): {
                "pearson_r": pearson_r(g["cov/term"], g["delta_h"]),
                "n": int(len(g)),
                "partial_r_given_entropy": _partial_r(g, h_key),
                "mean_cov": float(g["cov/term"].mean()),
                "mean_delta_h": float(g["delta_h"].mean()),
                "mean_relative_delta_h": float((g["delta_h"] / g[h_key]).mean()),
            }
            for k, g in pairs.groupby("label")
        },
    }
    groups = {}
    q = quarter(m["step"])
    for k in COV_GROUPS:
        if k in m.columns and m[k].notna().any():
            groups[k] = [float(m[k][q == i].mean()) for i in range(4)]
    return res, groups


def _cov_per_run(m: pd.DataFrame, delta_key: str | None, entropy_key: str) -> dict:
    """Per method and covariance form: each run's Pearson r and OLS slope of ΔH on the form, summarised over
    runs (r: Fisher-z t interval; slope: t interval), so a run's autocorrelated steps count once."""
    from harness.results.plots import NoData, entropy_change_pairs, pearson_r

    out: dict = {}
    for form in COV_FORMS:
        if form not in m.columns or not m[form].notna().any():
            continue
        try:
            pairs = entropy_change_pairs(m.assign(**{"cov/term": m[form]}), entropy_key, delta_key)
        except NoData:
            continue
        for label, g in pairs.groupby("label"):
            rs, slopes = [], []
            for _, run in g.groupby("run_dir"):
                x, y = run["cov/term"].to_numpy(float), run["delta_h"].to_numpy(float)
                if len(run) >= 3 and x.std() > 0 and y.std() > 0:
                    rs.append(pearson_r(x, y))
                    slopes.append(ols_line(x, y)[0])
            out.setdefault(str(label), {})[form] = {
                "r": stats.fisher_z_ci(rs).to_dict(),
                "slope": stats.mean_ci(slopes).to_dict(),
                "n_runs": len(rs),
            }
    return out


def _selection(col: Collection, done: pd.DataFrame) -> dict:
    """KL-Cov / Clip-Cov: nominal selected fraction (k_ratio / clip_ratio) beside the effective one (mean over
    steps of ``selected/frac``, then mean ± CI over runs) and the mean tokens selected per step, per size."""
    out: dict = {}
    m = col.metrics
    for r in done.itertuples():
        cfg = json.loads(r.method_config or "{}")
        hp = next((k for k in SELECTION_HPARAMS if k in cfg), None)
        if hp is None or "selected/frac" not in m.columns:
            continue
        steps = m[m["run_dir"] == r.run_dir]
        cell = out.setdefault(str(r.label), {}).setdefault(
            str(r.model), {"nominal": cfg[hp], "hparam": hp, "scope": cfg.get("scope"), "_f": [], "_c": []}
        )
        cell["_f"].append(float(steps["selected/frac"].mean()))
        cell["_c"].append(float(steps["selected/count"].mean()) if "selected/count" in steps else math.nan)
    for by in out.values():
        for cell in by.values():
            cell["effective"] = stats.mean_ci(cell.pop("_f")).to_dict()
            cell["count_per_step"] = stats.mean_ci(cell.pop("_c")).to_dict()
    return out


def _nanmean(v) -> float:
    v = np.asarray(v, float)
    return float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else math.nan


def _contrast(num, den, f) -> list:
    """Per run ``num - f·den``: > 0 exactly when the run's fraction num/den exceeds f (den > 0); a test of the
    mean contrast is a test of the fraction that does not divide by a near-zero denominator."""
    return list(np.asarray(num, float) - f * np.asarray(den, float))


def _claims(runs: pd.DataFrame, baseline: str, sizes: list[str]) -> list[Claim]:
    """The registered claims and their tests (docs/mechanism_prereg.md), per size and method."""
    claims = []
    for size in sizes:
        r = runs[(runs["model"] == size) & (runs["label"] == baseline)]
        claims += [_collapse_claim(r, size, baseline), _early_drop_claim(r, size), _early_gain_claim(r, size)]
        claims += [*_law_claims(r, size), _prediction_claim(r, size)]
    return claims + _rescue_claims(runs, baseline, sizes)


def _collapse_claim(r: pd.DataFrame, size: str, baseline: str) -> Claim:
    """The baseline's entropy collapses (end/start below the bar) and its held-out score is flat late."""
    ratio = (r["h_end"] / r["h_start"]).to_numpy(float)
    late = (r["s_end"] - r["s_two_thirds"]).to_numpy(float)
    c = Claim("collapse", size, "collapse", f"{baseline} entropy collapses; held-out score flat late")
    b = stats.log_ratio_ci(ratio, COLLAPSE_BAR)
    c.tests = [
        Check.of(f"end/start entropy < {COLLAPSE_BAR}", "qualitative", "below", b, "ratio"),
        Check.mean(f"last-third score gain < {100 * FLAT_BAR:g} points", "quantitative", "below", late, FLAT_BAR),
    ]
    c.tests[1].unit = "points"
    c.headline = f"end/start {b.estimate:.3g}; last-third gain {100 * _nanmean(late):+.1f} points"
    return c


def _early_drop_claim(r: pd.DataFrame, size: str) -> Claim:
    """Most of the baseline's entropy drop happens by T/3."""
    drop3, drop = r["h_start"] - r["h_third"], r["h_start"] - r["h_end"]
    statement = "most of the entropy drop by T/3 (paper: 94%)"
    c = _early_claim("early_drop", size, statement, "drop", "entropy drop", drop3, drop, EARLY_DROP_PAPER)
    c.headline = f"fraction {_frac(drop3.mean(), drop.mean()):.2f} (of mean drops)"
    return c


def _early_gain_claim(r: pd.DataFrame, size: str) -> Claim:
    """Most of the baseline's held-out gain happens by T/3."""
    gain3, gain = r["s_third"] - r["s_first"], r["s_end"] - r["s_first"]
    statement = "most of the held-out gain by T/3 (paper: > 93%)"
    c = _early_claim("early_gain", size, statement, "gain", "held-out gain", gain3, gain, EARLY_GAIN_PAPER)
    for t in c.tests:
        t.unit = "points"
    c.headline = f"fraction {_frac(gain3.mean(), gain.mean()):.2f}; total gain {100 * gain.mean():+.1f} points"
    return c


def _early_claim(name, size, statement, what: str, total_name: str, by_third, total, paper: float) -> Claim:
    """Most of a change (``what``: the entropy drop, the held-out gain) happens by T/3: the change is positive,
    and its part by T/3 exceeds ``EARLY_QUALITATIVE`` (qualitative) and the paper's fraction less the tolerance
    (quantitative) of the whole, tested as per-run contrasts."""
    c = Claim(name, size, "early", statement)
    q = paper - EARLY_TOLERANCE
    c.tests = [
        Check.mean(f"{total_name} > 0", "precondition", "above", total, 0.0),
        Check.mean(
            f"{what} by T/3 − {EARLY_QUALITATIVE}·{what} > 0",
            "qualitative",
            "above",
            _contrast(by_third, total, EARLY_QUALITATIVE),
            0.0,
        ),
        Check.mean(f"{what} by T/3 − {q:.2f}·{what} > 0", "quantitative", "above", _contrast(by_third, total, q), 0.0),
    ]
    return c


def _law_claims(r: pd.DataFrame, size: str) -> list[Claim]:
    """The entropy law fits each run (a > 0, R² above the bar), and better than a line in H."""
    fit = Claim("law_fit", size, "law", "R = −a·exp(H) + b fits each run, a > 0")
    fit.tests = [
        Check.mean("a > 0", "qualitative", "above", r["law_a"], 0.0),
        Check.mean(f"R² > {LAW_R2_BAR}", "quantitative", "above", r["law_r2"], LAW_R2_BAR),
    ]
    fit.headline = f"a {_nanmean(r['law_a']):.3g}, R² {_nanmean(r['law_r2']):.2f} (per run)"
    form = Claim("law_form", size, "law", "exp(H) fits better than a line in H")
    form.tests = [
        Check.mean("RMSE(line) − RMSE(exp law) > 0", "qualitative", "above", r["rmse_lin"] - r["rmse_exp"], 0.0)
    ]
    form.tests[0].unit = "points"
    form.headline = f"corr(exp H, H) {_nanmean(r['corr_exph_h']):.4f} (per run)"
    return [fit, form]


def _prediction_claim(r: pd.DataFrame, size: str) -> Claim:
    """A run's first-third law fit predicts its final score, better than the score at T/3 does."""
    e_law = (r["s_end"] - r["pred_early"]).abs()
    e_naive = (r["s_end"] - r["s_third"]).abs()
    c = Claim("prediction", size, "prediction", "a run's first-third fit predicts its final score (paper ~1 point)")
    c.tests = [
        Check.mean(
            "|error| of the score at T/3 − |error| of the fit > 0", "qualitative", "above", e_naive - e_law, 0.0
        ),
        Check.mean(f"|error| of the fit < {100 * PREDICT_BAR:g} points", "quantitative", "below", e_law, PREDICT_BAR),
    ]
    for t in c.tests:
        t.unit = "points"
    c.headline = f"mean |error| {100 * _nanmean(e_law):.1f} points (no-change: {100 * _nanmean(e_naive):.1f})"
    return c


def _rescue_claims(runs: pd.DataFrame, baseline: str, sizes: list[str]) -> list[Claim]:
    """Each other method ends with more entropy and a higher held-out score than the baseline (paired by seed)."""
    claims = []
    base = runs[runs["label"] == baseline]
    for (size, label), g in runs[runs["label"] != baseline].groupby(["model", "label"]):
        if size not in sizes:
            continue
        bs = base[base["model"] == size]
        b = stats.paired_log_ratio(dict(zip(g["seed"], g["h_end"])), dict(zip(bs["seed"], bs["h_end"])))
        c = Claim("rescue_entropy", f"{label} {size}", "rescue", f"{label} ends with more entropy than {baseline}")
        c.tests = [Check.of(f"end entropy ÷ {baseline}'s > 1", "qualitative", "above", b, "ratio")]
        c.headline = f"×{b.estimate:.2f}"
        claims.append(c)
        sc = dict(zip(bs["seed"], bs["s_end"]))
        diffs = [v - sc[k] for k, v in zip(g["seed"], g["s_end"]) if k in sc]
        c = Claim("rescue_score", f"{label} {size}", "rescue", f"{label} ends with a higher held-out score")
        c.tests = [Check.mean(f"final score − {baseline}'s > 0", "qualitative", "above", diffs, 0.0)]
        c.tests[0].unit = "points"
        c.headline = f"{100 * np.mean(diffs):+.1f} points" if diffs else "—"
        claims.append(c)
    return claims


def analyse(
    col: Collection, score_key: str = "auto", baseline: str = "grpo", law_family=None, entropy_key: str = "auto"
) -> dict:
    """All analyses of the module docstring; raises ValueError naming what the runs lack. ``law_family``
    None = the paper's GRPO-family methods that are present; given = exactly these (each must have runs)."""
    done = _check(col, baseline)
    entropy_key, delta_key = _entropy_keys(col, done, entropy_key)
    explicit = law_family is not None
    law_family = tuple(law_family) if explicit else LAW_FAMILY
    unknown = sorted(set(law_family) - set(done["label"].astype(str)))
    if unknown and explicit:
        raise ValueError(
            f"law family method(s) {', '.join(unknown)} have no completed run; methods present: "
            + ", ".join(sorted(done["label"].astype(str).unique()))
        )
    key = resolve_score_key(col, score_key)
    runs = _run_summaries(col, done, key, entropy_key)
    pts = run_points(col, key, entropy_key)
    runs = _per_run_fits(runs, pts)
    out: dict = {
        "score_key": key,
        "entropy_key": entropy_key,
        "delta_key": delta_key,
        "baseline": baseline,
        "law_family": list(law_family),
        "steps": int(runs["steps"].max()),
        "seeds": int(runs.groupby(["model", "label"]).size().max()),
        "window": WINDOW,
        "sizes": {},
        "methods": {},
    }
    order = runs.groupby("model")["model_params"].max().sort_values(na_position="last").index
    for model in order:
        r = runs[runs["model"] == model]
        if (r["label"] == baseline).any():
            out["sizes"][str(model)] = _size_block(r, pts[pts["model"] == model], baseline, law_family)
            out["sizes"][str(model)]["per_run"] = _per_run_block(r, baseline)
    laws = [(v["model_params"], v["law"]) for v in out["sizes"].values() if v["law"] and v["model_params"]]
    out["size_trend"] = None
    if len({p for p, _ in laws}) >= 2:
        out["size_trend"] = fit_size_trend(
            [p for p, _ in laws], [w["a"] for _, w in laws], [w["b"] for _, w in laws]
        ).to_dict()
    out["cov_vs_entropy_change"], out["cov_groups"] = _cov(col, done, entropy_key, delta_key)
    m = col.metrics[col.metrics["run_dir"].isin(done["run_dir"])]
    if out["cov_vs_entropy_change"] is not None:
        out["cov_vs_entropy_change"]["per_run"] = _cov_per_run(m, delta_key, entropy_key)
    out["selection"] = _selection(col, done)
    for (model, label), g in runs.groupby(["model", "label"]):
        if label == baseline:
            continue
        base = runs[(runs["model"] == model) & (runs["label"] == baseline)]
        if base.empty:
            continue
        bh = dict(zip(base["seed"], base["h_end"]))
        bs = dict(zip(base["seed"], base["s_end"]))
        out["methods"].setdefault(str(label), {})[str(model)] = {
            "entropy_end_vs_grpo": stats.paired_ratio(dict(zip(g["seed"], g["h_end"])), bh).to_dict(),
            "entropy_end_vs_grpo_log": stats.paired_log_ratio(dict(zip(g["seed"], g["h_end"])), bh).to_dict(),
            "score_delta_vs_grpo": stats.paired_diff(dict(zip(g["seed"], g["s_end"])), bs).to_dict(),
        }
    out["verdicts"] = decide(_claims(runs, baseline, list(out["sizes"])))
    out["runs"] = runs.drop(columns=["run_dir"]).sort_values(["model", "label", "seed"]).to_dict(orient="records")
    return _clean(out)


def write_mechanism(
    runs_dir,
    out_dir,
    score_key: str = "auto",
    baseline: str = "grpo",
    formats=("png",),
    law_family=None,
    entropy_key: str = "auto",
) -> list[Path]:
    """Collect ``runs_dir`` (run directories, or a folder of ``*.tar.xz`` archives of them: harness.results.archive),
    analyse, write mechanism.json and the figures; returns the written paths."""
    import warnings

    from harness.results.archive import unpacked
    from harness.results.collect import collect

    with unpacked(runs_dir) as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        col = collect([folder])
        res = analyse(col, score_key, baseline, law_family, entropy_key)
        return _write(col, res, runs_dir, out_dir, formats, law_family, entropy_key)


def _write(col, res, runs_dir, out_dir, formats, law_family, entropy_key) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "mechanism.json"
    path.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    md = out_dir / "mechanism.md"
    fam = "" if law_family is None else f" --law-family {','.join(law_family)}"
    fam += "" if entropy_key == "auto" else f" --entropy-key {entropy_key}"
    md.write_text(
        f"# Mechanism analyses: {runs_dir}\n\nRegenerate: `harness mechanism {runs_dir} --out {out_dir}{fam}`"
        "\n\n" + summary_markdown(res),
        encoding="utf-8",
    )
    verdicts = out_dir / "verdicts.md"
    verdicts.write_text(verdict_markdown([(f"Verdicts: {runs_dir}", res["verdicts"])]), encoding="utf-8")
    written = [path, md, verdicts]
    from harness.studies.mechanism_plots import plot_mechanism

    written += plot_mechanism(col, res, out_dir, formats)
    return written


def _iv(d, scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    if not d or d.get("mean") is None:
        return "—"
    text = fmt.format(d["mean"] * scale)
    if d.get("ci95") is not None:
        text += " ± " + fmt.replace("+", "").format(d["ci95"] * scale)
    return text + f" (n={d.get('n')})"


def summary_markdown(res: dict) -> str:
    """mechanism.md: the numbers of mechanism.json as tables (scores in percent points)."""
    out = _header_md(res) + _sizes_md(res) + _law_by_algorithm_md(res) + _size_trend_md(res)
    out += _cov_md(res) + _selection_md(res) + _rescue_md(res)
    return "\n".join(out) + "\n"


def _g(v, f: str = "{:.3g}") -> str:
    return "—" if v is None else f.format(v)


def _pts(v):
    return None if v is None else 100 * v


def _header_md(res: dict) -> list[str]:
    """The verdicts and what the numbers are (score, entropy, ΔH, baseline, steps, seeds, intervals)."""
    delta = (
        f"`{res['delta_key']}` (the update's change on the trained batch)" if res.get("delta_key") else "H[t+1] − H[t]"
    )
    return [
        verdict_markdown([("Verdicts", res["verdicts"])]),
        "",
        f"Score: `{res['score_key']}` (percent below); entropy H: `{res['entropy_key']}`; ΔH: {delta}; baseline "
        f"`{res['baseline']}`; {res['steps']} steps; up to {res['seeds']} seeds per (size, method); intervals = "
        "95% Student-t over seeds.",
        "",
    ]


def _sizes_md(res: dict) -> list[str]:
    """One row per size: collapse, early fractions, the pooled law, prediction and score spread."""
    out = [
        "| size | params | GRPO end/start entropy | held-out gain: last third / total (points) | collapsed "
        "| early: entropy drop | early: gain | law a | law b | law R² | points | prediction RMSE (points, runs) "
        "| final-score sd (points) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, v in res["sizes"].items():
        law = v.get("law") or {}
        out.append(
            f"| {size} | {_g(v['model_params'], '{:.3g}')} | {_iv(v['grpo_entropy_ratio'])} | "
            f"{_iv(v['late_gain'], 100, '{:+.1f}')} / {_iv(v['total_gain'], 100, '{:+.1f}')} | "
            f"{'yes' if v['collapsed'] else 'no'} | "
            f"{_iv(v['early_fraction']['entropy_drop'])} | {_iv(v['early_fraction']['gain'])} | "
            f"{_g(law.get('a'))} | {_g(law.get('b'))} | {_g(law.get('r2'), '{:.2f}')} | {law.get('n', '—')} | "
            f"{_g(_pts(v['prediction_rmse']), '{:.1f}')} ({v['prediction_n']}) | "
            f"{_g(_pts(v.get('final_score_sd')), '{:.1f}')} |"
        )
    return out


def _law_by_algorithm_md(res: dict) -> list[str]:
    out = [
        "",
        "Law per algorithm (one law for all? compare the pooled fit's RMSE on that algorithm's points with "
        "its own fit's):",
        "",
        "| size | algorithm | a | b | R² | points | RMSE own | RMSE pooled |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for size, v in res["sizes"].items():
        for alg, w in v["law_by_algorithm"].items():
            out.append(
                f"| {size} | {alg} | {_g(w['a'])} | {_g(w['b'])} | {_g(w['r2'], '{:.2f}')} | {w['n']} | "
                f"{_g(w['rmse_own'])} | {_g(w['rmse_pooled'])} |"
            )
    return out


def _size_trend_md(res: dict) -> list[str]:
    t = res.get("size_trend")
    if not t:
        return []
    return [
        "",
        f"a = {t['a_slope']:.3g}·log10(N) + {t['a_intercept']:.3g} (R² {_g(t['a_r2'], '{:.2f}')}); "
        f"b = {t['b_slope']:.3g}·log10(N) + {t['b_intercept']:.3g} (R² {_g(t['b_r2'], '{:.2f}')}), "
        f"{t['n_sizes']} sizes.",
    ]


def _cov_md(res: dict) -> list[str]:
    """ΔH against the covariance term: pooled, by quarter and by method; then per run and covariance form."""
    out = []
    c = res.get("cov_vs_entropy_change")
    if c:
        per = ", ".join(
            f"{m} {_g(w['pearson_r'], '{:.2f}')} (partial {_g(w.get('partial_r_given_entropy'), '{:.2f}')}, n={w['n']})"
            for m, w in c["by_method"].items()
        )
        quarters = " / ".join(_g(r, "{:+.2f}") for r in c.get("by_quarter") or [])
        out += [
            "",
            f"ΔH vs cov/term of the same step: Pearson r = {_g(c['pearson_r'], '{:.2f}')}, slope "
            f"{_g(c['slope'])}, n = {c['n']} steps (Theorem 1 predicts r < 0); by quarter of training "
            f"{quarters}; partial r given the states' entropy "
            f"{_g(c.get('partial_r_given_entropy'), '{:.2f}')}; r of the curves in blocks of "
            f"{c.get('block_steps')} steps {_g(c.get('block_r'), '{:.2f}')}. By method: {per}.",
        ]
    per = (c or {}).get("per_run") or {}
    if per:
        out += [
            "",
            "ΔH against each covariance form, per run (r: mean over runs on Fisher's z with its t interval; "
            "slope: mean ± t CI over runs):",
            "",
            "| method | form | r [95% CI] | slope | runs |",
            "|---|---|---|---|---|",
        ]
        for meth, forms in per.items():
            for form, w in forms.items():
                r = w["r"]
                out.append(
                    f"| {meth} | {form} | {_g(r['estimate'], '{:+.2f}')} [{_g(r['lo'], '{:+.2f}')}, "
                    f"{_g(r['hi'], '{:+.2f}')}] | {_iv(w['slope'], 1.0, '{:+.3g}')} | {w['n_runs']} |"
                )
    return out


def _selection_md(res: dict) -> list[str]:
    if not res.get("selection"):
        return []
    out = [
        "",
        "Selected tokens (KL-Cov / Clip-Cov): nominal fraction beside the effective one (mean over steps "
        "of selected/frac, mean ± CI over runs):",
        "",
        "| method | size | hparam | scope | nominal | effective | tokens per step |",
        "|---|---|---|---|---|---|---|",
    ]
    for meth, by in res["selection"].items():
        for size, w in by.items():
            out.append(
                f"| {meth} | {size} | {w['hparam']} | {w.get('scope') or 'micro_batch'} | {w['nominal']:g} | "
                f"{_iv(w['effective'], 1.0, '{:.3g}')} | {_iv(w['count_per_step'], 1.0, '{:.3g}')} |"
            )
    return out


def _rescue_md(res: dict) -> list[str]:
    out = [
        "",
        "Rescue vs the baseline, paired by seed (end entropy ratio; final score difference in points):",
        "",
        "| method | size | end entropy ÷ GRPO's (geometric mean [95% CI], log scale) | score − GRPO's (points) |",
        "|---|---|---|---|",
    ]
    for m, by in res["methods"].items():
        for size, v in by.items():
            lr = v.get("entropy_end_vs_grpo_log") or {}
            ratio = (
                f"{_g(lr.get('estimate'), '{:.2f}')} [{_g(lr.get('lo'), '{:.2f}')}, {_g(lr.get('hi'), '{:.2f}')}] "
                f"(n={lr.get('n')})"
            )
            out.append(f"| {m} | {size} | {ratio} | {_iv(v['score_delta_vs_grpo'], 100, '{:+.1f}')} |")
    return out
