"""Our loss and advantages inside OpenRLHF's real ``ActorPPOTrainer.training_step`` (tiny random Llama, CPU).

The trainer, the Actor (log-probs, entropy), ``aggregate_loss`` normalisers and the metric plumbing are
OpenRLHF's own; only DeepSpeed is replaced by a one-process strategy (``FakeStrategy``).
"""

import pytest
import torch
from orl_testlib import make_experience, split_experience, trainer_args

pytestmark = pytest.mark.openrlhf


def _params(trainer):
    return torch.cat([p.detach().flatten().clone() for p in trainer.actor.parameters()])


def _norms(exp, dp=1):
    n = exp.action_mask.float().sum()
    b = torch.tensor(float(exp.action_mask.shape[0]), device=n.device)
    return {"dp_size": dp, "batch_num_tokens": n, "global_batch_size": b}


@pytest.mark.parametrize(
    "method,coef",
    [
        ({"name": "kl_cov", "k_ratio": 0.1}, 0.0),
        ({"name": "clip_cov", "clip_ratio": 0.1, "cov_lb": -10.0, "cov_ub": 10.0}, 0.0),
        ({"name": "entropy_bonus", "coef": 0.05}, 0.05),
        ({"name": "grpo"}, None),
        ({"name": "high_entropy_tokens"}, 0.0),
        ({"name": "adaptive_entropy", "coef_init": 0.01}, 0.0),
    ],
)
def test_training_step_runs_our_method(method, coef, configure, make_trainer):
    plugin = configure(method)
    trainer = make_trainer(trainer_args(entropy_coef=coef))
    assert type(trainer.actor_loss_fn).__name__ == "HarnessPolicyLoss"
    exp = make_experience(batch=4)
    before = _params(trainer)
    status = trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info=_norms(exp))
    after = _params(trainer)
    assert not torch.equal(before, after), "parameters did not change"
    metrics = status["metrics"]
    assert torch.isfinite(metrics["policy_loss"]).all()
    assert "ppo_clip_ratio" in metrics and "ppo_kl" in metrics
    if method["name"] in ("kl_cov", "clip_cov"):
        frac = float(metrics["selected/frac"])
        assert 0 < frac <= 0.5, frac
        assert "cov/mean" in metrics
        per_sample = metrics["harness/selected_per_sample"]
        assert per_sample.shape == (4,)
        assert float(per_sample.sum()) == pytest.approx(frac * float(exp.action_mask.sum()))
    if method["name"] == "high_entropy_tokens":  # k = ceil(0.2 n) of the micro-batch's n valid tokens
        n = int(exp.action_mask.sum())
        assert float(metrics["selected/frac"]) == pytest.approx(max(1, int(n * 0.2 + 0.9999)) / n)
    if method["name"] == "adaptive_entropy":
        assert float(metrics["adaptive_entropy/coef_realized"]) == pytest.approx(0.01)
    if coef is not None:
        assert metrics["harness/entropy"].shape == (4,)
        assert 3.0 < float(metrics["harness/entropy"].mean()) < 4.3  # ~ln 64 for a random model
        assert "entropy_loss" in metrics
    else:
        assert "harness/entropy" not in metrics
    assert trainer.args.actor.entropy_coef == coef  # restored after the step
    assert plugin.STATE.entropy is None


