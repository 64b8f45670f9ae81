"""Which pocket runs may train as one population (population.py), importable without torch: sweep dry runs and
population planning ask it for every cell."""

from __future__ import annotations

# config keys members may differ in; everything else (model, task, batch shapes, steps, lr, eval) is shared
MEMBER_KEYS = ("seed", "method", "name", "logging")


def why_apart(configs) -> str | None:
    """None when the runs ``configs`` (RunConfig) can train as one population, else the reason (one line)."""
    from harness.backends.pocket import models
    from harness.run.config import diff_configs

    if not configs:
        return "no runs"
    for c in configs:
        if c.backend != "pocket":
            return f"backend {c.backend!r} has no population training (pocket only)"
        if not models.is_pocket(c.model.name):
            return f"model.name {c.model.name!r} is not a pocket size (only pocket sizes are stacked)"
        if c.train.old_log_probs != "rollout":
            return "train.old_log_probs: recompute trains alone (a population takes them from the sampling pass)"
    first = _shared(configs[0])
    for c in configs[1:]:
        diffs = diff_configs(first, _shared(c))
        if diffs:
            return "cells differ in " + "; ".join(diffs[:3]) + (f"; ... ({len(diffs)} keys)" if len(diffs) > 3 else "")
    return None


def _shared(cfg) -> dict:
    d = cfg.to_dict()
    for k in MEMBER_KEYS:
        d.pop(k, None)
    return d
