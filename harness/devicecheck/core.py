"""Runs the checks, times them, logs progress and writes the one JSON report (schema in docs/gpu.md).

Each check is ``fn(ctx) -> dict`` with a ``status``: ``ok`` (ran, every comparison within its stated
tolerance), ``fail`` (ran, a comparison failed: the report says which), ``skipped`` (a prerequisite is
missing: ``reason`` says which) or ``error`` (it raised: the traceback tail is kept). One check's failure
never stops the others. Exit status 0 when no check failed or errored.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1
STATUSES = ("ok", "fail", "skipped", "error")
REPORT, LOG = "device_check.json", "device_check.log"
MIN_LEFT_S = 20.0


@dataclass
class Context:
    """What every check gets: the device under test, the size preset, the output folder and the log."""

    device: str  # "cuda" on the GPU machine; "cpu" with --cpu (the CPU stands in for the device)
    small: bool  # --cpu: every check at small sizes
    out: Path
    log_file: object = None
    t0: float = field(default_factory=time.time)
    budget_s: float = 450.0  # the whole run; a check that would start past it is skipped, long ones stop early

    def left(self) -> float:
        """Seconds left of the budget."""
        return self.budget_s - (time.time() - self.t0)

    def log(self, msg: str) -> None:
        line = f"[{time.time() - self.t0:7.1f}s] {msg}"
        print(line, file=sys.stderr, flush=True)
        if self.log_file is not None:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    def sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()


CHECKS = ("environment", "losses", "entropy", "pocket", "openrlhf")
MODULES = {"environment": "env", "losses": "losses", "entropy": "entropy", "pocket": "pocket", "openrlhf": "orl"}


def _check_fn(name: str):
    import importlib

    return importlib.import_module(f"harness.devicecheck.{MODULES[name]}").check


def finite_json(obj):
    """NaN/inf -> None (strict JSON), recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): finite_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_json(v) for v in obj]
    return obj


def write_report(out: Path, report: dict) -> Path:
    path = out / REPORT
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(finite_json(report), indent=2, sort_keys=False, allow_nan=False) + "\n")
    os.replace(tmp, path)
    return path


def run_checks(ctx: Context, only=CHECKS) -> dict:
    report = {
        "schema_version": SCHEMA_VERSION,
        "mode": "cpu" if ctx.small else "device",
        "device": ctx.device,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "python": platform.python_version(),
        "argv": sys.argv[1:],
        "checks": {},
    }
    for name in only:
        ctx.log(f"== {name}")
        t0 = time.time()
        if ctx.left() < MIN_LEFT_S:
            report["checks"][name] = {
                "status": "skipped",
                "wall_s": 0.0,
                "reason": f"time budget: {ctx.left():.0f}s of --budget {ctx.budget_s:.0f}s left",
            }
            ctx.log(f"{name}: skipped ({report['checks'][name]['reason']})")
            write_report(ctx.out, report)
            continue
        try:
            res = _check_fn(name)(ctx)
        except Exception as e:  # noqa: BLE001 - one check's crash never stops the others
            res = {"status": "error", "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-3000:]}
            ctx.log(f"{name}: error: {type(e).__name__}: {e}")
        res["wall_s"] = round(time.time() - t0, 2)
        report["checks"][name] = res
        ctx.log(f"{name}: {res['status']} in {res['wall_s']}s" + (f" ({res['reason']})" if res.get("reason") else ""))
        write_report(ctx.out, report)  # partial report after every check: a timeout still leaves results
    report["wall_s"] = round(time.time() - ctx.t0, 2)
    report["summary"] = {s: [n for n, r in report["checks"].items() if r["status"] == s] for s in STATUSES}
    write_report(ctx.out, report)
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m harness.devicecheck",
        description="GPU checks of the harness; writes device_check.json + .log (docs/gpu.md)",
    )
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--cpu", action="store_true", help="small sizes, the CPU standing in for the device")
    p.add_argument("--device", default=None, help="device under test (default: cuda, or cpu with --cpu)")
    p.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated subset of {','.join(CHECKS)}")
    p.add_argument(
        "--budget",
        type=float,
        default=450.0,
        help="seconds for the whole run (default 450): later checks are skipped, long ones cut short",
    )
    args = p.parse_args(argv)
    only = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in only if c not in CHECKS]
    if unknown:
        print(f"error: --only: unknown check {unknown[0]!r}; allowed: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    if args.budget <= 0:
        print(f"error: --budget: must be a positive number of seconds, got {args.budget}", file=sys.stderr)
        return 2
    device = args.device or ("cpu" if args.cpu else "cuda")
    import torch

    if device.startswith("cuda") and not torch.cuda.is_available():
        print(
            f"error: --device {device}: torch {torch.__version__} sees no CUDA device here; "
            f"use --cpu for the small CPU run",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOG, "w") as log_file:
        ctx = Context(device=device, small=args.cpu, out=out, log_file=log_file, budget_s=args.budget)
        ctx.log(f"device check: device={device} sizes={'small (--cpu)' if args.cpu else 'full'} out={out}")
        report = run_checks(ctx, only)
        ctx.log(
            f"done in {report['wall_s']}s: "
            + ", ".join(f"{s}: {', '.join(v) or '-'}" for s, v in report["summary"].items())
        )
    return 0 if not (report["summary"]["fail"] or report["summary"]["error"]) else 1


def compare(got, want, rtol: float, atol: float) -> dict:
    """Max abs / rel difference of two tensors or floats; ok when |got - want| <= atol + rtol * |want| everywhere."""
    import torch

    g = torch.as_tensor(got, dtype=torch.float64).detach().cpu()
    w = torch.as_tensor(want, dtype=torch.float64).detach().cpu()
    if g.shape != w.shape:
        return {"ok": False, "error": f"shape {tuple(g.shape)} vs {tuple(w.shape)}"}
    diff = (g - w).abs()
    finite = bool(torch.isfinite(g).all() and torch.isfinite(w).all())
    rel = diff / w.abs().clamp_min(1e-12)
    return {
        "ok": finite and bool((diff <= atol + rtol * w.abs()).all()),
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "max_rel": float(rel.max()) if rel.numel() else 0.0,
        "finite": finite,
    }


def best_times(fns: dict, repeats: int, sync) -> dict[str, float]:
    """Best-of-``repeats`` seconds per function, one warm-up each, interleaved (round robin)."""
    for fn in fns.values():
        fn()
    sync()
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best
