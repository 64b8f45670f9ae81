"""Retention of OpenRLHF's Hugging Face copies (harness/backends/openrlhf/retention.py), pure Python: a fake save
sequence stands in for upstream's save (it writes ``global_step<N>_hf`` as ``PolicyModelActor.save_checkpoint``
does); the real one runs in tests/openrlhf/test_rehearsal.py and the CPU rehearsal."""

import json
from types import SimpleNamespace

import pytest

from harness.backends.openrlhf import retention
from harness.backends.openrlhf.flags import build_plan


def config(openrlhf=None):
    return {
        "backend": "openrlhf",
        "model": {"name": "Qwen/Qwen2.5-7B"},
        "task": {"name": "/data/dapo.jsonl"},
        "train": {"prompts_per_step": 16, "samples_per_prompt": 8, "updates_per_rollout": 2, "micro_batch_size": 1},
        "openrlhf": {"nodes": 1, "gpus_per_node": 8, **(openrlhf or {})},
    }


def args_for(path, save_steps):
    return SimpleNamespace(ckpt=SimpleNamespace(path=str(path), save_hf=True, save_steps=save_steps))


def run_saves(tmp_path, keep, steps=23, every=5):
    """Steps 1..steps of a run saving every ``every`` steps and at the last (the plug-in sets save_steps 1 there);
    returns the most HF copies seen at any moment and the copies after each save."""
    ckpt = tmp_path / "checkpoints" / "openrlhf"
    final = tmp_path / "checkpoints" / "final"
    final.mkdir(parents=True)
    (final / "model.safetensors").write_bytes(b"final")
    most, after = 0, {}
    args = args_for(ckpt, every)
    for step in range(1, steps + 1):
        if step == steps:
            args.ckpt.save_steps = 1
        with retention.rotation(args, step, keep, log=lambda *_: None):
            if step % args.ckpt.save_steps == 0:  # upstream's save: the new copy appears while the old ones exist
                new = ckpt / f"global_step{step}_hf"
                new.mkdir(parents=True)
                (new / "model.safetensors").write_bytes(b"x" * step)
                most = max(most, len(retention.copies(ckpt)))
        if step % args.ckpt.save_steps == 0:
            after[step] = [p.name for p in retention.copies(ckpt)]
            most = max(most, len(after[step]))
    assert (final / "model.safetensors").read_bytes() == b"final"  # the final model is never touched
    return most, after, ckpt


@pytest.mark.parametrize("keep", [2, 3])
def test_never_more_than_k_copies_and_the_newest_kept(tmp_path, keep):
    most, after, ckpt = run_saves(tmp_path, keep)
    assert most == keep  # saves at 5, 10, 15, 20 and the last step, 23
    assert list(after) == [5, 10, 15, 20, 23]
    assert after[23] == [f"global_step{s}_hf" for s in (5, 10, 15, 20, 23)[-keep:]]
    for step, names in after.items():
        assert names[-1] == f"global_step{step}_hf" and len(names) <= keep
    assert (ckpt / "global_step23_hf" / "model.safetensors").read_bytes() == b"x" * 23  # complete, never deleted
    rows = [json.loads(line) for line in (ckpt / retention.LOG_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20, 23]
    assert max(len(r["hf"]) for r in rows) == keep  # the peak, as recorded right after each save


def test_keep_one_holds_two_only_while_the_next_is_written(tmp_path):
    most, after, _ = run_saves(tmp_path, 1)
    assert most == 2 == retention.peak(1)  # the newest is never deleted before its successor is complete
    assert all(names == [f"global_step{step}_hf"] for step, names in after.items())


def test_steps_without_a_save_and_runs_without_hf_copies_touch_nothing(tmp_path):
    ckpt = tmp_path / "ckpt"
    for n in (1, 2, 3):
        (ckpt / f"global_step{n}_hf").mkdir(parents=True)
    with retention.rotation(args_for(ckpt, 5), 4, 1):  # step 4 saves nothing
        pass
    with retention.rotation(args_for(ckpt, float("inf")), 5, 1):  # --ckpt.save_steps -1: never
        pass
    args = args_for(ckpt, 1)
    args.ckpt.save_hf = False
    with retention.rotation(args, 6, 1):
        pass
    with retention.rotation(args_for(ckpt, 1), 7, None):  # a plug-in config without the key (older launch)
        pass
    assert [p.name for p in retention.copies(ckpt)] == ["global_step1_hf", "global_step2_hf", "global_step3_hf"]
    assert not (ckpt / retention.LOG_FILE).exists()


def test_copies_are_ordered_by_step_not_by_name(tmp_path):
    for n in (100, 20, 3):
        (tmp_path / f"global_step{n}_hf").mkdir()
    (tmp_path / "_actor").mkdir()
    (tmp_path / "global_step7_hf.tmp").mkdir()  # not a copy
    assert [p.name for p in retention.copies(tmp_path)] == ["global_step3_hf", "global_step20_hf", "global_step100_hf"]
    assert [p.name for p in retention.prune(tmp_path, 1, log=lambda *_: None)] == [
        "global_step3_hf",
        "global_step20_hf",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_actor", "global_step100_hf", "global_step7_hf.tmp"]


def test_the_launch_carries_the_retention_settings():
    plan = build_plan(config(), "/runs/x")
    argv = plan.argv
    assert argv[argv.index("--ckpt.max_num") + 1] == "2" and "--ckpt.save_hf" in argv
    assert plan.plugin["keep_hf_checkpoints"] == 2
    plan = build_plan(config(openrlhf={"keep_checkpoints": 3, "keep_hf_checkpoints": 0}), "/runs/x")
    assert plan.argv[plan.argv.index("--ckpt.max_num") + 1] == "3" and "--ckpt.save_hf" not in plan.argv
