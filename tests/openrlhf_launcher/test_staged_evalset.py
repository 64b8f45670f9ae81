"""A staged OpenRLHF sweep (issue 34 item 5): `harness stage` renders the in-loop eval set once for every cell that
evaluates on the same suites, and each launch copies it from the stage instead of building it from the hub; what
no offline job can read is refused before anything is written. Pure Python; the hub is a local folder of copies."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.backends.openrlhf import evalset, launch
from harness.backends.openrlhf.flags import build_plan
from harness.cli import main
from harness.run.config import load_config
from harness.run.offline import STAGE_ENV
from harness.sweeps import expand, load_spec
from harness.sweeps.staging import apply_stage

FIXTURES = Path(__file__).resolve().parents[2] / "evals" / "data" / "fixtures"
EVAL = {"every": 2, "n_samples": 4, "temperature": 0.6, "suites": ["math500", "amc23"], "max_problems": 2}


@pytest.fixture()
def sweep(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    hub = Path("hub")
    (hub / "Qwen" / "Qwen2.5-7B").mkdir(parents=True)
    (hub / "Qwen" / "Qwen2.5-7B" / "config.json").write_text('{"model_type": "qwen2"}\n')  # staging only copies
    for suite, repo in (("math500", "HuggingFaceH4/MATH-500"), ("amc23", "math-ai/amc23")):
        (hub / repo).mkdir(parents=True)
        shutil.copy(FIXTURES / f"{suite}.jsonl", hub / repo / "test.jsonl")
    Path("data").mkdir()
    Path("data/dapo.jsonl").write_text(json.dumps({"prompt": "1+1? \\boxed{}", "answer": "2"}) + "\n")
    spec = {
        "name": "orl_staged",
        "stage_dir": "stage",
        "base": {
            "backend": "openrlhf",
            "model": {"name": "Qwen/Qwen2.5-7B"},
            "task": {"name": "data/dapo.jsonl"},
            "train": {"steps": 10, "micro_batch_size": 2, "max_new_tokens": 256},
            "eval": EVAL,
            "openrlhf": {"gpus_per_node": 8},
        },
        "grid": {"method": [{"name": "grpo"}, {"name": "clip_higher", "eps_low": 0.2, "eps_high": 0.28}]},
        "seeds": [0],
    }
    Path("spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return Path("spec.yaml")


def test_the_in_loop_eval_set_is_rendered_once_into_the_stage_and_copied_by_every_launch(sweep, monkeypatch, capsys):
    assert main(["stage", str(sweep), "--source", str(Path("hub").absolute())]) == 0
    inputs = json.loads(Path("stage/manifest.json").read_text())["inputs"]
    (rendered,) = [e for e in inputs if e["kind"] == "file"]  # one eval set for both cells (same suites)
    assert [(e["kind"], e["name"]) for e in inputs if e["kind"] != "file"] == [
        ("model", "Qwen/Qwen2.5-7B"),
        ("local", "data/dapo.jsonl"),
        ("suite", "math500"),
        ("suite", "amc23"),
    ]
    spec = {"suites": EVAL["suites"], "limit": 2}
    assert rendered["name"] == evalset.staged_name(spec) and rendered["rows"] == 4
    # rendered from the staged hub rows, it is exactly what the shipped fixtures render to
    assert Path("stage", rendered["path"]).read_text() == evalset.render({**spec, "fixtures": True})
    # a launch of a staged cell copies the stage's file (marked here, to tell a copy from a fresh rendering)
    Path("stage", rendered["path"]).write_text("staged\n")
    (cell,) = apply_stage([expand(load_spec(sweep))[0]], Path("stage").absolute())
    plan = build_plan(load_config(cell.config), Path("run").absolute())
    monkeypatch.setenv(launch.PLUGIN_ENV, plan.env[launch.PLUGIN_ENV])
    monkeypatch.setenv(STAGE_ENV, str(Path("stage").absolute()))
    capsys.readouterr()
    launch.write_eval_dataset()
    assert Path("run/openrlhf_eval.jsonl").read_text() == "staged\n"
    assert f"the staged copy {Path('stage').absolute() / rendered['path']}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "task, error",
    [
        (
            "some-org/rl-prompts",
            "task.name some-org/rl-prompts (cells grpo__s0, clip_higher__s0): a training set named",
        ),
        ("data/missing.jsonl", "task.name data/missing.jsonl (cells grpo__s0, clip_higher__s0): not found; a local"),
    ],
)
def test_stage_refuses_what_no_offline_job_can_read_before_writing(sweep, capsys, task, error):
    spec = yaml.safe_load(sweep.read_text())
    spec["base"]["task"]["name"] = task
    sweep.write_text(yaml.safe_dump(spec))
    assert main(["stage", str(sweep), "--source", "hub"]) == 2
    assert capsys.readouterr().err.startswith(f"error: {error}")
    assert not Path("stage").exists()
