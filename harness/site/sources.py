"""What a site shows, read from the same records the tables use (``harness.results``): one :class:`Sweep` per path.

A path is one of two kinds:

* a **runs folder** (run directories beneath it, ``harness.results.collect.find_run_dirs``): the leaderboard is
  ``build_leaderboard(collect(path))`` turned into the csv records of ``to_csv`` (the very text ``harness table
  --format csv`` prints), each row knows its runs, and every run gets a page; the same in each further metric
  (``--metric pass``, ``maj``) that every suite's results hold, for the page's metric switch;
* a **committed results folder** (``leaderboard.csv`` written by ``harness report``): the leaderboard is that
  csv, its notes are ``leaderboard.md``'s, its figures are its PNGs; the runs behind it are not there, so its
  rows link to no run and the page says so.

Numbers are never recomputed here: cells show the csv record's values; a run's values are ``final_evals``'s.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.io import jsonl_lines
from harness.results import table as tbl
from harness.results.collect import Collection, collect, final_evals, find_run_dirs
from harness.results.rerender import leaderboard_columns, parse_leaderboard_md, read_records

__all__ = ["leaderboard_columns", "read_records"]  # the records' reader lives in harness.results.rerender

GRADED_SUFFIXES = (".graded.jsonl", ".graded.jsonl.gz")
MAX_SAMPLES = 2000  # graded rows kept per (run, suite) by default
MAX_TEXT = 20000  # characters kept of one prompt / response / gold text


@dataclass
class SampleSet:
    """One ``<suite>.graded.jsonl`` of a run (written by ``harness eval``)."""

    suite: str
    path: Path
    problems: dict  # id -> {"prompt", "gold"}
    rows: list  # [id, sample, response, correct, pred, reason]
    total_rows: int
    result: dict | None  # the suite's entry of the sibling results.json, if any
    prompt_source: str = ""

    @property
    def n_correct(self) -> int:
        return sum(1 for r in self.rows if r[3])


@dataclass
class RunInfo:
    slug: str
    run_dir: Path
    ident: dict  # the run's row of Collection.runs
    config_text: str
    result: dict | None
    metrics: pd.DataFrame
    evals: pd.DataFrame  # every eval step of the run (fractions, as logged)
    final: pd.DataFrame  # the leaderboard's input for this run (final_evals; percent)
    samples: list[SampleSet] = field(default_factory=list)
    row_index: int | None = None  # leaderboard row it counts in


@dataclass
class MetricView:
    """The leaderboard in another metric (``harness table --metric pass|maj``): its csv records, notes, the runs of
    each row and each run's value (``run_scores`` in that metric, percent)."""

    metric: str
    table: pd.DataFrame
    csv_text: str
    notes: list[str]
    row_runs: dict = field(default_factory=dict)  # table row index -> [RunInfo]
    scores: pd.DataFrame | None = None


@dataclass
class Sweep:
    slug: str
    title: str
    path: Path
    kind: str  # "runs" | "results"
    table: pd.DataFrame | None  # to_csv records (one row per leaderboard row)
    columns: list[str]  # suite columns, then the averages
    baseline: str | None
    notes: list[str]
    csv_text: str
    runs: list[RunInfo] = field(default_factory=list)
    row_runs: dict = field(default_factory=dict)  # table row index -> [RunInfo]
    figures: list[Path] = field(default_factory=list)
    other_files: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why something is not shown
    collection: Collection | None = None
    metric: str = "avg"  # the metric of ``table`` (the default view)
    views: list[MetricView] = field(default_factory=list)  # the other metrics every suite's results hold


def slugify(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text)).strip("-.")
    return s or "x"


def _unique(slug: str, taken: set) -> str:
    out, i = slug, 2
    while out in taken:
        out, i = f"{slug}-{i}", i + 1
    taken.add(out)
    return out


def is_results_folder(path: Path) -> bool:
    return (path / "leaderboard.csv").is_file()


