"""Power of a paired comparison over seeds, from the per-seed spread of a committed study.

A rescue claim ("method M ends with more entropy than GRPO") is tested on the per-seed paired difference d_s
(log end-entropy ratio, or final-score difference) with a two-sided one-sample Student-t test, as
``harness.studies.verdicts`` decides it. Its power at n seeds for a true mean difference delta and per-seed SD sigma
is P(|T| > t_{1-a/2, n-1}) with T ~ noncentral t(n - 1, delta / sigma * sqrt(n)); within a Holm family of m tests
the smallest p is compared with a/m, so ``alpha`` here is the level the test is registered at.

``study_spread(runs)`` reads the per-seed paired differences of a study's runs (folder or ``*.tar.xz`` archives);
``main`` prints the table a registration quotes:

    python -m harness.studies.power results/mechanism/runs --baseline grpo --method kl_cov
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path

from scipy import stats as sps


def power(effect: float, sd: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample t test of n paired differences with mean ``effect`` and SD ``sd``."""
    if n < 2:
        return float("nan")
    df, nc = n - 1, abs(effect) / sd * math.sqrt(n)
    crit = sps.t.ppf(1 - alpha / 2, df)
    return float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))


def seeds_for(effect: float, sd: float, target: float = 0.8, alpha: float = 0.05, most: int = 10_000) -> int:
    """The fewest seeds (n >= 2) whose power reaches ``target``."""
    for n in range(2, most + 1):
        if power(effect, sd, n, alpha) >= target:
            return n
    raise ValueError(f"power {target} not reached with {most} seeds (effect {effect}, sd {sd})")


def detectable(sd: float, n: int, target: float = 0.8, alpha: float = 0.05) -> float:
    """The smallest |effect| detected with power ``target`` at n seeds (bisection on ``power``)."""
    lo, hi = 0.0, 50.0 * sd
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(mid, sd, n, alpha) < target else (lo, mid)
    return hi


def _runs(folder: Path):
    from harness.results.archive import unpacked

    with unpacked(folder) as root:
        for result in sorted(Path(root).rglob("result.json")):
            d = result.parent
            cfg = json.loads(result.read_text())
            rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
            evals = [p for p in (d / "eval").glob("step_*.json") if re.fullmatch(r"step_\d+\.json", p.name)]
            last = max(evals, key=lambda p: int(p.stem.split("_")[1]))
            suites = json.loads(last.read_text())["suites"]
            (suite,) = suites.values()
            yield cfg["method"], cfg["seed"], rows, suite["metrics"][suite["primary"]]


def study_spread(folder, baseline: str = "grpo", method: str = "kl_cov", window: int = 5) -> dict:
    """Per-seed paired differences of ``method`` vs ``baseline``: log end-entropy ratio (end = mean of the last
    ``window`` logged steps of ``entropy/generated``, else ``entropy``) and final-score difference (last eval's
    primary metric, as a fraction)."""
    end, score = {}, {}
    for name, seed, rows, final in _runs(Path(folder)):
        h = [r.get("entropy/generated", r.get("entropy")) for r in rows]
        end[name, seed] = sum(h[-window:]) / window
        score[name, seed] = final
    seeds = sorted(s for m, s in end if m == method and (baseline, s) in end)
    if len(seeds) < 2:
        raise ValueError(f"{folder}: fewer than 2 seeds with both {method!r} and {baseline!r}")
    log_ratio = [math.log(end[method, s] / end[baseline, s]) for s in seeds]
    diff = [score[method, s] - score[baseline, s] for s in seeds]
    return {
        "seeds": seeds,
        "log_entropy_ratio": {
            "values": log_ratio,
            "mean": statistics.mean(log_ratio),
            "sd": statistics.stdev(log_ratio),
        },
        "score_difference": {"values": diff, "mean": statistics.mean(diff), "sd": statistics.stdev(diff)},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.studies.power", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="a study's runs folder or a folder of *.tar.xz run archives")
    ap.add_argument("--baseline", default="grpo")
    ap.add_argument("--method", default="kl_cov")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seeds", type=int, nargs="*", default=[5, 10, 12, 15, 20, 30], help="seed counts to tabulate")
    a = ap.parse_args(argv)
    s = study_spread(a.runs, a.baseline, a.method)
    sd_h, sd_s = s["log_entropy_ratio"]["sd"], s["score_difference"]["sd"]
    mean_h = s["log_entropy_ratio"]["mean"]
    print(
        f"spread from {len(s['seeds'])} seeds ({a.method} vs {a.baseline}): SD of log end-entropy ratio {sd_h:.3f} "
        f"(mean {mean_h:+.3f} = x{math.exp(mean_h):.2f}); SD of final-score difference {sd_s:.3f}"
    )
    print(
        f"seeds for 80% power at alpha {a.alpha}: x{math.exp(mean_h):.2f} entropy "
        f"{seeds_for(mean_h, sd_h, 0.8, a.alpha)}, 5 points {seeds_for(0.05, sd_s, 0.8, a.alpha)}"
    )
    print("| seeds | power x1.42 entropy | power 5 points | 80%-detectable entropy ratio | 80%-detectable points |")
    print("|---|---|---|---|---|")
    for n in a.seeds:
        print(
            f"| {n} | {power(mean_h, sd_h, n, a.alpha):.2f} | {power(0.05, sd_s, n, a.alpha):.2f} "
            f"| x{math.exp(detectable(sd_h, n, 0.8, a.alpha)):.2f} | {100 * detectable(sd_s, n, 0.8, a.alpha):.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
