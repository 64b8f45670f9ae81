"""Run identity is declared once (field metadata): logging, paths and resources never make a new run."""

import dataclasses

from harness.run.config import (
    RunConfig,
    config_hash,
    late_fields,
    load_config,
    measuring_items,
    non_measuring_fields,
    run_id_of,
)
from harness.run.runner import run


def test_logging_and_resources_keep_the_run_id_measuring_settings_change_it(tiny):
    base = load_config(tiny)
    for override in (
        "logging.progress=true",
        "logging.tensorboard=false",
        "logging.wandb_project=x",
        "train.threads=2",
        "train.checkpoint_every=0",
        "model.cache_dir=/tmp/elsewhere",
        "train.entropy_after_update=true",  # a measurement of the trained batch only
    ):
        assert load_config(tiny, [override]).run_id() == base.run_id(), override
    for override in (
        "train.steps=4",
        "train.lr=1e-3",
        "seed=1",
        "method.eps_high=0.28",
        "eval.n_samples=3",
        "model.warm_start.max_steps=7",
        "task.options={max_number: 5}",
    ):
        assert load_config(tiny, [override]).run_id() != base.run_id(), override


def test_default_configs_keep_the_ids_they_had():
    """The id hashes the config with non-measuring fields reset to their defaults, so a config that uses the
    defaults has the plain hash of its resolved dict without the late fields (the id before identity was
    declared, and before the late fields (task.chat_template, task.stop, train.entropy_after_update) existed: the
    literal is main's id of that time)."""
    d = load_config({}).to_dict()
    late = {tuple(p.split(".")) for p in late_fields()}
    assert {("task", "chat_template"), ("task", "stop"), ("train", "entropy_after_update")} <= late
    before = {
        k: ({f: x for f, x in v.items() if (k, f) not in late} if isinstance(v, dict) else v) for k, v in d.items()
    }
    assert run_id_of(d) == config_hash(before) == "747b4a598c3b"
    assert load_config({}, ["task.chat_template=none"]).run_id() != run_id_of(d)
    changed = dict(d, logging=dict(d["logging"], progress=False))
    assert config_hash(changed) != config_hash(d) and run_id_of(changed) == run_id_of(d)


def test_the_declaration_covers_core_and_backend_sections():
    skip = non_measuring_fields()
    assert {f"logging.{f.name}" for f in dataclasses.fields(RunConfig().logging)} <= set(skip)
    assert {"openrlhf.nodes", "openrlhf.gpus_per_node", "openrlhf.vllm_tp"} <= set(skip)  # backend-owned
    assert not {"train.steps", "train.lr", "seed", "openrlhf.kl_coef"} & set(skip)
    items = measuring_items(load_config({"method": {"name": "kl_cov"}}))
    assert items["method.k_ratio"] == 0.002 and items["train.steps"] == 50 and "logging.progress" not in items
    assert items["model.warm_start.target_acc"] == 0.3 and "train.threads" not in items


def test_changing_only_logging_never_retrains(tiny, tmp_path):
    tiny["train"]["steps"] = 1
    first = run(tiny, tmp_path / "r", quiet=True)
    assert first["status"] == "completed"
    mtime = (tmp_path / "r" / "result.json").stat().st_mtime_ns
    again = run(load_config(tiny, ["logging.progress=true"]), tmp_path / "r", quiet=True)
    assert again == first and (tmp_path / "r" / "result.json").stat().st_mtime_ns == mtime
    assert "already completed" in (tmp_path / "r" / "train.log").read_text()
