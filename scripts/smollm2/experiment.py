"""Tables, tests and curves of the SmolLM2 experiment (issue #24) from its run directories.

    python scripts/smollm2/experiment.py RUNS_DIR START_DIR [--out results/smollm2/experiment]

RUNS_DIR: the sweep's cells (each with config.yaml, metrics.jsonl, result.json, eval/step_<N>.per_problem.json);
START_DIR: ``start_eval.py``'s directory (eval/step_0.per_problem.json: the common start). Writes OUT/table.md,
OUT/summary.json, OUT/curves.png and copies every run's per-step data to OUT/runs/<method>_s<seed>/.

Statistics: per run, end - start accuracy on the same held-out problems, paired by problem (mean of the
per-problem differences with a Student-t 95% interval; exact McNemar test = two-sided binomial test of the
discordant pairs); per method, the mean over seeds of end - start with a Student-t 95% interval (n = 3 seeds);
method vs GRPO, the per-seed end accuracies paired by seed (mean difference, Student-t 95% interval).
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import yaml

from harness.run.metrics import ENTROPY, REWARD_MEAN, edge_means

RESULTS = Path(__file__).resolve().parents[2] / "results" / "smollm2"
CURVES = ("reward/mean", "entropy", "response/length", "grad_norm")


def t_interval(xs: list[float]) -> tuple[float, float]:
    """(mean, Student-t 95% half-width); half-width nan for one value (harness.results.stats.mean_ci)."""
    from harness.results.stats import mean_ci

    iv = mean_ci(xs)
    return iv.mean, iv.half


def mcnemar_exact(start: list[int], end: list[int]) -> tuple[int, int, float]:
    """(gained, lost, two-sided exact p) over problems right at the end but not at the start and vice versa."""
    from scipy.stats import binomtest

    gained = sum(1 for a, b in zip(start, end) if b and not a)
    lost = sum(1 for a, b in zip(start, end) if a and not b)
    p = binomtest(gained, gained + lost, 0.5).pvalue if gained + lost else 1.0
    return gained, lost, float(p)


def greedy_grades(path: Path) -> list[int]:
    return [int(row[0]) for row in json.loads(path.read_text())["correct"]]


def load_run(d: Path) -> dict | None:
    if not (d / "metrics.jsonl").is_file() or not (d / "config.yaml").is_file():
        return None
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    rows = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    res = json.loads((d / "result.json").read_text()) if (d / "result.json").is_file() else {}
    steps = max((r["step"] for r in rows), default=0)
    end = d / "eval" / f"step_{steps}.per_problem.json"
    return {
        "dir": d,
        "method": cfg["method"]["name"],
        "seed": int(cfg.get("seed", 0)),
        "rows": rows,
        "result": res,
        "steps": steps,
        "end": greedy_grades(end) if end.is_file() else None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("start", type=Path)
    ap.add_argument("--out", type=Path, default=RESULTS / "experiment")
    args = ap.parse_args(argv)
    start = greedy_grades(args.start / "eval" / "step_0.per_problem.json")
    runs = [r for d in sorted(args.runs.iterdir()) if d.is_dir() and (r := load_run(d))]
    runs.sort(key=lambda r: (r["method"] != "grpo", r["method"], r["seed"]))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    n = len(start)
    s_acc = sum(start) / n
    lines = [
        f"Start (every run; greedy, {n} held-out problems): {s_acc:.3f} ({sum(start)}/{n})",
        "",
        "| method | seed | steps | end acc | end - start (95% CI, paired by problem) | gained / lost | McNemar p | "
        "entropy start -> end | reward start -> end | gen s/step | update s/step | peak RSS MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary = {"start": {"acc": s_acc, "n": n}, "runs": [], "methods": {}}
    for r in runs:
        rows = r["rows"]
        ent = list(edge_means([x[ENTROPY] for x in rows]))  # the harness's one start/end window
        rew = list(edge_means([x[REWARD_MEAN] for x in rows]))
        gen = sorted(x["time/rollout"] for x in rows)[len(rows) // 2]
        upd = sorted(x["time/update"] for x in rows)[len(rows) // 2]
        rss = (r["result"].get("timing") or {}).get("peak_rss_mb")
        rec = {
            "method": r["method"],
            "seed": r["seed"],
            "steps": r["steps"],
            "entropy_first_last": ent,
            "reward_first_last": rew,
            "gen_s_median": gen,
            "update_s_median": upd,
            "peak_rss_mb": rss,
        }
        if r["end"] is not None and len(r["end"]) == n:
            diffs = [b - a for a, b in zip(start, r["end"])]
            m, h = t_interval(diffs)
            g, lost, p = mcnemar_exact(start, r["end"])
            rec.update(end_acc=sum(r["end"]) / n, diff=m, diff_ci95=h, gained=g, lost=lost, mcnemar_p=p)
            cells = f"{rec['end_acc']:.3f} | {m:+.3f} ± {h:.3f} | {g} / {lost} | {p:.3f}"
        else:
            cells = "- | - | - | -"
        lines.append(
            f"| {r['method']} | {r['seed']} | {r['steps']} | {cells} | {ent[0]:.3f} -> {ent[1]:.3f} | "
            f"{rew[0]:.3f} -> {rew[1]:.3f} | {gen:.1f} | {upd:.1f} | {rss if rss is None else round(rss)} |"
        )
        summary["runs"].append(rec)
        dest = out / "runs" / f"{r['method']}_s{r['seed']}"
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "result.json", "config.yaml"):
            if (r["dir"] / name).is_file():
                shutil.copy2(r["dir"] / name, dest / name)
        if (r["dir"] / "eval").is_dir():
            shutil.copytree(r["dir"] / "eval", dest / "eval", dirs_exist_ok=True)
    lines += [
        "",
        "| method | seeds | end - start, mean over seeds (95% CI, t, n = seeds) | end - GRPO end (paired by seed) |",
    ]
    lines.append("| --- | --- | --- | --- |")
    grpo_end = {x["seed"]: x.get("end_acc") for x in summary["runs"] if x["method"] == "grpo"}
    for method in dict.fromkeys(x["method"] for x in summary["runs"]):
        mine = [x for x in summary["runs"] if x["method"] == method and "diff" in x]
        if not mine:
            continue
        m, h = t_interval([x["diff"] for x in mine])
        rec = {"seeds": len(mine), "diff_mean": m, "diff_ci95": h}
        vs = ""
        if method != "grpo":
            pairs = [x["end_acc"] - grpo_end[x["seed"]] for x in mine if grpo_end.get(x["seed"]) is not None]
            if pairs:
                vm, vh = t_interval(pairs)
                rec.update(vs_grpo=vm, vs_grpo_ci95=vh)
                vs = f"{vm:+.3f} ± {vh:.3f} ({len(pairs)} seeds)"
        summary["methods"][method] = rec
        lines.append(f"| {method} | {len(mine)} | {m:+.3f} ± {h:.3f} | {vs or '-'} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    plot(runs, out / "curves.png")
    print("\n".join(lines))
    return 0


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {}
    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.6))
    for r in runs:
        c = colors.setdefault(r["method"], f"C{len(colors)}")
        steps = [x["step"] for x in r["rows"]]
        for ax, key in zip(axes, CURVES):
            if key in r["rows"][0]:
                label = r["method"] if r["seed"] == min(x["seed"] for x in runs if x["method"] == r["method"]) else None
                ax.plot(steps, [x[key] for x in r["rows"]], color=c, alpha=0.75, lw=1.2, label=label)
    for ax, key in zip(axes, CURVES):
        ax.set_title(key)
        ax.set_xlabel("step")
    axes[0].legend()
    fig.suptitle("SmolLM2-135M-Instruct, gsm_arith level 1: one line per seed")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
