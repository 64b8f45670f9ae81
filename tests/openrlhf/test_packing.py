"""The plug-in on packed inputs (``openrlhf.packing_samples``, ``openrlhf.max_tokens_per_gpu``), CPU, real OpenRLHF.

OpenRLHF 0.11.2 packs only inside ``Actor.forward``: the micro-batch's rows are unpadded into one row (position ids
restart at every sample, so attention stays within a sample), and the log-probs / entropy are scattered back to the
(B, A) padded layout before the loss. So the loss sees the same shapes, action mask and per-sample boundaries as
without packing: the same loss, gradient and selection up to float rounding (measured below). What legitimately
changes with dynamic batching is which samples share a micro-batch: per-micro-batch selection (the official
Clip-Cov/KL-Cov scope) then runs over more tokens, while ``scope: global`` still plans over the optimizer window.
On a CPU the packed forward uses eager attention with the block-diagonal mask transformers builds from the position
ids (a GPU uses flash-attention's varlen kernel) and torch versions of flash-attn's index helpers (stubs.py).
"""

import socket

import pytest
import torch
from orl_testlib import make_experience, split_experience, trainer_args

pytestmark = pytest.mark.openrlhf

# float32, eager attention on a CPU, packed (1 x 29 tokens, block-diagonal mask) vs padded (4 x 8 tokens), measured
# over the four methods below: log-probs, loss and entropy equal to the bit, gradients within 1.5e-8 (max |g| 0.09 to
# 0.16). The tolerances leave room for other kernels (scripts/gpu_smoke.sh runs this file on CUDA).
LOGP_TOL, LOSS_TOL, GRAD_TOL = 1e-6, 1e-6, 1e-6

METHODS = {
    "grpo": {"name": "grpo"},
    "clip_cov": {"name": "clip_cov", "clip_ratio": 0.2, "cov_lb": -10.0, "cov_ub": 10.0},
    "kl_cov": {"name": "kl_cov", "k_ratio": 0.2},
    "entropy_bonus": {"name": "entropy_bonus", "coef": 0.05},
}


def _run_step(trainer, plugin, exp, coef):
    """One real training_step without the optimizer step: loss inputs, selection, metrics and the gradient; with a
    packed Actor, upstream's unpad_and_slice_tensor must have packed the rows (``seen["packed"]``: its calls)."""
    import openrlhf.models.actor as actor_module

    seen = {"packed": 0}
    unpad = actor_module.unpad_and_slice_tensor

    def counted(*args, **kwargs):
        seen["packed"] += 1
        out = unpad(*args, **kwargs)
        assert out[0].shape[0] == 1  # one packed row
        return out

    m = plugin.method()
    real = type(m).per_token_loss

    def per_token_loss(*args, **kwargs):  # record what the method's loss saw (bound: self is the method)
        out = real(m, *args, **kwargs)
        seen.update(log_probs=args[0].detach().clone(), mask=args[3].clone(), selected=out.selected)
        return out

    m.per_token_loss = per_token_loss
    actor_module.unpad_and_slice_tensor = counted
    plugin.STATE.generator = None  # Clip-Cov's draw: the same seeded generator for both runs
    trainer.strategy.optimizer_step = lambda *a, **k: None
    try:
        status = trainer.training_step(exp, kl_ctl=0.0, step=0, loss_batch_info=_norms(exp))
    finally:
        del m.per_token_loss
        actor_module.unpad_and_slice_tensor = unpad
    assert seen["packed"] == (1 if trainer.actor.packing_samples else 0)
    grad = torch.cat([p.grad.flatten() for p in trainer.actor.parameters() if p.grad is not None])
    return seen, status["metrics"], grad


def _norms(exp):
    n = exp.action_mask.float().sum()
    rows = torch.tensor(float(exp.action_mask.shape[0]), device=n.device)
    return {"dp_size": 1, "batch_num_tokens": n, "global_batch_size": rows}


