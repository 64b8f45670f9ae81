"""Check 3, entropy: ``harness.entropy_from_logits`` (vocabulary-streaming) against the logsumexp route on
8,192 x 151,936 logits in bf16 and fp32: peak extra device memory (``torch.cuda.max_memory_allocated`` above
what was allocated before the call) and time, forward and forward+backward, as ratios to the logsumexp route.

The logsumexp route is verl's ``entropy_from_logits``: ``logsumexp(z) - sum(softmax(z) * z)`` in the logits'
dtype. Both outputs are compared against that route computed in float32 (bf16: the chunked route accumulates in
float32 and returns bf16; the logsumexp route works in bf16 throughout); only the harness route must be within
``VALUE_ATOL``. On the CPU (``--cpu``) memory is not
measured (null); times still are.
"""

from __future__ import annotations

import torch

from harness import entropy_from_logits
from harness.devicecheck.core import best_times

SIZES = {"full": (8192, 151_936), "small": (256, 8192)}
REPEATS = {"full": 5, "small": 2}
VALUE_ATOL = {torch.float32: 1e-3, torch.bfloat16: 7e-2}  # |H - H_ref(fp32)| in nats; bf16 ulp is 1/16 on [8, 16)


def logsumexp_route(z: torch.Tensor) -> torch.Tensor:
    p = torch.softmax(z, dim=-1)
    return torch.logsumexp(z, dim=-1) - (p * z).sum(-1)


def _peak_extra(fn, device: str) -> int | None:
    if not device.startswith("cuda"):
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def one_dtype(dtype, rows: int, vocab: int, device: str, repeats: int, sync) -> dict:
    g = torch.Generator(device=device).manual_seed(0)
    z = torch.empty(rows, vocab, device=device, dtype=torch.float32).normal_(0, 3, generator=g).to(dtype)
    with torch.no_grad():
        ref = logsumexp_route(z.float()).cpu()
        got = {"chunked": entropy_from_logits(z).float().cpu(), "logsumexp": logsumexp_route(z).float().cpu()}
    routes = {"chunked": entropy_from_logits, "logsumexp": logsumexp_route}
    out = {
        "dtype": str(dtype).replace("torch.", ""),
        "rows": rows,
        "vocab": vocab,
        "logits_mib": round(z.numel() * z.element_size() / 2**20, 1),
        "routes": {},
    }
    for name, fn in routes.items():

        def fwd(fn=fn):
            with torch.no_grad():
                fn(z)

        zg = z.detach().clone().requires_grad_()

        def fwd_bwd(fn=fn, zg=zg):
            zg.grad = None
            fn(zg).float().sum().backward()

        err = (got[name] - ref).abs().max().item()
        out["routes"][name] = {
            "max_abs_err_vs_fp32": err,
            "value_ok": err <= VALUE_ATOL[dtype],
            "fwd_peak_extra_mib": _mib(_peak_extra(fwd, device)),
            "fwd_bwd_peak_extra_mib": _mib(_peak_extra(fwd_bwd, device)),
        }
        t = best_times({"fwd": fwd, "fwd_bwd": fwd_bwd}, repeats, sync)
        out["routes"][name].update(fwd_s=round(t["fwd"], 6), fwd_bwd_s=round(t["fwd_bwd"], 6))
        del zg
    c, ref = out["routes"]["chunked"], out["routes"]["logsumexp"]
    out["ratios_chunked_to_logsumexp"] = {
        "fwd_time": round(c["fwd_s"] / ref["fwd_s"], 3),
        "fwd_bwd_time": round(c["fwd_bwd_s"] / ref["fwd_bwd_s"], 3),
        "fwd_peak_memory": _ratio(c["fwd_peak_extra_mib"], ref["fwd_peak_extra_mib"]),
        "fwd_bwd_peak_memory": _ratio(c["fwd_bwd_peak_extra_mib"], ref["fwd_bwd_peak_extra_mib"]),
    }
    if device.startswith("cuda"):
        del z
        torch.cuda.empty_cache()
    return out


def _mib(b):
    return None if b is None else round(b / 2**20, 1)


def _ratio(a, b):
    return None if a is None or b is None or b <= 0 else round(a / b, 4)


def check(ctx) -> dict:
    size = "small" if ctx.small else "full"
    rows, vocab = SIZES[size]
    res = {
        "status": "ok",
        "value_atol_nats": {str(k).replace("torch.", ""): v for k, v in VALUE_ATOL.items()},
        "memory_measured": ctx.device.startswith("cuda"),
        "results": [],
    }
    for dtype in (torch.bfloat16, torch.float32):
        r = one_dtype(dtype, rows, vocab, ctx.device, REPEATS[size], ctx.sync)
        res["results"].append(r)
        q = r["ratios_chunked_to_logsumexp"]
        ctx.log(
            f"{r['dtype']} {rows}x{vocab}: time fwd {q['fwd_time']}x, fwd+bwd {q['fwd_bwd_time']}x; "
            f"peak memory fwd {q['fwd_peak_memory']}x, fwd+bwd {q['fwd_bwd_peak_memory']}x of the logsumexp route"
        )
    # only the harness route is held to the tolerance; the logsumexp route's own error is reported
    bad = [r["dtype"] for r in res["results"] if not r["routes"]["chunked"]["value_ok"]]
    if bad:
        res["status"], res["reason"] = "fail", f"entropy off the fp32 reference beyond tolerance: {', '.join(bad)}"
    return res
