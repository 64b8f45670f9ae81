"""Our launch flags go through OpenRLHF 0.11.2's real ``train_ppo_ray`` parser and validation for every method.

``openrlhf.cli.train_ppo_ray`` runs as ``__main__`` exactly as the launcher runs it; ``get_strategy`` (the first
thing ``train()`` does after Ray) is intercepted to capture the validated, hierarchised args.
"""

import runpy
import sys

import pytest

import harness
from harness.backends.openrlhf.flags import build_plan

pytestmark = pytest.mark.openrlhf


class Captured(Exception):
    def __init__(self, args):
        super().__init__("captured")
        self.parsed = args


def upstream_args(argv, monkeypatch):
    import openrlhf.utils
    import ray

    def capture(args):
        raise Captured(args)

    monkeypatch.setattr(openrlhf.utils, "get_strategy", capture)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(sys, "argv", ["train_ppo_ray", *argv])
    with pytest.raises(Captured) as info:
        runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__", alter_sys=True)
    return info.value.parsed


def config(method, **train):
    return {
        "backend": "openrlhf",
        "seed": 3,
        "method": method,
        "model": {"name": "Qwen/Qwen2.5-0.5B"},
        "task": {"name": "/data/math.jsonl"},
        "train": {
            "steps": 4,
            "prompts_per_step": 8,
            "samples_per_prompt": 4,
            "updates_per_rollout": 2,
            "micro_batch_size": 2,
            "lr": 1e-6,
            "max_new_tokens": 256,
            **train,
        },
        "openrlhf": {"nodes": 1, "gpus_per_node": 2},
    }


EXPECTED = {  # methods with native OpenRLHF flags -> (estimator, eps low/high, entropy_coef, loss_agg_mode)
    "grpo": ("group_norm", (0.2, 0.2), 0.0, "token-mean"),
    "rloo": ("rloo", (0.2, 0.2), 0.0, "token-mean"),
    "clip_higher": ("group_norm", (0.2, 0.28), 0.0, "token-mean"),
    "clip_low": ("group_norm", (0.1, 0.2), 0.0, "token-mean"),
    "entropy_bonus": ("group_norm", (0.2, 0.2), 1e-3, "token-mean"),
    "clip_cov": ("group_norm", (1.0, 1.0), 0.0, "token-mean"),
    "kl_cov": ("group_norm", (0.2, 0.2), 0.0, "token-mean"),
    "gspo": ("group_norm", (3e-4, 4e-4), 0.0, "seq-mean-token-mean"),
}
LOSS_TYPE = {"gspo": "gspo"}  # --actor.policy_loss_type (else ppo)


PLUGGED = {  # losses / estimators our plug-in computes -> the built-in estimator flag the command shows
    "ce_gppo": "group_norm",
    "cispo": "group_norm",
    "sapo": "group_norm",
    "high_entropy_tokens": "group_norm",
    "adaptive_entropy": "group_norm",
    "w_reinforce": "reinforce",
    "entropy_advantage": "group_norm",  # its base estimator (grpo)
    "qae": "group_norm",
    "steer": "group_norm",
    "entropic": "group_norm",
    "erc": "group_norm",
}
REFUSED = {  # method -> what the one-line refusal at config load names
    "prime": "auxiliary model",
}


def test_every_method_is_covered_or_refused():
    assert set(EXPECTED) | set(PLUGGED) | set(REFUSED) == set(harness.list_methods())


