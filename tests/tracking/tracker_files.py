"""Readers of the trackers' own offline files, so the tests check what W&B and TensorBoard actually recorded.

W&B (0.31) keeps an offline run in ``wandb/offline-run-<time>-<id>/run-<id>.wandb``: a 7-byte header (``:W&B``,
magic 0xBEE1, version 0), then LevelDB-log records (32 KiB blocks; each record has a 7-byte header: crc32c,
length, type 1 = full, 2 = first, 3 = middle, 4 = last; a block tail shorter than a header is padding), each a
``wandb_internal_pb2.Record`` protobuf. wandb no longer ships a Python reader of this format, hence these lines.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK, HEADER = 32768, 7


def _records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    ident, magic, version = struct.unpack("<4sHB", data[:HEADER])
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    pos, part, out = HEADER, b"", []
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        pos += HEADER
        if kind == 0 and length == 0:
            break
        part += data[pos : pos + length]
        pos += length
        if kind in (1, 4):
            out.append(part)
            part = b""
    return out


def _items(items) -> dict:
    out = {}
    for it in items:
        key = it.key or "/".join(it.nested_key)
        out[key] = json.loads(it.value_json)
    return out


def wandb_runs(run_dir: Path) -> list[dict]:
    """Every offline W&B run under ``run_dir/wandb``, oldest first (by start time): id, entity, project, group,
    name, tags, config, summary (the last value of each key) and history (step -> logged values)."""
    from wandb.proto import wandb_internal_pb2 as pb

    runs = []
    for d in sorted((Path(run_dir) / "wandb").glob("offline-run-*")):
        (file,) = d.glob("run-*.wandb")
        run = {"dir": d.name, "summary": {}, "history": {}, "config": {}}
        for blob in _records(file):
            rec = pb.Record()
            rec.ParseFromString(blob)
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                r = rec.run
                run.update(
                    id=r.run_id,
                    entity=r.entity,
                    project=r.project,
                    group=r.run_group,
                    name=r.display_name,
                    tags=list(r.tags),
                    resumed=r.resumed,
                    start_ns=r.start_time.seconds * 10**9 + r.start_time.nanos,
                )
                run["config"].update(_items(r.config.update))
            elif kind == "config":
                run["config"].update(_items(rec.config.update))
            elif kind == "summary":
                run["summary"].update(_items(rec.summary.update))
            elif kind == "history":
                row = _items(rec.history.item)
                run["history"].setdefault(int(row.get("_step", rec.history.step.num)), {}).update(row)
        runs.append(run)
    # oldest first by the run's own start time: the folder names hold whole seconds only, so two attempts started
    # within one second would sort by their random ids
    return sorted(runs, key=lambda r: (r.get("start_ns", 0), r["dir"]))


def tb_accumulator(log_dir: Path):
    """TensorBoard's own reader over one run folder (purged steps dropped, as TensorBoard shows them)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def tb_scalars(log_dir: Path, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in tb_accumulator(log_dir).Scalars(tag)}


def tb_hparams(log_dir: Path) -> dict:
    """The hparams plugin's session: the hyperparameters it recorded and the metric tags it names."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    acc = tb_accumulator(log_dir)
    out = {"hparams": {}, "metrics": []}
    for _tag, content in acc.PluginTagToContent("hparams").items():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        which = data.WhichOneof("data")
        if which == "session_start_info":
            for k, v in data.session_start_info.hparams.items():
                out["hparams"][k] = getattr(v, v.WhichOneof("kind"))
        elif which == "experiment":
            out["metrics"] += [m.name.tag for m in data.experiment.metric_infos]
    return out
