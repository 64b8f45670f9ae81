"""Backend parity, pocket vs TRL: on one batch and one set of weights (parity_lib.py), pocket's ``_update`` and TRL's
``training_step`` (our loss on TRL's fused-head log-probs, transformers' backward) give the same loss and gradient
for every method both run, at its defaults, at global selection scope, and in the aggregation modes OpenRLHF lacks.
The OpenRLHF column is tests/openrlhf/test_parity_trl.py (the ``openrlhf`` suite)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")  # the project's 'test' extra installs it (Python >= 3.11)
sys.path.insert(0, str(Path(__file__).resolve().parent))
import parity_lib as P  # noqa: E402

# float32 with other op orders (fused LM head vs pocket's chunked head, SDPA vs pocket's fast decoder, RoPE
# positions from the cache vs from the mask): measured max 5.4e-7 (loss) and 1.4e-6 (gradient, |g| <= 0.72)
LOSS_TOL, GRAD_TOL = 2e-6, 5e-6


@pytest.mark.parametrize("case", list(P.CASES))
def test_trl_loss_path_matches_pocket(case):
    d = P.measure(case, P.trl_loss_and_grad)
    assert d["loss_diff"] <= LOSS_TOL, d
    assert d["grad_diff"] <= GRAD_TOL, d
    assert d["grad_max"] > 0.05, d  # a real gradient, not two zeros
    if P.CASES[case]["name"] in ("clip_cov", "kl_cov", "high_entropy_tokens"):
        assert d["selected"] > 0, d  # the selection acted on this batch


def test_the_parity_check_tells_methods_apart():
    """The tolerances are far below what a different loss changes: TRL running clip_higher vs pocket running grpo
    on the same batch differ by orders of magnitude more."""
    model, tok = P.make_model()
    b = P.make_batch(model, P.make_method("grpo"))
    ref_loss, ref_grad, _ = P.pocket_loss_and_grad(model, b, P.make_method("grpo"))
    loss, grad = P.trl_loss_and_grad(model, tok, P.in_pocket_order(b), P.make_method("clip_higher"))
    assert abs(loss - ref_loss) > 100 * LOSS_TOL
    assert float((grad - ref_grad).abs().max()) > 100 * GRAD_TOL
