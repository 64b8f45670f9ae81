"""Run-config validation: every bad input names its key path and the allowed values, before any work."""

import pytest

from harness.run.config import ConfigError, load_config, parse_override


def err(cfg, overrides=None) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(cfg, overrides)
    return str(e.value)


def test_defaults_and_overrides(tiny):
    cfg = load_config(tiny, ["train.steps=7", "train.lr=1e-4", "method={name: kl_cov, k_ratio: 0.02}"])
    assert cfg.train.steps == 7 and cfg.train.lr == pytest.approx(1e-4)  # "1e-4" (YAML 1.1 string) accepted
    assert cfg.method["name"] == "kl_cov" and cfg.method["k_ratio"] == 0.02
    assert cfg.method["beta"] == 1.0 and cfg.method["scope"] == "micro_batch"  # defaults filled in from the registry
    assert cfg.method_hparams["k_ratio"] == 0.02 and "name" not in cfg.method_hparams
    assert cfg.eval.temperature == 0.6 and cfg.eval.greedy is True
    assert load_config(cfg.to_dict()).run_id() == cfg.run_id()
    assert load_config(tiny).run_id() != cfg.run_id()
    # a default spelled out is the same config, hence the same run
    explicit = load_config(tiny, ["train.steps=7", "train.lr=1e-4", "method={name: kl_cov, k_ratio: 0.02, beta: 1.0}"])
    assert explicit.run_id() == cfg.run_id()


def test_unknown_key_gets_did_you_mean(tiny):
    tiny["train"]["stpes"] = 3
    msg = err(tiny)
    assert msg.startswith("train.stpes: unknown key.") and "Did you mean 'steps'" in msg and "prompts_per_step" in msg
    assert "Did you mean 'train'" in err({"trian": {}})


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("train.steps=0", "train.steps: 0 must be >= 1"),
        ("train.steps=ten", "train.steps: expected an integer, got 'ten'"),
        ("train.lr=fast", "train.lr: expected a number, got 'fast'"),
        ("train.dynamic_filtering=maybe", "train.dynamic_filtering: expected true or false"),
        ("model.dtype=fp8", "model.dtype: 'fp8' is not allowed. Allowed: float32, bfloat16, float16"),
        ("eval.top_p=2", "eval.top_p: 2 must be <= 1.0"),
        ("backend=pockit", "backend: 'pockit' is not allowed. Did you mean 'pocket'?"),
        ("train=5", "train: expected a mapping"),
        (
            "train.updates_per_rollout=99",
            "train.updates_per_rollout: 99 mini-batches need at least that many sequences",
        ),
    ],
)
def test_bad_values_name_the_path(tiny, override, fragment):
    assert fragment in err(tiny, [override])


def test_unknown_model_size_and_task_did_you_mean(tiny):
    msg = err(tiny, ["model.name=pocket-2m"])
    assert msg.startswith("model.name: unknown model 'pocket-2m'.") and "Did you mean" in msg and "pocket-4m" in msg
    msg = err(tiny, ["task.name=countdwn"])
    assert msg.startswith("task.name: unknown task 'countdwn'. Did you mean 'countdown'?")
    assert "task.options.digts: unknown option for task 'arith'. Did you mean 'digits'?" in err(
        tiny, ["task.name=arith", "task.options={digts: 3}"]
    )
    assert "task.options.digits: 9 must be <= 4" in err(tiny, ["task.name=arith", "task.options={digits: 9}"])
    assert "JSONL file not found" in err(tiny, ["task.name=/nonexistent/problems.jsonl"])


def test_method_errors_come_from_the_method_registry(tiny):
    assert "method: unknown method 'kl_cv'" in err(tiny, ["method.name=kl_cv"])
    assert "Did you mean 'kl_cov'" in err(tiny, ["method.name=kl_cv"])
    msg = err(tiny, ["method={name: kl_cov, k_percent: 0.2}"])
    assert msg.startswith("method: unknown hyperparameter 'k_percent' for method 'kl_cov'")
    assert "method.name: required" in err(tiny, ["method={k_ratio: 0.1}"])


def test_a_backend_section_is_typed_by_its_backend_and_refused_on_another(tiny):
    """Another backend's section is refused like an unknown key, naming the backend (it used to load on pocket and
    change the run id: issue 37 item 6); the empty section every pocket config.yaml records still loads."""
    tiny["eval"] = {**tiny["eval"], "every": 0}  # OpenRLHF evaluates in its loop only eval.suites (none here)
    assert load_config(dict(tiny, openrlhf={})).run_id() == load_config(tiny).run_id()
    for section in ({"nodes": 2}, {"vllm": {"tp": 2}, "anything": [1, 2]}):
        with pytest.raises(ConfigError, match=r"belongs to the openrlhf backend, and this run's backend is pocket"):
            load_config(dict(tiny, openrlhf=section))
    with pytest.raises(ConfigError, match=r"openrlhf.vllm: unknown key. Did you mean 'vllm_tp'"):
        load_config(dict(tiny, backend="openrlhf", openrlhf={"vllm": {"tp": 2}}), ["model.name=Qwen/Qwen2.5-7B"])
    hub = load_config(
        dict(tiny, backend="openrlhf", openrlhf={"gpus_per_node": 1, "zero_stage": "auto", "adam_offload": "auto"}),
        ["model.name=Qwen/Qwen2.5-7B", "train.micro_batch_size=1", "model.warm_start={}"],
    )
    assert hub.model.name == "Qwen/Qwen2.5-7B" and hub.openrlhf.gpus_per_node == 1  # typed by the backend
    with pytest.raises(ConfigError, match=r"model.warm_start.enabled: model.warm_start belongs to the pocket and trl"):
        load_config(dict(tiny, backend="openrlhf"), ["model.name=Qwen/Qwen2.5-7B", "train.micro_batch_size=1"])


def test_override_syntax():
    assert parse_override("a.b=1") == (["a", "b"], 1)
    assert parse_override("method={name: grpo}") == (["method"], {"name": "grpo"})
    with pytest.raises(ConfigError, match="expected key.path=value"):
        parse_override("train.steps")
    with pytest.raises(ConfigError, match="bad key path"):
        parse_override("train..steps=1")


def test_missing_and_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "nope.yaml")
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(p)


def test_logging_and_device_checks(tiny):
    import importlib.util

    assert "train.device: 'gpu' is not allowed" in err(tiny, ["train.device=gpu"])
    assert load_config(tiny, ["train.device=cuda:1"]).train.device == "cuda:1"
    if importlib.util.find_spec("wandb") is None:
        assert err(tiny, ["logging.wandb=true"]).startswith("logging.wandb: true needs the wandb package")
    assert load_config(tiny, ["logging.wandb=true", "logging.wandb_mode=disabled"]).logging.wandb