def load_sweeps(
    paths,
    *,
    baseline: str | None = None,
    allow_mixed_protocols: bool = False,
    max_samples: int = MAX_SAMPLES,
) -> list[Sweep]:
    """One :class:`Sweep` per path (see the module docstring); bad paths raise one clear error."""
    sweeps, taken = [], set()
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"no such folder: {p}")
        if not p.is_dir():
            raise ValueError(f"{p} is not a folder (give runs folders or results folders holding leaderboard.csv)")
        slug = _unique(slugify(p.resolve().name), taken)
        if is_results_folder(p):
            sweeps.append(_results_sweep(p, slug, max_samples))
        else:
            try:
                find_run_dirs([p])
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"{p}: neither a results folder (no leaderboard.csv) nor a runs folder (no run directory "
                    f"beneath it: a run directory holds result.json, metrics.jsonl, config.yaml or results.json)"
                ) from None
            sweeps.append(_runs_sweep(p, slug, baseline, allow_mixed_protocols, max_samples))
    return sweeps


# ------------------------------------------------------------------ leaderboard records


def _runs_sweep(p: Path, slug: str, baseline, allow_mixed, max_samples) -> Sweep:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # collect() keeps them in col.warnings; they go into the notes
        col = collect([p])
    sweep = Sweep(
        slug=slug,
        title=p.name,
        path=p,
        kind="runs",
        table=None,
        columns=[],
        baseline=None,
        notes=[],
        csv_text="",
        collection=col,
    )
    ev = None
    try:
        lb = tbl.build_leaderboard(col, baseline=baseline, allow_mixed_protocols=allow_mixed)
        sweep.csv_text = tbl.to_csv(lb)
        sweep.table = read_records(sweep.csv_text)
        sweep.columns = list(lb.columns)
        sweep.baseline = lb.baseline
        sweep.notes = list(lb.notes) + [f"WARNING: {w}" for w in col.warnings]
        ev, _ = tbl.run_scores(col, allow_mixed)
        sweep.views = _metric_views(col, baseline, allow_mixed)
    except ValueError as e:
        sweep.problems.append(f"No leaderboard: {e}")
        sweep.notes = [f"WARNING: {w}" for w in col.warnings]
    final = final_evals(col)
    taken: set = set()
    for r in col.runs.to_dict("records"):
        d = Path(r["run_dir"])
        run = RunInfo(
            slug=_unique(slugify(d.name), taken),
            run_dir=d,
            ident=r,
            config_text=_config_text(d),
            result=_read_json(d / "result.json") or _read_json(d / "results.json"),
            metrics=col.metrics[col.metrics["run_dir"] == r["run_dir"]].sort_values("step"),
            evals=col.evals[col.evals["run_dir"] == r["run_dir"]],
            final=_final_percent(final[final["run_dir"] == r["run_dir"]], ev),
            samples=find_samples(d, max_samples),
        )
        sweep.runs.append(run)
    if sweep.table is not None and ev is not None:
        _link_rows(sweep, ev)
        for v in sweep.views:
            v.row_runs = _row_runs(v.table, v.scores, sweep.runs)
    return sweep


def _metric_views(col: Collection, baseline, allow_mixed) -> list[MetricView]:
    """The leaderboard in each further metric (``tbl.METRICS`` after avg) that every suite's results hold."""
    views = []
    for metric in list(tbl.METRICS)[1:]:
        try:
            lb = tbl.build_leaderboard(col, baseline=baseline, allow_mixed_protocols=allow_mixed, metric=metric)
        except ValueError:  # some suite lacks it (harness table names which): no view
            continue
        csv_text = tbl.to_csv(lb)
        scores, _ = tbl.run_scores(col, allow_mixed, metric)
        notes = list(lb.notes) + [f"WARNING: {w}" for w in col.warnings]
        views.append(MetricView(metric, read_records(csv_text), csv_text, notes, scores=scores))
    return views


def _final_percent(final: pd.DataFrame, ev: pd.DataFrame | None) -> pd.DataFrame:
    """A run's final eval per suite in percent: the leaderboard's own per-run values (``run_scores``) when the
    leaderboard was built, else ``final_evals`` scaled the same way."""
    if ev is not None and not final.empty:
        mine = ev[ev["run_dir"] == final["run_dir"].iloc[0]]
        if not mine.empty:
            return mine
    out = final.copy()
    out["value"] = out["value"] * tbl.SCALE
    if "stderr" in out:
        out["stderr"] = out["stderr"] * tbl.SCALE
    out["column"] = out["suite"]
    return out


