"""One field language: the OpenRLHF launch reads the typed run config, so a config that leaves a field out launches
with the schema's default (harness/run/config.py, harness/backends/openrlhf/options.py), never a second default written
in flags.py. Pure Python, no OpenRLHF needed."""

import dataclasses
import re
from pathlib import Path

import pytest

from harness.backends.openrlhf import flags
from harness.backends.openrlhf.options import OpenRLHFOptions
from harness.run.config import EvalConfig, RunConfig, TrainConfig, load_config

# the fewest keys an OpenRLHF run names, on one 141 GiB GPU: the default batch shape (prompts x samples / updates, a
# multiple of micro_batch_size x GPUs) divides, and the memory plan of micro_batch_size sequences fits
MINIMAL = {
    "backend": "openrlhf",
    "model": {"name": "Qwen/Qwen2.5-0.5B"},
    "task": {"name": "/data/prompts.jsonl"},
    "method": {"name": "grpo"},
    "openrlhf": {"gpus_per_node": 1, "gpu_memory_gb": 141},
}


def flag(argv, name):
    assert argv.count(name) == 1, f"{name} given {argv.count(name)} times"
    return argv[argv.index(name) + 1]


def num(x) -> str:  # how the launcher writes a number (floats by repr, so 5e-4 stays 0.0005)
    return repr(float(x))


