"""Policy entropy on a fixed probe, at the start and the end of pocket runs (docs/mechanism.md, "Probe").

    python -m harness.studies.probe RUNS_DIR --out results/mechanism/probe.json [--method grpo]

Why: the trainer logs ``entropy`` on the batch it trains on. With dynamic filtering that batch holds only the
groups with mixed rewards, i.e. the prompts the policy is still unsure about, so late in a run the logged value
is the entropy of the hardest prompts, not of the policy (verl logs the same quantity). The probe measures the
policy itself: ``n_prompts`` training problems (a fixed sample, the same for every run) x ``n_samples`` responses
at T = 1, token-mean entropy per response, mean over responses; once with the run's warm-started model (the
state its step 1 starts from) and once with its last checkpoint. Also the sampled accuracy on the same prompts,
and at the end where the entropy sits: prompts split by their sampled accuracy (all right / mixed / none right).
For tasks with decision positions (countdown: the tokens where the response makes a choice) also the entropy on
those tokens at the start and the end (``decision_start`` / ``decision_end``, ``decision_ratio``; per size the
geometric-mean ratio with its log-scale interval).

Output: ``{"n_prompts", "n_samples", "method", "runs": [{"run_dir", "model", "seed", "step", "h_start", "h_end",
"ratio", "acc_start", "acc_end", "end_by_group": {"solved" | "mixed" | "unsolved": {"prompts",
"entropy_per_token", "entropy_share"}}}], "sizes": {SIZE: {"ratio": IV, "collapsed_runs": "k/n"}}}`` with IV as in
mechanism.json (mean ± 95% Student-t half-width over seeds).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

from harness.results import stats
from harness.results.collect import collect

PROBE_SEED = 0


def _probe(sampler, problems: list[dict], n_samples: int) -> tuple[float, float, dict]:
    """Entropy (token-mean per response, mean over responses), accuracy, and both per prompt group: ``solved``
    (all samples right), ``mixed``, ``unsolved`` (none right), with the group's share of the summed token entropy."""
    import torch

    from harness.kernel import ops

    gen = torch.Generator().manual_seed(PROBE_SEED)
    batch, scores = sampler.sample(problems, n_samples, 1.0, gen)
    if batch.entropy is None:
        raise ValueError("the probe needs the fast generation path (entropy from the sampling pass)")
    scores = scores.view(-1, n_samples)
    ent, mask = batch.entropy.cpu() * batch.mask.cpu(), batch.mask.cpu()
    acc = scores.mean(1)
    groups = {"solved": acc == 1, "mixed": (acc > 0) & (acc < 1), "unsolved": acc == 0}
    by_group = {}
    for name, sel in groups.items():
        rows = sel.repeat_interleave(n_samples)
        tokens = float(mask[rows].sum())
        by_group[name] = {
            "prompts": int(sel.sum()),
            "entropy_per_token": float(ent[rows].sum()) / tokens if tokens else None,
            "entropy_share": float(ent[rows].sum() / ent.sum()) if float(ent.sum()) > 0 else None,
        }
    h = float(ops.masked_mean(batch.entropy, batch.mask, dim=-1).mean())
    by_group["decision"] = _decision_entropy(sampler, batch)
    return h, float(acc.mean()), by_group


def _decision_entropy(sampler, batch) -> dict | None:
    """Entropy on the decision tokens (the task's ``decision_positions``: where the response makes a choice; None
    for a task without them): per response the mean over its decision tokens, then the mean over the responses
    that have one; ``tokens_per_response``: decision tokens / response tokens."""
    import torch

    positions = getattr(sampler.task, "decision_positions", None)
    if positions is None:
        return None
    mask = batch.mask.cpu().bool()
    ent = batch.entropy.cpu()
    per_resp, n_dec, n_tok = [], 0, 0
    for row, m, e in zip(batch.responses.cpu().tolist(), mask, ent):
        pieces = [sampler.decode([t]) if keep else "" for t, keep in zip(row, m.tolist())]
        starts, text = [], ""
        for piece in pieces:
            starts.append(len(text))
            text += piece
        chosen = set(positions(text))
        dec = torch.tensor(
            [bool(p) and any(c in chosen for c in range(st, st + len(p))) for p, st in zip(pieces, starts)],
            dtype=torch.bool,
        )
        n_dec, n_tok = n_dec + int(dec.sum()), n_tok + int(m.sum())
        if dec.any():
            per_resp.append(float(e[dec].mean()))
    return {
        "entropy": sum(per_resp) / len(per_resp) if per_resp else None,
        "tokens_per_response": n_dec / n_tok if n_tok else None,
    }


