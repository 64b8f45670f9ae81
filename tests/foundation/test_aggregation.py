"""Loss aggregation by hand: every mode with each empty-row policy, and micro-batch weights that make gradient
accumulation exact for every mode with empty rows (issue 26, items 3, 8, 9; peers in docs/conventions.md)."""

import pytest
import torch

from harness.kernel import ops


def test_empty_row_policies_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0], [0, 0, 0]])
    expected = {
        ("seq-mean-token-sum", "auto"): (6 + 4) / 3,  # the fork's mean over all rows
        ("seq-mean-token-sum", "count"): (6 + 4) / 3,
        ("seq-mean-token-sum", "skip"): (6 + 4) / 2,  # verl HEAD
        ("seq-mean-token-mean", "auto"): (2 + 4) / 2,
        ("seq-mean-token-mean", "skip"): (2 + 4) / 2,
        ("seq-mean-token-mean", "count"): (2 + 4) / 3,  # TRL
        ("seq-mean-token-sum-norm-verl", "auto"): 10 / (2 * 3),
        ("seq-mean-token-sum-norm-verl", "count"): 10 / (3 * 3),
        ("token-mean", "count"): 10 / 4,
        ("seq-mean-token-sum-norm", "count"): 10 / 3,
    }
    for (mode, rows), value in expected.items():
        assert ops.agg_loss(loss, mask, mode, rows).item() == pytest.approx(value), (mode, rows)
    with pytest.raises(ValueError, match="empty_rows"):
        ops.agg_loss(loss, mask, "seq-mean-token-mean", "drop")


# issue 26, item 9 ------------------------------------------------------------------------------------------
def test_micro_batch_weight_is_exact_with_an_empty_row():
    loss, mask = torch.tensor([[1.0], [0.0], [0.0], [0.0]]), torch.tensor([[1.0], [0.0], [1.0], [1.0]])
    full = ops.agg_loss(loss, mask, "seq-mean-token-mean").item()
    parts = [
        ops.agg_loss(loss[r], mask[r], "seq-mean-token-mean").item()
        * ops.micro_batch_weight("seq-mean-token-mean", mask[r], mask)
        for r in (slice(0, 2), slice(2, 4))
    ]
    assert full == pytest.approx(1 / 3) and sum(parts) == pytest.approx(1 / 3)  # was 0.5 (weight by rows 2/4)
    assert ops.micro_batch_weight("seq-mean-token-mean", mask[:2], mask) == pytest.approx(1 / 3)


@pytest.mark.parametrize("mode", ops.AGG_MODES)
@pytest.mark.parametrize("empty_rows", ops.EMPTY_ROWS)
def test_micro_batch_weights_sum_to_the_mini_batch_aggregate_for_every_mode(mode, empty_rows):
    g = torch.Generator().manual_seed(3)
    loss = torch.randn(12, 5, generator=g)
    mask = (torch.rand(12, 5, generator=g) < 0.6).float()
    mask[[1, 4, 5, 9]] = 0.0  # empty rows, one micro-batch of the 4-split has two
    full = ops.agg_loss(loss, mask, mode, empty_rows)
    for n in (2, 3, 4, 12):
        total = sum(
            ops.agg_loss(loss[r], mask[r], mode, empty_rows) * ops.micro_batch_weight(mode, mask[r], mask, empty_rows)
            for r in torch.arange(12).split(12 // n)
        )
        assert float(total) == pytest.approx(float(full), rel=1e-6, abs=1e-7), n


def test_global_normaliser_scale_counts_rows_by_the_same_policy():
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    skip = ops.global_normaliser_scale("seq-mean-token-mean", mask, 2, global_batch_size=8)
    count = ops.global_normaliser_scale("seq-mean-token-mean", mask, 2, global_batch_size=8, empty_rows="count")
    assert skip.item() == pytest.approx(2 / 8 * 2) and count.item() == pytest.approx(3 / 8 * 2)