def test_entropy_bonus_counted_once(configure, make_trainer):
    """With the bonus in our loss and upstream's term switched off for the step, the gradient equals
    OpenRLHF's built-in (PolicyLoss - coef * aggregate_loss(entropy)) computed on the same model."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    from harness.backends.openrlhf.plugin import make_policy_loss_class

    configure({"name": "entropy_bonus", "coef": 0.5})
    exp = make_experience(batch=3, seed=5)

    def grads(trainer):
        trainer.strategy.optimizer_step = lambda *a, **k: None
        trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info=_norms(exp))
        return torch.cat([p.grad.flatten() for p in trainer.actor.parameters() if p.grad is not None])

    ours = grads(make_trainer(trainer_args(entropy_coef=0.5), seed=1))
    builtin_cls = ppo_actor.PolicyLoss.__mro__[1]  # OpenRLHF's own PolicyLoss
    assert builtin_cls.__name__ == "PolicyLoss"
    original = ppo_actor.PolicyLoss
    orig_step = ppo_actor.ActorPPOTrainer.training_step
    try:
        ppo_actor.PolicyLoss = builtin_cls
        ppo_actor.ActorPPOTrainer.training_step = orig_step.__wrapped_original__
        ref = grads(make_trainer(trainer_args(entropy_coef=0.5), seed=1))
    finally:
        ppo_actor.PolicyLoss = original
        ppo_actor.ActorPPOTrainer.training_step = orig_step
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-7)
    assert make_policy_loss_class  # imported for the class relationship above


def test_global_scope_plan_is_independent_of_micro_batching(configure, make_trainer):
    """scope: global plans once per optimizer window over all its micro-batches: the union of the per-micro
    plans equals one selection_plan over the whole mini-batch, whatever the split."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    import harness

    method = {"name": "kl_cov", "k_ratio": 0.15, "scope": "global"}
    configure(method)
    trainer = make_trainer(trainer_args())
    assert ppo_actor.iter_grad_accum_global_norm.__name__ == "planned"
    full = make_experience(batch=6, seed=2)
    # whole-batch reference selection with the current policy
    with torch.no_grad():
        lp = trainer.actor(full.sequences, full.action_mask, attention_mask=full.attention_mask)
    m = harness.get_method("kl_cov", k_ratio=0.15, scope="global")
    expected = m.selection_plan(lp, full.action_log_probs, full.advantages, full.action_mask)
    assert 0 < int(expected.sum()) < int(full.action_mask.sum())

    from harness.backends.openrlhf import plugin

    plugin.STATE.trainer = trainer
    for rows in ([slice(0, 2), slice(2, 4), slice(4, 6)], [slice(0, 3), slice(3, 6)]):
        micro = split_experience(full, rows)
        items = list(
            ppo_actor.iter_grad_accum_global_norm(iter(micro), trainer.strategy, len(micro), lambda e: e.action_mask)
        )
        assert [it for it, _ in items] == micro
        plan = torch.cat([e._harness_selected for e in micro])
        assert torch.equal(plan, expected)

    # and the training step uses the plan: selected/frac in the step equals the plan's share of its tokens
    micro = split_experience(full, [slice(0, 3), slice(3, 6)])
    list(ppo_actor.iter_grad_accum_global_norm(iter(micro), trainer.strategy, 2, lambda e: e.action_mask))
    status = trainer.training_step(micro[0], kl_ctl=0.0, step=0, loss_batch_info=_norms(micro[0]))
    want = float(micro[0]._harness_selected.sum() / micro[0].action_mask.sum())
    assert float(status["metrics"]["selected/frac"]) == pytest.approx(want)