def _packed_args(coef, **train):
    args = trainer_args(entropy_coef=coef)
    args.ds.packing_samples = True
    return args


@pytest.mark.parametrize("name", sorted(METHODS))
def test_packed_micro_batch_gives_the_same_loss_gradient_and_selection(name, configure, make_trainer):
    """The same 4 samples (lengths 8, 7, 6, 8 tokens) in one micro-batch, padded vs packed: the loss's inputs (log-probs
    on the (B, A) layout, action mask), the loss, the gradient, the selected tokens and the metrics agree."""
    plugin = configure(METHODS[name])
    coef = METHODS[name].get("coef", 0.0)
    exp = make_experience(batch=4, seed=3)
    padded = _run_step(make_trainer(trainer_args(entropy_coef=coef), seed=1), plugin, exp, coef)
    packed_trainer = make_trainer(_packed_args(coef), seed=1, packing=True)
    assert packed_trainer.actor.packing_samples
    packed = _run_step(packed_trainer, plugin, exp, coef)
    (seen_a, met_a, grad_a), (seen_b, met_b, grad_b) = padded, packed
    assert seen_a["log_probs"].shape == seen_b["log_probs"].shape == exp.action_mask.shape
    assert torch.equal(seen_a["mask"], seen_b["mask"])
    valid = exp.action_mask.bool()
    assert float((seen_a["log_probs"] - seen_b["log_probs"])[valid].abs().max()) <= LOGP_TOL
    assert abs(float(met_a["policy_loss"]) - float(met_b["policy_loss"])) <= LOSS_TOL
    assert float(grad_a.abs().max()) > 1e-3  # a real gradient
    assert float((grad_a - grad_b).abs().max()) <= GRAD_TOL
    if name in ("clip_cov", "kl_cov"):
        assert seen_a["selected"].any() and torch.equal(seen_a["selected"], seen_b["selected"])
        assert torch.equal(met_a["harness/selected_per_sample"], met_b["harness/selected_per_sample"])
        assert float(met_a["cov/mean"]) == pytest.approx(float(met_b["cov/mean"]), abs=1e-6)
    if coef:
        torch.testing.assert_close(met_a["harness/entropy"], met_b["harness/entropy"], rtol=0, atol=LOGP_TOL)
    # the forward's padding: none when packed; 3 of 4 x 8 tokens padded otherwise (hand count)
    assert float(met_a["harness/pad_tokens"].sum()) == 3.0 and float(met_a["harness/forward_tokens"].sum()) == 32.0
    assert float(met_b["harness/pad_tokens"].sum()) == 0.0 and float(met_b["harness/forward_tokens"].sum()) == 29.0


def test_pad_fraction_reaches_the_metrics_row(configure, make_trainer):
    """batch/pad_frac = padded / forwarded tokens of the step's micro-batches and batch/tokens = forwarded tokens per
    micro-batch, from upstream's sample-weighted reduction (one micro-batch here: its rows' mean) via the bridge."""
    from harness.backends.openrlhf import bridge

    plugin = configure({"name": "grpo"})
    exp = make_experience(batch=4, seed=3)
    for packing, want in ((False, (3 / 32, 32.0)), (True, (0.0, 29.0))):
        args = _packed_args(0.0) if packing else trainer_args()
        _, metrics, _ = _run_step(make_trainer(args, packing=packing), plugin, exp, 0.0)
        status = {k: float(v.float().mean()) for k, v in metrics.items() if k.startswith("harness/")}
        row = bridge.to_harness_metrics(status, 1)
        assert (row["batch/pad_frac"], row["batch/tokens"]) == pytest.approx(want)


