"""`harness methods [NAME]`: the registered methods, their hyperparameters, defaults and docs."""

from __future__ import annotations

import dataclasses
import inspect

import harness  # the method registries load on first use (harness.METHODS): --help stays torch-free

ORDER = 10


def register(sub) -> None:
    p = sub.add_parser("methods", help="list methods and their hyperparameters")
    p.add_argument("name", nargs="?", help="show one method in full")
    p.set_defaults(func=run)


def _range(meta) -> str:
    low, high = meta.get("low"), meta.get("high")
    parts = []
    if low is not None:
        parts.append(f"{'>' if meta.get('low_open') else '>='} {low}")
    if high is not None:
        parts.append(f"<= {high}")
    off = f"; {meta['off']!r} = off" if meta.get("off") is not None else ""
    return f" ({', '.join(parts)}{off})" if parts else ""


def describe(name: str) -> str:
    cls = harness.METHODS.get(name)
    doc = inspect.getdoc(inspect.getmodule(cls)) or inspect.getdoc(cls) or ""
    lines = [f"{name}: {inspect.getdoc(cls).splitlines()[0] if cls.__doc__ else ''}", ""]
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        meta = f.metadata
        choices = f" [{'|'.join(map(str, meta['choices']))}]" if meta.get("choices") else ""
        late = " (in the run id only when set)" if meta.get("late") else ""
        lines.append(f"  {f.name:<18} = {default!r:<14} {meta.get('help', '')}{choices}{_range(meta)}{late}")
    if cls.retired_hparams:
        recorded = ", ".join(f"{k}={v!r}" for k, v in cls.retired_hparams.items())
        lines.append(
            f"  refused: {', '.join(cls.retired_hparams)} ({cls.retired_reason}); configs written before record "
            f"{recorded}, accepted at exactly that value only"
        )
    estimator_name = cls.hparams()["advantage"].default
    estimator = harness.ADVANTAGES.get(estimator_name)
    if estimator.options:
        lines += ["", f"  advantage options (advantage_options: {{...}}) of estimator {estimator_name!r}:"]
        for key, default in estimator.options.items():
            meta = estimator.specs[key].metadata if key in estimator.specs else {}
            choices = f" [{'|'.join(map(str, meta['choices']))}]" if meta.get("choices") else ""
            lines.append(f"    {key:<24} = {default!r:<12} {meta.get('help', '')}{choices}{_range(meta)}")
    return "\n".join(lines + ["", doc])


def run(args) -> int:
    if args.name:
        print(describe(args.name))
        return 0
    for name in harness.METHODS.names():
        cls = harness.METHODS.get(name)
        print(f"{name:<20} {(inspect.getdoc(cls) or '').splitlines()[0]}")
    print(f"\nadvantage estimators: {', '.join(harness.ADVANTAGES.names())}  (method option advantage=...)")
    print("every method: agg, empty_rows; PPO-clip methods also eps_low, eps_high, clip_ratio_c, log_ratio_clamp")
    print("(harness methods NAME for all of them; docs/conventions.md: the option that reproduces each peer)")
    return 0
