"""The rollout-mismatch correction (``rollout_correction``, OpenRLHF 0.11.2's is_correction_*) against values worked
out by hand: the worked example of B = 2, T = 3 (the same numbers upstream's own ``PolicyLoss`` gives:
tests/openrlhf/test_correction_parity.py), padding, seq-mean-token-mean, an off-policy TIS step, the divergence
gates, verl's ``drop`` convention, the identity when the rollout log-probs are the old ones (every method), the
config language and its refusals."""

import math

import pytest
import torch

import harness
from harness.kernel import ops
from harness.run.config import ConfigError, load_config

L = math.log
EPS = 1e-7  # token-mean divides by N + 1e-8 (verl's masked mean): hand values hold to ~1e-8 relative


def _example(mask=None, lr=None):
    """delta = log(pi_train / pi_rollout): row 0 [0, ln 2, -ln 4] (ratios 1, 2, 0.25), row 1 [ln 8, ln 8, ln 2]
    (8, 8, 2); A = +1 on row 0, -1 on row 1; on-policy (lp = old) unless ``lr`` = lp - old is given."""
    delta = torch.tensor([[0.0, L(2), -L(4)], [L(8), L(8), L(2)]], dtype=torch.float64)
    old = torch.tensor([[-2.6, -2.7, -2.8], [-2.9, -3.0, -3.1]], dtype=torch.float64)
    lp = (old + (lr if lr is not None else 0.0)).clone().requires_grad_(True)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.float64) if mask is None else mask
    return lp, old, adv, mask, old - delta


def _run(rc, method="grpo", **kw):
    lp, old, adv, mask, rollout = _example(kw.pop("mask", None), kw.pop("lr", None))
    out = harness.get_method(method, rollout_correction=rc, **kw).policy_loss(
        lp, old, adv, mask, rollout_log_probs=rollout
    )
    out.loss.backward()
    return out, lp.grad


@pytest.mark.parametrize(
    "rc,loss,grad6",
    [
        # TIS: coef = clamp(w, 0.5, 5) = [1, 2, 0.5], [5, 5, 2]; l = -A: (-1 - 2 - 0.5 + 5 + 5 + 2) / 6
        ("tis", 8.5 / 6, [[-1, -2, -0.5], [5, 5, 2]]),
        # ICEPOP: 0.25 and the two 8s leave: coef [1, 2, 0], [0, 0, 2]: (-1 - 2 + 2) / 6
        ("icepop", -1 / 6, [[-1, -2, 0], [0, 0, 2]]),
        # seq-mask: geometric means 0.5^(1/3) = 0.79 (kept with its own ratios) and 128^(1/3) = 5.04 > 5 (dropped)
        ("seq_mask", -3.25 / 6, [[-1, -2, -0.25], [0, 0, 0]]),
    ],
)
def test_the_worked_example(rc, loss, grad6):
    out, grad = _run(rc)
    assert out.loss.item() == pytest.approx(loss, rel=EPS)
    assert (grad * 6).tolist() == [pytest.approx(row, rel=EPS, abs=1e-12) for row in grad6]
    assert out.metrics["rollout_correction/filtered_frac"] == 0.5  # 3 of 6 tokens, or 1 of 2 rows
    # the mean of rollout - old = -mean(delta) = -(ln 2 - ln 4 + 2 ln 8 + ln 2) / 6 = -ln 2 (upstream's vllm_kl)
    assert out.metrics["rollout_correction/kl"] == pytest.approx(-L(2)) == pytest.approx(-0.693147, abs=1e-6)
    assert out.metrics["rollout_correction/log_ratio_abs"] == pytest.approx((L(2) + L(4) + 2 * L(8) + L(2)) / 6)
    assert out.metrics["clipfrac"] == 0.0 and out.metrics["ppo_kl"] == 0.0  # the PPO ratio is untouched


