"""entropy_advantage on OpenRLHF: the rollout's per-token entropy, measured by the policy workers' old-log-prob
forward, reaches the advantage estimator in the experience maker (a Ray call to the workers; see also
``test_ray_hook.py::test_driver_fetches_the_rollout_entropy_from_a_real_policy_actor``)."""

import pytest
import torch
from orl_testlib import make_experience, rollout_forward_entropy, trainer_args

pytestmark = pytest.mark.openrlhf


def hand_entropy_advantage(rewards, n, entropy, mask, alpha=0.4, kappa=2.0):
    """GRPO (unbiased group std, eps 1e-6) + min(alpha H, |A| / kappa) on the valid tokens, by hand."""
    r = rewards.reshape(-1, n).double()
    a = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-6)).reshape(-1, 1).float()
    return (a + torch.minimum(alpha * entropy, a.abs() / kappa)) * mask


def test_old_logprob_pass_feeds_the_estimator_per_token(configure, make_trainer):
    """The eval-mode, no-grad forward of make_experience keeps each response's per-token entropy (OpenRLHF's
    compute_entropy on its logits); the advantages then equal the hand formula on those entropies."""
    plugin = configure({"name": "entropy_advantage"})
    trainer = make_trainer(trainer_args())
    exp = make_experience(batch=8, seed=13)
    mask = exp.action_mask.float()
    want = rollout_forward_entropy(trainer.actor, exp).float() * mask
    assert len(plugin.STATE.rollout_token_entropy) == 8
    plugin.STATE.rollout_token_entropy[12345] = torch.ones(3)  # a stale row (never asked for): dropped

    (got,) = plugin.rollout_token_entropy([exp], lambda keys: plugin.take_rollout_token_entropy(None, keys))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert plugin.STATE.rollout_token_entropy == {}  # handed over once; nothing stale accumulates

    exp.rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    exp.index = list(range(8))
    (adv,) = plugin.harness_advantages([exp], 4, {"entropy": [got]})
    torch.testing.assert_close(adv, hand_entropy_advantage(exp.rewards, 4, want, mask), rtol=1e-5, atol=1e-6)
    assert float((adv - hand_entropy_advantage(exp.rewards, 4, 0 * want, mask)).abs().max()) > 0.1  # H matters


def test_a_row_the_workers_did_not_measure_is_an_error(configure):
    plugin = configure({"name": "entropy_advantage"})
    exp = make_experience(batch=2, seed=1)
    with pytest.raises(RuntimeError, match="log_entropy must be true"):
        plugin.rollout_token_entropy([exp], lambda keys: {})


def test_methods_without_the_extra_store_no_token_entropy(configure, make_trainer):
    plugin = configure({"name": "grpo"})
    trainer = make_trainer(trainer_args())
    exp = make_experience(batch=2, seed=3)
    trainer.actor.eval()
    with torch.no_grad():
        trainer.actor(exp.sequences, exp.action_mask, exp.attention_mask)
    trainer.actor.train()
    assert plugin.STATE.rollout_token_entropy == {} and len(plugin.STATE.rollout_entropy) == 2
