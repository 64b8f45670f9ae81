"""Run directories -> tidy pandas DataFrames (docs/contracts.md §2-4).

``collect(paths)`` finds every run directory under ``paths`` and returns a :class:`Collection` with

* ``runs``    one row per run dir: identity (model, method, seed, ...) and ``status``
              (``completed`` | ``insufficient_updates`` (finished, but fewer than half the expected updates) |
              ``failed`` | ``interrupted`` | ``missing`` = no result.json yet); ``setting`` names the measuring
              settings (steps, budget, task options, lr, ...) in which a run differs from other runs of its
              (model, task): runs with different settings are different experiments, never compared;
              a run id seen twice (the same run passed twice, or a copy) is counted once, with a warning;
* ``metrics`` one row per logged training step (wide: one column per metrics.jsonl key, NaN = not logged);
* ``evals``   one row per (run, eval step, suite): the suite's primary metric (``value``) and its standard error
              over problems (``stderr``), every metric the result holds (``metrics``, JSON), its protocol and weight.

``runs`` also carries each result's provenance: ``git_commit``, ``git_dirty`` and ``datasets`` (JSON
``{name: sha256}``), missing (NaN) for results written before provenance was recorded.

Nothing missing is ever turned into 0: absent keys, null values and unfinished runs stay NaN / "missing".
A corrupt metrics line is skipped with a :class:`CorruptMetricsWarning` naming file and line.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from harness.io import jsonl_lines
from harness.provenance import STAMP_FILE
from harness.run.config import WRITTEN_ORDER, cut_short
from harness.run.metrics import COMPLETED, FAILED, FINISHED, INSUFFICIENT_UPDATES, STEP
from harness.run.records import task_label

RUN_MARKERS = ("result.json", "metrics.jsonl", "config.yaml", "results.json")
EVAL_ONLY = "results.json"  # `harness eval --out DIR` writes DIR/results.json: a model scored without training
EXPORT_EVAL = "eval of its export"  # the eval rows source of a run's export eval joined into the run
PROTOCOL_KEYS = ("n_problems", "n_samples", "temperature", "top_p", "max_tokens")
_STEP_FILE = re.compile(r"^step_(\d+)\.json$")


class CorruptMetricsWarning(UserWarning):
    """A metrics.jsonl line that is not a JSON object was skipped."""


@dataclass
class Collection:
    runs: pd.DataFrame
    metrics: pd.DataFrame
    evals: pd.DataFrame
    warnings: list[str] = field(default_factory=list)

    @property
    def completed(self) -> pd.DataFrame:
        return self.runs[self.runs["status"] == COMPLETED]

    @property
    def not_completed(self) -> pd.DataFrame:
        """Runs without usable results (``insufficient_updates`` runs are finished and shown flagged)."""
        return self.runs[~self.runs["status"].isin(FINISHED)]


def find_run_dirs(paths: Iterable[str | Path]) -> list[Path]:
    """Every directory holding a run marker file, searched recursively; a run dir is not searched further."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise FileNotFoundError(f"no such run directory: {p}")
        if not p.is_dir():
            raise ValueError(f"{p} is not a directory (pass run directories or folders holding them)")
        before = len(found)
        _walk(p, found)
        if len(found) == before:
            raise FileNotFoundError(
                f"no run directories under {p} (a run directory holds one of {', '.join(RUN_MARKERS)})"
            )
    seen, unique = set(), []
    for d in found:
        if d.resolve() not in seen:
            seen.add(d.resolve())
            unique.append(d)
    return unique


def _walk(d: Path, out: list[Path], inside: Path | None = None) -> None:
    """Runs below a run are still read (never hidden), with a warning: nesting is a mistake (harness/run/rundir.py)."""
    if any((d / m).is_file() for m in RUN_MARKERS):
        if inside is not None:
            warnings.warn(
                f"{d}: a run directory nested inside the run directory {inside}; both are read. Move one "
                f"out (runs, sweep runs directories and reports must not nest)",
                stacklevel=2,
            )
        out.append(d)
        inside = inside or d
    for child in sorted(d.iterdir()):
        if (
            child.is_dir()
            and not child.name.startswith((".", "_"))
            and child.name not in ("replaced", "eval", "checkpoints")
        ):
            _walk(child, out, inside)


