"""The paper's mechanism analyses from a runs directory: ``harness mechanism RUNS_DIR --out DIR``.

Writes ``mechanism.json`` (shape below, stable; ``null`` = not computable from these runs) and figures.
Definitions (what differs from the paper is said here):

* the entropy H (``entropy_key``): ``auto`` = ``entropy/generated`` when every run logs it — the official entropy
  of all responses generated at the step, before dynamic filtering drops groups (without filtering it equals
  ``entropy``; with filtering ``entropy`` covers only the kept mixed-reward groups, a subset that changes from step
  to step) — else ``entropy``. Every analysis below uses this one key.
* start / end entropy of a run: mean H over its first / last ``WINDOW`` logged steps (the paper reads
  single points of smoothed curves); ``grpo_entropy_ratio`` = end / start of the baseline's runs, mean ± 95% CI
  over seeds. ``collapsed`` = ratio ≤ 0.1 and the held-out gain in the last third (``late_gain``, T·2/3 → T) below
  10% of the total gain (``total_gain``, step 0 → T), both seed means — the criterion of issue #11.
  ``late_gain_fraction`` is the per-seed ratio's mean, reported only: a seed whose total gain is near zero or
  negative makes that ratio meaningless (its sign flips), which is why the criterion compares means.
* ``early_fraction``: of the baseline's entropy drop (start → end) and held-out gain (step-0 eval → last eval), the
  part realised by step T/3 (entropy: mean of the ``WINDOW`` steps ending at T/3; score: linear interpolation
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
  difference of final held-out scores (score units), mean ± 95% Student-t CI (harness.results.stats).

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
     "methods": {METHOD: {SIZE: {"entropy_end_vs_grpo": IV, "score_delta_vs_grpo": IV}}}}

with IV = ``{"mean", "ci95", "n"}`` (ci95 = half-width; null when n < 2).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from . import stats
from .collect import Collection
from .fit import fit_entropy_law, fit_size_trend, ols_line
from .points import ENTROPY_KEY, GENERATED_KEY, UPDATE_DELTA_KEY, resolve_score_key, run_points, score_series

WINDOW = 5
LAW_FAMILY = ("grpo", "rloo", "prime")
COV_GROUPS = ["cov/top_0.02pct", "cov/top_0.2pct", "cov/top_2pct", "cov/top_20pct", "cov/top_50pct", "cov/mean"]


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
        raise ValueError(f"entropy key {entropy_key!r} is not logged by every completed run (the mechanism analyses "
                         f"need it); entropy keys present: {', '.join(known) or 'none'}")
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
        raise ValueError("the runs differ in settings that change what they measure ("
                         + " | ".join(sorted(set(done["setting"]) - {""}))
                         + "); analyse one setting at a time (pass only its run directories)")
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
        if len(h) < 2 * WINDOW or s.empty:
            continue
        steps = int(h["step"].max())
        third = steps / 3
        upto = h[h["step"] <= third]
        interp = (lambda x: float(np.interp(x, s["step"], s["score"]))) if len(s) >= 2 else (lambda x: math.nan)
        rows.append({"run_dir": r.run_dir, "model": r.model, "model_params": r.model_params, "label": r.label,
                     "seed": r.seed, "steps": steps,
                     "h_start": float(h["entropy"].head(WINDOW).mean()), "h_end": float(h["entropy"].tail(WINDOW).mean()),
                     "h_third": float(upto["entropy"].tail(WINDOW).mean()) if len(upto) else math.nan,
                     "h_last": float(h["entropy"].iloc[-1]),
                     "s_first": float(s["score"].iloc[0]), "s_end": float(s["score"].iloc[-1]),
                     "s_third": interp(third), "s_two_thirds": interp(2 * third),
                     "first_eval_step": int(s["step"].iloc[0])})
    if not rows:
        raise ValueError(f"no completed run has at least {2 * WINDOW} logged entropy steps and a {score_key!r} "
                         "score; nothing to analyse")
    return pd.DataFrame(rows)


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
    out["collapsed"] = bool(math.isfinite(ratio.mean) and ratio.mean <= 0.1 and math.isfinite(late_gain.mean)
                            and late_gain.mean < 0.1 * total_gain.mean)
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
        out["law_by_algorithm"][alg] = {**_law_dict(own), "rmse_own": own.rmse,
                                        "rmse_pooled": float(np.sqrt(np.mean(resid ** 2)))}
    steps = runs["steps"].max()
    early = fam[fam["step"] <= steps / 3]
    try:
        early_fit = fit_entropy_law(early["entropy"], early["score"])
    except ValueError:
        return out
    fr = runs[runs["label"].isin(family)]
    err = fr["s_end"] - early_fit.predict(fr["h_last"])
    out["prediction_rmse"] = float(np.sqrt(np.mean(err ** 2)))
    out["prediction_n"] = int(len(fr))
    out["final_score_sd"] = float(fr["s_end"].std(ddof=0))  # a law of H alone cannot beat this once H ~ 0
    out["prediction_law"] = _law_dict(early_fit)
    return out


def _partial_r(pairs: pd.DataFrame, h_key: str) -> float | None:
    """Pearson r of cov/term and ΔH after removing from each the part linear in the states' entropy H: both
    scale with H across steps (an early, high-entropy batch has a small covariance and a large drop), which
    the theorem's per-step relation does not describe."""
    from .plots import pearson_r

    g = pairs.dropna(subset=[h_key])
    if len(g) < 4:
        return None
    h = np.column_stack([np.ones(len(g)), g[h_key].to_numpy(float)])

    def resid(y):
        return y - h @ np.linalg.lstsq(h, y, rcond=None)[0]

    return pearson_r(resid(g["cov/term"].to_numpy(float)), resid(g["delta_h"].to_numpy(float)))


