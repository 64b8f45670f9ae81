"""Entropy and training reward per method of the zoo sweep, mean ± 95% CI over seeds and paired Δ vs GRPO.

    python results/methods_zoo/entropy_table.py runs/methods_zoo > results/methods_zoo/entropy.md

Per run: policy entropy (``entropy`` in metrics.jsonl) at step 1, its mean over the last 10 steps, and the mean
training reward over the last 10 steps (``reward/mean``). Intervals: harness.results.stats (Student t; paired by
seed). Bold Δ: the interval excludes zero.
"""

import sys

from harness.results.collect import collect
from harness.results.stats import excludes, mean_ci, paired_diff

col = collect([sys.argv[1]])
runs = col.completed.set_index("run_dir")
m = col.metrics
last = m[m["step"] > m.groupby("run_dir")["step"].transform("max") - 10]
per_run = {
    "H step 1": m[m["step"] == 1].groupby("run_dir")["entropy"].first(),
    "H last 10": last.groupby("run_dir")["entropy"].mean(),
    "reward last 10": last.groupby("run_dir")["reward/mean"].mean(),
}
by = {}  # label -> key -> {seed: value}
for rd, r in runs.iterrows():
    for key, s in per_run.items():
        by.setdefault(r["label"], {}).setdefault(key, {})[int(r["seed"])] = float(s[rd])


def fmt(iv, sign=""):
    return f"{iv.mean:{sign}.3f} ± {iv.half:.3f}"


ORDER = ["grpo", "rloo", "prime", "entropy_bonus", "clip_higher", "clip_cov", "kl_cov", "adaptive_entropy"]
ORDER += ["high_entropy_tokens", "gspo", "cispo", "sapo", "ce_gppo", "w_reinforce", "entropy_advantage"]
keys = list(per_run)
print(
    "| method | n | "
    + " | ".join(f"{k} (mean ± 95% CI)" for k in keys[1:])
    + " | "
    + " | ".join(f"Δ {k} vs grpo (paired)" for k in keys[1:])
    + " |"
)
print("|---" * (2 + 2 * (len(keys) - 1)) + "|")
base = by["grpo"]
for label in sorted(by, key=lambda x: (ORDER.index(x) if x in ORDER else len(ORDER), x)):
    d = by[label]
    cells = [fmt(mean_ci(d[k].values())) for k in keys[1:]]
    deltas = []
    for k in keys[1:]:
        iv = paired_diff(d[k], base[k])
        deltas.append("" if label == "grpo" else f"**{fmt(iv, '+')}**" if excludes(iv) else fmt(iv, "+"))
    print(f"| {label} | {len(d[keys[0]])} | " + " | ".join(cells) + " | " + " | ".join(deltas) + " |")
h1 = mean_ci([v for d in by.values() for v in d["H step 1"].values()])
print(f"\nEntropy at step 1 over all runs: {h1.mean:.3f} ± {h1.half:.3f} (n = {h1.n}).")