def read_metrics(path: Path) -> list[dict]:
    """Parse metrics.jsonl; a line that is not a JSON object is skipped with a warning naming file:line."""
    rows = []

    def skip(lineno: int, why: str) -> None:
        warnings.warn(f"{path}:{lineno}: skipped corrupt metrics line ({why})", CorruptMetricsWarning, stacklevel=3)

    try:
        lines = jsonl_lines(path, on_bad=skip)
    except ValueError as e:  # the file itself cannot be read
        why = str(e).removeprefix(f"{path}: ")
        warnings.warn(f"{path}: unreadable ({why}); no metrics read", CorruptMetricsWarning, stacklevel=2)
        return rows
    for lineno, obj in lines:
        if not isinstance(obj, dict):
            warnings.warn(
                f"{path}:{lineno}: skipped metrics line that is not a JSON object", CorruptMetricsWarning, stacklevel=2
            )
            continue
        rows.append({k: (math.nan if v is None else v) for k, v in obj.items()})
    return rows


def _finish_rank(status: str) -> int:
    """Which copy of a run id is read: the most finished (completed, then insufficient_updates, failed, the rest)."""
    return {COMPLETED: 0, INSUFFICIENT_UPDATES: 1, FAILED: 2}.get(status, 3)


def _why(e: Exception) -> str:
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8: byte {e.object[e.start]:#04x} at offset {e.start}"
    if isinstance(e, yaml.YAMLError):
        return "not valid YAML: " + str(getattr(e, "problem", None) or type(e).__name__)
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def _read_json(path: Path) -> dict | None:
    """A JSON object file; an unreadable one (torn, not UTF-8, not a file) is named in a warning, None."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        warnings.warn(f"{path}: unreadable ({_why(e)}); treated as missing", CorruptMetricsWarning, stacklevel=2)
        return None
    if not isinstance(obj, dict):
        warnings.warn(f"{path}: not a JSON object; treated as missing", CorruptMetricsWarning, stacklevel=2)
        return None
    return obj


def _read_config(path: Path) -> dict:
    try:
        obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as e:
        warnings.warn(
            f"{path}: unreadable ({_why(e)}); the run's settings are taken from result.json alone",
            CorruptMetricsWarning,
            stacklevel=2,
        )
        return {}
    return obj if isinstance(obj, dict) else {}


def _name(v) -> str | None:
    """A config entry that is a name or a section with a ``name``."""
    if isinstance(v, dict):
        v = v.get("name")
    return None if v is None else str(v)


def _eval_only_result(run_dir: Path) -> dict | None:
    """``harness eval`` output seen as a finished run of method ``eval-only`` (e.g. a base model)."""
    if (run_dir / "result.json").exists() or not (run_dir / EVAL_ONLY).is_file():
        return None
    obj = _read_json(run_dir / EVAL_ONLY)
    if not obj or not isinstance(obj.get("suites"), dict):
        return None
    model = str(obj.get("model") or run_dir.name).rstrip("/")
    out = {
        "status": COMPLETED,
        "method": "eval-only",
        "model": Path(model).name if "/" in model and Path(model).exists() else model,
        "eval": {"step": 0, "suites": obj["suites"]},
        "backend": obj.get("engine"),
        "provenance": obj.get("provenance"),
    }
    run = obj.get("run")
    if isinstance(run, dict) and run.get("method"):  # an exported run's policy: its method, seed, model and step
        out.update(
            method=run["method"],
            advantage=run.get("advantage"),
            seed=run.get("seed"),
            model=run.get("model") or out["model"],
            task=run.get("task"),
            attached_to=run.get("run_id"),
            eval={"step": run.get("step") or 0, "suites": obj["suites"]},
        )
    return out


def run_provenance(result: dict | None, role: str = "train") -> dict:
    """``git_commit``, ``git_dirty`` and ``datasets`` (JSON {key: sha256}) of a result's ``provenance``; all None
    for a result written before provenance was recorded (harness/provenance.py). Data are keyed by role and name:
    a training set by its name, an eval's problems as ``eval:<name>`` (``role``: of entries that record none, as
    results written before roles: ``train`` in a run's result.json, ``eval`` in harness eval's results.json)."""
    prov = (result or {}).get("provenance")
    if not isinstance(prov, dict):
        return {"git_commit": None, "git_dirty": None, "datasets": None}
    data = {
        dataset_key(d, role): d["sha256"]
        for d in prov.get("datasets") or []
        if isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("sha256"), str)
    }
    commit = prov.get("git_commit")
    return {
        "git_commit": commit if isinstance(commit, str) else None,
        "git_dirty": prov.get("git_dirty"),
        "datasets": json.dumps(data, sort_keys=True),
    }


def dataset_key(entry: dict, role: str = "train") -> str:
    """``name`` for training data, ``<role>:<name>`` for any other role: data are compared per (role, name)."""
    role = entry.get("role") if isinstance(entry.get("role"), str) else role
    return entry["name"] if role == "train" else f"{role}:{entry['name']}"


def _run_info(run_dir: Path) -> dict:
    result = _read_json(run_dir / "result.json") if (run_dir / "result.json").exists() else None
    role = "train" if result is not None else "eval"  # the data an eval-only results.json names: its problems
    result = result or _eval_only_result(run_dir)
    cfg = _read_config(run_dir / "config.yaml") if (run_dir / "config.yaml").exists() else {}
    if cfg:
        cfg = _trusted_config(run_dir, cfg, stamped=result is not None and (run_dir / STAMP_FILE).is_file())
    src = result or {}
    method_cfg = src.get("method_config")
    settings = {f"method.{k}": v for k, v in (method_cfg or {}).items()}
    settings.update(_flatten(cfg))
    if method_cfg is None and isinstance(cfg.get("method"), dict):
        method_cfg = {k: v for k, v in cfg["method"].items()}
    method = src.get("method") or _name(cfg.get("method"))
    advantage = src.get("advantage") or (method_cfg or {}).get("advantage")
    return {
        "run_dir": str(run_dir),
        "run_id": src.get("run_id"),
        "status": str(src.get("status", COMPLETED)) if result else "missing",
        "detail": _detail(run_dir, result),
        "backend": src.get("backend") or _name(cfg.get("backend")),
        "method": method,
        "advantage": advantage,
        "method_config": json.dumps(method_cfg or {}, sort_keys=True, default=str),
        "settings": json.dumps(settings, sort_keys=True, default=str),
        "model": src.get("model") or _name(cfg.get("model")),
        "model_params": src.get("model_params"),
        "task": src.get("task") or task_label(_name(cfg.get("task"))),
        "seed": src.get("seed", cfg.get("seed")),
        "steps": src.get("steps"),
        "wall_time_s": src.get("wall_time_s"),
        **run_provenance(result, role),
        "attached_to": src.get("attached_to"),
        "_result": result,
    }


def _trusted_config(run_dir: Path, cfg: dict, stamped: bool) -> dict:
    """``cfg`` (the run's config.yaml), or {} with a warning when it is not the config of the run its start stamp
    and result.json record (edited or cut after training): the run's settings then come from result.json alone.
    A run without a stamp cannot be checked: a file cut short in the harness's order is named, its rest used."""
    from harness.run.identity import config_drift

    if not stamped:
        gap = cut_short(cfg)
        if gap and list(cfg) == WRITTEN_ORDER[: len(cfg)]:  # the head of a file in the harness's order: cut short
            warnings.warn(
                f"{run_dir / 'config.yaml'}: {gap}; its other settings are used",
                CorruptMetricsWarning,
                stacklevel=3,
            )
        return cfg
    drift = config_drift(run_dir, cfg)
    if drift is None:
        return cfg
    warnings.warn(
        f"{run_dir}: {drift[1]}; its settings are read from result.json, not config.yaml",
        CorruptMetricsWarning,
        stacklevel=3,
    )
    return {}


def _detail(run_dir: Path, result: dict | None) -> str:
    """Why a run is not usable, for the MISSING note."""
    if result is None:
        if (run_dir / "result.json").exists() or (run_dir / EVAL_ONLY).is_file():
            return "result.json unreadable" if (run_dir / "result.json").exists() else "results.json unreadable"
        if (run_dir / "job_error.json").is_file():
            return "no result.json; job_error.json present"
        return "no result.json" + ("" if (run_dir / "metrics.jsonl").is_file() else ", no metrics yet")
    status = str(result.get("status", COMPLETED))
    return "" if status == COMPLETED else f"status {status}" + (f": {result['error']}" if result.get("error") else "")


def method_label(method: str | None, advantage: str | None) -> str:
    """``kl_cov`` (GRPO advantages, the paper's default) or ``kl_cov+rloo`` when another estimator is used."""
    m = method if isinstance(method, str) and method else "?"
    if isinstance(advantage, str) and advantage and advantage not in (m, "grpo"):
        return f"{m}+{advantage}"
    return m


# keys that are not a difference between experiments: every field declared ``measures=False`` in the config
# schema (logging, paths, resources; harness.run.config.non_measuring_fields) and the grouping axes handled
# elsewhere (seed = the replicate axis; eval.* = the eval protocol, checked per suite by the leaderboard;
# method name/advantage = the label)
_AXES = ("seed", "name", "eval.", "task.test_size", "method.name", "method.advantage")


def _flatten(d, prefix="") -> dict:
    out = {}
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _ignored(key: str) -> bool:
    from harness.run.config import non_measuring_fields

    return key in non_measuring_fields() or any(key == p or (p.endswith(".") and key.startswith(p)) for p in _AXES)


def _differing(cfgs: dict, keep) -> list[str]:
    keys = sorted({k for c in cfgs.values() for k in c if not _ignored(k) and keep(k)})
    # a key absent from a run (e.g. defaults not yet resolved in an unfinished run) is unknown, not different
    return [k for k in keys if len({json.dumps(c[k], sort_keys=True) for c in cfgs.values() if k in c}) > 1]


def _settings(runs: pd.DataFrame) -> pd.Series:
    """Per run: the non-method measuring settings (``train.steps=100,task.options.max_number=20``) in which
    runs of one (model, task) differ; "" when they all agree. Tables compare methods only within a setting."""
    out = pd.Series("", index=runs.index, dtype=object)
    for _key, grp in runs.groupby(["model", "task"], dropna=False):
        cfgs = {i: json.loads(runs.at[i, "settings"]) for i in grp.index}
        differing = _differing(cfgs, lambda k: not k.startswith("method."))
        for i in grp.index:
            out[i] = ",".join(f"{k}={json.dumps(cfgs[i].get(k), default=str)}" for k in differing)
    return out


DEFAULT = "<default>"  # a late hyper-parameter a finished run does not record: its default


def _disambiguate(runs: pd.DataFrame) -> pd.Series:
    """Runs sharing (model, task, setting, label) but differing in a method hyper-parameter are different
    experiments, never seeds of one: append the differing method settings to their labels. A finished run records
    every hyper-parameter except a late one at its default (e.g. ``rollout_correction: off``): absent from its
    ``method_config``, the key is the default (not shown); absent from an unfinished run (defaults not yet resolved)
    or one without a ``method_config``, it is unknown."""
    labels = runs["label"].copy()
    for (_model, _task, _setting, label), grp in runs.groupby(["model", "task", "setting", "label"], dropna=False):
        cfgs = {i: json.loads(runs.at[i, "settings"]) for i in grp.index}
        keys = sorted({k for c in cfgs.values() for k in c if not _ignored(k) and k.startswith("method.")})
        keys = [k for k in keys if not any(o.startswith(k + ".") for o in keys)]  # a mapping whose leaves are listed
        done = {i for i in grp.index if runs.at[i, "status"] != "missing" and runs.at[i, "method_config"] != "{}"}
        known = {i: {**dict.fromkeys(keys, DEFAULT), **c} if i in done else c for i, c in cfgs.items()}
        differing = [k for k in keys if len({json.dumps(c[k], sort_keys=True) for c in known.values() if k in c}) > 1]
        if not differing:
            continue
        absent = {i: {k for k in differing if known[i].get(k) == DEFAULT} for i in grp.index}
        for i in grp.index:
            shown = ",".join(f"{k.removeprefix('method.')}={known[i].get(k)}" for k in differing if k not in absent[i])
            labels[i] = f"{label}({shown})" if shown else label
    return labels


def _suite_rows(run_dir: str, step, suites: dict, source: str) -> list[dict]:
    rows = []
    for name, res in (suites or {}).items():
        if not isinstance(res, dict):
            continue
        metrics = res.get("metrics") or {}
        primary = res.get("primary") or next(iter(metrics), None)
        value = metrics.get(primary) if primary else None
        n_problems, n_samples = res.get("n_problems"), res.get("n_samples")
        weight = (
            (n_problems * n_samples)
            if isinstance(n_problems, (int, float)) and isinstance(n_samples, (int, float))
            else math.nan
        )
        stderr = metrics.get(f"{primary}_stderr") if primary else None
        row = {
            "run_dir": run_dir,
            "step": step,
            "suite": res.get("suite", name),
            "metric": primary,
            "value": math.nan if value is None else float(value),
            "stderr": float(stderr) if isinstance(stderr, (int, float)) else math.nan,
            "weight": weight,
            "source": source,
            "metrics": json.dumps(metrics if isinstance(metrics, dict) else {}, sort_keys=True, default=str),
        }
        for k in PROTOCOL_KEYS:
            row[k] = res.get(k)
        row["protocol"] = protocol_tag(res)
        rows.append(row)
    return rows


def protocol_tag(res: dict) -> str:
    """``n=32,T=0.6,top_p=1.0,max_tokens=8192``: results with different tags are never averaged together."""
    short = {"n_problems": "problems", "n_samples": "n", "temperature": "T"}
    return ",".join(f"{short.get(k, k)}={res.get(k)}" for k in PROTOCOL_KEYS)


def _eval_rows(run_dir: Path, result: dict | None) -> list[dict]:
    rows = []
    final_step = None
    if result and isinstance(result.get("eval"), dict):
        ev = result["eval"]
        final_step = ev.get("step", result.get("steps"))
        rows += _suite_rows(str(run_dir), final_step, ev.get("suites"), "result.json")
    eval_dir = run_dir / "eval"
    if eval_dir.is_dir():
        for f in sorted(eval_dir.iterdir()):
            m = _STEP_FILE.match(f.name)
            if not m:
                continue
            step = int(m.group(1))
            if step == final_step and rows:
                continue  # result.json already holds this step
            obj = _read_json(f)
            if obj is None:
                continue
            suites = obj.get("suites", obj)
            rows += _suite_rows(str(run_dir), step, suites, f"eval/{f.name}")
    return rows


def collect(paths: Iterable[str | Path]) -> Collection:
    """Read every run directory under ``paths`` (see the module docstring)."""
    run_dirs = find_run_dirs(paths)
    messages = []
    kept: dict[str, tuple] = {}  # run_dir -> (info, metric rows, eval rows), in reading order
    by_id: dict[str, str] = {}  # run id -> the run_dir of the copy kept
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        attached: dict[str, str] = {}  # eval dir -> the run id whose export it scored
        for d in run_dirs:
            info = _run_info(d)
            result = info.pop("_result")
            if info.pop("attached_to", None):
                attached[str(d)] = str(result["attached_to"])
            rid = info.get("run_id")
            if isinstance(rid, str) and rid and rid in by_id:  # one run in two directories (a copy, a rerun)
                other = by_id[rid]
                if _finish_rank(info["status"]) >= _finish_rank(kept[other][0]["status"]):
                    warnings.warn(
                        f"{d}: run id {rid} already read from {other} ({kept[other][0]['status']}); "
                        f"counted once, from {other}",
                        CorruptMetricsWarning,
                        stacklevel=2,
                    )
                    continue
                warnings.warn(
                    f"{other}: run id {rid} ({kept[other][0]['status']}) is also in {d} "
                    f"({info['status']}); counted once, from {d}",
                    CorruptMetricsWarning,
                    stacklevel=2,
                )
                del kept[other]
            if isinstance(rid, str) and rid:
                by_id[rid] = str(d)
            metric_rows = []
            if (d / "metrics.jsonl").exists():
                for r in read_metrics(d / "metrics.jsonl"):
                    r["run_dir"] = str(d)
                    metric_rows.append(r)
            kept[str(d)] = (info, metric_rows, _eval_rows(d, result))
        _join_export_evals(kept, attached, by_id)
    infos = [v[0] for v in kept.values()]
    metric_rows = [r for v in kept.values() for r in v[1]]
    eval_rows = [r for v in kept.values() for r in v[2]]
    for w in caught:  # re-emit so callers see them, and keep ours for reports
        if issubclass(w.category, CorruptMetricsWarning):
            messages.append(str(w.message))
        warnings.warn(w.message, w.category, stacklevel=2)

    runs = pd.DataFrame(infos)
    runs["task"] = [t if isinstance(t, str) else "" for t in runs["task"]]  # unknown task: one consistent key
    runs["label"] = [method_label(m, a) for m, a in zip(runs["method"], runs["advantage"])]
    runs["setting"] = _settings(runs)
    runs["label"] = _disambiguate(runs)
    runs["model_params"] = pd.to_numeric(runs["model_params"], errors="coerce")
    ident = runs[["run_dir", "model", "model_params", "task", "setting", "label", "seed", "status"]]

    metrics = pd.DataFrame(metric_rows)
    if metrics.empty:
        metrics = pd.DataFrame(columns=["run_dir", STEP])
    elif STEP not in metrics:
        metrics[STEP] = metrics.groupby("run_dir").cumcount()
    metrics = metrics.merge(ident, on="run_dir", how="left")
    for c in metrics.columns:
        if c not in ident.columns and metrics[c].dtype == object:
            metrics[c] = pd.to_numeric(metrics[c], errors="coerce")

    evals = pd.DataFrame(
        eval_rows,
        columns=[
            *["run_dir", "step", "suite", "metric", "value", "stderr", "weight", "source", "metrics"],
            *PROTOCOL_KEYS,
            "protocol",
        ],
    )
    evals = evals.merge(ident, on="run_dir", how="left")
    return Collection(runs=runs, metrics=metrics, evals=evals, warnings=messages)


def _join_export_evals(kept: dict, attached: dict[str, str], by_id: dict[str, str]) -> None:
    """A ``harness eval`` of a run's export read together with that (finished) run is the run's, not a second
    seed: its suites join the run's final eval (a suite scored in both keeps the export eval's score, as the
    after-training stage does), its data join the run's provenance (role ``eval``), and the eval directory is no
    row of its own; a warning says so."""
    for d, rid in attached.items():
        target = by_id.get(rid)
        if d not in kept or target not in kept or kept[target][0]["status"] not in FINISHED:
            continue
        info, _, rows = kept.pop(d)
        tinfo, _, trows = kept[target]
        suites = sorted({r["suite"] for r in rows})
        trows[:] = [r for r in trows if not (r["source"] == "result.json" and r["suite"] in suites)]
        trows += [{**r, "run_dir": target, "source": f"{EXPORT_EVAL}: {d}"} for r in rows]
        if isinstance(info["datasets"], str):
            data = {**json.loads(tinfo["datasets"] or "{}"), **json.loads(info["datasets"])}
            tinfo["datasets"] = json.dumps(data, sort_keys=True)
        warnings.warn(
            f"{d}: harness eval of the export of run {rid}, read with the run itself ({target}): one run, counted "
            f"once; its {', '.join(suites)} score{'s' if len(suites) > 1 else ''} from this eval "
            "(the final policy's)",
            CorruptMetricsWarning,
            stacklevel=2,
        )


def final_evals(col: Collection) -> pd.DataFrame:
    """The leaderboard's input: each finished run's final eval (the one in result.json, with the suites of an
    eval of its export read with it, else its last step); ``insufficient_updates`` runs are included (tables flag
    them and never rank them)."""
    ev = col.evals[col.evals["status"].isin(FINISHED)]
    if ev.empty:
        return ev
    from_result = ev[(ev["source"] == "result.json") | ev["source"].str.startswith(EXPORT_EVAL)]
    rest = ev[~ev["run_dir"].isin(from_result["run_dir"])]
    if not rest.empty:
        last = rest.groupby("run_dir")["step"].transform("max")
        rest = rest[rest["step"] == last]
    return pd.concat([from_result, rest], ignore_index=True)