def _link_rows(sweep: Sweep, ev: pd.DataFrame) -> None:
    """Each leaderboard row's runs (and each run's row in the default view)."""
    sweep.row_runs = _row_runs(sweep.table, ev, sweep.runs)
    for i, runs in sweep.row_runs.items():
        for run in runs:
            run.row_index = i


def _row_runs(t: pd.DataFrame, ev: pd.DataFrame, runs: list[RunInfo]) -> dict:
    """Table row index -> the runs whose final evals the row aggregates (same key as build_leaderboard)."""
    index = {}
    for i, r in t.iterrows():
        if r["source"] == "runs":
            index[(str(r["model"]), str(r["task"]), str(r["setting"]), str(r["method"]), str(r["flag"]))] = i
    by_dir = {str(run.run_dir): run for run in runs}
    out: dict = {}
    for run_dir, grp in ev.groupby("run_dir"):
        g = grp.iloc[0]
        flag = tbl.FLAG_INSUFFICIENT if g["status"] == tbl.FLAG_INSUFFICIENT else ""
        key = (str(g["model"]), str(g["task"]), str(g["setting"]), str(g["label"]), flag)
        i = index.get(key)
        run = by_dir.get(str(run_dir))
        if i is not None and run is not None:
            out.setdefault(i, []).append(run)
    for rs in out.values():
        rs.sort(key=lambda r: (str(r.ident.get("seed")), r.slug))
    return out


def _results_sweep(p: Path, slug: str, max_samples) -> Sweep:
    csv_text = (p / "leaderboard.csv").read_text(encoding="utf-8")
    try:
        table = read_records(csv_text)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{p / 'leaderboard.csv'}: not a leaderboard csv ({e})") from None
    need = {"source", "model", "method"}
    if not need <= set(table.columns) or not any(c.endswith("_mean") for c in table.columns):
        raise ValueError(
            f"{p / 'leaderboard.csv'}: not a harness leaderboard csv (needs columns source, model, method and "
            f"<suite>_mean; has {', '.join(table.columns)})"
        )
    md = _read_text(p / "leaderboard.md")
    title, baseline, notes = parse_leaderboard_md(md)
    sweep = Sweep(
        slug=slug,
        title=p.name,
        path=p,
        kind="results",
        table=table,
        columns=leaderboard_columns(table),
        baseline=baseline,
        notes=notes,
        csv_text=csv_text,
        metric=str(table["metric"].iloc[0]) if "metric" in table and len(table) else "avg",
    )
    sweep.figures = sorted(f for f in p.glob("*.png") if f.is_file())
    sweep.other_files = sorted(
        f for f in p.iterdir() if f.is_file() and f.suffix in (".md", ".json", ".txt") and f.name != "leaderboard.md"
    )
    runs_from = f" ({title})" if title else ""
    sweep.problems.append(
        f"This is a committed results folder: it holds the leaderboard csv, its notes and figures, not the runs "
        f"behind them{runs_from}. Its cells link to no run page, and it has no curves per run and no graded "
        f"samples. Build the site from the runs folder for those: harness site RUNS_DIR --out DIR."
    )
    return sweep


# ------------------------------------------------------------------ samples


def find_samples(run_dir: Path, max_samples: int = MAX_SAMPLES) -> list[SampleSet]:
    """Graded outputs of a run: ``*.graded.jsonl[.gz]`` in the run directory (a ``harness eval --out`` folder)
    or anywhere below it except ``checkpoints/`` (e.g. ``eval/samples/``, a post-hoc ``harness eval``)."""
    found = []
    for f in sorted(run_dir.rglob("*.graded.jsonl*")):
        rel = f.relative_to(run_dir).parts
        if not f.name.endswith(GRADED_SUFFIXES) or "checkpoints" in rel or any(s.startswith(".") for s in rel):
            continue
        found.append(read_samples(f, max_samples))
    return found


def _clip(text) -> str:
    if text is None:
        return ""
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False) if isinstance(text, (dict, list)) else str(text)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} more characters]"


