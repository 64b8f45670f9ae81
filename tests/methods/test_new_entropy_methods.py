"""Issue 38's methods pinned by hand: QAE's quantile baseline, clip-low's tighter lower clip, STEER's token weights,
EntroPIC's PI controller and adjustment loss, ERC's entropy-ratio mask. Every number is worked out here (the spec's
cases, /tmp/research/issue38_spec.md §2, recomputed by hand); tests/methods/test_new_method_parity.py compares the
same losses with re-derivations of the public code on random inputs."""

import math

import pytest
import torch

import harness
from harness.run.config import ConfigError, load_config


def flat(x):
    """A (nested) list or tensor as one flat list of floats (pytest.approx compares flat sequences)."""
    x = x.tolist() if torch.is_tensor(x) else x
    return [v for item in x for v in flat(item)] if isinstance(x, (list, tuple)) else [x]


def approx_flat(want, **kw):
    return pytest.approx(flat(want), **kw)


def _qae(scores, **opts):
    m = harness.get_method("grpo", advantage="qae", advantage_options=opts)
    s = torch.tensor(scores, dtype=torch.float32)
    return m.advantages(s, [0] * len(scores), torch.ones(len(scores), 1))[:, 0]


# -- QAE --------------------------------------------------------------------------------------------------------
SD1 = math.sqrt(1 / 8 * 7 / 8 * 8 / 7) + 1e-6  # unbiased std (+ eps) of one 1 (or one 0) among eight 0/1 scores
SD3 = math.sqrt(3 / 8 * 5 / 8 * 8 / 7) + 1e-6  # ... of three 1s (or three 0s)


@pytest.mark.parametrize(
    "scores,correct,wrong",
    [
        ([1, 0, 0, 0, 0, 0, 0, 0], 1 / SD1, 0.0),  # hard: baseline 0
        ([1, 1, 1, 0, 0, 0, 0, 0], 1 / SD3, 0.0),  # baseline 0 (K(n-1) = 2.8 lands between two 0s)
        ([1, 1, 1, 1, 1, 0, 0, 0], 0.2 / SD3, -0.8 / SD3),  # baseline 0 + 0.8 (1 - 0): linear, not the paper's 1
        ([1, 1, 1, 1, 1, 1, 1, 0], 0.0, -1 / SD1),  # easy: baseline 1
    ],
)
def test_qae_binary_groups_by_hand(scores, correct, wrong):
    adv = _qae(scores)
    n1 = sum(scores)
    assert adv[:n1].tolist() == pytest.approx([correct] * n1, abs=1e-6)
    assert adv[n1:].tolist() == pytest.approx([wrong] * (8 - n1), abs=1e-6)


def test_qae_spec_values_and_edges():
    # the spec's executed numbers (torch.quantile linear, unbiased std, eps 1e-6)
    assert _qae([1, 0, 0, 0, 0, 0, 0, 0])[0].item() == pytest.approx(2.828419, abs=1e-5)
    assert _qae([1, 1, 1, 1, 1, 0, 0, 0])[[0, 7]].tolist() == pytest.approx([0.386436, -1.545744], abs=1e-5)
    assert _qae([0.0, 0.5, 1.0, 2.0]).tolist() == pytest.approx([-0.702647, -0.117108, 0.468431, 1.639510], abs=1e-5)
    assert _qae([1]).tolist() == pytest.approx([1 / (1 + 1e-6)], abs=1e-7)  # one response: baseline 0, std 1
    assert _qae([1] * 8).abs().max() == 0 and _qae([0] * 8).abs().max() == 0  # constant group: exactly 0
    # the paper's gate at the fractional boundary: 'higher' puts the baseline of 5/8 correct at 1
    assert _qae([1, 1, 1, 1, 1, 0, 0, 0], interpolation="higher")[:5].abs().max() == 0
    # without std normalisation: s - Q_K; baseline of [0, .5, 1, 2] at K = 0.4 is 0.5 + 0.2 * 0.5 = 0.6
    assert _qae([0.0, 0.5, 1.0, 2.0], std_normalize=False).tolist() == pytest.approx([-0.6, -0.1, 0.4, 1.4], abs=1e-6)
    # GRPO's mean baseline differs on the same group (0.724567 / -1.207612)
    grpo = harness.get_method("grpo").advantages(torch.tensor([1.0] * 5 + [0.0] * 3), [0] * 8, torch.ones(8, 1))
    assert grpo[[0, 7], 0].tolist() == pytest.approx([0.724567, -1.207612], abs=1e-5)


