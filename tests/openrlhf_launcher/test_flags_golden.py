"""OpenRLHF launcher, pure Python (no OpenRLHF needed): flags vs golden lists, dry-run text, bad input."""

import os

import pytest

import harness
from harness.backends import BACKENDS
from harness.backends.openrlhf import flags
from harness.backends.openrlhf.flags import OpenRLHFConfigError, build_plan, method_flags, parse_options
from tests.helpers.openrlhf_config import config

GOLDEN_METHOD_FLAGS = {
    "grpo": [
        "--algo.advantage.estimator",
        "group_norm",
        "--actor.policy_loss_type",
        "ppo",
        "--actor.eps_clip_low_high",
        "0.2",
        "0.2",
        "--actor.loss_agg_mode",
        "token-mean",
        "--actor.entropy_coef",
        "0",
    ],
    "rloo": [
        "--algo.advantage.estimator",
        "rloo",
        "--actor.policy_loss_type",
        "ppo",
        "--actor.eps_clip_low_high",
        "0.2",
        "0.2",
        "--actor.loss_agg_mode",
        "token-mean",
        "--actor.entropy_coef",
        "0",
    ],
    "clip_higher": [
        "--algo.advantage.estimator",
        "group_norm",
        "--actor.policy_loss_type",
        "ppo",
        "--actor.eps_clip_low_high",
        "0.2",
        "0.28",
        "--actor.loss_agg_mode",
        "token-mean",
        "--actor.entropy_coef",
        "0",
    ],
    "entropy_bonus": [
        "--algo.advantage.estimator",
        "group_norm",
        "--actor.policy_loss_type",
        "ppo",
        "--actor.eps_clip_low_high",
        "0.2",
        "0.2",
        "--actor.loss_agg_mode",
        "token-mean",
        "--actor.entropy_coef",
        "0.001",
    ],
    "clip_cov": [
        "--algo.advantage.estimator",
        "group_norm",
        "--actor.policy_loss_type",
        "ppo",
        "--actor.eps_clip_low_high",
        "1.0",
        "1.0",
        "--actor.loss_agg_mode",
        "token-mean",
        "--actor.entropy_coef",
        "0",
    ],
    "kl_cov": [
        "--algo.advantage.estimator",
        "group_norm",
        "--actor.policy_loss_type",
        "ppo",
        "--actor.eps_clip_low_high",
        "0.2",
        "0.2",
        "--actor.loss_agg_mode",
        "token-mean",
        "--actor.entropy_coef",
        "0",
    ],
}


@pytest.mark.parametrize("name", sorted(GOLDEN_METHOD_FLAGS))
def test_method_flags_golden(name):
    assert method_flags(harness.get_method(name), parse_options({})) == GOLDEN_METHOD_FLAGS[name]


def test_method_variants():
    opts = parse_options({"log_entropy": False})
    assert method_flags(harness.get_method("grpo", std_normalize=False), opts)[:2] == [
        "--algo.advantage.estimator",
        "dr_grpo",
    ]
    assert "--actor.entropy_coef" not in method_flags(harness.get_method("kl_cov"), opts)
    assert method_flags(harness.get_method("kl_cov", advantage="rloo"), opts)[1] == "rloo"
    f = method_flags(harness.get_method("clip_higher", eps_high=0.3, agg="seq-mean-token-mean"), opts)
    assert f[f.index("--actor.eps_clip_low_high") + 2] == "0.3" and "seq-mean-token-mean" in f