def _cov(col: Collection, done: pd.DataFrame, entropy_key: str, delta_key: str | None) -> tuple[dict | None, dict]:
    from .plots import NoData, entropy_change_pairs, pearson_r

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
    res = {"pearson_r": pearson_r(pairs["cov/term"], pairs["delta_h"]), "slope": slope, "n": int(len(pairs)),
           "block_r": pearson_r(blocks["cov/term"], blocks["delta_h"]), "block_steps": block,
           "partial_r_given_entropy": _partial_r(pairs, h_key),
           "by_quarter": [pearson_r(g["cov/term"], g["delta_h"]) for _, g in pairs.groupby(quarter(pairs["step"]))],
           "by_method": {str(k): {"pearson_r": pearson_r(g["cov/term"], g["delta_h"]), "n": int(len(g)),
                                  "partial_r_given_entropy": _partial_r(g, h_key),
                                  "mean_cov": float(g["cov/term"].mean()), "mean_delta_h": float(g["delta_h"].mean()),
                                  "mean_relative_delta_h": float((g["delta_h"] / g[h_key]).mean())}
                         for k, g in pairs.groupby("label")}}
    groups = {}
    q = quarter(m["step"])
    for k in COV_GROUPS:
        if k in m.columns and m[k].notna().any():
            groups[k] = [float(m[k][q == i].mean()) for i in range(4)]
    return res, groups


def analyse(col: Collection, score_key: str = "auto", baseline: str = "grpo", law_family=None,
            entropy_key: str = "auto") -> dict:
    """All analyses of the module docstring; raises ValueError naming what the runs lack. ``law_family``
    None = the paper's GRPO-family methods that are present; given = exactly these (each must have runs)."""
    done = _check(col, baseline)
    entropy_key, delta_key = _entropy_keys(col, done, entropy_key)
    explicit = law_family is not None
    law_family = tuple(law_family) if explicit else LAW_FAMILY
    unknown = sorted(set(law_family) - set(done["label"].astype(str)))
    if unknown and explicit:
        raise ValueError(f"law family method(s) {', '.join(unknown)} have no completed run; methods present: "
                         + ", ".join(sorted(done["label"].astype(str).unique())))
    key = resolve_score_key(col, score_key)
    runs = _run_summaries(col, done, key, entropy_key)
    pts = run_points(col, key, entropy_key)
    out: dict = {"score_key": key, "entropy_key": entropy_key, "delta_key": delta_key, "baseline": baseline,
                 "law_family": list(law_family),
                 "steps": int(runs["steps"].max()), "seeds": int(runs.groupby(["model", "label"]).size().max()),
                 "window": WINDOW, "sizes": {}, "methods": {}}
    order = runs.groupby("model")["model_params"].max().sort_values(na_position="last").index
    for model in order:
        r = runs[runs["model"] == model]
        if (r["label"] == baseline).any():
            out["sizes"][str(model)] = _size_block(r, pts[pts["model"] == model], baseline, law_family)
    laws = [(v["model_params"], v["law"]) for v in out["sizes"].values() if v["law"] and v["model_params"]]
    out["size_trend"] = None
    if len({p for p, _ in laws}) >= 2:
        out["size_trend"] = fit_size_trend([p for p, _ in laws], [w["a"] for _, w in laws],
                                           [w["b"] for _, w in laws]).to_dict()
    out["cov_vs_entropy_change"], out["cov_groups"] = _cov(col, done, entropy_key, delta_key)
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
            "score_delta_vs_grpo": stats.paired_diff(dict(zip(g["seed"], g["s_end"])), bs).to_dict()}
    out["runs"] = runs.drop(columns=["run_dir"]).to_dict(orient="records")
    return _clean(out)