def test_seq_mask_counts_only_valid_tokens_and_keeps_the_dropped_row_in_the_denominator():
    """Row 1 padded to [1, 1, 0]: its geometric mean over 2 tokens is 8 > 5, dropped; its 2 tokens stay counted."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    out, grad = _run("seq_mask", mask=mask)
    assert out.loss.item() == pytest.approx(-3.25 / 5, rel=EPS)
    assert out.metrics["rollout_correction/filtered_frac"] == 0.5
    assert grad[1].tolist() == [0.0, 0.0, 0.0]


def test_icepop_with_seq_mean_token_mean():
    out, _ = _run("icepop", agg="seq-mean-token-mean")
    assert out.loss.item() == pytest.approx((-3 / 3 + 2 / 3) / 2, rel=1e-12)


def test_tis_weights_the_clipped_ppo_loss():
    """Off-policy: token (0,0) r = e^0.1 (unclipped, weight 1); token (1,2) r = e^-0.3 < 0.8 with A < 0: clipped,
    loss 0.8 and no gradient, times its weight 2."""
    lr = torch.tensor([[0.1, 0.0, 0.0], [0.0, 0.0, -0.3]], dtype=torch.float64)
    out, grad = _run("tis", lr=lr)
    assert out.loss.item() == pytest.approx((-math.exp(0.1) - 2 - 0.5 + 5 + 5 + 0.8 * 2) / 6, rel=EPS)
    assert out.loss.item() == pytest.approx(1.332472, abs=1e-6)
    assert out.metrics["clipfrac"] == pytest.approx(1 / 6)
    want = [[-math.exp(0.1), -2, -0.5], [5, 5, 0]]
    assert (grad * 6).tolist() == [pytest.approx(row, rel=EPS, abs=1e-12) for row in want]


@pytest.mark.parametrize("gating", ["binary_kl", "tv"])
def test_divergence_gates_drop_the_token_whose_probabilities_differ(gating):
    """pi_rollout = [0.5, 0.9], pi_train = [0.6, 0.9], high 0.01: token 0's binary KL 0.5 ln(0.5/0.6) + 0.5
    ln(0.5/0.4) = 0.020411 and TV 0.1 both exceed it; token 1 (divergence 0) keeps its weight 1. A = +1."""
    old = torch.tensor([[0.6, 0.9]], dtype=torch.float64).log()
    rollout = torch.tensor([[0.5, 0.9]], dtype=torch.float64).log()
    lp = old.clone().requires_grad_(True)
    m = harness.get_method("grpo", rollout_correction={"level": "token", "gating": gating, "high": 0.01})
    out = m.policy_loss(lp, old, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2), rollout_log_probs=rollout)
    assert out.loss.item() == pytest.approx(-0.5, rel=EPS)
    assert out.metrics["rollout_correction/filtered_frac"] == 0.5
    kl = 0.5 * L(0.5 / 0.6) + 0.5 * L(0.5 / 0.4)
    assert kl == pytest.approx(0.020411, abs=1e-6)
    loose = harness.get_method("grpo", rollout_correction={"level": "token", "gating": gating, "high": 0.2})
    lp2 = old.clone().requires_grad_(True)
    ones = torch.ones(1, 2, dtype=torch.float64)
    kept = loose.policy_loss(lp2, old, ones, torch.ones(1, 2), rollout_log_probs=rollout)
    # kept with its own ratio 0.6 / 0.5 = 1.2: (-1.2 - 1) / 2
    assert kept.loss.item() == pytest.approx(-(1.2 + 1) / 2, rel=EPS)


def test_drop_takes_the_rejected_tokens_out_of_the_denominator():
    """verl's rollout_rs: ICEPOP's survivors (-1 - 2 + 2) over 3 tokens, not 6; seq-mask leaves row 0 alone."""
    out, _ = _run({"scheme": "icepop", "rejected": "drop"})
    assert out.loss.item() == pytest.approx(-1 / 3, rel=EPS)
    out, _ = _run({"scheme": "seq_mask", "rejected": "drop"}, agg="seq-mean-token-mean")
    assert out.loss.item() == pytest.approx(-3.25 / 3, rel=1e-12)  # row 1 empty: not counted (skip)
    keep, _ = _run("seq_mask", agg="seq-mean-token-mean")
    assert keep.loss.item() == pytest.approx(-3.25 / 3 / 2, rel=1e-12)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_drop_accumulates_exactly_with_the_aggregation_masks(agg):
    """Micro-batches weighted by ops.micro_batch_weight of ``aggregation_mask`` sum to the whole batch's loss."""
    g = torch.Generator().manual_seed(0)
    B, T = 6, 5
    mask = (torch.arange(T)[None] < torch.tensor([5, 3, 4, 5, 2, 5])[:, None]).float()
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    rollout = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.8
    lp = old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.1
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, T) * mask
    m = harness.get_method("grpo", agg=agg, rollout_correction={"scheme": "icepop", "rejected": "drop", "high": 2.0})
    whole = m.policy_loss(lp, old, adv, mask, rollout_log_probs=rollout)
    assert 0 < whole.metrics["rollout_correction/filtered_frac"] < 1
    full = m.aggregation_mask(mask, old, rollout)
    assert float(full.sum()) < float(mask.sum())
    total = 0.0
    for rows in (slice(0, 2), slice(2, 6)):
        part = m.policy_loss(lp[rows], old[rows], adv[rows], mask[rows], rollout_log_probs=rollout[rows]).loss
        total += part * ops.micro_batch_weight(agg, m.aggregation_mask(mask[rows], old[rows], rollout[rows]), full)
    assert float(total) == pytest.approx(float(whole.loss), rel=EPS)
    keep = harness.get_method("grpo", agg=agg, rollout_correction="icepop")
    assert keep.aggregation_mask(mask, old, rollout) is mask


