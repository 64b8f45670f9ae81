"""Experiment trackers of a run (TensorBoard, W&B): one tracker run per training attempt.

``logging:`` settings (none of them changes a run id): ``tensorboard``, ``wandb``, ``wandb_mode`` (offline needs no
network or account), ``wandb_project``, ``wandb_entity``, ``wandb_group`` (a sweep sets it to the sweep's name),
``wandb_tags`` (added to the tags every run gets: ``method:<name>``, ``model:<name>``, ``size:<7b|0.3m|...>`` when
the model name carries one, ``seed:<n>``).

Attempts. An attempt that starts at step 0 gets a fresh tracker id, ``<run id>-<6 random hex>``: rerunning a
config (after a lost checkpoint, in another run directory, after ``--force``) never writes into an earlier W&B run.
The id travels in the checkpoint (``tracker`` in pocket's ``latest.pt``), so only an attempt that resumes from that
checkpoint reuses it (W&B ``resume="allow"``; TensorBoard reopens ``RUN/tensorboard/<id>/`` with ``purge_step`` =
the checkpoint's step + 1, so the steps trained again replace the ones logged after the checkpoint). A checkpoint
written before ids were recorded resumes the id older versions used (the run id; TensorBoard: ``RUN/tensorboard``).
Each attempt appends a line to ``RUN/trackers.jsonl`` (id, start, resumed step, W&B entity/project/group, the
TensorBoard folder): which tracker run holds which attempt.

At the end (``Trackers.finish``) the run's final summary and its final eval results are logged: W&B summary keys
``final/<summary key>`` and ``final/eval/<suite>/<metric>`` plus a table ``final/eval_table``; TensorBoard hparams (the
run's measuring settings, method, model, seed) with those final metrics, and the eval table as text. The eval
before training (step 0) is logged as ``eval/<suite>/<metric>`` at step 0 (``Trackers.log_eval``).

Differs from the usual W&B set-up (``id = config hash``, ``resume="allow"``, which this harness did before and which
makes a rerun write into the old run) and from OpenRLHF's (a new W&B run for every launch, resumed or not): a
backend that launches its own trainer passes that trainer's logger flags (the OpenRLHF backend's ``logger.py``).
"""

from __future__ import annotations

import atexit
import json
import re
import secrets
import time
from pathlib import Path

from harness.run.metrics import STEP, eval_key

TRACKERS_FILE = "trackers.jsonl"
TB_DIR = "tensorboard"
CHECKPOINT_KEY = "tracker"  # what a backend stores in its checkpoint (``Trackers.checkpoint_state``)
MAX_TAG = 64  # W&B refuses longer tags
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)([mMbBkK])(?![a-zA-Z])")


def model_size(name: str) -> str | None:
    """The size a model's name carries, lower case: ``pocket-0.3m`` -> ``0.3m``, ``Qwen/Qwen2.5-Math-7B`` ->
    ``7b``, ``SmolLM2-135M-Instruct`` -> ``135m``; None when the name carries none (a local path)."""
    found = _SIZE.findall(Path(str(name)).name)
    return f"{found[-1][0]}{found[-1][1].lower()}" if found else None


def run_tags(cfg) -> list[str]:
    """``method:``, ``model:``, ``size:`` (when known) and ``seed:`` tags, then ``logging.wandb_tags``."""
    model = Path(str(cfg.model.name)).name or str(cfg.model.name)
    tags = [f"method:{cfg.method_name}", f"model:{model}"]
    size = model_size(cfg.model.name)
    if size:
        tags.append(f"size:{size}")
    tags.append(f"seed:{cfg.seed}")
    tags += [str(t) for t in (getattr(cfg.logging, "wandb_tags", None) or []) if str(t) not in tags]
    long = [t for t in tags if len(t) > MAX_TAG]
    if long:
        raise ValueError(f"logging.wandb_tags: tag {long[0]!r} is longer than W&B's {MAX_TAG} characters")
    return [t[:MAX_TAG] for t in tags]