def test_qae_groups_need_not_be_contiguous_and_any_loss_takes_it():
    m = harness.get_method("kl_cov", advantage="qae")
    adv = m.advantages(torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0]), ["a", "b", "a", "b", "a", "a"], torch.ones(6, 2))
    # group a = [1, 1, 1, 0] (n = 4, K(n-1) = 1.2: baseline 1), std = 0.5; group b = [0, 0]: 0
    assert adv[:, 0].tolist() == pytest.approx([0, 0, 0, 0, 0, -1 / (0.5 + 1e-6)], abs=1e-6)
    assert harness.get_method("qae").to_config()["advantage"] == "qae"


@pytest.mark.parametrize("k", [0.0, 1.0, 1.5])
def test_qae_k_outside_the_open_unit_interval_is_refused(k):
    with pytest.raises(ConfigError, match=r"advantage_options\.k: .* K must lie in \(0, 1\)"):
        load_config({"method": {"name": "qae", "advantage_options": {"k": k}}})


# -- clip-low ---------------------------------------------------------------------------------------------------
def test_clip_low_clips_where_grpo_does_not():
    old = torch.tensor([[math.log(0.5)]])
    lp = (old + math.log(0.85)).requires_grad_()  # r = 0.85, A = -1
    adv, mask = torch.tensor([[-1.0]]), torch.ones(1, 1)
    out = harness.get_method("clip_low").policy_loss(lp, old, adv, mask)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.9) and lp.grad.item() == 0.0 and out.metrics["clipfrac"] == 1.0
    lp2 = lp.detach().clone().requires_grad_()
    grpo = harness.get_method("grpo").policy_loss(lp2, old, adv, mask)  # 0.85 > 0.8: unclipped
    grpo.loss.backward()
    assert grpo.loss.item() == pytest.approx(0.85) and lp2.grad.item() == pytest.approx(0.85)
    m = harness.get_method("clip_low")
    assert (m.eps_low, m.eps_high) == (0.1, 0.2)


# -- STEER ------------------------------------------------------------------------------------------------------
A2 = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
P2 = torch.tensor([[0.5, 0.9], [0.2, 0.99]])
H2 = torch.tensor([[1.0, 0.3], [2.0, 0.05]])


def _omega(a, p, h):
    """The spec's estimate by hand, on-policy (x = pi_old = p): (A/p) p(1-p)(ln p + H) = A (1-p)(ln p + H)."""
    return abs(a * (1 - p) * (math.log(p) + h))


def test_steer_entropy_change_estimate_by_hand():
    from harness.methods.steer import entropy_change

    omega = entropy_change(P2.log(), P2.log(), A2, H2)
    want = [[_omega(a, p, h) for a, p, h in zip(*rows)] for rows in zip(A2.tolist(), P2.tolist(), H2.tolist())]
    assert flat(omega) == approx_flat(want, abs=1e-6)
    assert flat(want) == approx_flat([[0.153426, 0.019464], [0.312450, 0.000399]], abs=1e-6)


def test_steer_exp_weights_loss_and_gradient_by_hand():
    k = math.log(1.25) / 0.3124497  # -ln(0.8) / max |Omega|
    w = [[math.exp(-k * o) for o in row] for row in [[0.1534264, 0.0194640], [0.3124497, 0.0003995]]]
    assert flat(w) == approx_flat([[0.896217, 0.986196], [0.8, 0.999715]], abs=1e-6)
    lp = P2.log().requires_grad_()
    out = harness.get_method("steer").policy_loss(lp, P2.log(), A2, torch.ones(2, 2), old_entropy=H2)
    out.loss.backward()
    # on-policy r = 1: loss = mean(-A w), gradient -A w / 4
    assert out.loss.item() == pytest.approx(sum(-a * x for a, x in zip([1, 1, -1, -1], sum(w, []))) / 4, abs=1e-6)
    assert out.loss.item() == pytest.approx(-0.020674, abs=1e-6)
    assert flat(lp.grad) == approx_flat([[-0.224054, -0.246549], [0.2, 0.249929]], abs=1e-6)
    assert out.metrics["steer/weight_mean"] == pytest.approx(sum(sum(w, [])) / 4, abs=1e-6)


def test_steer_linear_mapping_and_small_omega_floor():
    from harness.methods.steer import entropy_change, steer_weights

    omega = entropy_change(P2.log(), P2.log(), A2, H2)
    lo, hi = 0.0003995, 0.3124497
    lin = [[1.2 - (o - lo) * 0.4 / (hi - lo) for o in row] for row in omega.tolist()]
    assert flat(steer_weights(omega, torch.ones(2, 2), "linear", 0.8, 1.2)) == approx_flat(lin, abs=1e-5)
    assert flat(lin) == approx_flat([[1.003843, 1.175562], [0.8, 1.2]], abs=1e-5)
    # A x 0.01: max |Omega| = 0.003124 < 0.02, so k = ln 1.25 / 0.02 and no token reaches w_min
    small = entropy_change(P2.log(), P2.log(), A2 * 0.01, H2)
    k = math.log(1.25) / 0.02
    want = [[math.exp(-k * o) for o in row] for row in small.tolist()]
    assert flat(steer_weights(small, torch.ones(2, 2), "exp", 0.8, 1.0)) == approx_flat(want, abs=1e-6)
    assert flat(want) == approx_flat([[0.983028, 0.997831], [0.965740, 0.999955]], abs=1e-6)
    # all |Omega| equal: the linear map gives the midpoint
    even = steer_weights(torch.full((1, 3), 0.5), torch.ones(1, 3), "linear", 0.8, 1.2)
    assert flat(even) == approx_flat([[1.0, 1.0, 1.0]])


