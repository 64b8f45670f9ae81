"""Advantage estimators against values worked out by hand (2 prompts x 4 responses x 5 tokens)."""

import math

import pytest
import torch

import harness

MASK = torch.tensor(
    [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0],
        [1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0],
    ],
    dtype=torch.float32,
)
SCORES = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


def per_response(adv):
    """The value each response's tokens carry, and a check that it is constant on valid tokens, 0 on padding."""
    vals = []
    for row, m in zip(adv, MASK):
        assert torch.all(row[m == 0] == 0)
        valid = row[m == 1]
        assert torch.allclose(valid, valid[0].expand_as(valid))
        vals.append(float(valid[0]))
    return vals


def test_grpo_group_normalised_with_unbiased_std():
    # group 0: [1,0,1,1] mean 0.75, unbiased std sqrt((3*0.25^2 + 0.75^2)/3) = 0.5
    # group 1: [0,0,1,0] mean 0.25, std 0.5
    adv = harness.get_method("grpo").advantages(SCORES, GROUPS, MASK)
    d = 0.5 + 1e-6
    expected = [0.25 / d, -0.75 / d, 0.25 / d, 0.25 / d, -0.25 / d, -0.25 / d, 0.75 / d, -0.25 / d]
    assert per_response(adv) == pytest.approx(expected, rel=1e-6)
    assert adv.dtype == torch.float32 and adv.shape == MASK.shape


def test_dr_grpo_drops_the_std():
    adv = harness.get_method("grpo", std_normalize=False).advantages(SCORES, GROUPS, MASK)
    assert per_response(adv) == pytest.approx([0.25, -0.75, 0.25, 0.25, -0.25, -0.25, 0.75, -0.25])


def test_grpo_all_equal_group_gives_zero_and_singleton_uses_mean0_std1():
    scores = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 2, 2, 2])  # group 1 is a single response
    adv = harness.get_method("grpo").advantages(scores, groups, MASK)
    vals = per_response(adv)
    assert vals[:4] == [0.0, 0.0, 0.0, 0.0]
    assert vals[4] == pytest.approx(1.0 / (1.0 + 1e-6))  # (1 - 0) / (1 + 1e-6), verl's singleton rule
    # group 2: [0,1,0] mean 1/3, unbiased std sqrt(((1/3)^2*2 + (2/3)^2)/2) = sqrt(1/3)
    std = math.sqrt(1 / 3)
    assert vals[5:] == pytest.approx(
        [(-1 / 3) / (std + 1e-6), (2 / 3) / (std + 1e-6), (-1 / 3) / (std + 1e-6)], rel=1e-6
    )


def test_grpo_groups_need_not_be_contiguous_and_ids_may_be_strings():
    perm = torch.tensor([3, 6, 0, 5, 1, 4, 7, 2])
    m = harness.get_method("grpo")
    base = m.advantages(SCORES, GROUPS, MASK)
    shuffled = m.advantages(SCORES[perm], [f"prompt-{int(g)}" for g in GROUPS[perm]], MASK[perm])
    assert torch.equal(shuffled, base[perm])


def test_rloo_leave_one_out():
    adv = harness.get_method("rloo").advantages(SCORES, GROUPS, MASK)
    # group 0: 1 - (0+1+1)/3, 0 - (1+1+1)/3, ...; group 1: 0 - (0+1+0)/3, ..., 1 - 0
    expected = [1 / 3, -1.0, 1 / 3, 1 / 3, -1 / 3, -1 / 3, 1.0, -1 / 3]
    assert per_response(adv) == pytest.approx(expected, abs=1e-6)


def test_rloo_singleton_keeps_score():
    adv = harness.get_method("rloo").advantages(torch.tensor([0.7]), torch.tensor([5]), torch.ones(1, 3))
    assert adv[0].tolist() == pytest.approx([0.7, 0.7, 0.7])