@pytest.mark.parametrize("scope", ["global", "micro_batch"])
def test_real_ppo_train_selects_over_the_window(scope, configure, make_trainer, monkeypatch):
    """OpenRLHF's own ppo_train (replay buffer, shuffled DataLoader, iter_grad_accum_global_norm, metric
    reduction) over 6 samples = one optimizer window of 3 micro-batches of 2. KL-Cov with k_ratio 0.1:
    scope global selects max(1, int(0.1 N)) tokens over the window; micro_batch selects at least 1 per
    micro-batch (the official per-GPU approximation), so the logged selected/frac differs."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    from harness.backends.openrlhf import plugin

    configure({"name": "kl_cov", "k_ratio": 0.1, "scope": scope})
    trainer = make_trainer(trainer_args(), accumulated_gradient=3)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    trainer.replay_buffer = NaiveReplayBuffer(2, cpu_offload=False)
    exp = make_experience(batch=6, action_len=5, seed=7)
    exp.rewards = torch.ones(6)
    trainer.replay_buffer.append(exp)
    n_tokens = int(exp.action_mask.sum())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    trainer.dataloader_pin_memory = False
    step_before = plugin.STATE.rollout_step
    status = trainer.ppo_train(kl_ctl=0.0)
    assert plugin.STATE.rollout_step == step_before + 1
    frac = status["selected/frac"] * n_tokens
    if scope == "global":
        assert frac == pytest.approx(max(1, int(0.1 * n_tokens)))
    else:
        assert frac >= 3 - 1e-6  # at least one token in each of the 3 micro-batches
    assert ppo_actor.iter_grad_accum_global_norm.__name__ == "planned"


def test_global_scope_across_two_dp_ranks(tiny_model_dir, tmp_path, configure, make_trainer):
    """Two gloo ranks, each with half of the mini-batch in two micro-batches: the planner's collectives
    (through method.selection_plan) give the same tokens as one process selecting over all 8 rows."""
    import socket

    import torch.multiprocessing as mp
    from orl_testlib import dp_rank_main

    import harness

    method = {"name": "kl_cov", "k_ratio": 0.15, "scope": "global"}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(dp_rank_main, args=(2, tiny_model_dir, port, str(tmp_path), method), nprocs=2, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    configure(method)
    trainer = make_trainer(trainer_args())
    full = make_experience(batch=8, seed=2)
    with torch.no_grad():
        lp = trainer.actor(full.sequences, full.action_mask, attention_mask=full.attention_mask)
    m = harness.get_method("kl_cov", k_ratio=0.15, scope="global")
    expected = m.selection_plan(lp, full.action_log_probs, full.advantages, full.action_mask)
    got = torch.cat([p["plan"] for p in parts])
    assert parts[0]["tokens"] == float(full.action_mask.sum()) / 2  # OpenRLHF's window norm: all ranks / gas
    assert int(expected.sum()) == max(1, int(0.15 * int(full.action_mask.sum())))
    assert torch.equal(got, expected)


def test_entropy_measured_in_the_old_logprob_pass(configure, make_trainer, monkeypatch):
    """PolicyModelActor.forward's eval-mode, no-grad old-log-prob forward also yields each response's
    token-mean entropy (the official pre-update `entropy`), attached to the rows when they enter OpenRLHF's
    replay buffer; log-probs are unchanged."""
    from openrlhf.models.utils import compute_entropy
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    configure({"name": "grpo"})
    trainer = make_trainer(trainer_args())
    exp = make_experience(batch=4, seed=11)
    actor = trainer.actor
    actor.eval()
    with torch.no_grad():
        lp = actor(exp.sequences, exp.action_mask, exp.attention_mask)  # as PolicyModelActor.forward calls it
        lp_ref, out = actor(exp.sequences, exp.action_mask, exp.attention_mask, return_output=True)
    actor.train()
    torch.testing.assert_close(lp, lp_ref)
    logits = out["logits"][:, :-1][:, -exp.action_mask.shape[1] :]
    m = exp.action_mask.float()
    want = (compute_entropy(logits) * m).sum(-1) / m.sum(-1)

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    buffer = NaiveReplayBuffer(2, cpu_offload=False)
    exp.rewards = torch.ones(4)
    buffer.append(exp)
    got = torch.stack([item.info["harness/entropy_rollout"] for item in buffer.items])
    torch.testing.assert_close(got, want.cpu(), rtol=1e-5, atol=1e-6)

    other = make_experience(batch=2, seed=12)  # never seen by the forward: NaN = not measured
    other.rewards = torch.ones(2)
    buffer.append(other)
    assert torch.isnan(torch.stack([it.info["harness/entropy_rollout"] for it in buffer.items[4:]])).all()


def test_reference_model_forwards_are_not_taken_for_the_policy(configure, make_trainer, tiny_model_dir):
    """A reference model's eval-mode forward (another Actor) records nothing: only the policy's own does."""
    from openrlhf.models import Actor

    from harness.backends.openrlhf import plugin

    configure({"name": "grpo"})
    make_trainer(trainer_args())
    ref = Actor(tiny_model_dir, attn_implementation="eager", param_dtype="bf16").float()
    ref.eval()
    exp = make_experience(batch=2, seed=3)
    plugin.STATE.rollout_entropy.clear()
    with torch.no_grad():
        ref(exp.sequences.cpu(), exp.action_mask.cpu(), exp.attention_mask.cpu())
    assert plugin.STATE.rollout_entropy == {}


def test_global_plan_with_entropy_is_independent_of_micro_batching(configure, make_trainer):
    """high_entropy_tokens, scope global: the planner's extra forward also returns the current policy's entropy;
    the plan over 2x3 or 3x2 micro-batches equals the top-20% tokens of OpenRLHF's compute_entropy over all 6."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.models.utils import compute_entropy

    from harness.backends.openrlhf import plugin

    configure({"name": "high_entropy_tokens", "scope": "global"})
    trainer = make_trainer(trainer_args())
    plugin.STATE.trainer = trainer
    full = make_experience(batch=6, seed=4)
    with torch.no_grad():
        _, out = trainer.actor(full.sequences, full.action_mask, attention_mask=full.attention_mask, return_output=True)
    ent = compute_entropy(out["logits"][:, :-1])[:, -full.action_mask.shape[1] :]
    n = int(full.action_mask.sum())
    k = max(1, int(n * 0.2 + 0.9999))
    flat = ent.masked_fill(~full.action_mask.bool(), -float("inf")).flatten()
    expected = torch.zeros_like(flat, dtype=torch.bool)
    expected[flat.topk(k).indices] = True
    for rows in ([slice(0, 2), slice(2, 4), slice(4, 6)], [slice(0, 3), slice(3, 6)]):
        micro = split_experience(full, rows)
        list(ppo_actor.iter_grad_accum_global_norm(iter(micro), trainer.strategy, len(micro), lambda e: e.action_mask))
        assert torch.equal(torch.cat([e._harness_selected for e in micro]).flatten(), expected)