def test_steer_padding_is_out_of_the_max_and_old_entropy_is_required():
    from harness.methods.steer import steer_weights

    omega = torch.tensor([[0.1, 5.0], [0.2, 0.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    w = steer_weights(omega, mask, "exp", 0.8, 1.0)
    assert w[0, 1] == 0 and w[1, 0].item() == pytest.approx(0.8)  # the max is 0.2, not the padded 5.0
    m = harness.get_method("steer")
    assert m.needs_old_entropy and not m.needs_entropy
    with pytest.raises(ValueError, match="steer needs the old policy's per-token entropy"):
        m.policy_loss(P2.log(), P2.log(), A2, torch.ones(2, 2))
    with pytest.raises(ValueError, match="old_entropy\\[0, 0\\] = -1: an entropy must be >= 0"):
        m.policy_loss(P2.log(), P2.log(), A2, torch.ones(2, 2), old_entropy=-torch.ones(2, 2))


# -- EntroPIC ---------------------------------------------------------------------------------------------------
def test_entropic_controller_per_micro_batch_by_hand():
    """K_p 1, K_i 0.01, H_target 0.1, two micro-batches of 2 rows per mini-batch of 4 (share 0.5 each): alpha uses
    the integral before the micro-batch's own error is added."""
    m = harness.get_method("entropic")
    got = []
    for j, h in enumerate([0.30, 0.30, 0.05, 0.08]):
        if j % 2 == 0:
            m.begin_mini_batch(torch.ones(4, 3))
        lp = torch.full((2, 3), -1.0)
        out = m.policy_loss(lp, lp, torch.zeros(2, 3), torch.ones(2, 3), entropy=torch.full((2, 3), h))
        got.append((out.metrics["entropic/alpha"], out.metrics["entropic/integral"]))
    # alpha_j = clip(0.01 I_j + (H_j - 0.1)); I_{j+1} = I_j + 0.5 (H_j - 0.1)
    assert flat(got) == approx_flat([0.2, 0.1, 0.2 + 0.001, 0.2, -0.05 + 0.002, 0.175, -0.02 + 0.00175, 0.165])
    assert m.state_dict() == pytest.approx({"integral": 0.165, "alpha": -0.01825, "updates": 4})
    # without begin_mini_batch a micro-batch counts as a whole mini-batch (share 1)
    solo = harness.get_method("entropic")
    solo.policy_loss(lp, lp, torch.zeros(2, 3), torch.ones(2, 3), entropy=torch.full((2, 3), 0.3))
    assert solo.integral == pytest.approx(0.2)


def test_entropic_alpha_is_clipped_to_one():
    m = harness.get_method("entropic", k_p=10.0)
    lp = torch.full((1, 2), -1.0)
    m.policy_loss(lp, lp, torch.zeros(1, 2), torch.ones(1, 2), entropy=torch.full((1, 2), 2.0))
    assert m.alpha == 1.0 and m.integral == pytest.approx(1.9)  # no anti-windup on the integral (official)


def test_entropic_loss_and_gradient_by_hand():
    """alpha 0.2 on-policy, A = [+1, +1, -1, -1], pi = [0.97, 0.5, 0.96, 0.3]: tokens 0 and 2 have pi > 0.95;
    L = mean(-A) + 0.2 * mean over them of (-r |A|) = 0 - 0.2; dL/dlog pi = -A/4 - 0.2 |A| [hp] / 2."""
    pi = torch.tensor([[0.97, 0.5, 0.96, 0.3]])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    m = harness.get_method("entropic", update="step")
    m.alpha = 0.2
    lp = pi.log().requires_grad_()
    out = m.policy_loss(lp, pi.log(), adv, torch.ones(1, 4))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.2, abs=1e-6)
    assert flat(lp.grad) == approx_flat([[-0.35, -0.25, 0.15, 0.25]], abs=1e-6)
    assert out.metrics["entropic/high_prob_frac"] == 0.5
    none_high = m.policy_loss(
        torch.log(torch.full((1, 2), 0.5)), torch.log(torch.full((1, 2), 0.5)), adv[:, :2], torch.ones(1, 2)
    )
    assert none_high.loss.item() == pytest.approx(-1.0)  # no token above 0.95: the adjustment is 0


def test_entropic_step_update_reads_the_rollout_entropy_and_round_trips():
    m = harness.get_method("entropic", update="step")
    assert not m.needs_entropy and m.has_step_state
    m.on_step_end({"entropy/rollout_token_mean": 0.3})
    assert (m.alpha, m.integral) == pytest.approx((0.2, 0.2))
    m.on_step_end({"entropy/rollout_token_mean": 0.05})  # 0.01 * 0.2 - 0.05
    assert (m.alpha, m.integral) == pytest.approx((-0.048, 0.15))
    fresh = harness.get_method("entropic", update="step")
    fresh.load_state_dict(m.state_dict())
    assert fresh.state_dict() == m.state_dict()
    with pytest.raises(ValueError, match="entropy/rollout_token_mean"):
        m.on_step_end({"entropy": 0.3})
    micro = harness.get_method("entropic")
    micro.on_step_end({"entropy/rollout_token_mean": 0.3})  # the official mode ignores the step row
    assert micro.state_dict() == {"integral": 0.0, "alpha": 0.0, "updates": 0} and micro.needs_entropy


# -- ERC --------------------------------------------------------------------------------------------------------
def _erc(method, h_new, h_old, adv, p=0.5):
    lp = torch.full(adv.shape, math.log(p)).requires_grad_()
    out = method.policy_loss(lp, lp.detach(), adv, torch.ones_like(adv), entropy=h_new, old_entropy=h_old)
    out.loss.backward()
    return out, lp.grad


def test_erc_keeps_the_gradient_only_inside_the_ratio_band():
    """H_old = [1, .5, 2, .2], H = [1.02, .56, 1.85, .2]: rho = [1.02, 1.12, 0.925, 1] -> keep [T, F, F, T];
    on-policy the loss value is mean(-A) = 0 whatever is kept, the gradient -A/4 on kept tokens only."""
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    out, grad = _erc(
        harness.get_method("erc"), torch.tensor([[1.02, 0.56, 1.85, 0.2]]), torch.tensor([[1.0, 0.5, 2.0, 0.2]]), adv
    )
    assert out.loss.item() == pytest.approx(0.0, abs=1e-7)
    assert flat(grad) == approx_flat([[-0.25, 0.0, 0.0, 0.25]], abs=1e-7)
    assert out.metrics["erc/kept_frac"] == 0.5


def test_erc_bounds_are_strict_and_zero_entropy_is_kept():
    m = harness.get_method("erc", entropy_low=0.5, entropy_high=2.0)
    adv = torch.ones(1, 4)
    # rho exactly 2 and exactly 0.5 are dropped; H = H_old = 0 gives (0 + 1e-8)/(0 + 1e-8) = 1: kept
    out, grad = _erc(m, torch.tensor([[2.0, 0.5, 0.0, 1.5]]), torch.tensor([[1.0, 1.0, 0.0, 1.0]]), adv)
    assert flat(grad) == approx_flat([[0.0, 0.0, -0.25, -0.25]])
    with pytest.raises(ValueError, match="entropy_low=1.1 must be < entropy_high=1.05"):
        harness.get_method("erc", entropy_low=1.1)


def test_erc_gppo_base_keeps_a_gradient_on_clipped_tokens():
    """r = 1.5, A = +1, eps_high 0.28: PPO's clipped token has value -1.28 and no gradient; GPPO's the same value and
    gradient -1.28 (both kept by ERC: H = H_old)."""
    old = torch.tensor([[math.log(0.4)]])
    h = torch.ones(1, 1)
    for base, grad in (("ppo", 0.0), ("gppo", -1.28)):
        lp = (old + math.log(1.5)).requires_grad_()
        out = harness.get_method("erc", base=base).policy_loss(
            lp, old, torch.ones(1, 1), torch.ones(1, 1), entropy=h, old_entropy=h
        )
        out.loss.backward()
        assert out.loss.item() == pytest.approx(-1.28) and lp.grad.item() == pytest.approx(grad), base
        assert out.metrics["clipfrac"] == 1.0


def test_erc_official_recipe_adds_the_nll_of_correct_responses_and_needs_both_entropies():
    m = harness.get_method("erc", recipe="official")
    out, grad = _erc(m, torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 2))
    assert out.loss.item() == pytest.approx(-1 + 0.1 * math.log(2), abs=1e-6)  # + 0.1 x -log 0.5
    assert flat(grad) == approx_flat([[-0.55, -0.55]], abs=1e-6)  # -1/2 - 0.1/2
    assert m.needs_entropy and m.needs_old_entropy
    with pytest.raises(ValueError, match="erc needs the current and the old policy's per-token entropy"):
        m.policy_loss(
            torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2), entropy=torch.ones(1, 2)
        )
