"""``population: auto`` in a sweep spec: which cells form population jobs, the reasons for those that cannot,
and a real local sweep whose population jobs write every cell's own run directory."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.sweeps import cells as C
from harness.sweeps import expand, load_spec
from harness.sweeps.population import describe, plan_units
from harness.sweeps.spec import SpecError
from harness.sweeps.status import sweep_status

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "backend": "pocket",
    "model": {"name": "pocket-0.1m", "warm_start": {"enabled": "false"}},
    "task": {"name": "countdown", "test_size": 8},
    "train": {
        "steps": 2,
        "prompts_per_step": 2,
        "samples_per_prompt": 2,
        "updates_per_rollout": 2,
        "micro_batch_size": 2,
        "max_new_tokens": 4,
        "checkpoint_every": 1,
    },
    "eval": {"every": 0, "n_samples": 1, "max_problems": 4, "greedy": False},
    "logging": {"progress": False},
}


def _spec(**extra):
    return {"name": "pop", "base": BASE, "grid": {"method": [{"name": "grpo"}, {"name": "kl_cov"}]}, **extra}


def test_population_key_accepts_auto_and_off_and_names_the_allowed_values():
    assert load_spec(_spec(seeds=[0, 1])).population == "off"  # the default: one job per cell
    assert load_spec(_spec(seeds=[0], population="auto")).population == "auto"
    assert load_spec(_spec(seeds=[0], population=False)).population == "off"  # YAML reads a bare `off` as false
    with pytest.raises(SpecError) as e:
        load_spec(_spec(seeds=[0], population="yes"))
    assert str(e.value).startswith("population: 'yes' is not allowed. Allowed: auto (")


def test_cells_that_differ_in_shape_train_apart_with_the_reason():
    spec = load_spec(
        _spec(
            seeds=[0, 1],
            population="auto",
            grid={"method": [{"name": "grpo"}, {"name": "kl_cov"}], "model.name": ["pocket-0.1m", "pocket-0.3m"]},
        )
    )
    cells = expand(spec)
    units, notes = plan_units(cells, "auto")
    pops = [u for u in units if u.population]
    assert sorted(len(u.cells) for u in pops) == [4, 4]  # seeds and methods together, one population per size
    for u in pops:
        assert len({c.config["model"]["name"] for c in u.cells}) == 1
    assert len(notes) == 1 and "cells differ in model.name: 'pocket-0.1m' -> 'pocket-0.3m'" in notes[0]
    # a local executor with 2 slots splits populations until 4 jobs keep them busy; the split changes no number
    units2, _ = plan_units(cells, "auto", parallel=2)
    assert len(units2) == 4 and sorted(c.id for u in units2 for c in u.cells) == sorted(c.id for c in cells)
    # split by cost (a pocket-0.3m cell costs ~1.6x a pocket-0.1m one: sqrt of the parameter count), longest first
    assert [(len(u.cells), u.cells[0].config["model"]["name"]) for u in units2] == [
        (2, "pocket-0.3m"),
        (2, "pocket-0.3m"),
        (2, "pocket-0.1m"),
        (2, "pocket-0.1m"),
    ]
    assert describe(units2) == "4 population job(s) of 2, 2, 2, 2 cells"
    assert all(not u.population and len(u.cells) == 1 for u in plan_units(cells, "off")[0])


def test_a_cell_that_cannot_join_runs_alone_and_says_why():
    spec = load_spec(_spec(seeds=[0], population="auto", grid={"model.name": ["pocket-0.1m", "Qwen/Qwen2.5-0.5B"]}))
    units, notes = plan_units(expand(spec), "auto")
    alone = [u for u in units if not u.population]
    assert len(alone) == 1 and alone[0].cells[0].config["model"]["name"] == "Qwen/Qwen2.5-0.5B"
    assert any("runs alone: model.name 'Qwen/Qwen2.5-0.5B' is not a pocket size" in n for n in notes)


def test_local_sweep_trains_population_jobs_into_each_cells_directory(tmp_path):
    spec_path = tmp_path / "pop.yaml"
    one_at_a_time = {"default": {"array_parallelism": 1}}  # then 2 population jobs of 2 cells keep the slot busy
    spec_path.write_text(yaml.safe_dump(_spec(seeds=[0, 1], population="auto", resources=one_at_a_time)))
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "harness", "sweep", str(spec_path), "--runs-dir", str(runs), "--no-progress"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "population: auto: 4 cells as 2 population job(s) of 2, 2 cells" in out.stdout
    rows = sweep_status(runs)
    assert [r.state for r in rows] == ["done"] * 4
    jobs = {}
    for d in C.list_cell_dirs(runs):
        result = json.loads((d / "result.json").read_text())
        cell = C.read_cell(d)
        assert result["run_id"] == cell["id"] and result["population"]["size"] >= 1
        assert [r["step"] for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())] == [1, 2]
        assert (d / "checkpoints" / "latest.pt").is_file() and (d / "eval" / "step_2.json").is_file()
        jobs.setdefault(C.last_job(d)["job_id"], []).append(d.name)
    assert sorted(map(len, jobs.values())) == [2, 2]  # a job trained two cells, each records it
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "nothing to submit (4 cells)" in again.stdout