@pytest.mark.parametrize("scheme,level,mode", [("tis", "token", "clip"), ("seq_mask", "seq", "mask")])
def test_rollout_correction_in_the_real_training_step_equals_upstreams(scheme, level, mode, configure, make_trainer):
    """The experience's rollout_log_probs reach our loss through upstream's training_step; the gradient, vllm_kl and
    is_filter_ratio equal OpenRLHF's own correction (its PolicyLoss and training_step) on the same model."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    configure({"name": "grpo", "rollout_correction": scheme})
    exp = make_experience(batch=4, seed=7)
    g = torch.Generator().manual_seed(3)
    shift = torch.tensor([[-1.0], [0.0], [0.2], [2.0]])  # rows 0 and 3 outside seq-mask's band, row 1 within
    noise = torch.randn(exp.action_mask.shape, generator=g) * 0.5 + shift
    exp.rollout_log_probs = (exp.action_log_probs - noise.to(exp.action_log_probs.device)) * exp.action_mask

    def run(trainer):
        trainer.strategy.optimizer_step = lambda *a, **k: None
        status = trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info=_norms(exp))
        grads = torch.cat([p.grad.flatten() for p in trainer.actor.parameters() if p.grad is not None])
        return grads, status["metrics"]

    args = trainer_args()
    args.algo.advantage.is_correction_level, args.algo.advantage.is_correction_mode = level, mode
    args.algo.advantage.is_correction_threshold = [0.5, 5.0]
    ours, metrics = run(make_trainer(args, seed=1))
    original, orig_step = ppo_actor.PolicyLoss, ppo_actor.ActorPPOTrainer.training_step
    try:
        ppo_actor.PolicyLoss = original.__mro__[1]  # OpenRLHF's own PolicyLoss and training_step
        ppo_actor.ActorPPOTrainer.training_step = orig_step.__wrapped_original__
        ref, ref_metrics = run(make_trainer(args, seed=1))
    finally:
        ppo_actor.PolicyLoss, ppo_actor.ActorPPOTrainer.training_step = original, orig_step
    torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-7)
    for key in ("vllm_kl", "is_filter_ratio"):
        torch.testing.assert_close(metrics[key].float(), ref_metrics[key].float(), rtol=1e-5, atol=1e-7)
    assert 0 < float(metrics["is_filter_ratio"]) < 1
    assert float(metrics["rollout_correction/filtered_frac"]) == pytest.approx(float(ref_metrics["is_filter_ratio"]))
