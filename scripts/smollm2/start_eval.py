"""The held-out evaluation before any training, with the trainer's own ``evaluate`` (same protocol as every
run's final evaluation): writes DIR/eval/step_0.json and DIR/eval/step_0.per_problem.json.

Every run of the experiment starts from the same weights and evaluates greedily on the same problems, so
this one evaluation is every run's start (the runs themselves set ``eval.every: 0``: end only).

    python scripts/smollm2/start_eval.py sweeps/configs/smollm2_calibrated.yaml DIR [key=value ...]
"""

from __future__ import annotations

import sys
import time


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    from harness.backends.pocket.trainer import PocketTrainer, peak_rss_mb
    from harness.run.config import load_config

    cfg = load_config(argv[0], overrides=argv[2:])
    tr = PocketTrainer(cfg, argv[1], log=print)
    tr.setup()
    t0 = time.time()
    doc = tr.evaluate(0)
    suite = next(iter(doc["suites"].values()))
    print(
        f"start: {suite['metrics']} on {suite['n_problems']} problems in {time.time() - t0:.0f} s, "
        f"peak RSS {peak_rss_mb():.0f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