def test_full_argv_golden(tmp_path):
    run = str(tmp_path / "run")
    plan = build_plan(config(), run)
    assert plan.argv == [
        "--actor.model_name_or_path",
        "Qwen/Qwen2.5-7B",
        "--data.prompt_dataset",
        "/data/dapo.jsonl",
        "--data.input_key",
        "prompt",
        "--data.label_key",
        "answer",
        "--data.apply_chat_template",
        "--data.max_len",
        "3072",
        "--train.num_episodes",
        "10",
        "--train.seed",
        "1",
        "--rollout.batch_size",
        "16",
        "--rollout.n_samples_per_prompt",
        "8",
        "--rollout.max_new_tokens",
        "1024",
        "--rollout.temperature",
        "1.0",
        "--rollout.top_p",
        "1.0",
        "--rollout.micro_batch_size",
        "4",
        "--train.batch_size",
        "32",
        "--train.micro_batch_size",
        "4",
        "--train.max_epochs",
        "1",
        "--actor.adam.lr",
        "5e-07",
        "--actor.adam.weight_decay",
        "0.0",
        "--actor.adam.betas",
        "0.9",
        "0.999",
        "--actor.lr_scheduler",
        "constant",
        "--actor.lr_warmup_ratio",
        "0.0",
        "--actor.max_norm",
        "1.0",
        *GOLDEN_METHOD_FLAGS["grpo"],
        "--algo.kl.init_coef",
        "0.0",
        "--reward.remote_url",
        flags.REWARD_FILE,
        "--actor.num_nodes",
        "1",
        "--actor.num_gpus_per_node",
        "8",
        "--ref.num_nodes",
        "1",
        "--ref.num_gpus_per_node",
        "8",
        "--vllm.num_engines",
        "8",
        "--vllm.tensor_parallel_size",
        "1",
        "--vllm.gpu_memory_utilization",
        "0.6",
        "--train.colocate_all",
        "--vllm.enable_sleep",
        "--ds.enable_sleep",
        "--ds.zero_stage",
        "2",
        "--ds.param_dtype",
        "bf16",
        "--ds.attn_implementation",
        "flash_attention_2",
        "--ds.packing_samples",  # openrlhf.packing_samples (default true): no padding in the forwards
        "--actor.gradient_checkpointing_enable",
        "--ckpt.path",
        os.path.join(run, "checkpoints", "openrlhf"),
        "--ckpt.output_dir",
        os.path.join(run, "checkpoints", "final"),
        "--ckpt.save_steps",
        "5",
        "--ckpt.max_num",
        "2",
        "--ckpt.load_enable",
        "--ckpt.save_hf",
        "--logger.logging_steps",
        "1",
        "--eval.steps",
        "-1",
    ]
    assert plan.plugin["method"]["name"] == "grpo" and plan.plugin["steps"] == 10
    assert plan.plugin["max_gen_batches"] is None  # no dynamic filtering: nothing to cap
    assert plan.plugin["run_dir"] == run and len(plan.plugin["run_id"]) == 12
    assert flags.PLUGIN_ENV in plan.env


def test_model_dtype_and_dynamic_filtering(tmp_path):
    cfg = config(dynamic_filtering=True, max_gen_batches=3)
    cfg["model"]["dtype"] = "float16"
    argv = build_plan(cfg, tmp_path).argv
    assert argv[argv.index("--ds.param_dtype") + 1] == "fp16"
    assert argv[argv.index("--train.num_episodes") + 1] == "30"  # steps x max_gen_batches passes at most
    assert "--data.max_samples" not in argv  # the plugin stops after train.steps; no cap on the eval set
    assert argv[argv.index("--algo.dynamic_filtering_enable") + 1 :][:3] == [
        "--algo.dynamic_filtering_range",
        "0.0",
        "1.0",
    ]


def test_logging_and_extra_flags(tmp_path):
    cfg = config(
        openrlhf={
            "extra_flags": {
                "--vllm.enforce_eager": True,
                "--actor.adam.eps": 1e-6,
                "--reward.clip_range": [-5, 5],
            },
            "env": {"NCCL_DEBUG": "INFO"},
        }
    )
    from harness.run.config import load_config

    resolved = load_config(cfg).to_dict()  # wandb on: the local wandb-package check is the config module's job
    resolved["logging"].update(tensorboard=True, wandb=True)

    class Resolved:
        def to_dict(self):
            return resolved

        def run_id(self):
            return "0123456789ab"

    plan = build_plan(Resolved(), tmp_path)
    argv = plan.argv
    assert argv[-6:] == [
        "--vllm.enforce_eager",
        "--actor.adam.eps",
        "1e-06",
        "--reward.clip_range",
        "-5",
        "5",
    ]
    assert argv[argv.index("--vllm.enforce_eager") + 1] == "--actor.adam.eps"
    assert argv[argv.index("--reward.clip_range") + 1 :][:2] == ["-5", "5"]
    assert argv[argv.index("--logger.tensorboard_dir") + 1] == str(tmp_path / "tensorboard")
    assert argv[argv.index("--logger.wandb.key") + 1] == "${WANDB_API_KEY}"
    assert plan.env["NCCL_DEBUG"] == "INFO"


