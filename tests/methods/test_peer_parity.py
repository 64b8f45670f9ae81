"""Peer parity (issue 26): each peer convention where the peers differ, pinned on the issue's minimal input to the
peer's value and gradient worked out by hand here, with the option that reproduces it; the default (ours) beside
it, unchanged. The numbers are facts about verl 0.9.1, TRL 1.16.0, OpenRLHF 0.11.2 and the official releases from
the issue's independent check; docs/conventions.md has the table. The aggregation modes themselves (items 3, 8, 9:
empty rows, verl's sum-norm, exact micro-batch weights) are pinned in tests/foundation/test_aggregation.py."""

import math

import pytest
import torch

import harness
from harness.kernel import ops


def _one_token(log_ratio: float, adv: float):
    """B = T = 1: log pi = log_ratio + log pi_old (log pi_old = ln 0.5), advantage adv."""
    old = torch.tensor([[math.log(0.5)]])
    lp = (old + log_ratio).requires_grad_()
    return lp, old, torch.tensor([[adv]]), torch.ones(1, 1)


def _loss_and_grad(method, lp, old, adv, mask, **kw):
    """[loss, *gradient in log_probs (row-major)]: one flat list, as pytest.approx compares them."""
    out = method.policy_loss(lp, old, adv, mask, **kw)
    out.loss.backward()
    return [out.loss.item(), *lp.grad.flatten().tolist()]


def flat(loss, grad):
    return pytest.approx([loss, *torch.tensor(grad, dtype=torch.float64).flatten().tolist()], abs=1e-6)


# 1 -------------------------------------------------------------------------------------------------------
def test_ce_gppo_official_recipe_adds_the_releases_nll_on_correct_responses():
    # a correct response (A = +1), on-policy, log pi = ln 0.5: official -1 + 0.1 * ln 2 = -0.9307, grad -1 - 0.1
    lp, old, adv, mask = _one_token(0.0, 1.0)
    m = harness.get_method("ce_gppo", recipe="official")
    loss, grad = _loss_and_grad(m, lp, old, adv, mask)
    assert loss == pytest.approx(-1 + 0.1 * math.log(2), abs=1e-6) and loss == pytest.approx(-0.9307, abs=1e-4)
    assert grad == pytest.approx(-1.1, abs=1e-6)
    lp, old, adv, mask = _one_token(0.0, 1.0)
    assert _loss_and_grad(harness.get_method("ce_gppo"), lp, old, adv, mask) == flat(-1.0, [[-1.0]])


def test_ce_gppo_nll_is_the_token_mean_over_correct_responses_only():
    lp = torch.log(torch.tensor([[0.5, 0.25, 1.0], [0.1, 0.1, 0.1]])).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3])  # row 0 correct, row 1 wrong
    m = harness.get_method("ce_gppo", recipe="official")
    out = m.policy_loss(lp, lp.detach(), adv, mask)
    nll = (math.log(2) + math.log(4)) / 2  # token mean over the correct row's 2 valid tokens
    assert out.metrics["ce_gppo/positive_nll"] == pytest.approx(nll, rel=1e-6)
    pg = (-1 - 1 + 1 + 1 + 1) / 5
    assert out.loss.item() == pytest.approx(pg + 0.1 * nll, rel=1e-6)
    out.loss.backward()
    # NLL gradient -0.1 / 2 on the correct tokens only; the PG gradient -A / 5 everywhere valid
    assert lp.grad.flatten().tolist() == pytest.approx([-0.25, -0.25, 0.0, 0.2, 0.2, 0.2], abs=1e-6)
    none_correct = m.policy_loss(lp.detach(), lp.detach(), -adv.abs(), mask)
    assert none_correct.metrics["ce_gppo/positive_nll"] == 0.0


# 2 -------------------------------------------------------------------------------------------------------
def test_w_reinforce_official_recipe_trains_with_the_entropy_bonus():
    lp, old, adv, mask = _one_token(0.0, 0.1)
    ent = torch.tensor([[1.0]], requires_grad=True)
    m = harness.get_method("w_reinforce", recipe="official")
    assert m.needs_entropy
    out = m.policy_loss(lp, old, adv, mask, entropy=ent)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(-0.101, abs=1e-7) and ent.grad.item() == pytest.approx(-0.001)
    with pytest.raises(ValueError, match="recipe: official needs the per-token entropy"):
        m.policy_loss(lp.detach(), old, adv, mask)
    paper = harness.get_method("w_reinforce")
    assert not paper.needs_entropy
    ent = torch.tensor([[1.0]], requires_grad=True)
    out = paper.policy_loss(lp.detach(), old, adv, mask, entropy=ent)
    assert out.loss.item() == pytest.approx(-0.1) and not out.loss.requires_grad and ent.grad is None