def _prompt(row: dict, generations: dict) -> tuple[str | None, str]:
    if isinstance(row.get("prompt"), str):
        return row["prompt"], "graded row"
    pd_ = row.get("problem_data")
    if isinstance(pd_, dict) and isinstance(pd_.get("prompt"), str):
        return pd_["prompt"], "graded row (problem_data)"
    g = generations.get((row.get("id"), row.get("sample"))) or generations.get((row.get("id"), 0))
    if isinstance(g, str):
        return g, "generations.jsonl"
    for k in ("problem", "question"):
        if isinstance(row.get(k), str):
            return row[k], f"graded row ({k})"
    return None, ""


def _gold(row: dict) -> str:
    for k in ("answer", "gold", "solution"):
        if row.get(k) is not None:
            return _clip(row[k])
    for k in ("test", "tests", "test_list", "input_output"):
        if row.get(k) is not None:
            return "tests:\n" + _clip(row[k])
    return ""


def _reason(row: dict) -> str:
    parts = [str(row[k]) for k in ("reason", "status") if row.get(k) not in (None, "")]
    if row.get("detail") not in (None, ""):
        parts.append(str(row["detail"]))
    return ": ".join(parts)


def read_samples(path: Path, max_samples: int = MAX_SAMPLES) -> SampleSet:
    """Read one graded file (``harness eval``'s format: id, sample, response, correct, pred/reason or
    status/detail, answer); the prompt comes from the row, else from the sibling ``generations.jsonl``."""
    name = path.name
    suite = name[: name.index(".graded.jsonl")]
    gen_path = path.with_name(f"{suite}.generations.jsonl")
    generations = {}
    if gen_path.is_file():  # the prompts only: a line it cannot read costs a prompt, not the page
        for _, g in jsonl_lines(gen_path, on_bad=lambda lineno, why: None):
            if isinstance(g, dict) and isinstance(g.get("prompt"), str):
                generations[(g.get("id"), g.get("sample"))] = g["prompt"]
    problems, rows, total, source = {}, [], 0, ""
    for lineno, row in jsonl_lines(path):
        if not isinstance(row, dict) or "id" not in row or "correct" not in row:
            raise ValueError(f"{path}:{lineno}: a graded row needs 'id' and 'correct' (harness eval's format)")
        total += 1
        if len(rows) >= max_samples:
            continue
        pid = str(row["id"])
        if pid not in problems:
            prompt, src = _prompt(row, generations)
            source = source or src
            problems[pid] = {"prompt": _clip(prompt) if prompt is not None else None, "gold": _gold(row)}
        rows.append(
            [
                pid,
                row.get("sample", 0),
                _clip(row.get("response")),
                bool(row["correct"]),
                _clip(row.get("pred")) if row.get("pred") is not None else None,
                _reason(row),
            ]
        )
    results = _read_json(path.parent / "results.json") or {}
    suite_result = (results.get("suites") or {}).get(suite) if isinstance(results, dict) else None
    return SampleSet(
        suite=suite,
        path=path,
        problems=problems,
        rows=rows,
        total_rows=total,
        result=suite_result if isinstance(suite_result, dict) else None,
        prompt_source=source,
    )


# ------------------------------------------------------------------ small readers


def _config_text(run_dir: Path) -> str:
    """The run's config.yaml, headed by a warning when it is not the config of the run it holds (edited after
    training: harness.run.identity)."""
    import yaml

    from harness.io import load_yaml
    from harness.provenance import STAMP_FILE
    from harness.run.identity import config_drift

    text = _read_text(run_dir / "config.yaml")
    try:
        cfg = load_yaml(text)
    except (ValueError, yaml.YAMLError):
        return text
    stamped = (run_dir / STAMP_FILE).is_file()  # a run stamped at its start (as harness.results.collect)
    drift = config_drift(run_dir, cfg) if stamped and isinstance(cfg, dict) and cfg else None
    return text if drift is None else f"# WARNING: {drift[1]}\n{text}"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _read_json(path: Path):
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def seed_text(v) -> str:
    """``3`` for 3 or 3.0; "" for a run without a seed (an eval-only folder)."""
    f = finite(v)
    if f is None:
        return "" if v is None or isinstance(v, float) else str(v)
    return str(int(f)) if f.is_integer() else str(v)


def finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
