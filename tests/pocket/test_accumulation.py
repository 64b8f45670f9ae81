"""Gradient accumulation: the summed micro-batch losses give the mini-batch gradient, whatever the micro size;
a global-scope selection plan makes covariance methods independent of the micro-batch size as well."""

import pytest
import torch

from harness.backends.pocket.generate import token_logprobs
from harness.backends.pocket.trainer import PocketTrainer, make_generator
from harness.run.config import load_config


def _grads(tiny, tmp_path, method, micro, plan_scope=None):
    tiny["method"] = method
    tiny["train"].update(micro_batch_size=micro, prompts_per_step=4, samples_per_prompt=4)
    tr = PocketTrainer(load_config(tiny), tmp_path / f"m{micro}", log=lambda *_: None)
    tr.setup()
    ro = tr.rollout(1)
    batch = ro["batch"]
    with torch.no_grad():
        old, _ = token_logprobs(tr.model, batch)
    # fixed, non-trivial advantages (a random model scores 0 everywhere) and a policy moved off the old one
    adv = torch.linspace(-1.5, 1.5, batch.mask.shape[0])[:, None] * batch.mask
    with torch.no_grad():
        for p in tr.model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    plan = None
    if plan_scope == "global":
        with torch.no_grad():
            cur, _ = token_logprobs(tr.model, batch)
        plan = tr.method.selection_plan(cur, old, adv, batch.mask, generator=make_generator(0, 1, "method"))
    tr.model.train()
    tr.model.zero_grad(set_to_none=True)
    n_tok, _, n_sel = tr.accumulate_gradients(1, batch, old, adv, plan, make_generator(0, 1, "method"))
    assert n_tok == float(batch.mask.sum())
    return [p.grad.clone() for p in tr.model.parameters()], n_sel


@pytest.mark.parametrize(
    "method",
    [
        {"name": "grpo"},
        {"name": "grpo", "agg": "seq-mean-token-mean"},
        {"name": "grpo", "agg": "seq-mean-token-sum-norm"},
        {"name": "entropy_bonus", "coef": 0.1},
    ],
)
def test_micro_batch_size_does_not_change_the_gradient(tiny, tmp_path, method):
    g16, _ = _grads(tiny, tmp_path, method, 16)
    g3, _ = _grads(tiny, tmp_path, method, 3)
    assert any(float(g.abs().sum()) > 0 for g in g16)
    for a, b in zip(g16, g3):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_global_plan_makes_kl_cov_independent_of_micro_size(tiny, tmp_path):
    kl = {"name": "kl_cov", "k_ratio": 0.02, "scope": "global"}
    g16, s16 = _grads(tiny, tmp_path, kl, 16, plan_scope="global")
    g3, s3 = _grads(tiny, tmp_path, kl, 3, plan_scope="global")
    assert s16 == s3 == 1  # max(1, int(0.02 * ~60 tokens)) over the whole mini-batch
    for a, b in zip(g16, g3):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    # official micro-batch scope: one token per micro-batch of 3 -> many more tokens, a different gradient
    local = {"name": "kl_cov", "k_ratio": 0.02}
    _, s_local = _grads(tiny, tmp_path, local, 3)
    assert s_local > s3