def write_mechanism(runs_dir, out_dir, score_key: str = "auto", baseline: str = "grpo",
                    formats=("png",), law_family=None, entropy_key: str = "auto") -> list[Path]:
    """Collect ``runs_dir``, analyse, write mechanism.json and the figures; returns the written paths."""
    import warnings

    from .collect import collect

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        col = collect([runs_dir])
    res = analyse(col, score_key, baseline, law_family, entropy_key)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "mechanism.json"
    path.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    md = out_dir / "mechanism.md"
    fam = "" if law_family is None else f" --law-family {','.join(law_family)}"
    fam += "" if entropy_key == "auto" else f" --entropy-key {entropy_key}"
    md.write_text(f"# Mechanism analyses: {runs_dir}\n\nRegenerate: `harness mechanism {runs_dir} --out {out_dir}{fam}`"
                  "\n\n" + summary_markdown(res), encoding="utf-8")
    written = [path, md]
    from .mechanism_plots import plot_mechanism

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
    g = lambda v, f="{:.3g}": "—" if v is None else f.format(v)  # noqa: E731
    delta = (f"`{res['delta_key']}` (the update's change on the trained batch)" if res.get("delta_key")
             else "H[t+1] − H[t]")
    out = [f"Score: `{res['score_key']}` (percent below); entropy H: `{res['entropy_key']}`; ΔH: {delta}; baseline "
           f"`{res['baseline']}`; {res['steps']} steps; up to {res['seeds']} seeds per (size, method); intervals = "
           "95% Student-t over seeds.", "",
           "| size | params | GRPO end/start entropy | held-out gain: last third / total (points) | collapsed "
           "| early: entropy drop | early: gain | law a | law b | law R² | points | prediction RMSE (points, runs) "
           "| final-score sd (points) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pts = lambda v: None if v is None else 100 * v  # noqa: E731
    for size, v in res["sizes"].items():
        law = v.get("law") or {}
        out.append(f"| {size} | {g(v['model_params'], '{:.3g}')} | {_iv(v['grpo_entropy_ratio'])} | "
                   f"{_iv(v['late_gain'], 100, '{:+.1f}')} / {_iv(v['total_gain'], 100, '{:+.1f}')} | "
                   f"{'yes' if v['collapsed'] else 'no'} | "
                   f"{_iv(v['early_fraction']['entropy_drop'])} | {_iv(v['early_fraction']['gain'])} | "
                   f"{g(law.get('a'))} | {g(law.get('b'))} | {g(law.get('r2'), '{:.2f}')} | {law.get('n', '—')} | "
                   f"{g(pts(v['prediction_rmse']), '{:.1f}')} ({v['prediction_n']}) | "
                   f"{g(pts(v.get('final_score_sd')), '{:.1f}')} |")
    out += ["", "Law per algorithm (one law for all? compare the pooled fit's RMSE on that algorithm's points with "
            "its own fit's):", "", "| size | algorithm | a | b | R² | points | RMSE own | RMSE pooled |",
            "|---|---|---|---|---|---|---|---|"]
    for size, v in res["sizes"].items():
        for alg, w in v["law_by_algorithm"].items():
            out.append(f"| {size} | {alg} | {g(w['a'])} | {g(w['b'])} | {g(w['r2'], '{:.2f}')} | {w['n']} | "
                       f"{g(w['rmse_own'])} | {g(w['rmse_pooled'])} |")
    t = res.get("size_trend")
    if t:
        out += ["", f"a = {t['a_slope']:.3g}·log10(N) + {t['a_intercept']:.3g} (R² {g(t['a_r2'], '{:.2f}')}); "
                    f"b = {t['b_slope']:.3g}·log10(N) + {t['b_intercept']:.3g} (R² {g(t['b_r2'], '{:.2f}')}), "
                    f"{t['n_sizes']} sizes."]
    c = res.get("cov_vs_entropy_change")
    if c:
        per = ", ".join(f"{m} {g(w['pearson_r'], '{:.2f}')} (partial {g(w.get('partial_r_given_entropy'), '{:.2f}')}"
                        f", n={w['n']})" for m, w in c["by_method"].items())
        quarters = " / ".join(g(r, "{:+.2f}") for r in c.get("by_quarter") or [])
        out += ["", f"ΔH vs cov/term of the same step: Pearson r = {g(c['pearson_r'], '{:.2f}')}, slope "
                    f"{g(c['slope'])}, n = {c['n']} steps (Theorem 1 predicts r < 0); by quarter of training "
                    f"{quarters}; partial r given the states' entropy "
                    f"{g(c.get('partial_r_given_entropy'), '{:.2f}')}; r of the curves in blocks of "
                    f"{c.get('block_steps')} steps {g(c.get('block_r'), '{:.2f}')}. By method: {per}."]
    out += ["", "Rescue vs the baseline, paired by seed (end entropy ratio; final score difference in points):", "",
            "| method | size | end entropy ÷ GRPO's | score − GRPO's (points) |", "|---|---|---|---|"]
    for m, by in res["methods"].items():
        for size, v in by.items():
            out.append(f"| {m} | {size} | {_iv(v['entropy_end_vs_grpo'])} | "
                       f"{_iv(v['score_delta_vs_grpo'], 100, '{:+.1f}')} |")
    return "\n".join(out) + "\n"
