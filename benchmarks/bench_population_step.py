"""A population member's training step vs a separate run's: the same M configs (the quickstart's GRPO settings,
seeds 0..M-1, no evaluation, no checkpoints) trained as M ``PocketTrainer.run()`` calls or as one ``Population``,
in this process, after their warm starts are cached. Prints the CPU time per member and the first member's
rollout/update seconds (a population member's are its group's: divide by the group size, 4).

    python benchmarks/bench_population_step.py pocket-1m [--members 4] [--steps 6]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from harness.backends.pocket.population import Population
from harness.backends.pocket.trainer import PocketTrainer
from harness.run.config import load_config

BASE = Path(__file__).resolve().parents[1] / "sweeps" / "configs" / "pocket_countdown.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp())

    def config(seed: int):
        overrides = [f"seed={seed}", f"model.name={args.size}", f"model.cache_dir={root / 'cache'}"]
        overrides += [f"train.steps={args.steps}", "eval.every=0", "train.checkpoint_every=0", "logging.progress=false"]
        return load_config(str(BASE), overrides=overrides)

    def quiet(*_a, **_k):
        pass

    for s in range(args.members):  # warm starts into the cache, untimed
        PocketTrainer(config(s), root / f"warm{s}", log=quiet).setup()
    for mode in ("separate", "population"):
        trainers = [PocketTrainer(config(s), root / f"{mode}{s}", log=quiet) for s in range(args.members)]
        t0 = time.process_time()
        if mode == "separate":
            for t in trainers:
                t.run()
        else:
            Population(trainers, log=quiet).run()
        cpu = time.process_time() - t0
        timing = {k: round(v, 2) for k, v in trainers[0].timing.items() if k in ("rollout_s", "update_s", "eval_s")}
        print(
            f"{mode:10s} {args.size} x{args.members}, {args.steps} steps: CPU {cpu / args.members:.2f} s per member; "
            f"first member {timing}"
        )


if __name__ == "__main__":
    main()
