"""STEER/ERC on OpenRLHF: the old policy's per-token entropy, measured by the policy workers' old-log-prob forward,
travels in each experience's ``info`` through OpenRLHF's own replay buffer (split per sample, padding removed,
rebatched) into the loss of the real ``ppo_train``; and ``begin_mini_batch`` opens each optimizer-step window
(EntroPIC's row shares)."""

import pytest
import torch
from orl_testlib import experience_maker, make_experience, rollout_forward_entropy, trainer_args

pytestmark = pytest.mark.openrlhf


def _ppo_train(plugin, trainer, exp, monkeypatch, accumulated_gradient=None):
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    trainer.replay_buffer = NaiveReplayBuffer(2, cpu_offload=False)
    trainer.replay_buffer.append(exp)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    trainer.dataloader_pin_memory = False
    return trainer.ppo_train(kl_ctl=0.0)


def test_old_entropy_reaches_the_loss_through_the_replay_buffer(configure, make_trainer, monkeypatch):
    plugin = configure({"name": "erc"})
    trainer = make_trainer(trainer_args())
    exp = make_experience(batch=6, seed=31)
    want = rollout_forward_entropy(trainer.actor, exp).float() * exp.action_mask  # the forward stores it per row
    assert len(plugin.STATE.rollout_token_entropy) == 6

    # the patched compute_advantages_and_returns fetches it once from the workers (here: this process)
    monkeypatch.setattr(plugin, "ray_fetch", lambda group: lambda keys: plugin.take_rollout_token_entropy(None, keys))
    exp.rewards, exp.index = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 1.0]), list(range(6))
    exp.kl = torch.zeros_like(exp.action_mask, dtype=torch.float32)
    maker = experience_maker("group_norm", 3)
    (exp,) = maker.compute_advantages_and_returns([exp])
    torch.testing.assert_close(exp.info[plugin.OLD_ENTROPY_KEY], want.cpu(), rtol=1e-5, atol=1e-6)
    assert plugin.STATE.rollout_token_entropy == {}

    seen = []
    m = plugin.method()
    orig = m.policy_loss

    def spy(lp, old, adv, mask, **kw):
        seen.append((old.detach().clone(), kw["old_entropy"].clone(), kw["entropy"].detach().clone(), mask.clone()))
        return orig(lp, old, adv, mask, **kw)

    monkeypatch.setattr(m, "policy_loss", spy)
    status = _ppo_train(plugin, trainer, exp, monkeypatch)
    assert len(seen) == 3 and "harness/old_entropy" not in status  # 3 micro-batches of 2; not logged as a metric
    # each row reached the loss with its own old entropy (rows matched by their old log-probs; the loader shuffles)
    for old, old_ent, _, mask in seen:
        for r in range(old.shape[0]):
            i = int(
                (exp.action_log_probs - torch.nn.functional.pad(old[r], (0, 5 - old.shape[1]))).abs().sum(-1).argmin()
            )
            n = int(mask[r].sum())
            torch.testing.assert_close(old_ent[r, :n], want[i, :n], rtol=1e-5, atol=1e-6)
    # on-policy, the first update's training forward has the same entropy (train vs eval mode, no dropout)
    torch.testing.assert_close(seen[0][2][seen[0][3].bool()], seen[0][1][seen[0][3].bool()], rtol=1e-4, atol=1e-5)
    assert status["erc/kept_frac"] == pytest.approx(1.0)  # ERC only acts off-policy


def test_a_method_without_it_carries_none(configure, make_trainer, monkeypatch):
    plugin = configure({"name": "grpo"})
    trainer = make_trainer(trainer_args())
    exp = make_experience(batch=2, seed=32)
    rollout_forward_entropy(trainer.actor, exp)
    assert plugin.STATE.rollout_token_entropy == {}  # neither the estimator nor the loss asks for it


def test_missing_old_entropy_is_an_error_naming_the_setting(configure, make_trainer, monkeypatch):
    plugin = configure({"name": "steer"})
    trainer = make_trainer(trainer_args())
    exp = make_experience(batch=2, seed=33)
    with pytest.raises(RuntimeError, match="needs the old policy's entropy.*log_entropy must be true"):
        trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info={})
    assert plugin.take_old_entropy(exp) is None


def test_begin_mini_batch_opens_every_optimizer_window(configure, make_trainer, monkeypatch):
    """EntroPIC with 6 rows in one window of 3 micro-batches of 2: begin_mini_batch sees the window's 6 rows once,
    so every micro-batch adds a third of its error to the integral (the official rows / mini-batch rows)."""
    plugin = configure({"name": "entropic", "target_entropy": 0.0})
    trainer = make_trainer(trainer_args(), accumulated_gradient=3)
    m = plugin.method()
    starts = []
    monkeypatch.setattr(
        m,
        "begin_mini_batch",
        lambda mask: (starts.append(int(mask.shape[0])), setattr(m, "_mini_rows", int(mask.shape[0]))),
    )
    errors = []
    orig = m.control
    monkeypatch.setattr(m, "control", lambda h, share: (errors.append((h, share)), orig(h, share))[1])
    exp = make_experience(batch=6, seed=34)
    exp.rewards = torch.ones(6)
    _ppo_train(plugin, trainer, exp, monkeypatch)
    assert starts == [6] and [s for _, s in errors] == pytest.approx([1 / 3] * 3)
    assert m.integral == pytest.approx(sum(h for h, _ in errors) / 3)
