"""One field language on the methods' side (issue 25): only clipping methods carry eps_*; a hyperparameter that does
nothing is refused at load; estimator options are typed and refused at load like hyperparameters; options added
after run ids were published leave every default config's identity as it was."""

import math

import pytest
import torch

import harness
from harness.commands.methods import describe
from harness.kernel.method import Method, MethodBase, PPOClipMethod
from harness.run.config import ConfigError, config_hash, load_config

# config_hash(get_method(name).to_config()) on main before the peer-parity options existed (commit ab3824e): the
# method section of every config that uses the defaults, i.e. its contribution to the run id
DEFAULT_METHOD_IDS = {
    "adaptive_entropy": "ac37c6badaf3",
    "ce_gppo": "9fa1d6d8f962",
    "cispo": "50dadfecc174",
    "clip_cov": "136a5f259795",
    "clip_higher": "75b1b4bc9fe3",
    "entropy_advantage": "5055ea994d67",
    "entropy_bonus": "628819bf7301",
    "grpo": "6cde33810b58",
    "gspo": "042393a0ca2c",
    "high_entropy_tokens": "718eefcd23c1",
    "kl_cov": "ee229262a60b",
    "prime": "ae142c505248",
    "rloo": "ad087bcc2ac7",
    "sapo": "0c181401e6ff",
    "w_reinforce": "dd0ddf932dd0",
}
LATE = {  # option -> a value other than its default
    "empty_rows": "count",
    "clip_ratio_c": 3.0,
    "log_ratio_clamp": 20.0,
    "recipe": "official",
    "selection": "quantile",
    "dead_zone": 1e-4,
    "rollout_correction": "tis",
}


@pytest.mark.parametrize("name", sorted(DEFAULT_METHOD_IDS))
def test_default_method_sections_keep_their_identity(name):
    assert config_hash(harness.get_method(name).to_config()) == DEFAULT_METHOD_IDS[name]


@pytest.mark.parametrize("name", sorted(DEFAULT_METHOD_IDS))
def test_late_options_enter_the_identity_only_when_set(name):
    base = load_config({"method": {"name": name}}).run_id()
    fields = harness.get_method(name).hparams()
    late = [k for k, f in fields.items() if f.metadata.get("late")]
    assert "empty_rows" in late
    for key in late:
        default = fields[key].default
        assert key not in harness.get_method(name).to_config()
        assert load_config({"method": {"name": name, key: default}}).run_id() == base, key
        changed = load_config({"method": {"name": name, key: LATE[key]}})
        assert changed.method[key] == LATE[key] and changed.run_id() != base, key


def test_only_clipping_methods_carry_eps():
    for name in harness.list_methods():
        m = harness.get_method(name)
        has_eps = "eps_low" in m.hparams()
        assert has_eps == (isinstance(m, PPOClipMethod) or name == "cispo"), name  # cispo: bounds of its IS weight
        assert ("clip_ratio_c" in m.hparams()) == isinstance(m, PPOClipMethod), name
    assert PPOClipMethod is Method and not isinstance(harness.get_method("kl_cov"), Method)
    assert isinstance(harness.get_method("kl_cov"), MethodBase) and isinstance(harness.get_method("sapo"), MethodBase)


@pytest.mark.parametrize("name", ["kl_cov", "sapo"])
def test_eps_on_a_method_without_clip_is_refused_at_load(name):
    for key in ("eps_low", "eps_high"):
        with pytest.raises(ConfigError, match=rf"method: {name}: {key}=0.3 is refused: {name} has no such"):
            load_config({"method": {"name": name, key: 0.3}})
        with pytest.raises(harness.HyperparameterError, match="Remove it"):
            harness.get_method(name, **{key: 0.28})
    # configs written before record the inherited 0.2: they load, mean nothing, and keep their run id
    recorded = load_config({"method": {"name": name, "eps_low": 0.2, "eps_high": 0.2}})
    assert recorded.run_id() == load_config({"method": {"name": name}}).run_id()
    assert recorded.method["eps_low"] == 0.2 and "eps_low" not in harness.get_method(name).hparams()
    assert harness.get_method(name).eps_low == 0.2  # read-only, for launch code that reads it
    with pytest.raises(AttributeError):
        harness.get_method(name).clip_ratio_c  # noqa: B018


def test_kl_cov_loss_never_read_a_clip_range():
    # the KL-Cov loss is -A r (+ beta |log r| on the selected tokens) with no clip: far outside any eps the ratio
    # still counts in full (official compute_policy_loss_kl_cov is not passed clip_ratio_low/high)
    lp = torch.tensor([[0.0, -1.0]], requires_grad=True)
    old = torch.tensor([[-2.0, -1.0]])  # r = e^2 on token 0, 1 on token 1
    out = harness.get_method("kl_cov", beta=0.0).policy_loss(lp, old, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-(torch.e**2 + 1) / 2, rel=1e-6)
    assert lp.grad[0].tolist() == pytest.approx([-(torch.e**2) / 2, -0.5], rel=1e-6)


def test_an_unknown_eps_names_the_clipping_rule():
    with pytest.raises(harness.HyperparameterError, match="Only clipping methods take clip_ratio_c"):
        harness.get_method("kl_cov", clip_ratio_c=3.0)