def test_icepop_masks_an_overflowing_ratio_without_nan():
    """exp(delta) = inf (delta 1000) is outside the band: weight 0, a finite loss (upstream's own test)."""
    old = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    rollout = torch.tensor([[-1001.0, -1.0]], dtype=torch.float64)
    lp = old.clone().requires_grad_(True)
    out = harness.get_method("grpo", rollout_correction="icepop").policy_loss(
        lp, old, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2), rollout_log_probs=rollout
    )
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.5, rel=EPS) and torch.isfinite(lp.grad).all()
    assert lp.grad[0, 0].item() == 0.0


SCHEMES = ["tis", "icepop", "seq_mask", {"level": "seq", "gating": "binary_kl", "high": 0.01}]


@pytest.mark.parametrize("name", sorted(harness.list_methods()))
@pytest.mark.parametrize("rc", SCHEMES, ids=["tis", "icepop", "seq_mask", "seq_binary_kl"])
def test_rollout_log_probs_equal_to_the_old_ones_change_nothing(name, rc):
    """pocket's ``old_log_probs: rollout``: the coefficient is exactly 1, so loss and gradient are bit-identical to
    the uncorrected method's; no rollout log-probs at all is the identity too."""
    g = torch.Generator().manual_seed(1)
    B, T = 4, 6
    mask = (torch.arange(T)[None] < torch.tensor([6, 4, 5, 2])[:, None]).float()
    old = -torch.rand(B, T, generator=g) * 3
    lr = torch.randn(B, T, generator=g) * 0.3
    adv = torch.randn(B, 1, generator=g).expand(B, T) * mask
    ent = torch.rand(B, T, generator=g) * 2
    results = []
    for hp, rollout in (({}, None), ({"rollout_correction": rc}, old.clone()), ({"rollout_correction": rc}, None)):
        m = harness.get_method(name, **hp)
        lp = (old + lr).requires_grad_(True)
        e = ent.clone().requires_grad_(True)
        kw = {"rollout_log_probs": rollout} if rollout is not None else {}
        if m.needs_old_entropy:  # STEER, ERC: the behaviour policy's entropy too
            kw["old_entropy"] = ent * 0.9
        out = m.policy_loss(lp, old, adv, mask, entropy=e, generator=torch.Generator().manual_seed(2), **kw)
        out.loss.backward()
        results.append((out.loss.detach(), lp.grad.clone(), out.metrics))
    (l0, g0, m0), (l1, g1, m1), (l2, g2, _) = results
    assert torch.equal(l0, l1) and torch.equal(g0, g1) and torch.equal(l0, l2) and torch.equal(g0, g2)
    assert m1["rollout_correction/filtered_frac"] == 0.0 and m1["rollout_correction/coef_mean"] == 1.0
    assert m1["rollout_correction/log_ratio_abs"] == 0.0
    assert not any(k.startswith("rollout_correction/") for k in m0)


