"""OpenRLHF's experiment-tracker flags for a run's ``logging:`` section (the launcher passes them).

OpenRLHF 0.11 takes the W&B entity (``--logger.wandb.org``), project, group and run name; it has no flag for tags,
a run id or resuming: each launch is a new W&B run (the harness's own trackers, harness.run.tracking, resume theirs).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.run.tracking import TB_DIR


def logger_flags(logging: dict, run_dir) -> list[str]:
    """``--logger.*`` flags for the ``logging`` section: TensorBoard goes to ``RUN/tensorboard/<run name>/``
    (OpenRLHF adds the run name); W&B gets the entity, project, group and run name."""
    argv: list[str] = []
    if logging.get("tensorboard"):
        argv += ["--logger.tensorboard_dir", os.path.join(run_dir, TB_DIR)]
    if logging.get("wandb"):
        argv += ["--logger.wandb.key", "${WANDB_API_KEY}"]
        argv += ["--logger.wandb.project", str(logging.get("wandb_project") or "entropy-harness")]
        if logging.get("wandb_entity"):
            argv += ["--logger.wandb.org", str(logging["wandb_entity"])]
        if logging.get("wandb_group"):
            argv += ["--logger.wandb.group", str(logging["wandb_group"])]
        argv += ["--logger.wandb.run_name", Path(run_dir).name]
    return argv
