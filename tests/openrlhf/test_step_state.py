"""Per-step method state on OpenRLHF (adaptive_entropy): ``on_step_end`` after OpenRLHF's real ``ppo_train``
with the step's rollout measures, and ``state_dict`` through upstream's ``PolicyModelActor.save_checkpoint`` ->
``DeepspeedStrategy.save_ckpt`` / ``load_ckpt`` (a file-backed DeepSpeed engine stands in for the GPU one)."""

import os
from types import SimpleNamespace

import pytest
import torch
from orl_testlib import make_experience, rollout_forward_entropy, trainer_args

pytestmark = pytest.mark.openrlhf


def _rollout(trainer, monkeypatch, seed=7):
    """make_experience's old-log-prob forward (eval, no grad: measures the entropy), then the replay buffer.
    Returns the experience and each row's token-mean entropy from OpenRLHF's compute_entropy."""
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    exp = make_experience(batch=6, action_len=5, seed=seed)
    exp.rewards = torch.ones(6)
    m = exp.action_mask.double()
    per_row = (rollout_forward_entropy(trainer.actor, exp).double() * m).sum(-1) / m.sum(-1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    trainer.replay_buffer = NaiveReplayBuffer(2, cpu_offload=False)
    trainer.replay_buffer.append(exp)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    trainer.dataloader_pin_memory = False
    return exp, per_row


@pytest.mark.parametrize("variant", ["skywork", "trl"])
def test_ppo_train_feeds_the_step_to_the_controller(variant, configure, make_trainer, monkeypatch):
    """After OpenRLHF's ppo_train the controller sees the rollout's -mean old log-prob (skywork) or token-mean
    entropy (trl), computed by hand here; c moves by delta toward the target and the gate follows."""
    target = {"skywork": 3.0, "trl": 4.0}[variant]  # the old log-probs here ~ -2.5, a random model's H ~ ln 64
    plugin = configure({"name": "adaptive_entropy", "variant": variant, "target": target, "coef_init": 0.002})
    trainer = make_trainer(trainer_args(entropy_coef=0.0), accumulated_gradient=3)
    exp, per_row = _rollout(trainer, monkeypatch)
    m = exp.action_mask.double()
    neg_logprob = float(-(exp.action_log_probs.double() * m).sum() / m.sum())
    token_mean = float((per_row * m.sum(-1)).sum() / m.sum())
    status = trainer.ppo_train(kl_ctl=0.0)
    assert status["rollout/neg_logprob"] == pytest.approx(neg_logprob, rel=1e-9)
    assert status["entropy/rollout_token_mean"] == pytest.approx(token_mean, rel=1e-6)
    measured = neg_logprob if variant == "skywork" else token_mean
    below = measured < target
    state = plugin.method().state_dict()
    assert state["coef"] == pytest.approx(0.002 + (1e-4 if below else -1e-4))
    assert state["enabled"] == int(below) and state["updates"] == 1
    assert state["last_measured"] == pytest.approx(measured)
    assert status["adaptive_entropy/coef"] == pytest.approx(0.002)  # the step trained with the previous c


def test_stateless_methods_get_no_step_stats(configure, make_trainer, monkeypatch):
    configure({"name": "grpo"})
    trainer = make_trainer(trainer_args(), accumulated_gradient=3)
    _rollout(trainer, monkeypatch)
    assert "rollout/neg_logprob" not in trainer.ppo_train(kl_ctl=0.0)


def test_adaptive_loss_is_the_entropy_bonus_at_the_current_coefficient(configure, make_trainer):
    """With state c = 0.3, gate open, the training step's gradient equals OpenRLHF's built-in path with
    --actor.entropy_coef 0.3 (PolicyLoss - 0.3 * aggregate_loss(entropy)); with the gate closed, plain PPO."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    exp = make_experience(batch=3, seed=5)
    n = exp.action_mask.float().sum()
    norms = {"dp_size": 1, "batch_num_tokens": n, "global_batch_size": torch.tensor(3.0)}

    def grads(trainer):
        trainer.strategy.optimizer_step = lambda *a, **k: None
        trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info=norms)
        return torch.cat([p.grad.flatten() for p in trainer.actor.parameters() if p.grad is not None])

    def builtin(coef):
        original, orig_step = ppo_actor.PolicyLoss, ppo_actor.ActorPPOTrainer.training_step
        try:
            ppo_actor.PolicyLoss = original.__mro__[1]
            ppo_actor.ActorPPOTrainer.training_step = orig_step.__wrapped_original__
            return grads(make_trainer(trainer_args(entropy_coef=coef), seed=1))
        finally:
            ppo_actor.PolicyLoss, ppo_actor.ActorPPOTrainer.training_step = original, orig_step

    for enabled, coef in ((1, 0.3), (0, 0.0)):
        plugin = configure({"name": "adaptive_entropy", "coef_max": 1.0})
        plugin.method().load_state_dict({"coef": 0.3, "enabled": enabled, "last_measured": 0.1, "updates": 4})
        ours = grads(make_trainer(trainer_args(entropy_coef=0.0), seed=1))
        torch.testing.assert_close(ours, builtin(coef), rtol=1e-4, atol=1e-7)


class FileEngine:
    """Built lazily as a ``deepspeed.DeepSpeedEngine`` subclass (upstream asserts the type); its checkpoint is
    DeepSpeed's layout reduced to ``<dir>/<tag>/client_state.pt`` + ``<dir>/latest``."""

    @staticmethod
    def make():
        import deepspeed

        class _Engine(deepspeed.DeepSpeedEngine):
            def __init__(self):
                torch.nn.Module.__init__(self)

            def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True):
                os.makedirs(os.path.join(save_dir, tag), exist_ok=True)
                torch.save(client_state, os.path.join(save_dir, tag, "client_state.pt"))
                if save_latest:
                    with open(os.path.join(save_dir, "latest"), "w") as f:
                        f.write(tag)

            def load_checkpoint(self, load_dir, tag=None, **_):
                latest = os.path.join(load_dir, "latest")
                if tag is None and not os.path.exists(latest):
                    return None, None
                tag = tag or open(latest).read()
                path = os.path.join(load_dir, tag)
                return path, torch.load(os.path.join(path, "client_state.pt"), weights_only=False)

        return _Engine()