def wandb_on(cfg) -> bool:
    return bool(cfg.logging.wandb) and cfg.logging.wandb_mode != "disabled"


def final_metrics(result) -> dict[str, float]:
    """``final/<summary key>`` and ``final/eval/<suite>/<metric>`` (numbers only) of a run's result fields."""
    fields = result.to_dict() if hasattr(result, "to_dict") else dict(result or {})
    out = {}
    for k, v in (fields.get("summary") or {}).items():
        if _number(v):
            out[f"final/{k}"] = float(v)
    for suite, res in ((fields.get("eval") or {}).get("suites") or {}).items():
        for k, v in (res.get("metrics") or {}).items():
            if _number(v):
                out[f"final/{eval_key(suite, k)}"] = float(v)
    for k in ("steps", "model_params"):
        if _number(fields.get(k)):
            out[f"final/{k}"] = float(fields[k])
    return out


def eval_rows(result) -> list[list]:
    """One row per (suite, metric) of a result's eval: suite, metric, value, primary, and the protocol."""
    fields = result.to_dict() if hasattr(result, "to_dict") else dict(result or {})
    rows = []
    for suite, res in ((fields.get("eval") or {}).get("suites") or {}).items():
        proto = [res.get(k) for k in ("n_problems", "n_samples", "temperature", "top_p", "max_tokens")]
        for k, v in (res.get("metrics") or {}).items():
            if _number(v):
                rows.append([suite, k, float(v), k == res.get("primary"), *proto])
    return rows


EVAL_COLUMNS = ["suite", "metric", "value", "primary", "n_problems", "n_samples", "temperature", "top_p", "max_tokens"]


def hparams_of(cfg) -> dict:
    """The run's measuring settings (flat, dotted) with method, model and seed, as TensorBoard hparam values."""
    from harness.run.config import measuring_items

    flat = {"method": cfg.method_name, "model": str(cfg.model.name), "seed": cfg.seed, **measuring_items(cfg)}
    out = {}
    for k, v in flat.items():
        if isinstance(v, bool) or isinstance(v, (int, float, str)):
            out[k] = v
        else:
            out[k] = json.dumps(v, sort_keys=True, default=str)
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def _scalars(row: dict):
    return {k: v for k, v in row.items() if k != STEP and _number(v)}


# ------------------------------------------------------------------------------------------------ sinks
class TensorBoardSink:
    def __init__(self, log_dir: Path, purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.dir = log_dir
        self.w = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, row: dict, step: int) -> None:
        for k, v in _scalars(row).items():
            self.w.add_scalar(k, v, step)

    def finish(self, cfg, result, step: int) -> None:
        metrics = final_metrics(result)
        if metrics:  # the hparams plugin's session (settings -> final metrics), in this attempt's folder
            self.w.add_hparams(hparams_of(cfg), metrics, run_name=".", global_step=step)
        rows = eval_rows(result)
        if rows:
            head = "| " + " | ".join(EVAL_COLUMNS) + " |\n|" + "---|" * len(EVAL_COLUMNS) + "\n"
            self.w.add_text("final/eval", head + "\n".join("| " + " | ".join(map(str, r)) + " |" for r in rows), step)

    def close(self) -> None:
        self.w.flush()
        self.w.close()


class WandBSink:
    def __init__(self, cfg, run_dir: Path, tracker_id: str, resumed_step: int | None, attempt: dict):
        import wandb

        self.wandb = wandb
        lg = cfg.logging
        self.run = wandb.init(
            entity=lg.wandb_entity,
            project=lg.wandb_project,
            group=lg.wandb_group,
            tags=run_tags(cfg),
            mode=lg.wandb_mode,
            dir=str(run_dir),
            name=cfg.name or cfg.run_id(),
            id=tracker_id,
            resume="allow" if resumed_step is not None else None,
            config={**cfg.to_dict(), "harness": attempt},
        )

    def log(self, row: dict, step: int) -> None:
        self.run.log(_scalars(row), step=step)

    def finish(self, cfg, result, step: int) -> None:
        self.run.summary.update(final_metrics(result))
        rows = eval_rows(result)
        if rows:
            self.run.log({"final/eval_table": self.wandb.Table(columns=EVAL_COLUMNS, data=rows)}, step=step)

    def close(self) -> None:
        self.run.finish()


