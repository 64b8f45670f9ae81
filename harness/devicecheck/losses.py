"""Check 2, losses: every registered method's ``policy_loss`` forward + backward on the device equals the CPU
result on the same inputs (the entropy's gradient too: zero where a method uses the entropy only to select), and
every method's time as a ratio to GRPO at 1M and 16M tokens.

Inputs are made on the CPU (seeded), copied to the device. Random selections get a CPU generator seeded the same
on both sides (what the pocket backend and the OpenRLHF plug-in pass), so Clip-Cov must pick the same tokens.
Clip-Cov is also run with a generator on the device: ``torch.randperm`` then draws from the device's own RNG
stream, so the tokens differ from the CPU draw (only their count must match); that is reported, not failed.
"""

from __future__ import annotations

import torch

import harness
from harness.devicecheck.core import best_times, compare

RTOL, ATOL = 1e-5, 1e-6  # loss and gradients, fp32 (reduction order differs on the device)
METRIC_RTOL, METRIC_ATOL = 1e-4, 1e-6
AGREE_SIZE = {"full": (256, 1024), "small": (16, 64)}  # (B, T) for the agreement part
TIMING_SIZES = {"full": [(512, 2048), (8192, 2048)], "small": [(16, 128), (64, 256)]}  # 1M and 16M tokens
REPEATS = {"full": 5, "small": 2}


