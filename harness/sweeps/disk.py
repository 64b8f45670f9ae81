"""The disk a sweep needs, checked before anything is queued (docs/gpu.md "Disk plans and retention").

Each cell's disk plan comes from its backend (``Backend.disk_plan``; None: the backend's runs keep little and are
not counted). ``check_budgets`` refuses a cell whose plan exceeds its ``resources.disk_gb`` (also in a dry run);
``check_free`` refuses a submission whose cells need more than the free space of the runs directory's file system
(where every cell's checkpoints go), counting what each cell's directory holds already (a resumed cell has
written part of its plan). A finished cell keeps its plan's files, so a sweep's total is the sum of its cells'.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

from harness.run.disk import GB


def cell_plans(cells) -> dict:
    """``{cell id: DiskPlan}`` of the cells whose backend makes one."""
    from harness.backends import get_backend
    from harness.run.config import load_config

    out = {}
    for c in cells:
        cfg = load_config(c.config)
        plan = get_backend(cfg.backend).disk_plan(cfg)
        if plan is not None:
            out[c.id] = plan
    return out


def check_budgets(cells, plans: dict) -> None:
    """Refuse (ValueError) the first cell whose disk plan exceeds its ``resources.disk_gb``, with the plan's terms."""
    for c in cells:
        budget, plan = c.resources.get("disk_gb"), plans.get(c.id)
        if budget is None or plan is None or plan.total <= budget * GB:
            continue
        terms = ", ".join(f"{t.name} {t.copies} x {t.each / GB:.2f}" for t in plan.terms if t.total)
        raise ValueError(
            f"cell {c.alias}: its disk plan needs {plan.total / GB:.1f} GB at its peak, over its resources.disk_gb "
            f"{budget:g} ({terms} GB; retention: {plan.retention}). Raise resources.disk_gb, or keep fewer checkpoints"
        )


def used_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (0 when it does not exist); links are not followed."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def free_bytes(runs_dir: Path) -> tuple[int, Path]:
    """Free bytes of the file system the runs directory is (or will be) on, and the folder asked."""
    where = Path(runs_dir).absolute()
    while not where.exists():
        where = where.parent
    return shutil.disk_usage(where).free, where


def needed_bytes(cells, plans: dict, runs_dir: Path) -> int:
    """What ``cells`` still need: each plan less what its cell directory holds already."""
    from harness.sweeps.cells import cell_dir

    return sum(max(int(plans[c.id].total) - used_bytes(cell_dir(runs_dir, c)), 0) for c in cells if c.id in plans)


def check_free(cells, plans: dict, runs_dir: Path) -> None:
    """Refuse (ValueError) a submission of ``cells`` whose plans need more than the runs directory's free space."""
    need = needed_bytes(cells, plans, runs_dir)
    free, where = free_bytes(runs_dir)
    if need > free:
        raise ValueError(
            f"{runs_dir}: the disk plans of the {len(cells)} cells to submit need {need / GB:.1f} GB more, and the "
            f"file system of {where} has {free / GB:.1f} GB free; free space, use another --runs-dir, or keep fewer "
            f"checkpoints (each cell's plan: harness sweep SPEC --dry-run)"
        )


def summary(cells, plans: dict, runs_dir: Path) -> str:
    """The dry run's last lines: the sweep's total plan and the free space a submission would be checked against."""
    if not plans:
        return "disk: no cell has a disk plan (its backend keeps little)"
    sizes = Counter(round(plans[c.id].total / GB, 1) for c in cells if c.id in plans)
    total = sum(p.total for p in plans.values())
    need = needed_bytes(cells, plans, runs_dir)
    free, where = free_bytes(runs_dir)
    verdict = "fits" if need <= free else "a submission would be refused"
    parts = " + ".join(f"{n} x {gb:g}" for gb, n in sizes.items())
    return (
        f"disk: {len(plans)} cells plan {total / GB:.1f} GB in all ({parts} GB); {need / GB:.1f} GB still to "
        f"write; free at {where}: {free / GB:.1f} GB: {verdict}"
    )
