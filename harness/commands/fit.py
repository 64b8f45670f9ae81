"""``harness fit RUNS... | --csv FILE``: fit the entropy law R = -a·exp(H) + b per run or model."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from harness.commands._common import collect_runs
from harness.run.metrics import ENTROPY, EVAL_PREFIX

ORDER = 130


def register(sub) -> None:
    f = sub.add_parser(
        "fit",
        help="fit the entropy law R = -a·exp(H) + b",
        description="Fits a, b (R², ceiling -a+b) per run or model from RUNS, or from exported "
        "CSV logs. --fit-fraction F fits on the first F of the points (step order) "
        "and reports the prediction error on the rest (rmse_heldout).",
    )
    f.add_argument("runs", nargs="*", help="run directories or folders holding them")
    f.add_argument(
        "--csv",
        action="append",
        type=Path,
        default=None,
        help="exported log CSV (W&B, TensorBoard); repeat to merge files on their step column",
    )
    f.add_argument("--entropy-col", help="entropy column of the CSV")
    f.add_argument("--score-col", help="score column of the CSV")
    f.add_argument("--step-col", default=None, help="step column of the CSV (default: step/Step/_step/global_step)")
    f.add_argument(
        "--score-key",
        default="auto",
        help="runs: score key, auto (eval/<suite>/<metric> if logged, else reward/mean) or any key",
    )
    f.add_argument("--entropy-key", default=ENTROPY, help="runs: entropy key in metrics.jsonl")
    f.add_argument("--by", choices=["run", "model"], default="run", help="runs: one fit per run or per model")
    f.add_argument("--fit-fraction", type=float, default=None, help="fit on the first F (0<F<1) of the points")
    f.add_argument(
        "--predict-size",
        type=float,
        action="append",
        default=None,
        help="extrapolate a, b, ceiling to this many parameters (needs fits of ≥2 model sizes)",
    )
    f.add_argument("--json", action="store_true", help="print one JSON object")
    f.set_defaults(func=run)


def _clean(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def run(args) -> int:
    if bool(args.runs) == bool(args.csv):
        raise ValueError("give either run directories or --csv FILE (with --entropy-col and --score-col)")
    fits, trend, skipped = [], None, []
    if args.csv:
        pooled, source = _fit_csv(args)
    else:
        fits, pooled, trend, source = _fit_runs(args, skipped)
    if args.predict_size and trend is None:
        raise ValueError("--predict-size needs law fits for at least two model sizes (model_params in result.json)")
    out = {**pooled.to_dict(), **source, "fits": [f.to_dict() for f in fits], "skipped": skipped}
    for s in skipped:
        print(f"skipped {s}", file=sys.stderr)
    if trend is not None:
        out["size_trend"] = trend.to_dict()
        out["predictions"] = [trend.predict(s) for s in (args.predict_size or [])]
    if args.json:
        print(json.dumps(_clean(out), indent=2))
        return 0
    _print_fits(pooled, fits, out)
    return 0


def _fit_csv(args):
    """``--csv``: one fit over the exported logs; (the fit, its source)."""
    from harness.results.fit import fit_entropy_law
    from harness.results.points import csv_points

    if not args.entropy_col or not args.score_col:
        raise ValueError("--csv needs --entropy-col and --score-col")
    for p in args.csv:  # name the file that cannot be read (pandas' own errors name none)
        _check_csv(p)
    try:
        pts = csv_points(args.csv, args.entropy_col, args.score_col, args.step_col)
    except (pd_errors().ParserError, pd_errors().EmptyDataError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--csv {', '.join(map(str, args.csv))}: not a readable CSV ({first})") from None
    dropped = pts.attrs.get("dropped_steps") or []
    if dropped:  # steps logged without both values (an eval every k steps, a failed export): said, not hidden
        shown = ", ".join(str(s) for s in dropped[:8]) + (" ..." if len(dropped) > 8 else "")
        print(
            f"note: {len(dropped)} of {len(dropped) + len(pts)} rows have no number for {args.entropy_col!r} "
            f"or {args.score_col!r} and are left out of the fit (steps {shown})",
            file=sys.stderr,
        )
    try:
        pooled = fit_entropy_law(pts["entropy"], pts["score"], args.fit_fraction, label=str(args.csv[0]))
    except ValueError as e:
        raise ValueError(f"--csv {', '.join(map(str, args.csv))}: {e}") from None
    return pooled, {"csv": [str(p) for p in args.csv], "entropy_col": args.entropy_col, "score_col": args.score_col}


def _fit_runs(args, skipped: list):
    """Run directories: a fit per run or model, the pooled fit, and the size trend when there are >= 2 sizes;
    (fits, pooled, trend or None, source). Groups too small to fit are appended to ``skipped``."""
    from harness.results.fit import fit_entropy_law, fit_groups, fit_size_trend
    from harness.results.points import resolve_score_key, run_points

    col = collect_runs(args.runs)
    key = resolve_score_key(col, args.score_key)
    pts = run_points(col, key, args.entropy_key)
    if pts.empty:
        raise ValueError(f"no completed run logged both {args.entropy_key!r} and {key!r} on the same step")
    try:
        fits = fit_groups(pts, args.by, args.fit_fraction, skipped)
    except ValueError as e:
        hint = (
            (
                f" (the score is {key!r}, logged on eval steps only; --score-key reward/mean uses every step, "
                "--by model pools the runs of a model)"
            )
            if key.startswith(EVAL_PREFIX)
            else ""
        )
        raise ValueError(f"{e}{hint}") from None
    pooled_pts = pts.sort_values(["step", "run_dir"])
    pooled = fit_entropy_law(pooled_pts["entropy"], pooled_pts["score"], args.fit_fraction, label="all runs")
    source = {"runs": [str(r) for r in args.runs], "score_key": key, "entropy_key": args.entropy_key, "by": args.by}
    by_model = fit_groups(pts, "model") if args.by == "run" else fits
    sized = [f for f in by_model if f.model_params]
    trend = None
    if len({f.model_params for f in sized}) >= 2:
        trend = fit_size_trend([f.model_params for f in sized], [f.a for f in sized], [f.b for f in sized])
    return fits, pooled, trend, source


def pd_errors():
    import pandas as pd

    return pd.errors


def _check_csv(path: Path) -> None:
    """``--csv FILE`` is a readable UTF-8 file, else one error naming it."""
    from harness.io import read_text

    if not path.exists():
        raise FileNotFoundError(f"--csv {path}: no such file")
    text = read_text(path)  # ValueError naming the file: a directory, not UTF-8, no permission
    if not text.strip():
        raise ValueError(f"--csv {path}: empty file")


def _fmt(v) -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.4g}"


def _print_fits(pooled, fits, out) -> None:
    head = ["fit", "a", "b", "ceiling(-a+b)", "R²", "points", "a (Theil-Sen)", "b (Theil-Sen)"]
    heldout = pooled.fit_fraction is not None
    if heldout:
        head += ["held out", "rmse_heldout"]
    rows = []
    for f in (fits if len(fits) > 1 else []) + [pooled]:
        r = [
            f.label or "",
            _fmt(f.a),
            _fmt(f.b),
            _fmt(f.ceiling),
            _fmt(f.r2),
            str(f.n_points),
            _fmt(f.a_robust),
            _fmt(f.b_robust),
        ]
        if heldout:
            r += [str(f.n_heldout), _fmt(f.rmse_heldout)]
        rows.append(r)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    for f in (fits if len(fits) > 1 else []) + [pooled]:
        if f.warning:
            print(f"warning: {f.label}: {f.warning}")
    if "size_trend" in out:
        t = out["size_trend"]
        print(
            f"a = {t['a_slope']:.4g}·log10(N) + {t['a_intercept']:.4g} (R² {_fmt(t['a_r2'])}); "
            f"b = {t['b_slope']:.4g}·log10(N) + {t['b_intercept']:.4g} (R² {_fmt(t['b_r2'])})"
            + (" -- only 2 sizes: the line passes through both exactly" if t["n_sizes"] == 2 else "")
        )
        for p in out.get("predictions", []):
            print(f"predicted at N={p['model_params']:.3g}: a={p['a']:.4g} b={p['b']:.4g} ceiling={p['ceiling']:.4g}")