def test_minimal_config_launches_with_the_schema_defaults(tmp_path):
    cfg = load_config(MINIMAL)
    train, opts = TrainConfig(), OpenRLHFOptions()
    assert dataclasses.asdict(cfg.train) == dataclasses.asdict(train)  # nothing set: the schema's defaults
    plan = flags.build_plan(MINIMAL, tmp_path / "r")
    argv = plan.argv
    expected = {
        "--actor.adam.lr": num(train.lr),
        "--actor.adam.weight_decay": num(train.weight_decay),
        "--actor.max_norm": num(train.grad_clip or 1e9),
        "--rollout.temperature": num(train.temperature),
        "--rollout.max_new_tokens": str(train.max_new_tokens),
        "--rollout.batch_size": str(train.prompts_per_step),
        "--rollout.n_samples_per_prompt": str(train.samples_per_prompt),
        "--rollout.micro_batch_size": str(train.micro_batch_size),
        "--train.micro_batch_size": str(train.micro_batch_size),
        "--train.batch_size": str(train.prompts_per_step * train.samples_per_prompt // train.updates_per_rollout),
        "--train.seed": str(RunConfig().seed),
        "--ckpt.save_steps": str(train.checkpoint_every if train.checkpoint_every > 0 else -1),
        "--data.max_len": str(opts.max_prompt_len + train.max_new_tokens),
        "--data.input_key": opts.input_key,
        "--data.label_key": opts.label_key,
        "--algo.kl.init_coef": num(opts.kl_coef),
        "--vllm.gpu_memory_utilization": num(opts.vllm_gpu_memory_utilization),
        "--ds.param_dtype": opts.param_dtype,  # model.dtype float32 (the schema default) -> openrlhf.param_dtype
        "--ds.attn_implementation": opts.attn_implementation,
    }
    assert {k: flag(argv, k) for k in expected} == expected
    assert ("--ds.packing_samples" in argv) is opts.packing_samples  # switches follow their fields too
    assert ("--train.dynamic_batch_enable" in argv) is (opts.max_tokens_per_gpu is not None)
    # the literal fallbacks flags.py used to carry (lr 1e-6, 1024 new tokens) are not what the schema says
    assert flag(argv, "--actor.adam.lr") != num(1e-6) and flag(argv, "--rollout.max_new_tokens") != "1024"
    # an eval: section at its defaults asks for no in-loop eval on OpenRLHF (evalset.requested)
    assert flag(argv, "--eval.steps") == "-1" and "--eval.temperature" not in argv
    assert plan.plugin["steps"] == train.steps and plan.plugin["seed"] == RunConfig().seed
    assert plan.plugin["run_id"] == cfg.run_id()


def test_in_loop_eval_uses_the_eval_section_defaults(tmp_path):
    plan = flags.build_plan({**MINIMAL, "eval": {"suites": ["math500"]}}, tmp_path / "r")
    ev, max_new = EvalConfig(), TrainConfig().max_new_tokens
    assert flag(plan.argv, "--eval.steps") == str(ev.every)
    assert flag(plan.argv, "--eval.temperature") == num(ev.temperature)
    assert flag(plan.argv, "--eval.n_samples_per_prompt") == str(ev.n_samples)
    spec = plan.plugin["eval"]
    assert (spec["n_samples"], spec["temperature"], spec["max_tokens"]) == (ev.n_samples, ev.temperature, max_new)
    assert (spec["fixtures"], spec["data_dir"], spec["limit"]) == (ev.fixtures, ev.data_dir, ev.max_problems)


def test_every_flag_follows_the_typed_field(tmp_path):
    """A value set on the typed config (not through a dict) reaches the flags: the builder reads attributes."""
    cfg = load_config(MINIMAL)
    cfg.train.lr, cfg.train.max_new_tokens, cfg.train.temperature = 3e-6, 96, 0.7
    cfg.train.weight_decay, cfg.train.grad_clip, cfg.seed = 0.01, 0.0, 7
    cfg.eval.suites, cfg.eval.every, cfg.eval.temperature, cfg.eval.n_samples = ["math500"], 3, 0.9, 2
    flags.check(cfg)
    argv = flags.to_argv(cfg, tmp_path / "r")
    assert argv == flags.build_plan(cfg, tmp_path / "r").argv
    got = {k: flag(argv, k) for k in ("--actor.adam.lr", "--rollout.max_new_tokens", "--rollout.temperature")}
    assert got == {"--actor.adam.lr": "3e-06", "--rollout.max_new_tokens": "96", "--rollout.temperature": "0.7"}
    assert flag(argv, "--actor.adam.weight_decay") == "0.01" and flag(argv, "--actor.max_norm") == "1000000000.0"
    assert flag(argv, "--train.seed") == "7"
    assert flag(argv, "--data.max_len") == str(OpenRLHFOptions().max_prompt_len + 96)
    assert (flag(argv, "--eval.steps"), flag(argv, "--eval.temperature")) == ("3", "0.9")
    assert flag(argv, "--eval.n_samples_per_prompt") == "2"


def test_check_refuses_before_building(monkeypatch, tmp_path):
    """check() raises every refusal itself: the builder is not reached for a bad config."""
    few, clash = load_config(MINIMAL), load_config(MINIMAL)
    few.train.samples_per_prompt = 1
    clash.openrlhf.extra_flags = {"--actor.adam.lr": 1e-5}  # the launcher sets it from train.lr
    monkeypatch.setattr(flags, "to_plan", lambda *a: pytest.fail("built a plan for a refused config"))
    with pytest.raises(flags.OpenRLHFConfigError, match=r"train\.samples_per_prompt: 1.*at least 2"):
        flags.build_plan(few, tmp_path / "r")
    with pytest.raises(flags.OpenRLHFConfigError, match=r"extra_flags: --actor\.adam\.lr is set by the launcher"):
        flags.build_plan(clash, tmp_path / "r")


def test_flags_py_has_no_fallback_defaults():
    """Guard: no ``section.get("key", default)`` / ``getattr(cfg, "key", default)`` in flags.py; a config value is a
    typed field whose default lives in the schema."""
    source = Path(flags.__file__).read_text()
    fallbacks = re.findall(r"""\.get\(\s*["'][^"']*["']\s*,[^)]*\)""", source)
    assert fallbacks == [], f"fallback defaults in flags.py: {fallbacks}"
    on_config = re.findall(r"getattr\(\s*(?:cfg|config|train|ev|model|task|logging|opts)\b[^)]*\)", source)
    assert on_config == [], f"getattr on a config section in flags.py: {on_config}"