# 3 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name,ours,trl",
    [
        ("gspo", (-1.0, [[-1.0], [0.0]]), (-0.5, [[-0.5], [0.0]])),
        ("sapo", (-2.0, [[-1.0], [0.0]]), (-1.0, [[-0.5], [0.0]])),
    ],
)
def test_trl_counts_empty_rows_in_the_sequence_mean(name, ours, trl):
    mask, adv = torch.tensor([[1.0], [0.0]]), torch.tensor([[1.0], [0.0]])
    for hp, expected in (({}, ours), ({"empty_rows": "count"}, trl), ({"empty_rows": "skip"}, ours)):
        lp = torch.full((2, 1), -0.7, requires_grad=True)
        got = _loss_and_grad(harness.get_method(name, **hp), lp, lp.detach(), adv, mask)
        assert got == flat(*expected), hp


# 4 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["sequence", "token"])
def test_gspo_with_verl_091s_default_aggregation(level):
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([[1.0, 1.0], [-1.0, 0.0]])
    lp = torch.full((2, 2), -1.0, requires_grad=True)
    verl = harness.get_method("gspo", agg="token-mean", level=level)
    # verl 0.9.1: (-1 - 1 + 1) / 3 tokens
    assert _loss_and_grad(verl, lp, lp.detach(), adv, mask) == flat(-1 / 3, [[-1 / 3, -1 / 3], [1 / 3, 0.0]])
    lp = lp.detach().requires_grad_()
    ours = harness.get_method("gspo", level=level)  # ours (OpenRLHF's): mean over rows of (-1, +1)
    assert _loss_and_grad(ours, lp, lp.detach(), adv, mask) == flat(0.0, [[-1 / 4, -1 / 4], [1 / 2, 0.0]])


# 5 -------------------------------------------------------------------------------------------------------
def test_high_entropy_tokens_trl_has_no_dual_clip():
    trl = {"normalize": "all", "selection": "quantile", "clip_ratio_c": 0.0}
    for hp, expected in ((trl, (20.0, [[20.0]])), ({"normalize": "all"}, (10.0, [[0.0]]))):
        lp, old, adv, mask = _one_token(math.log(20.0), -1.0)
        got = _loss_and_grad(
            harness.get_method("high_entropy_tokens", **hp), lp, old, adv, mask, entropy=torch.ones(1, 1)
        )
        assert got == flat(*expected), hp


# 6 -------------------------------------------------------------------------------------------------------
def test_dual_clip_gives_verls_default_number():
    lp, old, adv, mask = _one_token(math.log(4.0), -1.0)
    assert _loss_and_grad(harness.get_method("grpo", clip_ratio_c=3.0), lp, old, adv, mask) == flat(3.0, [[0.0]])
    lp, old, adv, mask = _one_token(math.log(4.0), -1.0)
    assert _loss_and_grad(harness.get_method("grpo"), lp, old, adv, mask) == flat(4.0, [[4.0]])


def test_log_ratio_clamp_gives_openrlhfs_number():
    # A = -1, log r = 25: OpenRLHF clamps log r to 20 -> loss e^20, no gradient; unclamped e^25 and gradient e^25
    for hp, value, grad in (({"log_ratio_clamp": 20.0}, math.exp(20), 0.0), ({}, math.exp(25), math.exp(25))):
        lp, old, adv, mask = _one_token(25.0, -1.0)
        out = harness.get_method("grpo", **hp).policy_loss(lp, old, adv, mask)
        out.loss.backward()
        assert out.loss.item() == pytest.approx(value, rel=1e-5) and lp.grad.item() == pytest.approx(grad, rel=1e-5)
        assert out.metrics["log_ratio/max_abs"] == pytest.approx(25.0)  # diagnostics see the unclamped ratio
    lp, old, adv, mask = _one_token(25.0, -1.0)  # both, as OpenRLHF with --actor.dual_clip 3: min(e^20, 3)
    m = harness.get_method("grpo", log_ratio_clamp=20.0, clip_ratio_c=3.0)
    assert _loss_and_grad(m, lp, old, adv, mask) == flat(3.0, [[0.0]])