OPT = "advantage_options."  # an estimator option's key path under the method


@pytest.mark.parametrize(
    "method,msg",
    [
        ({"name": "entropy_advantage", "advantage_options": {"alpha": -5}}, f"{OPT}alpha: -5 must be >= 0.0"),
        ({"name": "entropy_advantage", "advantage_options": {"kappa": 1.0}}, f"{OPT}kappa: 1.0 must be > 1.0"),
        ({"name": "entropy_advantage", "advantage_options": {"base": "prime"}}, "base='prime' is not allowed"),
        (
            {"name": "entropy_advantage", "advantage_options": {"alpha": "big"}},
            f"{OPT}alpha: expected a number, got 'big'",
        ),
        (
            {"name": "prime", "advantage_options": {"norm": "bad"}},
            f"{OPT}norm: 'bad' is not allowed. Allowed: batch_norm",
        ),
        ({"name": "prime", "advantage_options": {"beta": 0}}, f"{OPT}beta: 0 must be > 0.0"),
        ({"name": "prime", "advantage_options": {"drop_last_process_reward": 1}}, "expected true or false, got 1"),
        (
            {"name": "w_reinforce", "advantage_options": {"positive_weight": -1.0}},
            f"{OPT}positive_weight: -1.0 must be >= 0.0",
        ),
        (
            {"name": "grpo", "advantage": "grpo", "advantage_options": {"std_normalize": "no"}},
            "expected true or false, got 'no'",
        ),
        ({"name": "kl_cov", "advantage": "rloo", "advantage_options": {"beta": 1.0}}, "unknown advantage option"),
    ],
)
def test_bad_estimator_options_are_refused_at_load(method, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config({"method": method})


def test_good_estimator_options_load_unchanged():
    cfg = load_config({"method": {"name": "entropy_advantage", "advantage_options": {"alpha": 1, "base": "rloo"}}})
    assert cfg.method["advantage_options"] == {"alpha": 1, "base": "rloo"}  # recorded as given (run ids)
    m = harness.get_method("prime", advantage_options={"beta": 1})
    assert m.estimator_options()["beta"] == 1


def test_harness_methods_shows_the_new_options():
    text = describe("grpo")
    for key in ("clip_ratio_c", "log_ratio_clamp", "empty_rows", "seq-mean-token-sum-norm-verl"):
        assert key in text, key
    assert "std_normalize" in text and "advantage options" in text
    kl = describe("kl_cov")
    assert "eps_low" in kl and "refused" in kl and "clip_ratio_c" not in kl
    for name, keys in {
        "ce_gppo": ("recipe",),
        "w_reinforce": ("recipe",),
        "high_entropy_tokens": ("selection",),
    }.items():
        assert all(k in describe(name) for k in keys), name
    assert "alpha" in describe("entropy_advantage") and "kappa" in describe("entropy_advantage")


VARIANTS = [
    {"name": "ce_gppo", "recipe": "official"},
    {"name": "w_reinforce", "recipe": "official"},
    {"name": "high_entropy_tokens", "selection": "quantile", "normalize": "all", "clip_ratio_c": 0.0},
    {"name": "grpo", "clip_ratio_c": 3.0, "log_ratio_clamp": 20.0},
    {"name": "gspo", "agg": "token-mean", "level": "token"},
    {"name": "sapo", "empty_rows": "count"},
    {"name": "grpo", "agg": "seq-mean-token-sum-norm-verl"},
    {"name": "grpo", "advantage": "qae", "advantage_options": {"k": 0.6, "interpolation": "higher"}},
    {"name": "steer", "mapping": "linear", "weight_max": 1.2},
    {"name": "erc", "base": "gppo", "eps_high": 0.2, "recipe": "official"},
    {"name": "entropic", "update": "step", "target_entropy": 1.0},
]


def test_every_peer_option_trains_on_pocket(tiny, tmp_path):
    """The backend reads the capabilities, never the option: W-REINFORCE's official recipe asks for the entropy
    (needs_entropy), CE-GPPO's adds its NLL term through policy_loss; each variant trains (untrained tiny model:
    rewards are mostly 0, so only W-REINFORCE's -1 on wrong answers is sure to move the weights)."""
    from harness.backends.pocket.trainer import PocketTrainer
    from harness.io import read_jsonl

    tiny["train"].update(steps=2, prompts_per_step=2, samples_per_prompt=4, updates_per_rollout=2, micro_batch_size=2)
    tiny["eval"].update(every=0, n_samples=1, max_problems=1, greedy=False)
    for i, method in enumerate(VARIANTS):
        cfg = load_config(dict(tiny, method=method))
        trainer = PocketTrainer(cfg, tmp_path / f"r{i}", log=lambda *_: None)
        trainer.run()
        rows = read_jsonl(tmp_path / f"r{i}" / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2] and all(math.isfinite(r["grad_norm"]) for r in rows), method
        if method["name"] == "w_reinforce":
            assert all(r["grad_norm"] > 0 for r in rows), method
        if method.get("recipe") == "official" and method["name"] == "ce_gppo":
            assert "ce_gppo/positive_nll" in rows[0], method