def test_prime_by_hand():
    # one prompt, 2 responses; row 1 has 2 valid tokens. q = log pi_prm - log pi_ref
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    q = torch.tensor([[0.2, -0.4, 0.6], [0.4, 0.2, 9.0]])
    ref = torch.zeros(2, 3)
    adv = harness.get_method("prime").advantages(
        torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, prm_log_probs=q, ref_log_probs=ref
    )
    # r = 0.05 q, last valid token dropped: row0 [0.01, -0.02, 0], row1 [0.02, 0]
    # batch norm: max |reverse cumsum| = max(|-0.01|, |-0.02|, 0, |0.02|, 0) = 0.02
    c = 1 / (0.02 + 1e-6)
    p0, p1 = [0.01 * c, -0.02 * c, 0.0], [0.02 * c, 0.0]
    # leave-one-out, n = 2: m0 = mean(p0) over 3 tokens, m1 = mean(p1) over 2; r~ = 2 r - (m0 + m1)
    base = sum(p0) / 3 + sum(p1) / 2
    proc0, proc1 = [2 * x - base for x in p0], [2 * x - base for x in p1]
    # outcome at the last token: 2 s - (1 + 0) -> row0 +1, row1 -1
    rew0 = [5 * proc0[0], 5 * proc0[1], 5 * proc0[2] + 5 * 1.0]
    rew1 = [5 * proc1[0], 5 * proc1[1] + 5 * -1.0]
    ret0 = [rew0[0] + rew0[1] + rew0[2], rew0[1] + rew0[2], rew0[2]]
    ret1 = [rew1[0] + rew1[1], rew1[1]]
    vals = ret0 + ret1
    mean = sum(vals) / 5
    var = sum((v - mean) ** 2 for v in vals) / 5 * 5 / 4
    white = [(v - mean) / math.sqrt(var + 1e-8) for v in vals]
    assert adv[0].tolist() == pytest.approx(white[:3], rel=1e-4, abs=1e-5)
    assert adv[1, :2].tolist() == pytest.approx(white[3:], rel=1e-4, abs=1e-5)
    assert adv[1, 2] == 0


def test_prime_requires_process_inputs_and_groups_of_two():
    m = harness.get_method("prime")
    with pytest.raises(ValueError, match="prm_log_probs, ref_log_probs"):
        m.advantages(SCORES, GROUPS, MASK)
    with pytest.raises(ValueError, match="at least 2 responses"):
        m.advantages(
            torch.tensor([1.0]),
            torch.tensor([0]),
            torch.ones(1, 2),
            prm_log_probs=torch.zeros(1, 2),
            ref_log_probs=torch.zeros(1, 2),
        )
    with pytest.raises(ValueError, match="takes no extra input"):
        harness.get_method("grpo").advantages(SCORES, GROUPS, MASK, prm_log_probs=torch.zeros(8, 5))


def test_prm_loss_is_bce_on_beta_times_summed_log_ratio():
    from harness.baselines.prime import prm_loss

    prm = torch.tensor([[0.5, -1.0, 2.0], [1.0, 1.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    loss = prm_loss(prm, torch.zeros(2, 3), mask, torch.tensor([1.0, 0.0]), beta=0.5)
    s0, s1 = 0.5 * 1.5, 0.5 * 2.0
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected = (-math.log(sig(s0)) - math.log(1 - sig(s1))) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    assert prm.grad[1, 2] == 0  # padding gets no gradient


def test_advantage_input_errors_name_the_argument():
    m = harness.get_method("grpo")
    with pytest.raises(ValueError, match="scores must be 1-D"):
        m.advantages(SCORES[:3], GROUPS, MASK)
    with pytest.raises(ValueError, match="group_ids must be 1-D"):
        m.advantages(SCORES, GROUPS[:2], MASK)
    with pytest.raises(ValueError, match="scores has a non-finite"):
        m.advantages(torch.tensor([1.0, float("nan"), 0, 0, 0, 0, 0, 0]), GROUPS, MASK)
    with pytest.raises(ValueError, match="mask must hold only 0/1"):
        m.advantages(SCORES, GROUPS, MASK * 2)
