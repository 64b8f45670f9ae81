"""Check 4, pocket: real pocket runs (``harness.run.runner.run``, ``train.device`` set) of every method, a few steps
each on the CPU and on the device: metrics finite, the first step's metrics equal within tolerance, and seconds
per step on the device against the CPU.

Rollouts are sampled from a generator on the run's device, so a CUDA run draws other responses than a CPU run
with the same seed. To compare like with like, the device run's first step replays the CPU run's first rollout
(``PocketTrainer.rollout`` is wrapped while the runs go: the CPU run records its step-1 output, the device run
gets it back on its device). Both first steps drop what the sampling pass computed (the fast path's old log-probs
and entropy), so everything after the tokens (old log-probs, entropy, advantages, the mini-batch updates, the
metrics) is computed by the same code on each device. Later steps sample freely. Seconds per step are the mean
``time/step`` over steps 2.. of each run (step 1 is replayed on the device; CPU runs use ``train.threads``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import tempfile
from pathlib import Path

import torch
import yaml

import harness
from harness.io import jsonl_lines

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "sweeps" / "configs" / "pocket_countdown.yaml"  # the quickstart's shared run settings
HPARAMS = ROOT / "sweeps" / "quickstart.yaml"  # the quickstart's method hyperparameters
RTOL, ATOL = 1e-3, 1e-5  # first-step metrics: after 8 AdamW mini-batch updates, fp32 on both sides
SKIP_KEYS = ("time/", "lr")


def quickstart_hparams() -> dict:
    try:
        grid = yaml.safe_load(HPARAMS.read_text())["grid"]["method"]
        return {m["name"]: {k: v for k, v in m.items() if k != "name"} for m in grid}
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return {}


def run_config(method: dict, device: str, small: bool, cache: Path) -> dict:
    cfg = yaml.safe_load(BASE.read_text())
    cfg["method"] = method
    cfg["model"] = {"name": "pocket-0.3m", "cache_dir": str(cache)}
    cfg["train"].update(steps=4, checkpoint_every=0, device=device)
    cfg["eval"] = {"every": 0, "n_samples": 1, "max_problems": 32, "greedy": False}
    cfg["logging"] = {"tensorboard": False, "progress": False}
    if small:  # seconds on a CPU: no warm start (rewards ~0: only PRIME's process rewards give advantages),
        # no dynamic filtering (it would drop every all-zero group), small batches
        cfg["model"]["warm_start"] = {"enabled": "false"}
        cfg["task"]["test_size"] = 8
        cfg["train"].update(
            steps=2,
            prompts_per_step=4,
            samples_per_prompt=4,
            updates_per_rollout=2,
            micro_batch_size=8,
            dynamic_filtering=False,
        )
        cfg["eval"]["max_problems"] = 4
    return cfg


SAMPLING_OUTPUTS = ("logp", "entropy")  # what the fast path's sampling pass attaches to the batch


def _tokens_only(batch):
    """The batch without what the sampling pass computed, so each trainer recomputes old log-probs and entropy
    itself (on its own device) from the tokens."""
    if dataclasses.is_dataclass(batch):
        drop = {f.name: None for f in dataclasses.fields(batch) if f.name in SAMPLING_OUTPUTS}
        if drop:
            return dataclasses.replace(batch, **drop)
    return batch


@contextlib.contextmanager
def first_rollout(mode: str, store: dict):
    """mode "record": step 1's rollout without its sampling-pass outputs goes on to the trainer and a CPU copy
    into ``store``; "replay": that copy (batch moved to the trainer's device) replaces step 1's sampling."""
    from harness.backends.pocket import trainer as pt

    orig = pt.PocketTrainer.rollout

    def rollout(self, step, *args, **kwargs):
        if step == 1 and mode == "replay":
            return {
                k: (v.to(self.device) if hasattr(v, "to") and not torch.is_tensor(v) else copy.deepcopy(v))
                for k, v in store.items()
            }
        out = orig(self, step, *args, **kwargs)
        if step == 1 and mode == "record":
            out = {k: _tokens_only(v) for k, v in out.items()}
            store.update({k: (v.to("cpu") if hasattr(v, "to") else copy.deepcopy(v)) for k, v in out.items()})
        return out

    pt.PocketTrainer.rollout = rollout
    try:
        yield
    finally:
        pt.PocketTrainer.rollout = orig


def read_rows(run_dir: Path) -> list[dict]:
    return [row for _, row in jsonl_lines(run_dir / "metrics.jsonl")]


def numeric(row: dict) -> dict:
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def nonfinite(rows) -> list[str]:
    return sorted({f"step {r.get('step')}: {k}" for r in rows for k, v in numeric(r).items() if not math.isfinite(v)})


def compare_rows(cpu: dict, dev: dict) -> dict:
    a, b = numeric(cpu), numeric(dev)
    keys = sorted(k for k in set(a) | set(b) if not k.startswith(SKIP_KEYS))
    out, worst = {}, 0.0
    for k in keys:
        if k not in a or k not in b:
            out[k] = {"cpu": a.get(k), "device": b.get(k), "ok": False}
            continue
        diff = abs(a[k] - b[k])
        rel = diff / max(abs(a[k]), 1e-12)
        ok = diff <= ATOL + RTOL * abs(a[k])
        worst = max(worst, rel if abs(a[k]) > ATOL else 0.0)
        if not ok:
            out[k] = {"cpu": a[k], "device": b[k], "ok": False}
    return {"ok": not out, "keys_compared": len(keys), "max_rel": worst, "differing": out}


def step_seconds(rows) -> float | None:
    t = [r["time/step"] for r in rows if r.get("step", 0) >= 2 and isinstance(r.get("time/step"), (int, float))]
    return sum(t) / len(t) if t else None


def one_method(name: str, hp: dict, ctx, work: Path) -> dict:
    from harness.run.runner import run

    method = {"name": name, **hp}
    cache = work / "cache"
    store: dict = {}
    res = {"method": method}
    runs = {}
    for side, device, mode in (("cpu", "cpu", "record"), ("device", ctx.device, "replay")):
        run_dir = work / f"{name}-{side}"
        try:
            with first_rollout(mode, store):
                result = run(run_config(method, device, ctx.small, cache), run_dir, force=True, quiet=True)
        except Exception as e:  # noqa: BLE001 - reported with the side that raised
            return dict(res, ok=False, error=f"{side} run (train.device={device}): {type(e).__name__}: {e}"[:1000])
        rows = read_rows(run_dir)
        runs[side] = rows
        res[side] = {
            "status": result.get("status"),
            "steps": len(rows),
            "s_per_step": step_seconds(rows),
            "nonfinite": nonfinite(rows),
            "train_device": device,
        }
        if mode == "record" and not store:
            raise RuntimeError(
                "PocketTrainer.rollout was not called for step 1: the replay hook no longer fits "
                "the pocket trainer (harness.devicecheck.pocket.first_rollout)"
            )
    res["first_step"] = compare_rows(runs["cpu"][0], runs["device"][0])
    c, d = res["cpu"]["s_per_step"], res["device"]["s_per_step"]
    res["device_to_cpu_time"] = round(d / c, 3) if c and d else None
    res["ok"] = (
        res["first_step"]["ok"]
        and not res["cpu"]["nonfinite"]
        and not res["device"]["nonfinite"]
        and res["cpu"]["status"] == res["device"]["status"] == "completed"
    )
    return res


def check(ctx) -> dict:
    hps = quickstart_hparams()
    res = {
        "status": "ok",
        "tolerance": {"first_step_rtol": RTOL, "first_step_atol": ATOL},
        "config": run_config({"name": "grpo"}, ctx.device, ctx.small, Path("<work>/cache")),
        "methods": {},
    }
    with tempfile.TemporaryDirectory(prefix="harness-devicecheck-pocket-") as tmp:
        for name in harness.list_methods():
            if ctx.left() < 30:
                res["methods"][name] = {"ok": True, "skipped": f"time budget ({ctx.left():.0f}s left)"}
                ctx.log(f"{name}: skipped, time budget")
                continue
            try:
                r = one_method(name, hps.get(name, {}), ctx, Path(tmp))
            except Exception as e:  # noqa: BLE001 - one method's crash is reported, the others still run
                r = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            res["methods"][name] = r
            if "error" in r:
                ctx.log(f"{name}: error: {r['error']}")
            else:
                ctx.log(
                    f"{name}: first step {'equal' if r['first_step']['ok'] else 'DIFFERS'} "
                    f"(max rel {r['first_step']['max_rel']:.1e} over {r['first_step']['keys_compared']} keys); "
                    f"s/step cpu {r['cpu']['s_per_step']} device {r['device']['s_per_step']}"
                )
    skipped = [n for n, r in res["methods"].items() if "skipped" in r]
    if skipped:
        res["skipped_methods"] = skipped
    secs = [
        (r["cpu"]["s_per_step"], r["device"]["s_per_step"])
        for r in res["methods"].values()
        if "cpu" in r and "device" in r
    ]
    secs = [(c, d) for c, d in secs if c and d]
    if secs:
        res["mean_s_per_step"] = {
            "cpu": sum(c for c, _ in secs) / len(secs),
            "device": sum(d for _, d in secs) / len(secs),
        }
        res["device_to_cpu_time"] = round(res["mean_s_per_step"]["device"] / res["mean_s_per_step"]["cpu"], 3)
    bad = [n for n, r in res["methods"].items() if not r["ok"]]
    if bad:
        res["status"], res["reason"] = "fail", f"pocket runs failed or differ from the CPU for: {', '.join(bad)}"
    return res