@pytest.mark.parametrize("name", sorted(PLUGGED))
def test_plugged_losses_parse_upstream(name, monkeypatch, tmp_path):
    plan = build_plan(config({"name": name}), tmp_path / "run")
    args = upstream_args(plan.argv, monkeypatch)
    assert args.algo.advantage.estimator == PLUGGED[name]
    assert args.actor.entropy_coef == 0.0  # entropy returned by the training forward (a bonus only in our loss)
    assert args.actor.policy_loss_type == "ppo"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_unsupported_methods_are_refused_at_load(name, tmp_path):
    from harness.backends.openrlhf.options import OpenRLHFConfigError

    with pytest.raises(OpenRLHFConfigError, match=REFUSED[name]):
        build_plan(config({"name": name}), tmp_path / "run")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_flags_parse_and_validate_upstream(name, monkeypatch, tmp_path):
    plan = build_plan(config({"name": name}, dynamic_filtering=True), tmp_path / "run")
    args = upstream_args(plan.argv, monkeypatch)
    estimator, eps, coef, agg = EXPECTED[name]
    assert args.algo.advantage.estimator == estimator
    assert tuple(args.actor.eps_clip_low_high) == pytest.approx(eps)
    assert args.actor.entropy_coef == pytest.approx(coef)
    assert args.actor.loss_agg_mode == agg
    assert args.actor.policy_loss_type == LOSS_TYPE.get(name, "ppo")
    assert args.critic.model_name_or_path is None  # no critic for group estimators
    assert args.algo.kl.init_coef == 0.0
    assert args.rollout.batch_size == 8 and args.rollout.n_samples_per_prompt == 4
    assert args.train.batch_size == 16 and args.train.micro_batch_size == 2
    assert args.actor.adam.lr == pytest.approx(1e-6) and args.actor.lr_scheduler == "constant"
    assert args.train.seed == 3 and args.train.num_episodes == 4 * 3  # dynamic filtering: x max_gen_batches
    assert args.algo.dynamic_filtering_enable and list(args.algo.dynamic_filtering_range) == [0.0, 1.0]
    assert args.reward.remote_url[0].endswith("harness/backends/openrlhf/reward.py")
    assert args.ckpt.path == str(tmp_path / "run" / "checkpoints" / "openrlhf")
    assert args.train.colocate_all and args.vllm.num_engines == 2


def test_dr_grpo_and_seq_mean_and_kl_loss(monkeypatch, tmp_path):
    cfg = config({"name": "grpo", "std_normalize": False, "agg": "seq-mean-token-mean"})
    cfg["openrlhf"].update(
        kl_coef=0.001,
        kl_use_loss=True,
        log_entropy=False,
        extra_flags={"--vllm.enforce_eager": True, "--ds.adam_offload": False},
    )
    args = upstream_args(build_plan(cfg, tmp_path).argv, monkeypatch)
    assert args.algo.advantage.estimator == "dr_grpo"
    assert args.actor.loss_agg_mode == "seq-mean-token-mean"
    assert args.algo.kl.use_loss and args.algo.kl.init_coef == pytest.approx(1e-3) and args.algo.kl.estimator == "k3"
    assert args.actor.entropy_coef is None
    assert args.vllm.enforce_eager and not args.ds.adam_offload


def test_upstream_rejects_a_bad_flag_so_the_check_can_fail(monkeypatch, tmp_path):
    argv = build_plan(config({"name": "grpo"}), tmp_path).argv + ["--algo.advantage.estimator", "nope"]
    with pytest.raises(SystemExit):
        upstream_args(argv, monkeypatch)


@pytest.mark.parametrize("change", [{"level": "token"}, {"agg": "token-mean"}])
def test_gspo_variants_openrlhf_lacks_launch_as_ppo_with_our_loss(change, monkeypatch, tmp_path):
    """Native GSPO only where it equals ours (sequence level, seq-mean-token-mean; OpenRLHF's gspo forces
    that aggregation): GSPO-token or another agg launch as ppo and our plug-in computes the loss."""
    args = upstream_args(build_plan(config({"name": "gspo", **change}), tmp_path).argv, monkeypatch)
    assert args.actor.policy_loss_type == "ppo"
    assert args.actor.loss_agg_mode == change.get("agg", "seq-mean-token-mean")


def test_no_entropy_logging_still_returns_the_entropy_a_method_needs(tmp_path):
    cfg = config({"name": "high_entropy_tokens"})
    cfg["openrlhf"]["log_entropy"] = False
    argv = build_plan(cfg, tmp_path).argv
    assert argv[argv.index("--actor.entropy_coef") + 1] == "0"