def test_the_penalty_is_weighted_with_the_loss():
    """KL-Cov's beta |log r| is part of the per-token loss: the correction weights it too (token (1, 2) of the
    example is the only one ICEPOP keeps in row 1; its weight is 2)."""
    lr = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.3, 0.3]], dtype=torch.float64)
    out, _ = _run("icepop", method="kl_cov", lr=lr, k_ratio=1.0)
    plain, _ = _run("off", method="kl_cov", lr=lr, k_ratio=1.0)
    assert plain.penalty.item() == pytest.approx(0.3 * 3 / 6, rel=EPS)  # beta 1, |log r| on row 1's 3 tokens
    assert out.penalty.item() == pytest.approx(0.3 * 2 / 6, rel=EPS)


# -- the config language ----------------------------------------------------------------------------------------
FULL_TIS = {"level": "token", "mode": "clip", "gating": "ratio", "low": 0.5, "high": 5.0, "rejected": "keep"}


def test_presets_and_their_spelled_out_forms_record_the_same():
    assert harness.get_method("grpo", rollout_correction="tis").to_config()["rollout_correction"] == "tis"
    assert harness.get_method("grpo", rollout_correction=FULL_TIS).to_config()["rollout_correction"] == "tis"
    assert harness.get_method("grpo", rollout_correction={"scheme": "tis"}).rollout_correction == "tis"
    icepop = harness.get_method("grpo", rollout_correction={"level": "token"})  # OpenRLHF's defaults: mask, ratio
    assert icepop.rollout_correction == "icepop"
    custom = harness.get_method("grpo", rollout_correction={"scheme": "tis", "high": 2})
    assert custom.rollout_correction == {**FULL_TIS, "high": 2.0}
    ids = {load_config({"method": {"name": "grpo", "rollout_correction": v}}).run_id() for v in ("tis", FULL_TIS)}
    assert len(ids) == 1
    for off in ("off", {"level": "off"}, {"scheme": "off"}):
        m = harness.get_method("grpo", rollout_correction=off)
        assert m.correction is None and "rollout_correction" not in m.to_config()
    base = load_config({"method": {"name": "grpo"}}).run_id()
    assert load_config({"method": {"name": "grpo", "rollout_correction": "off"}}).run_id() == base
    assert load_config({"method": {"name": "grpo", "rollout_correction": "icepop"}}).run_id() != base


@pytest.mark.parametrize(
    "value,match",
    [
        ("tiss", r"'tiss' is not a correction\. Did you mean 'tis'\?"),
        ({"scheme": "icepop", "hihg": 2}, r"rollout_correction\.hihg: unknown key\. Did you mean 'high'\?"),
        ({"level": "seq", "mode": "clip"}, "mode clip needs level token and gating ratio"),
        ({"gating": "tv", "high": 0.1, "low": 0.5}, "takes an upper bound only"),
        ({"gating": "binary_kl"}, "needs an upper bound high"),
        ({"scheme": "tis", "rejected": "drop"}, "rejected drop needs mode mask"),
        ({"scheme": "tis", "level": "seq"}, "scheme 'tis' sets level, mode and gating; drop level"),
        ({"low": 3.0, "high": 2.0}, "low 3.0 is above high 2.0"),
        ({"level": "tokens"}, r"'tokens' is not allowed\. Did you mean 'token'\?"),
        (2.0, "expected off, a preset"),
    ],
)
def test_bad_corrections_are_refused_at_load(value, match):
    with pytest.raises(harness.HyperparameterError, match=match):
        harness.get_method("grpo", rollout_correction=value)
    with pytest.raises(ConfigError, match=match):
        load_config({"method": {"name": "kl_cov", "rollout_correction": value}})
