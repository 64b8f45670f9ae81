"""Tables and curves of the SmolLM2 experiment (issue #15) from its run directories.

python scripts/smollm2/report.py RUNS_DIR   # RUNS_DIR/<method>/{metrics.jsonl,result.json}
-> results/smollm2/{curves.png,summary.json,table.md}
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "results" / "smollm2"
KEYS = ("reward/mean", "entropy", "response/length", "grad_norm", "time/rollout", "time/score", "time/update")


def load(run: Path) -> dict:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    res = json.loads((run / "result.json").read_text()) if (run / "result.json").is_file() else {}
    # peak RSS: result.json timing, else the train.log timing line (rows carried it per step before 9ebeaed)
    peaks = [res.get("timing", {}).get("peak_rss_mb") or 0.0, *[r.get("mem/peak_rss_mb", 0.0) for r in rows]]
    log = run / "train.log"
    peaks += [float(m) for m in re.findall(r"peak RSS (\d+) MB", log.read_text() if log.is_file() else "")]
    return {"rows": rows, "result": res, "peak_rss_mb": max(peaks)}


def final_eval(res: dict) -> tuple[float, int] | None:
    ev = (res.get("eval") or {}).get("suites", {}).get("gsm_arith")
    return (ev["metrics"]["avg@1"], ev["n_problems"]) if ev else None


def ci95(p: float, n: int) -> float:
    return 1.96 * math.sqrt(p * (1 - p) / n)


def main(runs: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {d.name: load(d) for d in sorted(runs.iterdir()) if (d / "metrics.jsonl").is_file()}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    summary = {}
    for name, d in data.items():
        rows = d["rows"]
        steps = [r["step"] for r in rows]
        for ax, key in zip(axes, ("reward/mean", "entropy", "response/length")):
            ax.plot(steps, [r[key] for r in rows], marker="o", label=name)
            ax.set_title(key)
            ax.set_xlabel("step")
        s = {k: [round(r[k], 4) for r in rows] for k in KEYS if k in rows[0]}
        s["peak_rss_mb"] = d["peak_rss_mb"]
        fe = final_eval(d["result"])
        s["final_eval_avg@1"] = None if fe is None else {"acc": fe[0], "n": fe[1], "ci95": round(ci95(*fe), 4)}
        summary[name] = s
    for ax in axes:
        ax.legend()
    fig.suptitle("SmolLM2-135M-Instruct, gsm_arith level 1, 16 responses/step (2 shared CPU cores)")
    fig.tight_layout()
    fig.savefig(RESULTS / "curves.png", dpi=110)
    (RESULTS / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        "| method | steps | reward (first -> last) | entropy (first -> last) | length | gen s/step | update s/step "
        "| peak RSS MB | final held-out greedy acc (n) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        n = len(s["reward/mean"])
        mean = {k: sum(v) / n for k, v in s.items() if isinstance(v, list)}
        fe = s["final_eval_avg@1"]
        fe_txt = "-" if fe is None else f"{fe['acc']:.3f} ± {fe['ci95']:.3f} ({fe['n']})"
        lines.append(
            f"| {name} | {n} | {s['reward/mean'][0]:.3f} -> {s['reward/mean'][-1]:.3f} "
            f"(mean {mean['reward/mean']:.3f}) | {s['entropy'][0]:.3f} -> {s['entropy'][-1]:.3f} "
            f"| {mean['response/length']:.0f} | {mean['time/rollout']:.0f} | {mean['time/update']:.0f} "
            f"| {s['peak_rss_mb']:.0f} | {fe_txt} |"
        )

    (RESULTS / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