def test_dynamic_micro_batch_selects_over_its_tokens(configure, make_trainer):
    """Where per-micro-batch selection legitimately differs: KL-Cov (scope micro_batch, the official) over three
    micro-batches of 2 samples selects max(1, int(0.1 n)) tokens in each; a dynamic micro-batch holding all 6 samples
    selects max(1, int(0.1 N)) over all of them, which is exactly scope: global's plan over the window."""
    import harness

    plugin = configure({"name": "kl_cov", "k_ratio": 0.1})
    trainer = make_trainer(_packed_args(0.0), packing=True)
    full = make_experience(batch=6, seed=2)
    thirds = [slice(0, 2), slice(2, 4), slice(4, 6)]
    fixed = [_run_step(trainer, plugin, e, 0.0)[0]["selected"] for e in split_experience(full, thirds)]
    counts = [int(s.sum()) for s in fixed]
    sizes = [int(full.action_mask[r].sum()) for r in thirds]
    assert counts == [max(1, int(0.1 * n)) for n in sizes] == [1, 1, 1]  # 8, 9, 8 tokens
    whole = _run_step(trainer, plugin, full, 0.0)[0]["selected"]
    n = int(full.action_mask.sum())
    assert int(whole.sum()) == max(1, int(0.1 * n)) == 2  # 25 tokens
    with torch.no_grad():
        lp = trainer.actor(full.sequences, full.action_mask, attention_mask=full.attention_mask)
    plan = harness.get_method("kl_cov", k_ratio=0.1, scope="global").selection_plan(
        lp, full.action_log_probs, full.advantages, full.action_mask
    )
    assert torch.equal(whole, plan)
    assert not torch.equal(torch.cat(fixed), whole)