@pytest.mark.parametrize("name", ["clip_cov", "ce_gppo", "gspo", "adaptive_entropy", "high_entropy_tokens"])
def test_every_ppo_clip_method_takes_both_options(name):
    lp, old, adv, mask = _one_token(math.log(4.0), -1.0)
    m = harness.get_method(name, clip_ratio_c=3.0, log_ratio_clamp=20.0)
    assert isinstance(m, harness.kernel.method.PPOClipMethod)
    out = m.policy_loss(lp, old, adv, mask, entropy=torch.ones(1, 1), generator=torch.Generator().manual_seed(0))
    assert out.loss.item() <= 3.0 + 1e-6  # capped at -A c (Clip-Cov may zero its one token)


# 7 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rho,entropy,quantile,topk",
    [
        (0.3, [0.1, 0.2, 0.3, 0.4], [0, 0, 0, 1], [0, 0, 1, 1]),
        (0.2, [0.5] * 5, [1] * 5, [1, 0, 0, 0, 0]),  # ties at the threshold: TRL keeps all; top-k one (by position)
    ],
)
def test_high_entropy_mask_quantile_vs_topk(rho, entropy, quantile, topk):
    ent, mask = torch.tensor([entropy]), torch.ones(1, len(entropy))
    for selection, expected in (("quantile", quantile), ("topk", topk)):
        m = harness.get_method("high_entropy_tokens", rho=rho, selection=selection)
        chosen, count, n = m.select(ent, mask)
        assert chosen.int().tolist() == [expected] and count == sum(expected) and n == len(entropy), selection
        out = m.policy_loss(
            torch.zeros(1, len(entropy)), torch.zeros(1, len(entropy)), torch.ones(1, len(entropy)), mask, entropy=ent
        )
        assert out.metrics["selected/count"] == sum(expected)


def test_quantile_mask_ignores_padding_and_normalises_by_the_selected_count():
    ent = torch.tensor([[0.1, 0.2, 9.0], [0.3, 0.4, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])  # the 9.0 is padding
    m = harness.get_method("high_entropy_tokens", rho=0.3, selection="quantile")
    lp = torch.zeros(2, 3, requires_grad=True)
    out = m.policy_loss(lp, torch.zeros(2, 3), torch.ones(2, 3), mask, entropy=ent)
    out.loss.backward()
    assert out.metrics["selected/count"] == 1  # only H = 0.4 >= 0.31
    assert out.loss.item() == pytest.approx(-1.0)  # normalize "selected": the one token's -A r over 1
    assert lp.grad.flatten().tolist() == pytest.approx([0, 0, 0, 0, -1.0, 0])


# 8 -------------------------------------------------------------------------------------------------------
def test_verl_091_seq_mean_token_sum_norm_beside_the_forks():
    loss, mask = torch.tensor([[1.0, 2.0], [3.0, 0.0]]), torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert ops.agg_loss(loss, mask, "seq-mean-token-sum-norm-verl").item() == pytest.approx(1.5)
    assert ops.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(3.0)
    lp = torch.zeros(2, 2, requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss_v, *grad = _loss_and_grad(
        harness.get_method("grpo", agg="seq-mean-token-sum-norm-verl"), lp, lp.detach(), adv, mask
    )
    assert [loss_v, *grad] == flat(-3 / 4, [[-0.25, -0.25], [-0.25, 0.0]])


# 9 -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("empty_rows", ops.EMPTY_ROWS)
def test_a_methods_micro_batches_sum_to_its_mini_batch_loss_with_an_empty_row(empty_rows):
    mask = torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    adv = torch.tensor([[1.0], [0.0], [-1.0], [0.5]])
    lp = torch.full((4, 1), -0.3)
    m = harness.get_method("grpo", agg="seq-mean-token-mean", empty_rows=empty_rows)
    full = m.policy_loss(lp, lp, adv, mask).loss.item()
    parts = sum(
        m.policy_loss(lp[r], lp[r], adv[r], mask[r]).loss.item() * m.micro_batch_weight(mask[r], mask)
        for r in (slice(0, 2), slice(2, 4))
    )
    assert parts == pytest.approx(full)
    assert full == pytest.approx((-1 + 1 - 0.5) / (4 if empty_rows == "count" else 3))