# ---------------------------------------------------------------------------------------------- trackers
class Trackers:
    """The trackers of one attempt. ``open`` -> ``log`` per step (``log_eval`` for the eval before training) ->
    ``finish(result)`` when the run completed, else ``close``. Iterating gives the sinks (``log``/``close``)."""

    def __init__(self, sinks: list, tracker_id: str, tensorboard: str | None):
        self.sinks, self.id, self.tensorboard = sinks, tracker_id, tensorboard
        self._closed = not sinks
        if sinks:
            atexit.register(self.close)

    @classmethod
    def open(cls, cfg, run_dir, checkpoint: dict | None = None) -> Trackers:
        """``checkpoint``: the checkpoint this attempt resumes from (None: it starts at step 0 -> a fresh id)."""
        run_dir = Path(run_dir)
        resumed_step = int(checkpoint.get("step", 0)) if checkpoint is not None else None
        previous = checkpoint.get(CHECKPOINT_KEY) if checkpoint is not None else None
        if isinstance(previous, dict) and previous.get("id"):
            tracker_id, tb = str(previous["id"]), previous.get("tensorboard") or f"{TB_DIR}/{previous['id']}"
        elif checkpoint is not None:  # a checkpoint of an older version: the id and folder that version used
            tracker_id, tb = cfg.run_id(), TB_DIR
        else:
            tracker_id = f"{cfg.run_id()}-{secrets.token_hex(3)}"
            tb = f"{TB_DIR}/{tracker_id}"
        on_tb, on_wb = bool(cfg.logging.tensorboard), wandb_on(cfg)
        if not (on_tb or on_wb):
            return cls([], tracker_id, tb)
        lg = cfg.logging
        attempt = {
            "id": tracker_id,
            "run_id": cfg.run_id(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "resumed_step": resumed_step,
            "tensorboard": tb if on_tb else None,
            "wandb": (
                {"entity": lg.wandb_entity, "project": lg.wandb_project, "group": lg.wandb_group, "mode": lg.wandb_mode}
                if on_wb
                else None
            ),
        }
        sinks: list = []
        try:
            if on_tb:
                purge = resumed_step + 1 if resumed_step is not None else None
                sinks.append(TensorBoardSink(run_dir / tb, purge))
            if on_wb:
                sinks.append(WandBSink(cfg, run_dir, tracker_id, resumed_step, attempt))
        except BaseException:
            for s in sinks:
                s.close()
            raise
        from harness.io import append_jsonl

        append_jsonl(run_dir / TRACKERS_FILE, attempt)
        return cls(sinks, tracker_id, tb if on_tb else None)

    def __iter__(self):
        return iter(self.sinks)

    def checkpoint_state(self) -> dict:
        """What the backend's checkpoint carries, so that the attempt resuming from it reuses this tracker run."""
        return {"id": self.id, "tensorboard": self.tensorboard}

    def log(self, row: dict, step: int) -> None:
        for s in self.sinks:
            s.log(row, step)

    def log_eval(self, doc: dict | None) -> None:
        """An eval document (``{"step", "suites"}``) as ``eval/<suite>/<metric>`` at its step."""
        if not doc or not self.sinks:
            return
        row = {eval_key(s, k): v for s, r in doc.get("suites", {}).items() for k, v in r.get("metrics", {}).items()}
        self.log(row, int(doc.get("step", 0)))

    def finish(self, cfg, result, step: int) -> None:
        """Log the run's final summary and eval results, then close."""
        try:
            for s in self.sinks:
                s.finish(cfg, result, step)
        finally:
            self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        for s in self.sinks:
            s.close()
