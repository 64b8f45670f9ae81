"""A checkpoint's lineage: the run it belongs to, its length aside. Every backend records it in its checkpoints and
refuses to resume from one of another run (docs/contracts.md §5)."""

from __future__ import annotations

from pathlib import Path


def lineage(cfg) -> str:
    """The run's identity except its length: a checkpoint of the same run with fewer steps may be continued; one
    of another run (other seed, method, model, task, ...) may not."""
    from harness.run.config import config_hash, measuring_items

    return config_hash({k: v for k, v in measuring_items(cfg).items() if k != "train.steps"})


def foreign_checkpoint(cfg, recorded: str | None, owner: str | None, checkpoint: Path, run_dir: Path) -> str | None:
    """Why ``checkpoint`` (its recorded lineage and run id) is another run's; None when this run may continue it.
    A checkpoint written before lineages were recorded is judged by its run id."""
    if recorded not in (None, lineage(cfg)) or (recorded is None and owner not in (None, cfg.run_id())):
        return (
            f"checkpoint {checkpoint} belongs to run {owner}, not to this run ({cfg.run_id()}); move it out of "
            f"{run_dir} or use another --run-dir"
        )
    return None