# ------------------------------------------------------------------------ upstream's ppo_train, dynamic batches
@pytest.fixture
def one_rank_group(monkeypatch):
    """A one-process gloo group and a CPU device mesh: what upstream's dynamic batching all-reduces over."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    finally:
        dist.destroy_process_group()


def _dynamic_trainer(make_trainer, mesh, monkeypatch, max_tokens, rows=6, mini_batch=3, seed=7):
    """A packed trainer with upstream's dynamic batching over ``rows`` samples in the real replay buffer."""
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    args = _packed_args(0.0)
    args.train.dynamic_batch_enable, args.train.max_tokens_per_gpu, args.train.batch_size = True, max_tokens, mini_batch
    args.rollout.batch_size, args.rollout.n_samples_per_prompt = rows, 1
    args.ds.ring_attn_size = 1
    trainer = make_trainer(args, packing=True)
    trainer.strategy.ds_device_mesh = mesh
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    trainer.replay_buffer = NaiveReplayBuffer(1, cpu_offload=False, packing_samples=True, dynamic_batch=True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    exp = make_experience(batch=rows, seed=seed)
    exp.rewards = torch.ones(rows)
    exp.total_length = exp.attention_mask.sum(-1).float()
    trainer.replay_buffer.append(exp)
    trainer.dataloader_pin_memory = False
    return trainer, exp


@pytest.mark.parametrize("scope", ["global", "micro_batch"])
def test_real_ppo_train_with_dynamic_packed_batches(scope, configure, make_trainer, one_rank_group, monkeypatch):
    """Upstream's ppo_train with --train.dynamic_batch_enable and packing: 6 samples (8, 7, 6, 8, 7, 6 tokens), 2
    optimizer windows of 3 samples, a 16-token budget -> micro-batches [8, 7] and [6] per window (first fit). KL-Cov
    k 0.1: scope global plans over each window (our planner on upstream's dynamic windows): max(1, int(0.1 n_w))
    tokens per window; scope micro_batch selects at least one per micro-batch. The forward has no padding."""
    from harness.backends.openrlhf import bridge

    configure({"name": "kl_cov", "k_ratio": 0.1, "scope": scope})
    trainer, exp = _dynamic_trainer(make_trainer, one_rank_group, monkeypatch, max_tokens=16)
    status = trainer.ppo_train(kl_ctl=0.0)
    buffer = trainer.replay_buffer
    assert buffer.dynamic_optimizer_step == [0, 1, 0, 1]  # 2 windows of 2 micro-batches
    assert [sorted(int(buffer.items[i].total_length) for i in mb) for mb in buffer.dynamic_indices] == [
        [6, 7],
        [8],
        [6, 7],
        [8],
    ]
    window_tokens = [int(exp.action_mask[r].sum()) for r in (slice(0, 3), slice(3, 6))]
    selected = status["selected/frac"] * float(exp.action_mask.sum())
    if scope == "global":
        assert selected == pytest.approx(sum(max(1, int(0.1 * n)) for n in window_tokens))  # 1 + 1
        assert plugin_window_plan_empty()
    else:
        assert selected >= 4 - 1e-6  # at least one token in each of the 4 micro-batches
    row = bridge.to_harness_metrics(status, 1)
    assert row["batch/pad_frac"] == 0.0
    assert row["batch/tokens"] == pytest.approx(float(exp.attention_mask.sum()) / 4)  # 42 tokens, 4 micro-batches


def plugin_window_plan_empty() -> bool:
    from harness.backends.openrlhf import plugin

    return plugin.STATE.window_plan == {}


def test_global_plan_on_dynamic_windows_equals_one_selection(configure, make_trainer, one_rank_group, monkeypatch):
    """The planner's slices for one dynamic window are the selection over the window's samples taken at once with the
    policy of the window's start (upstream's micro-batch order and collation)."""
    import harness
    from harness.backends.openrlhf import plugin

    method = {"name": "kl_cov", "k_ratio": 0.3, "scope": "global"}
    configure(method)
    trainer, _ = _dynamic_trainer(make_trainer, one_rank_group, monkeypatch, max_tokens=16)
    trainer.replay_buffer.setup_dynamic_batch(trainer.strategy)
    plugin.STATE.trainer = trainer
    first = plugin.dynamic_window_plan(trainer, 0)
    second = plugin.STATE.window_plan[1]
    buffer = trainer.replay_buffer
    window = [buffer.collate_fn([buffer[i]]) for i in (0, 1)]
    rows = [it for i in (0, 1) for it in (buffer.items[j] for j in buffer.dynamic_indices[i])]
    whole = buffer.collate_fn([rows])
    with torch.no_grad():
        lp = trainer.actor(whole.sequences, whole.action_mask, attention_mask=whole.attention_mask)
    want = harness.get_method(**method).selection_plan(lp, whole.action_log_probs, whole.advantages, whole.action_mask)
    got = [first, second]
    width = whole.action_mask.shape[1]
    got = torch.cat([torch.nn.functional.pad(g, (0, width - g.shape[1])) for g in got])
    assert int(want.sum()) == max(1, int(0.3 * int(whole.action_mask.sum())))
    assert torch.equal(got, want)
    assert [w.action_mask.shape[0] for w in window] == [2, 1]


def test_a_buffer_short_of_one_mini_batch_trains_nothing_and_says_so(
    configure, make_trainer, one_rank_group, monkeypatch, capsys
):
    """2 samples (a step cut short by the end of the prompt set or the generation cap) and mini-batches of 3: upstream's
    dynamic batching takes whole mini-batches only, so nothing trains; the plug-in warns and the row is marked
    update/skipped (runner.count_updates does not count it)."""
    from harness.backends.openrlhf import bridge

    configure({"name": "grpo"})
    trainer, _ = _dynamic_trainer(make_trainer, one_rank_group, monkeypatch, max_tokens=16, rows=2)
    before = [p.detach().clone() for p in trainer.actor.parameters()]
    status = trainer.ppo_train(kl_ctl=0.0)
    assert status == {"harness/update_skipped": 1.0}
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.actor.parameters()))
    assert "2 samples on this GPU fill no mini-batch (--train.batch_size 3" in capsys.readouterr().out
    row = bridge.to_harness_metrics({**status, "rollout/num_samples": 2.0, "rollout/reward_mean": 0.5}, 4)
    assert row == {"step": 4, "reward/mean": 0.5, "openrlhf/rollout/num_samples": 2.0, "update/skipped": True}
    assert "update/skipped" not in bridge.to_harness_metrics({"rollout/num_samples": 2.0, "policy_loss": 0.1}, 4)
