"""The rescue study (docs/rescue_prereg.md): does KL-Cov keep more entropy than GRPO, and is that the
noise-signed push of its penalty? Verdicts by the registered rule of ``harness.studies.verdicts``.

Arms are read from each run's config: ``grpo``, ``clip_cov``, ``kl_cov`` (old log-probs from the rollout, as
official) and ``kl_cov_exact`` (``train.old_log_probs: recompute``). Per run: end entropy = mean of
``entropy/generated`` over the last ``WINDOW`` logged steps, final score = the last eval's primary metric. Tests are
paired by seed over the seeds whose four arms all completed (the first ``max_seeds`` of them when given, as an
amendment fixes it); ratios on the log scale, Holm within the families ``entropy`` (E1-E4) and ``score`` (S1, S2,
S4). ``plain_answer`` turns E1-E3 into the registered sentence.

    python -m harness.studies.rescue RUNS_OR_ARCHIVES --out DIR [--max-seeds N]   # rescue.json + rescue.md
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
import yaml

from harness.results import stats
from harness.studies.verdicts import Check, Claim, decide, verdict_markdown

ARMS = ("grpo", "clip_cov", "kl_cov", "kl_cov_exact")
WINDOW = 5
ENTROPY_KEY = "entropy/generated"
NOISE_KEYS = ("selected/below_floor", "selected/count", "penalty/grad_norm")  # amendment 1's names
MIN_SEEDS = 10  # fewer paired seeds: inconclusive by design, not analysed (registration, "Budget and stopping")
# (id, family, statement, arm, reference arm, kind, side); kind: "entropy" (ratio) or "score" (difference)
HYPOTHESES = (
    ("E1", "entropy", "KL-Cov (rollout) ends with more entropy than GRPO", "kl_cov", "grpo", "entropy", "above"),
    (
        "E2",
        "entropy",
        "KL-Cov with exact old log-probs ends with more entropy than GRPO",
        "kl_cov_exact",
        "grpo",
        "entropy",
        "above",
    ),
    ("E3", "entropy", "exact old log-probs lower KL-Cov's end entropy", "kl_cov_exact", "kl_cov", "entropy", "below"),
    ("E4", "entropy", "Clip-Cov ends with more entropy than GRPO", "clip_cov", "grpo", "entropy", "above"),
    ("S1", "score", "KL-Cov (rollout) scores higher than GRPO", "kl_cov", "grpo", "score", "above"),
    (
        "S2",
        "score",
        "KL-Cov with exact old log-probs scores higher than GRPO",
        "kl_cov_exact",
        "grpo",
        "score",
        "above",
    ),
    ("S4", "score", "Clip-Cov scores higher than GRPO", "clip_cov", "grpo", "score", "above"),
)


def arm_of(config: dict) -> str:
    """The arm a run belongs to, from its resolved config (ValueError for a run of no arm)."""
    name = (config.get("method") or {}).get("name")
    exact = (config.get("train") or {}).get("old_log_probs", "rollout") == "recompute"
    arm = f"{name}_exact" if exact else name
    if arm not in ARMS:
        raise ValueError(f"a run of method {name!r} (old_log_probs {'recompute' if exact else 'rollout'}) is no arm")
    return arm


def _final_score(run: Path) -> float:
    evals = [p for p in (run / "eval").glob("step_*.json") if re.fullmatch(r"step_\d+\.json", p.name)]
    if not evals:
        return float("nan")
    (suite,) = json.loads(max(evals, key=lambda p: int(p.stem.split("_")[1])).read_text())["suites"].values()
    return float(suite["metrics"][suite["primary"]])


def read_runs(root) -> list[dict]:
    """One record per run directory under ``root`` (or in its ``*.tar.xz`` archives)."""
    from harness.results.archive import unpacked

    out = []
    with unpacked(root) as folder:
        for result in sorted(Path(folder).rglob("result.json")):
            run = result.parent
            res = json.loads(result.read_text())
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
            h = [r[ENTROPY_KEY] for r in rows if ENTROPY_KEY in r]
            noise = {k: float(np.mean([r[k] for r in rows if k in r])) for k in NOISE_KEYS if any(k in r for r in rows)}
            cfg = yaml.safe_load((run / "config.yaml").read_text())
            out.append(
                {
                    "arm": arm_of(cfg),
                    "model": (cfg.get("model") or {}).get("name"),
                    "seed": res["seed"],
                    "status": res["status"],
                    "h_end": float(np.mean(h[-WINDOW:])) if len(h) >= WINDOW else float("nan"),
                    "score": _final_score(run),
                    "steps": len(rows),
                    "noise": noise,
                    "dir": run.name,
                }
            )
    return out


def paired_seeds(runs: list[dict], max_seeds: int | None = None) -> tuple[list[int], list[dict]]:
    """Seeds whose four arms all completed, in order (the first ``max_seeds``), and the excluded runs."""
    done = {(r["arm"], r["seed"]) for r in runs if r["status"] == "completed"}
    seeds = sorted({r["seed"] for r in runs})
    kept = [s for s in seeds if all((a, s) in done for a in ARMS)]
    excluded = [r for r in runs if r["status"] != "completed"]
    return (kept[:max_seeds] if max_seeds else kept), excluded


def claims_of(runs: list[dict], seeds: list[int]) -> list[Claim]:
    value = {(r["arm"], r["seed"]): r for r in runs if r["seed"] in seeds}
    claims = []
    for hid, family, statement, arm, ref, kind, side in HYPOTHESES:
        c = Claim(hid, f"{arm} vs {ref}", family, statement)
        if kind == "entropy":
            b = stats.paired_log_ratio(
                {s: value[arm, s]["h_end"] for s in seeds}, {s: value[ref, s]["h_end"] for s in seeds}
            )
            c.tests = [
                Check.of(f"end entropy ÷ {ref}'s {'>' if side == 'above' else '<'} 1", "qualitative", side, b, "ratio")
            ]
            c.headline = f"×{b.estimate:.2f}"
        else:
            diffs = [value[arm, s]["score"] - value[ref, s]["score"] for s in seeds]
            c.tests = [Check.mean(f"final score − {ref}'s > 0", "qualitative", side, diffs, 0.0)]
            c.tests[0].unit = "points"
            c.headline = f"{100 * np.mean(diffs):+.1f} points" if diffs else "—"
        claims.append(c)
    return claims


def plain_answer(verdicts: dict) -> str:
    """The registered answer to "is KL-Cov's effect the noise-signed push?" from the verdicts of E1, E2, E3."""
    v = {c["claim"]: c["verdict"] for c in verdicts["claims"]}
    holds = {k: v.get(k) == "reproduces" for k in ("E1", "E2", "E3")}
    if v.get("E1") == "does not":
        return "no effect to attribute: KL-Cov keeps less entropy than GRPO here (E1 rejected)"
    if not holds["E1"]:
        if holds["E3"]:
            return "the push raises entropy (E3 holds), but no KL-Cov effect over GRPO is established (E1)"
        return "inconclusive: no KL-Cov effect on entropy is established (E1)"
    if holds["E2"]:
        if holds["E3"]:
            return "partly: exact old log-probs lower KL-Cov's entropy (E3), which stays above GRPO's (E2)"
        return "no: KL-Cov keeps more entropy than GRPO with exact old log-probs too (E1, E2; E3 not established)"
    if holds["E3"]:
        return "yes: with exact old log-probs KL-Cov's entropy is lower (E3), its effect over GRPO not established (E2)"
    return "undetermined: KL-Cov keeps more entropy than GRPO (E1); whether it needs the noise cannot be told (E2, E3)"


def analyse(root, max_seeds: int | None = None) -> dict:
    runs = read_runs(root)
    seeds, excluded = paired_seeds(runs, max_seeds)
    verdicts = decide(claims_of(runs, seeds))
    by_arm = {
        arm: {
            k: float(np.mean([r["noise"][k] for r in runs if r["arm"] == arm and k in r["noise"]]))
            for k in NOISE_KEYS
            if any(k in r["noise"] for r in runs if r["arm"] == arm)
        }
        for arm in ARMS
    }
    return {
        "arms": list(ARMS),
        "models": sorted({str(r["model"]) for r in runs}),
        "seeds": seeds,
        "n": len(seeds),
        "excluded": [{"dir": r["dir"], "status": r["status"]} for r in excluded],
        "window": WINDOW,
        "entropy_key": ENTROPY_KEY,
        "verdicts": verdicts,
        "answer": plain_answer(verdicts),
        "noise_per_step_mean": by_arm,
    }


def write(root, out, max_seeds: int | None = None) -> dict:
    res = analyse(root, max_seeds)
    if res["n"] < MIN_SEEDS:  # the registered floor: no verdict is read from fewer seeds
        for claim in res["verdicts"]["claims"]:
            claim["verdict"], claim["why"] = "inconclusive", f"{res['n']} paired seeds < {MIN_SEEDS} (by design)"
        res["answer"] = f"inconclusive by design: {res['n']} paired seeds, fewer than the registered {MIN_SEEDS}"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rescue.json").write_text(json.dumps(res, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    seeds = f"{res['seeds'][0]}-{res['seeds'][-1]}" if res["seeds"] else "none"
    title = f"Rescue study ({', '.join(res['models'])}): {res['n']} seeds paired, {seeds}"
    md = [
        verdict_markdown([(title, res["verdicts"])]),
        "",
        f"**Is KL-Cov's effect the noise-signed push?** {res['answer']}",
    ]
    (out / "rescue.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.studies.rescue", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", help="the study's runs folder or a folder of *.tar.xz archives")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-seeds", type=int, default=None, help="analyse the first N complete seeds (an amendment)")
    a = ap.parse_args(argv)
    res = write(a.runs, a.out, a.max_seeds)
    print(f"{res['n']} seeds; {res['answer']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