def make_inputs(b: int, t: int, seed: int = 0, ragged: bool = True) -> dict:
    """Mask (ragged, or all valid), GRPO advantages of 0/1 scores in groups of 8, old log-probs, a nearby
    policy, entropy, and the old policy's entropy within +/-10% of it (STEER, ERC: ``needs_old_entropy``)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, t // 4), t + 1, (b,), generator=g) if ragged else torch.full((b,), t)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).float()
    scores = (torch.rand(b, generator=g) > 0.5).float()
    adv = harness.get_method("grpo").advantages(scores, torch.arange(b) // 8, mask)
    old = -torch.rand(b, t, generator=g) * 3 - 0.01
    lp = old + 0.2 * torch.randn(b, t, generator=g)
    ent = torch.rand(b, t, generator=g) * 2
    old_ent = ent * (1 + 0.2 * (torch.rand(b, t, generator=g) - 0.5))
    return {"mask": mask, "adv": adv, "old": old, "lp": lp, "ent": ent, "old_ent": old_ent}


def _old_entropy(m, x: dict, device: str) -> dict:
    """``old_entropy=`` for a method that needs it, else nothing."""
    return {"old_entropy": x["old_ent"].to(device)} if m.needs_old_entropy else {}


def run_loss(name: str, x: dict, device: str, generator) -> dict:
    m = harness.get_method(name)
    lp = x["lp"].to(device).clone().requires_grad_()
    ent = x["ent"].to(device).clone().requires_grad_() if m.needs_entropy else None
    out = m.policy_loss(
        lp,
        x["old"].to(device),
        x["adv"].to(device),
        x["mask"].to(device),
        entropy=ent,
        step=0,
        generator=generator,
        **_old_entropy(m, x, device),
    )
    out.loss.backward()
    return {
        "loss": out.loss.detach().cpu(),
        "grad": _grad(lp),
        "grad_entropy": _grad(ent) if ent is not None else None,
        "metrics": out.metrics,
    }


def _grad(x: torch.Tensor) -> torch.Tensor:
    """x's gradient on the CPU; zeros where the loss does not depend on x (high_entropy_tokens uses the entropy
    only to select tokens: no gradient reaches it)."""
    return (x.grad if x.grad is not None else torch.zeros_like(x)).detach().cpu()


def agree(name: str, x: dict, device: str) -> dict:
    cpu = run_loss(name, x, "cpu", torch.Generator().manual_seed(1))
    dev = run_loss(name, x, device, torch.Generator().manual_seed(1))
    res = {
        "loss_cpu": float(cpu["loss"]),
        "loss_device": float(dev["loss"]),
        "loss": compare(dev["loss"], cpu["loss"], RTOL, ATOL),
        "grad": compare(dev["grad"], cpu["grad"], RTOL, ATOL),
    }
    if cpu["grad_entropy"] is not None:
        res["grad_entropy"] = compare(dev["grad_entropy"], cpu["grad_entropy"], RTOL, ATOL)
    keys = sorted(set(cpu["metrics"]) | set(dev["metrics"]))
    bad = {
        k: (cpu["metrics"].get(k), dev["metrics"].get(k))
        for k in keys
        if k not in cpu["metrics"]
        or k not in dev["metrics"]
        or not compare(dev["metrics"][k], cpu["metrics"][k], METRIC_RTOL, METRIC_ATOL)["ok"]
    }
    res["metrics_differing"] = {k: {"cpu": c, "device": d} for k, (c, d) in bad.items()}
    res["selected_count"] = cpu["metrics"].get("selected/count")
    res["ok"] = res["loss"]["ok"] and res["grad"]["ok"] and res.get("grad_entropy", {"ok": True})["ok"] and not bad
    return res


def clip_cov_device_generator(x: dict, device: str) -> dict:
    """Clip-Cov with a generator on the device vs the CPU generator: same count, tokens drawn differently --
    or an error, which is reported (``torch.randperm`` without ``device=`` refuses a CUDA generator)."""
    cpu = run_loss("clip_cov", x, "cpu", torch.Generator().manual_seed(1))
    try:
        dev = run_loss("clip_cov", x, device, torch.Generator(device=device).manual_seed(1))
    except RuntimeError as e:
        return {
            "generator_device": device,
            "supported": False,
            "error": f"RuntimeError: {e}"[:500],
            "note": "Clip-Cov's draw (harness.kernel.selection.random_subset_mask) cannot take a generator on this "
            "device; the pocket backend and the OpenRLHF plug-in pass CPU generators",
        }
    valid = x["mask"].bool()
    zero_cpu, zero_dev = (cpu["grad"] == 0) & valid, (dev["grad"] == 0) & valid  # detached tokens have no gradient
    return {
        "generator_device": device,
        "supported": True,
        "selected_count_cpu": cpu["metrics"]["selected/count"],
        "selected_count_device": dev["metrics"]["selected/count"],
        "count_equal": cpu["metrics"]["selected/count"] == dev["metrics"]["selected/count"],
        "same_tokens_as_cpu_generator": bool(torch.equal(zero_cpu, zero_dev)),
        "note": "a device generator draws torch.randperm from the device's RNG stream: the same number of "
        "tokens, not the same tokens as the CPU draw (pass a CPU generator for CPU-identical draws)",
    }


def timing(device: str, b: int, t: int, repeats: int, sync, methods) -> dict:
    x = {k: v.to(device) for k, v in make_inputs(b, t, seed=3, ragged=False).items()}
    fns = {}
    for name in methods:
        m = harness.get_method(name)

        def step(m=m):
            lp = x["lp"].clone().requires_grad_()
            e = x["ent"].clone().requires_grad_() if m.needs_entropy else None
            m.policy_loss(
                lp,
                x["old"],
                x["adv"],
                x["mask"],
                entropy=e,
                generator=torch.Generator().manual_seed(1),
                **_old_entropy(m, x, device),
            ).loss.backward()

        fns[name] = step
    peak = {}
    if device.startswith("cuda"):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            fn()
            torch.cuda.synchronize()
            peak[name] = torch.cuda.max_memory_allocated() - base
    best = best_times(fns, repeats, sync)
    base = best["grpo"]
    rows = {n: {"seconds": round(s, 6), "ratio_to_grpo": round(s / base, 3)} for n, s in best.items()}
    for n, p in peak.items():
        rows[n]["peak_extra_mib"] = round(p / 2**20, 1)
        rows[n]["peak_ratio_to_grpo"] = round(p / max(peak["grpo"], 1), 3)
    return {
        "batch": b,
        "seq": t,
        "tokens": int(x["mask"].sum()),
        "positions": b * t,
        "repeats": repeats,
        "methods": rows,
    }


def check(ctx) -> dict:
    size = "small" if ctx.small else "full"
    b, t = AGREE_SIZE[size]
    x = make_inputs(b, t)
    methods = harness.list_methods()
    res = {
        "status": "ok",
        "tolerance": {
            "loss_grad_rtol": RTOL,
            "loss_grad_atol": ATOL,
            "metric_rtol": METRIC_RTOL,
            "metric_atol": METRIC_ATOL,
        },
        "agreement_size": {"batch": b, "seq": t, "tokens": int(x["mask"].sum())},
        "methods": {},
    }
    for name in methods:
        try:
            r = agree(name, x, ctx.device)
        except Exception as e:  # noqa: BLE001 - one method's crash is reported, the others still run
            r = {"ok": False, "error": f"{type(e).__name__}: {e}"[:1000]}
            ctx.log(f"{name}: error: {r['error']}")
        else:
            ctx.log(
                f"{name}: loss {r['loss_device']:.6g} vs cpu {r['loss_cpu']:.6g}, grad max rel "
                f"{r['grad']['max_rel']:.2e} -> {'ok' if r['ok'] else 'DIFFERS'}"
            )
        res["methods"][name] = r
    if "clip_cov" in methods:
        res["clip_cov_device_generator"] = clip_cov_device_generator(x, ctx.device)
    res["timing"] = []
    for tb, tt in TIMING_SIZES[size]:
        timed = [n for n in methods if "error" not in res["methods"][n]]
        if "grpo" not in timed or ctx.left() < 60:
            why = "no grpo baseline" if "grpo" not in timed else "time budget"
            res["timing_cut"] = f"sizes from {tb}x{tt} on not timed ({why})"
            ctx.log(res["timing_cut"])
            break
        row = timing(ctx.device, tb, tt, REPEATS[size], ctx.sync, timed)
        res["timing"].append(row)
        ctx.log(f"timing {tb}x{tt}: " + ", ".join(f"{n} {v['ratio_to_grpo']}x" for n, v in row["methods"].items()))
        if ctx.device.startswith("cuda"):
            torch.cuda.empty_cache()
    errors = [n for n, r in res["methods"].items() if r.get("error")]
    differ = [n for n, r in res["methods"].items() if not r["ok"] and not r.get("error")]
    if errors or differ:
        res["status"] = "fail"
        res["reason"] = "; ".join(
            part
            for part in (
                f"raised: {', '.join(errors)}" if errors else "",
                f"device != CPU beyond tolerance: {', '.join(differ)}" if differ else "",
            )
            if part
        )
    return res