def test_dry_run_command_shows_env_and_flags(tmp_path):
    text = BACKENDS.get("openrlhf").launch_command(config({"name": "clip_higher"}), tmp_path / "r")
    assert text.startswith("env HARNESS_OPENRLHF_PLUGIN=")
    assert "-m harness.backends.openrlhf.launch" in text
    assert "--actor.eps_clip_low_high 0.2 0.28" in text
    assert "--algo.advantage.estimator group_norm" in text
    assert '"eps_high": 0.28' in text


@pytest.mark.parametrize(
    "cfg,match",
    [
        (config({"name": "prime"}), "prime is not supported on the OpenRLHF backend"),
        (config({"name": "grpo", "advantage": "prime"}), "prime is not supported"),
        (config({"name": "grpo", "agg": "seq-mean-token-sum"}), "method.agg: 'seq-mean-token-sum' is not supported"),
        (config(updates_per_rollout=3), "updates_per_rollout: 3 does not divide"),
        (config(micro_batch_size=3), "not a multiple of micro_batch_size"),
        (config(samples_per_prompt=1), "at least 2"),
        (config(entropy_after_update=True), "train.entropy_after_update: true is pocket-only"),
        (config(openrlhf={"vllm_engines": 3}), "vllm_engines x vllm_tp == actor GPUs"),
        (config(openrlhf={"gpus": 8}), r"openrlhf.gpus: unknown key. Did you mean 'gpus_per_node'"),
        (config(openrlhf={"zero_stage": 4}), "openrlhf.zero_stage: 4 is not allowed"),
        (config(openrlhf={"kl_coef": 0.01}), "needs openrlhf.kl_use_loss: true"),
        (config(openrlhf={"reward": "lean"}), "openrlhf.reward: 'lean' is not allowed"),
        (config(openrlhf={"reward": "/nope/r.py"}), "file not found"),
        (config(openrlhf={"extra_flags": {"--train.batch_size": 4}}), "set by the launcher"),
        (config(openrlhf={"extra_flags": {"train.seed": 4}}), "is not a flag"),
        (config(openrlhf={"extra_flags": {"--train.async_enable": True}}), "not supported by the harness backend"),
        (config(openrlhf={"extra_flags": {"--actor.dual_clip": 3.0}}), "silently ignore"),
        (
            config({"name": "grpo", "rollout_correction": {"scheme": "icepop", "rejected": "drop"}}),
            "rejected 'drop' is not supported on the OpenRLHF backend",
        ),
        (
            config({"name": "kl_cov", "scope": "global"}, openrlhf={"extra_flags": {"--ds.ring_attn_size": 2}}),
            "scope: global",
        ),
        (
            config({"name": "entropic"}, openrlhf={"max_tokens_per_gpu": 8192}),
            "entropic weighs each micro-batch by its share of the optimizer-step window",
        ),
        (config({"name": "steer"}, openrlhf={"log_entropy": False}), "steer needs the old policy's entropy"),
        (
            config(openrlhf={"extra_flags": {"--train.dynamic_batch_enable": True}}),
            "--train.dynamic_batch_enable is set by openrlhf.max_tokens_per_gpu",
        ),
        (
            config(openrlhf={"extra_flags": {"--rollout.max_tokens_per_gpu": 4096}}),
            "--rollout.max_tokens_per_gpu is set by openrlhf.max_tokens_per_gpu",
        ),
        (config(openrlhf={"extra_flags": {"--ds.packing_samples": True}}), "is set by openrlhf.packing_samples"),
        (config(openrlhf={"attn_implementation": "sdpa"}), "packing_samples: true needs a flash_attention kernel"),
        (config(openrlhf={"max_tokens_per_gpu": 0}), "openrlhf.max_tokens_per_gpu"),
        (
            config(openrlhf={"max_tokens_per_gpu": 8192, "packing_samples": False}),
            "dynamic batches are packed",
        ),
    ],
)
def test_bad_input_errors_before_anything_starts(cfg, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        build_plan(cfg, tmp_path)


def test_backend_errors_have_their_own_type(tmp_path):
    with pytest.raises(OpenRLHFConfigError):
        build_plan(config({"name": "prime"}), tmp_path)


def test_bad_method_hyperparameter_is_a_user_error(tmp_path):
    with pytest.raises(ValueError, match="k_ratio"):
        build_plan(config({"name": "kl_cov", "k_ratioo": 0.1}), tmp_path)


def test_missing_openrlhf_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    from harness.backends.openrlhf import launch

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "openrlhf" else real(n, *a))
    with pytest.raises(ImportError, match=r"entropy-harness\[openrlhf\]"):
        BACKENDS.get("openrlhf").train(config(), tmp_path / "r")
    assert not (tmp_path / "r").exists()  # nothing started
    assert isinstance(launch.OpenRLHFMissingError("x"), ImportError)