def _strategy(tmp_path, monkeypatch):
    from harness.backends.openrlhf import hook

    hook.install()
    import openrlhf.utils.deepspeed.deepspeed as ds

    assert getattr(ds, hook.PATCHED_FLAG, False)
    monkeypatch.setattr(ds, "torch_dist_barrier_and_cuda_sync", lambda: None)
    strategy = ds.DeepspeedStrategy.__new__(ds.DeepspeedStrategy)
    strategy.args = SimpleNamespace(ckpt=SimpleNamespace(path=str(tmp_path / "ckpt"), max_num=2, max_mem=1000))
    return strategy


def test_state_round_trips_through_the_openrlhf_checkpoint(configure, tmp_path, monkeypatch):
    """Upstream's PolicyModelActor.save_checkpoint writes our state into DeepSpeed's client_state (next to
    upstream's own); load_ckpt, as init_model_from_pretrained calls it, restores it bit-identically along with
    the loss's step counter, and the resumed controller then walks exactly like an uninterrupted one."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    rows = [{"rollout/neg_logprob": h} for h in (0.1, 0.13, 0.31, 0.05, 0.2, 0.19999)]
    method_cfg = {"name": "adaptive_entropy", "delta": 3e-4, "coef_init": 1e-3}
    plugin = configure(method_cfg)
    for row in rows[:3]:
        plugin.method().on_step_end(row)
    plugin.STATE.rollout_step = 3
    saved = plugin.method().state_dict()

    strategy, engine = _strategy(tmp_path, monkeypatch), FileEngine.make()
    monkeypatch.setattr(ppo_actor, "torch_dist_barrier_and_cuda_sync", lambda: None)
    actor = SimpleNamespace(
        strategy=strategy, actor=SimpleNamespace(model=engine), disable_ds_ckpt=False, save_hf_ckpt=False
    )
    ppo_actor.PolicyModelActor.__ray_actor_class__.save_checkpoint(actor, "global_step3", {"global_step": 3})

    plugin.STATE.__init__()  # a new worker process: fresh method, step 0
    plugin = configure(method_cfg)
    assert plugin.method().state_dict() != saved and plugin.STATE.rollout_step == 0
    _, states = strategy.load_ckpt(engine, os.path.join(strategy.args.ckpt.path, "_actor"))
    assert states["global_step"] == 3  # upstream's client state is untouched
    assert plugin.method().state_dict() == saved and plugin.STATE.rollout_step == 3

    import harness

    reference = harness.get_method(**method_cfg)  # never interrupted
    for row in rows[:3]:
        reference.on_step_end(row)
    for row in rows[3:]:
        reference.on_step_end(row)
        plugin.method().on_step_end(row)
    assert plugin.method().state_dict() == reference.state_dict()


def test_a_checkpoint_of_another_method_is_refused(configure, tmp_path, monkeypatch):
    plugin = configure({"name": "adaptive_entropy"})
    strategy, engine = _strategy(tmp_path, monkeypatch), FileEngine.make()
    actor_dir = os.path.join(strategy.args.ckpt.path, "_actor")
    strategy.save_ckpt(engine, actor_dir, "global_step1", 2, 1000, {})
    plugin.STATE.__init__()
    configure({"name": "grpo"})
    with pytest.raises(RuntimeError, match="written by method 'adaptive_entropy'"):
        strategy.load_ckpt(engine, actor_dir)


def test_other_checkpoints_are_left_alone(configure, tmp_path, monkeypatch):
    """Only the policy's <ckpt.path>/_actor carries our state (not a critic's)."""
    configure({"name": "adaptive_entropy"})
    strategy, engine = _strategy(tmp_path, monkeypatch), FileEngine.make()
    critic_dir = os.path.join(strategy.args.ckpt.path, "_critic")
    strategy.save_ckpt(engine, critic_dir, "global_step1", 2, 1000, {"x": 1})
    assert strategy.load_ckpt(engine, critic_dir)[1] == {"x": 1}
