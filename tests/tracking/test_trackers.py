"""Trackers in their offline modes (W&B offline, TensorBoard event files): what a run records, and one tracker run
per attempt (a new one when training starts over, the same one when it resumes from its checkpoint)."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from harness.io import read_jsonl
from harness.run.config import load_config
from harness.run.runner import run
from harness.run.tracking import model_size

pytest.importorskip("wandb")
pytest.importorskip("tensorboard")

sys.path.insert(0, str(Path(__file__).parent))
from tracker_files import tb_hparams, tb_scalars, wandb_runs  # noqa: E402


@pytest.fixture(autouse=True)
def quiet_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_MODE", "offline")  # never the network, whatever a config says
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


def _tracked(tiny, **logging):
    tiny["logging"].update(tensorboard=True, wandb=True, wandb_mode="offline", **logging)
    return tiny


def test_a_run_records_config_tags_group_history_summary_and_eval(tiny, tmp_path):
    cfg = _tracked(tiny, wandb_entity="lab", wandb_project="proj", wandb_group="sweep-a", wandb_tags=["pilot"])
    rd = tmp_path / "run"
    res = run(load_config(cfg), rd, quiet=True)
    rows = read_jsonl(rd / "metrics.jsonl")
    (attempt,) = read_jsonl(rd / "trackers.jsonl")
    assert attempt["id"].startswith(res["run_id"] + "-") and len(attempt["id"]) == 12 + 1 + 6
    assert attempt["resumed_step"] is None and attempt["tensorboard"] == f"tensorboard/{attempt['id']}"
    assert attempt["wandb"] == {"entity": "lab", "project": "proj", "group": "sweep-a", "mode": "offline"}

    (wb,) = wandb_runs(rd)
    assert (wb["id"], wb["entity"], wb["project"], wb["group"]) == (attempt["id"], "lab", "proj", "sweep-a")
    assert wb["tags"] == ["method:grpo", "model:pocket-0.3m", "size:0.3m", "seed:0", "pilot"]
    assert wb["name"] == res["run_id"]  # the display name; the id is the attempt's
    assert wb["config"]["method"]["name"] == "grpo" and wb["config"]["train"]["steps"] == 3
    assert wb["config"]["seed"] == 0 and wb["config"]["logging"]["wandb_group"] == "sweep-a"
    assert wb["config"]["harness"]["run_id"] == res["run_id"] and wb["config"]["harness"]["resumed_step"] is None
    # every step's metrics, and the eval before training at step 0
    assert [wb["history"][r["step"]]["entropy"] for r in rows] == pytest.approx([r["entropy"] for r in rows])
    ev0 = json.loads((rd / "eval" / "step_0.json").read_text())["suites"]["countdown"]["metrics"]["avg@2"]
    assert wb["history"][0]["eval/countdown/avg@2"] == pytest.approx(ev0)
    # the final summary and eval results
    s, final = wb["summary"], res["eval"]["suites"]["countdown"]["metrics"]
    assert s["final/entropy_start"] == pytest.approx(res["summary"]["entropy_start"])
    assert s["final/reward_end"] == pytest.approx(res["summary"]["reward_end"])
    assert s["final/eval/countdown/avg@2"] == pytest.approx(final["avg@2"])
    assert s["final/eval/countdown/greedy"] == pytest.approx(final["greedy"])
    assert s["final/steps"] == 3 and s["final/eval_table/_type"] == "table-file"
    assert s["final/eval_table/nrows"] == len(final)  # one row per metric of the one suite

    tb = rd / attempt["tensorboard"]
    assert tb_scalars(tb, "entropy") == pytest.approx({r["step"]: r["entropy"] for r in rows}, rel=1e-6)
    assert tb_scalars(tb, "eval/countdown/avg@2")[0] == pytest.approx(ev0, rel=1e-6)
    assert tb_scalars(tb, "final/eval/countdown/avg@2")[3] == pytest.approx(final["avg@2"], rel=1e-6)
    hp = tb_hparams(tb)
    assert hp["hparams"]["method"] == "grpo" and hp["hparams"]["model"] == "pocket-0.3m"
    assert hp["hparams"]["seed"] == 0 and hp["hparams"]["train.steps"] == 3 and hp["hparams"]["train.lr"] > 0
    assert "logging.wandb_group" not in hp["hparams"]  # settings that measure nothing are not hparams
    assert {"final/entropy_end", "final/eval/countdown/avg@2"} <= set(hp["metrics"])


def test_a_new_attempt_gets_a_new_tracker_run_and_a_resumed_one_keeps_its_own(tiny, tmp_path, monkeypatch):
    from harness.backends.pocket.trainer import PocketTrainer

    cfg = _tracked(tiny)
    cfg["train"].update(steps=4, checkpoint_every=2)
    cfg["eval"]["every"] = 0
    rd = tmp_path / "run"
    real = PocketTrainer.train_step

    def crash_at_4(self, step):
        if step == 4:
            raise RuntimeError("simulated crash")
        return real(self, step)

    monkeypatch.setattr(PocketTrainer, "train_step", crash_at_4)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(load_config(cfg), rd, quiet=True)  # steps 1-3 logged, checkpoint at step 2
    monkeypatch.setattr(PocketTrainer, "train_step", real)
    res = run(load_config(cfg), rd, quiet=True)  # resumes at step 2: steps 3 and 4 trained (again)
    first, resumed = read_jsonl(rd / "trackers.jsonl")
    assert resumed["id"] == first["id"] and resumed["resumed_step"] == 2 and first["resumed_step"] is None
    wb = wandb_runs(rd)
    assert [w["id"] for w in wb] == [first["id"]] * 2  # W&B resumes the same run (one run once synced)
    assert wb[1]["config"]["harness"]["resumed_step"] == 2
    assert sorted(wb[0]["history"]) == [1, 2, 3] and sorted(wb[1]["history"]) == [3, 4]
    rows = read_jsonl(rd / "metrics.jsonl")
    # TensorBoard: one folder; the attempt's step 3 was dropped (purge_step 3) and replaced by the retrained one
    assert tb_scalars(rd / first["tensorboard"], "entropy") == pytest.approx(
        {r["step"]: r["entropy"] for r in rows}, rel=1e-6
    )
    assert wb[1]["summary"]["final/entropy_end"] == pytest.approx(res["summary"]["entropy_end"])
    assert "final/entropy_end" not in wb[0]["summary"]  # the crashed attempt has no final summary

    # the same config trained again from scratch (no checkpoint to resume): a new tracker run, a new folder
    shutil.rmtree(rd / "checkpoints")
    (rd / "result.json").unlink()
    run(load_config(cfg), rd, quiet=True)
    third = read_jsonl(rd / "trackers.jsonl")[-1]
    assert third["id"] != first["id"] and third["id"].startswith(res["run_id"] + "-") and third["resumed_step"] is None
    assert [w["id"] for w in wandb_runs(rd)] == [first["id"], first["id"], third["id"]]
    assert sorted(tb_scalars(rd / third["tensorboard"], "entropy")) == [1, 2, 3, 4]
    # and in another run directory: another tracker run (the old id-from-the-config wrote into the same W&B run)
    run(load_config(cfg), tmp_path / "elsewhere", quiet=True)
    other = read_jsonl(tmp_path / "elsewhere" / "trackers.jsonl")[0]["id"]
    assert other not in (first["id"], third["id"])


def test_a_checkpoint_from_before_tracker_ids_resumes_the_id_that_version_used(tiny, tmp_path):
    import torch

    from harness.backends.pocket.trainer import CKPT

    cfg = _tracked(tiny)
    cfg["logging"]["wandb"] = False
    rd = tmp_path / "run"
    res = run(load_config(cfg), rd, quiet=True)
    blob = torch.load(rd / CKPT, weights_only=False)
    del blob["tracker"]
    blob["step"] = 2
    blob["metrics"] = blob["metrics"][:2]
    torch.save(blob, rd / CKPT)
    (rd / "result.json").unlink()
    run(load_config(cfg), rd, quiet=True)
    last = read_jsonl(rd / "trackers.jsonl")[-1]
    assert last["id"] == res["run_id"] and last["tensorboard"] == "tensorboard" and last["resumed_step"] == 2


def test_no_tracker_no_tracker_files(tiny, tmp_path):
    run(load_config(tiny), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "trackers.jsonl").exists() and not (tmp_path / "run" / "wandb").exists()


@pytest.mark.parametrize(
    "name, size",
    [
        ("pocket-0.3m", "0.3m"),
        ("pocket-1m", "1m"),
        ("Qwen/Qwen2.5-7B", "7b"),
        ("Qwen/Qwen2.5-Math-1.5B-Instruct", "1.5b"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "135m"),
        ("/models/my-finetune", None),
        ("Qwen/Qwen2.5-32B", "32b"),
    ],
)
def test_model_size_tag(name, size):
    assert model_size(name) == size


def test_a_too_long_tag_is_refused_before_training(tiny, tmp_path):
    cfg = _tracked(tiny, wandb_tags=["x" * 65])
    with pytest.raises(ValueError, match="longer than W&B's 64 characters"):
        run(load_config(cfg), tmp_path / "run", quiet=True)