def probe_run(run_dir, n_prompts: int = 200, n_samples: int = 8) -> dict:
    """Probe entropy and accuracy of one completed run: its warm-started policy vs its last checkpoint, sampled
    through its backend's ``policy_sampler``."""
    from harness.backends import get_backend
    from harness.run.config import load_config

    run_dir = Path(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    backend = get_backend(cfg.backend)
    if "policy_sampler" not in backend.capabilities:
        raise ValueError(
            f"{run_dir}: backend {cfg.backend!r} cannot sample a finished run's policy; the probe needs one"
        )
    sampler = backend.policy_sampler(cfg, run_dir)
    train = sampler.task.train
    problems = random.Random(PROBE_SEED).sample(train, min(n_prompts, len(train)))
    h0, a0, groups0 = _probe(sampler, problems, n_samples)
    sampler.use("end")
    h1, a1, groups = _probe(sampler, problems, n_samples)
    d0, d1 = groups0.pop("decision"), groups.pop("decision")
    return {
        "run_dir": str(run_dir),
        "model": cfg.model.name,
        "seed": cfg.seed,
        "step": sampler.step,
        "h_start": h0,
        "h_end": h1,
        "ratio": h1 / h0 if h0 > 0 else None,
        "acc_start": a0,
        "acc_end": a1,
        "end_by_group": groups,
        "decision_start": d0,
        "decision_end": d1,
        "decision_ratio": d1["entropy"] / d0["entropy"]
        if d0 and d1 and d0["entropy"] and d1["entropy"] is not None
        else None,
    }


def probe_runs(runs_dir, method: str = "grpo", n_prompts: int = 200, n_samples: int = 8) -> dict:
    """Probe every completed run of ``method`` under ``runs_dir``; per size the end/start ratio over seeds."""
    done = collect([runs_dir]).completed
    done = done[done["label"].astype(str) == method]
    if done.empty:
        raise ValueError(f"{runs_dir}: no completed {method!r} run to probe")
    runs = [probe_run(d, n_prompts, n_samples) for d in sorted(done["run_dir"])]
    sizes = {}
    for size in sorted({r["model"] for r in runs}):
        ratios = [r["ratio"] for r in runs if r["model"] == size and r["ratio"] is not None]
        iv = stats.mean_ci(ratios)
        dec = [r["decision_ratio"] for r in runs if r["model"] == size and r.get("decision_ratio") is not None]
        sizes[size] = {
            "ratio": {"mean": iv.mean, "ci95": iv.half if iv.n >= 2 else None, "n": iv.n},
            "collapsed_runs": f"{sum(x <= 0.1 for x in ratios)}/{len(ratios)}",
            "decision_ratio": stats.log_ratio_ci(dec).to_dict() if dec else None,
        }
    return {"method": method, "n_prompts": n_prompts, "n_samples": n_samples, "runs": runs, "sizes": sizes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.studies.probe", description=__doc__.split("\n")[0])
    p.add_argument("runs_dir")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--method", default="grpo")
    p.add_argument("--n-prompts", type=int, default=200)
    p.add_argument("--n-samples", type=int, default=8)
    a = p.parse_args(argv)
    try:
        res = probe_runs(a.runs_dir, a.method, a.n_prompts, a.n_samples)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    for r in res["runs"]:
        print(
            f"{r['model']} s{r['seed']}: H {r['h_start']:.3f} -> {r['h_end']:.3f} (ratio {r['ratio']:.3f}), "
            f"acc {r['acc_start']:.2f} -> {r['acc_end']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