def test_wrong_openrlhf_version_is_refused(monkeypatch):
    import importlib.metadata
    import importlib.util

    from harness.backends.openrlhf import launch

    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object())
    monkeypatch.setattr(importlib.metadata, "version", lambda n: "0.11.0")
    with pytest.raises(ImportError, match=r"openrlhf==0.11.2 .* found 0.11.0"):
        launch.require_openrlhf()


def test_backend_module_imports_without_openrlhf():
    import subprocess
    import sys

    code = (
        "import sys, harness.backends.openrlhf as b; from harness.backends.openrlhf import flags, bridge, hook;"
        "assert 'openrlhf' not in sys.modules and 'ray' not in sys.modules and 'deepspeed' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_ray_head_port_avoids_slurm_ray_workers_and_busy_ports():
    """The head's port (raycluster.free_port): below Ray's worker ports (10002-19999), never one of SLURM's ports
    (``avoid``: 6817-6819 lie in the range), never one something listens on; the search starts at the seed."""
    import socket

    from harness.backends.openrlhf import raycluster

    start = raycluster.HEAD_PORTS.start
    assert raycluster.HEAD_PORTS.stop <= raycluster.RAY_WORKER_PORTS.start
    first = raycluster.free_port({6817, 6818, 6819}, 6817 - start)
    assert first >= 6820
    with socket.socket() as busy:
        busy.bind(("", first))
        busy.listen()
        assert raycluster.free_port({6817, 6818, 6819}, 6817 - start) > first


def test_eval_dataset_flags_and_protocol(tmp_path):
    import json

    data = tmp_path / "eval.jsonl"
    data.write_text(
        "\n".join(
            json.dumps({"prompt": f"q{i}", "answer": "1", "datasource": "aime" if i < 3 else "amc"}) for i in range(5)
        )
        + "\n"
    )
    cfg = config(openrlhf={"eval_dataset": str(data)})
    cfg["eval"] = {"every": 4, "n_samples": 8, "temperature": 0.6}
    plan = build_plan(cfg, tmp_path / "r")
    argv = plan.argv
    assert argv[argv.index("--eval.dataset") :][:10] == [
        "--eval.dataset",
        str(data),
        "--eval.steps",
        "4",
        "--ckpt.best_metric_key",
        "none",
        "--eval.temperature",
        "0.6",
        "--eval.n_samples_per_prompt",
        "8",
    ]
    assert argv.count("--eval.steps") == 1
    assert plan.plugin["eval"] == {
        "n_samples": 8,
        "temperature": 0.6,
        "top_p": 1.0,
        "max_tokens": 1024,
        "counts": {"aime": 3, "amc": 2},
    }
    cfg["eval"]["max_new_tokens"] = 2048
    with pytest.raises(ValueError, match="eval.max_new_tokens"):
        build_plan(cfg, tmp_path / "r")


def test_episodes_from_a_local_prompt_set(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join('{"prompt": "p", "answer": "1"}\n' for _ in range(50)))
    argv = build_plan({**config(), "task": {"name": str(data)}}, tmp_path / "r").argv
    # 10 steps x 16 prompts = 160 prompts from 50 rows: ceil(3.2) + 1 = 5 passes
    assert argv[argv.index("--train.num_episodes") + 1] == "5"


def test_rollout_correction_becomes_upstreams_switch(tmp_path):
    """The method's correction is the only source of upstream's is_correction_* flags (vLLM's log-probs); GSPO
    with it runs as ppo (upstream's GSPO path takes its ratio against the rollout instead of weighting)."""
    argv = build_plan(config({"name": "grpo", "rollout_correction": "tis"}), tmp_path).argv
    i = argv.index("--algo.advantage.is_correction_level")
    assert argv[i : i + 9] == [
        "--algo.advantage.is_correction_level",
        "token",
        "--algo.advantage.is_correction_mode",
        "clip",
        "--algo.advantage.is_correction_gating",
        "ratio",
        "--algo.advantage.is_correction_threshold",
        "0.5",
        "5.0",
    ]
    assert not [a for a in build_plan(config(), tmp_path).argv if "is_correction" in a]
    gspo = build_plan(config({"name": "gspo", "rollout_correction": "icepop"}), tmp_path).argv
    assert gspo[gspo.index("--actor.policy_loss_type") + 1] == "ppo"
    assert build_plan(config({"name": "gspo"}), tmp_path).argv.count("gspo") >= 1


def test_dynamic_batches_and_the_gen_batch_cap(tmp_path):
    """openrlhf.max_tokens_per_gpu -> upstream's dynamic batching with that budget for the training and the
    old-log-prob micro-batches (the official ppo_max_token_len_per_gpu = log_prob_max_token_len_per_gpu); the memory
    plan counts the budget instead of micro x padded length; train.max_gen_batches reaches the plug-in (its cap)."""
    cfg = config(dynamic_filtering=True, max_gen_batches=10, openrlhf={"max_tokens_per_gpu": 8192})
    plan = build_plan(cfg, tmp_path)
    argv = plan.argv
    i = argv.index("--train.dynamic_batch_enable")
    assert argv[i - 2 : i + 5] == [
        "--train.micro_batch_size",
        "4",
        "--train.dynamic_batch_enable",
        "--train.max_tokens_per_gpu",
        "8192",
        "--rollout.max_tokens_per_gpu",
        "8192",
    ]
    assert "--ds.packing_samples" in argv
    assert plan.plugin["max_gen_batches"] == 10
    assert "(8192 tokens, dynamic batch)" in "\n".join(plan.memory.lines())
    # a budget below one sequence (2048 + 1024 tokens): that sequence is a micro-batch of its own
    small = build_plan(config(openrlhf={"max_tokens_per_gpu": 1000}), tmp_path)
    assert "(3072 tokens, dynamic batch)" in "\n".join(small.memory.lines())
    fixed = build_plan(config(openrlhf={"packing_samples": False}), tmp_path).argv
    assert "--ds.packing_samples" not in fixed and "--train.dynamic_batch_enable" not in fixed


def test_packing_and_token_budget_in_the_run_id():
    """packing changes no number the loss sees (tests/openrlhf/test_packing.py): not in the run id; the token budget
    changes which samples share a micro-batch (Clip-Cov/KL-Cov select per micro-batch): in the run id when set, and
    a config that leaves both alone keeps its id (late fields)."""
    from harness.run.config import load_config

    base = load_config(config()).run_id()
    assert load_config(config(openrlhf={"packing_samples": False})).run_id() == base
    assert load_config(config(openrlhf={"max_tokens_per_gpu": 8192})).run_id() != base
