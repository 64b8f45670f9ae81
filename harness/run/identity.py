"""A run directory's identity: the run its ``config.yaml`` hashes to must be the run its ``result.json`` and its
start stamp (``provenance.json``) record. A ``config.yaml`` edited after the run started would otherwise stand
beside numbers it did not produce: ``harness train`` refuses such a directory (``check_run_dir``) and the readers
(``harness.results.collect``: table, report, site) flag the run and show the recorded settings, not the edited ones;
``export`` reads the config through ``load_stored_config``, which refuses it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from harness.provenance import STAMP_FILE, read_stamp

if TYPE_CHECKING:
    from harness.run.config import RunConfig


def recorded_runs(run_dir: Path) -> dict[str, str]:
    """``{file: run id}``: the run ids ``result.json`` and the start stamp record (an unreadable file records
    none: its own refusal or warning names it)."""
    out = {}
    try:
        result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        result = None
    if isinstance(result, dict) and isinstance(result.get("run_id"), str):
        out["result.json"] = result["run_id"]
    stamp = read_stamp(run_dir)
    if stamp is not None and isinstance(stamp.get("run_id"), str):
        out[STAMP_FILE] = stamp["run_id"]
    return out


def config_ids(config: Mapping) -> list[str]:
    """The run ids ``config`` may stand for: as written, and resolved now (a hand-written, unresolved config.yaml of
    a run is that run), the resolved one last."""
    from harness.run.config import load_config, run_id_of

    ids = [run_id_of(config)]
    try:
        ids.append(load_config(dict(config)).run_id())
    except (ValueError, TypeError, KeyError):  # not a valid config today: its id as written
        pass
    return ids


def config_drift(run_dir: Path, config: Mapping) -> tuple[str, str] | None:
    """``(recorded run id, why)`` when ``config`` (the directory's config.yaml, as read) is not the config of the
    run ``run_dir`` records; None when it is, or nothing is recorded yet."""
    from harness.run.config import cut_short, run_id_of

    recorded = recorded_runs(run_dir)
    if not recorded or set(recorded.values()) <= {run_id_of(config)}:
        return None
    ids = config_ids(config)
    other = {f: r for f, r in recorded.items() if r not in ids}
    if not other:
        return None
    rid = next(iter(other.values()))
    files = " and ".join(sorted(other))
    verb = "record" if len(other) > 1 else "records"
    head = f"its config.yaml is not the config of the run it holds: {files} {verb} run {rid}, config.yaml gives run "
    gap = cut_short(config)
    if gap:  # cut short: the keys the defaults would fill in are no edit
        return rid, f"{head}{ids[-1]}: {gap}"
    changed = changed_keys(run_dir, config)
    what = f": {'; '.join(changed)}" if changed else "; which keys changed is not recorded in result.json"
    return rid, f"{head}{ids[-1]} (edited after the run started{what})"


def changed_keys(run_dir: Path, config: Mapping) -> list[str]:
    """``key: recorded -> now`` for each measuring setting that differs from what the run recorded: its start
    stamp's config, else the settings result.json names (method, model, task, seed, steps)."""
    now = _flat_settings(config)
    stamp = read_stamp(run_dir) or {}
    if isinstance(stamp.get("config"), Mapping):
        then = _flat_settings(stamp["config"])
    else:
        try:
            result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        then = {f"method.{k}": v for k, v in (result.get("method_config") or {}).items()}
        then.update({"model.name": result.get("model"), "task.name": result.get("task"), "seed": result.get("seed")})
        then["train.steps"] = result.get("steps")
        then = {k: v for k, v in then.items() if v is not None and k in now}
    keys = sorted(set(then) | set(now)) if isinstance(stamp.get("config"), Mapping) else sorted(then)
    missing = "<missing>"
    return [f"{k}: {then.get(k, missing)!r} -> {now.get(k, missing)!r}" for k in keys if then.get(k) != now.get(k)]


def _flat_settings(config: Mapping) -> dict:
    """The measuring settings of ``config``, resolved when it loads (defaults filled in), else as written."""
    from harness.run.config import load_config, measuring_items

    try:
        return measuring_items(load_config(dict(config)))
    except (ValueError, TypeError, KeyError):
        return measuring_items(dict(config))


def load_stored_config(run_dir: str | os.PathLike) -> RunConfig:
    """A run directory's own config.yaml as a ``RunConfig``, refused (naming the file) when it lacks a section the
    harness always writes (filling the gap with defaults would give another run id and blame the checkpoints) or
    is not the config of the run its ``result.json``/start stamp record (``config_drift``): what ``export``
    builds its model from."""
    from harness.run.config import ConfigError, cut_short, load_config, read_config_file

    path = Path(run_dir) / "config.yaml"
    data = read_config_file(path)
    gap = cut_short(data)
    if gap:
        raise ConfigError(f"{path}: {gap}")
    drift = config_drift(Path(run_dir), data)
    if drift is not None:
        raise ConfigError(f"{run_dir}: {drift[1]}; restore its config.yaml to use this run")
    return load_config(data)