@pytest.mark.parametrize("name", ["adaptive_entropy", "entropy_advantage"])
def test_methods_reading_the_rollout_entropy_need_it_measured(name, tmp_path):
    from harness.backends.openrlhf.options import OpenRLHFConfigError

    cfg = config({"name": name})
    cfg["openrlhf"]["log_entropy"] = False
    with pytest.raises(OpenRLHFConfigError, match="log_entropy: true"):
        build_plan(cfg, tmp_path)


def test_entropy_advantage_on_rloo_and_dr_grpo_bases(monkeypatch, tmp_path):
    for options, flag in (({"base": "rloo"}, "rloo"), ({"std_normalize": False}, "dr_grpo")):
        plan = build_plan(config({"name": "entropy_advantage", "advantage_options": options}), tmp_path)
        assert upstream_args(plan.argv, monkeypatch).algo.advantage.estimator == flag


@pytest.mark.parametrize(
    "correction,upstream",
    [
        ("tis", ("token", "clip", "ratio", [0.5, 5.0])),
        ("icepop", ("token", "mask", "ratio", [0.5, 5.0])),
        ({"scheme": "seq_mask", "low": 0.8, "high": 1.25}, ("seq", "mask", "ratio", [0.8, 1.25])),
        ({"level": "seq", "gating": "binary_kl", "high": 0.01}, ("seq", "mask", "binary_kl", [0.0, 0.01])),
    ],
)
def test_rollout_correction_sets_upstreams_switch(correction, upstream, monkeypatch, tmp_path):
    """The method's rollout_correction is upstream's is_correction_* as its parser reads them (the switch that
    makes vLLM return the sampled tokens' log-probs); upstream's PolicyLoss accepts them; GSPO then runs as ppo."""
    from openrlhf.models.loss import PolicyLoss

    for name in ("grpo", "gspo"):
        args = upstream_args(
            build_plan(config({"name": name, "rollout_correction": correction}), tmp_path).argv, monkeypatch
        )
        a = args.algo.advantage
        assert (a.is_correction_level, a.is_correction_mode, a.is_correction_gating) == upstream[:3]
        assert list(a.is_correction_threshold) == pytest.approx(upstream[3])
        assert args.actor.policy_loss_type == "ppo"
        PolicyLoss(
            is_correction_level=a.is_correction_level,
            is_correction_mode=a.is_correction_mode,
            is_correction_gating=a.is_correction_gating,
            is_correction_threshold=a.is_correction_threshold,
        )
    plain = upstream_args(build_plan(config({"name": "grpo"}), tmp_path).argv, monkeypatch)
    assert plain.algo.advantage.is_correction_level == "off"


@pytest.mark.parametrize(
    "flags",
    [
        {"level": "token", "mode": "clip"},
        {"level": "token", "threshold": [0.8, 1.25]},
        {"level": "seq", "gating": "binary_kl", "threshold": 0.01},
        {"level": "seq", "gating": "tv", "threshold": [0.0, 0.05]},
    ],
)
def test_upstream_correction_flags_reach_upstream_as_written(flags, monkeypatch, tmp_path):
    """is_correction_* written in openrlhf.extra_flags are rewritten into the method's rollout_correction (one run
    id); upstream's parser then reads from our launch what it reads from the flags appended to a plain launch."""
    prefix = "--algo.advantage.is_correction_"
    cfg = config({"name": "grpo"})
    cfg["openrlhf"]["extra_flags"] = {prefix + k: v for k, v in flags.items()}
    ours = upstream_args(build_plan(cfg, tmp_path).argv, monkeypatch).algo.advantage
    written = [str(x) for k, v in flags.items() for x in (prefix + k, *(v if isinstance(v, list) else [v]))]
    plain = build_plan(config({"name": "grpo"}), tmp_path).argv
    theirs = upstream_args([*plain, *written], monkeypatch).algo.advantage
    for key in ("level", "mode", "gating"):
        assert getattr(ours, "is_correction_" + key) == getattr(theirs, "is_correction_" + key)
    assert list(ours.is_correction_threshold) == pytest.approx(list(theirs.is_correction_threshold))
    assert ours.is_correction_level != "off"
