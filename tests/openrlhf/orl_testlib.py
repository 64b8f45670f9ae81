"""Helpers of the OpenRLHF CPU suite (a uniquely named module: the openrlhf wheel installs a top-level ``tests``)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

# scripts/gpu_smoke.sh runs the training-step tests on CUDA with HARNESS_OPENRLHF_TEST_DEVICE=cuda
DEVICE = os.environ.get("HARNESS_OPENRLHF_TEST_DEVICE", "cpu")


def plugin_config(method: dict, run_dir="/tmp/harness-openrlhf-test", steps=0, seed=0) -> dict:
    return {
        "method": method,
        "run_dir": str(run_dir),
        "seed": seed,
        "steps": steps,
        "seed_offset_per_rank": True,
        "reward": "math",
        "run_id": "test",
        "config": {},
    }


class FakeStrategy:
    """The DeepspeedStrategy surface ActorPPOTrainer.training_step uses, on one CPU process (plain AdamW step)."""

    def __init__(self, args, accumulated_gradient=1):
        self.args = args
        self.ring_attn_group = None
        self.accumulated_gradient = accumulated_gradient
        self.backward_calls = 0

    def backward(self, loss, model, optimizer, **kwargs):
        self.backward_calls += 1
        loss.backward()

    def optimizer_step(self, optimizer, model, scheduler, name="model", **kwargs):
        self.micro_steps = getattr(self, "micro_steps", 0) + 1
        if self.micro_steps % self.accumulated_gradient == 0:  # DeepSpeed steps at accumulation boundaries
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()

    def all_reduce(self, data, op="mean"):
        return data

    def get_grad_norm(self, model):
        return 0.0

    def is_rank_0(self):
        return True

    def print(self, *a, **k):
        pass


def trainer_args(entropy_coef=0.0, eps=(0.2, 0.2), agg="token-mean", temperature=1.0):
    ns = SimpleNamespace
    return ns(
        actor=ns(
            eps_clip_low_high=eps,
            dual_clip=None,
            loss_agg_mode=agg,
            policy_loss_type="ppo",
            entropy_coef=entropy_coef,
            aux_loss_coef=0.0,
        ),
        algo=ns(
            advantage=ns(
                is_correction_level="off",
                is_correction_mode="mask",
                is_correction_gating="ratio",
                is_correction_threshold=[0.0, 2.0],
            ),
            kl=ns(use_loss=False, init_coef=0.0, estimator="k1", unbiased_gradient=False),
        ),
        train=ns(max_epochs=1, dynamic_batch_enable=False, colocate_all=False, async_enable=False),
        ds=ns(packing_samples=False, tensor_parallel_size=1),
        vllm=ns(sync_backend="nccl"),
        rollout=ns(temperature=temperature),
    )


def make_experience(batch=4, prompt_len=3, action_len=5, seed=0, vocab=64, adv=None):
    """A batched Experience with right-padded responses of different lengths and random old log-probs."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    g = torch.Generator().manual_seed(seed)
    total = prompt_len + action_len
    sequences = torch.randint(3, vocab, (batch, total), generator=g)
    lengths = torch.tensor([action_len - (i % 3) for i in range(batch)])
    action_mask = torch.arange(action_len)[None, :] < lengths[:, None]
    attention_mask = torch.cat([torch.ones(batch, prompt_len, dtype=torch.long), action_mask.long()], dim=1)
    sequences = sequences * attention_mask
    old = -torch.rand(batch, action_len, generator=g) * 4 - 0.5
    if adv is None:
        adv = torch.randn(batch, generator=g)[:, None].expand(batch, action_len).clone()
    exp = Experience(
        sequences=sequences,
        attention_mask=attention_mask,
        action_mask=action_mask,
        action_log_probs=old * action_mask,
        advantages=adv * action_mask,
        info={},
    )
    exp.to_device(torch.device(DEVICE))
    return exp


def rollout_forward_entropy(actor, exp) -> torch.Tensor:
    """Run the actor's eval-mode, no-grad rollout forward on ``exp`` as PolicyModelActor.forward calls it (where the
    plug-in keeps the rollout's entropy) and return OpenRLHF's ``compute_entropy`` of its logits on the action
    tokens, (B, action_len), unmasked."""
    from openrlhf.models.utils import compute_entropy

    actor.eval()
    with torch.no_grad():
        actor(exp.sequences, exp.action_mask, exp.attention_mask)
        _, out = actor(exp.sequences, exp.action_mask, exp.attention_mask, return_output=True)
    actor.train()
    return compute_entropy(out["logits"][:, :-1])[:, -exp.action_mask.shape[1] :]


def split_experience(full, rows) -> list:
    """``full`` cut into micro-batch Experiences by row slices (sequences, masks, old log-probs, advantages)."""
    from openrlhf.trainer.ppo_utils.experience import Experience

    return [
        Experience(
            sequences=full.sequences[r],
            attention_mask=full.attention_mask[r],
            action_mask=full.action_mask[r],
            action_log_probs=full.action_log_probs[r],
            advantages=full.advantages[r],
            info={},
        )
        for r in rows
    ]


def experience_maker(estimator, n, actor_model_group=None):
    """A RemoteExperienceMaker without its constructor: just what compute_advantages_and_returns reads."""
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker

    maker = RemoteExperienceMaker.__new__(RemoteExperienceMaker)
    ns = SimpleNamespace
    args = ns(
        rollout=ns(n_samples_per_prompt=n, max_new_tokens=None),
        algo=ns(advantage=ns(estimator=estimator, gamma=1.0, lambd=1.0, no_std_norm=False)),
        reward=ns(clip_range=(-10, 10), overlong_buffer_len=None, stop_properly_penalty_coef=None),
        data=ns(max_len=64),
    )
    maker.strategy, maker.args, maker.advantage_estimator = ns(args=args), args, estimator
    maker.kl_ctl = ns(value=0.0)
    maker.actor_model_group = actor_model_group
    return maker


def dp_rank_main(rank, world, model_dir, port, out_dir, method):
    """One data-parallel rank (gloo, CPU): plans the global selection over its own micro-batches of a shared
    8-row mini-batch through the patched iter_grad_accum_global_norm, and saves the plan."""
    import json

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), HARNESS_OPENRLHF_CPU_STUBS="1")
    os.environ["HARNESS_OPENRLHF_PLUGIN"] = json.dumps(plugin_config(method))
    torch.compile = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)  # noqa: E731
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from harness.backends.openrlhf import hook, plugin

        hook.install()
        import openrlhf.trainer.ray.ppo_actor as ppo_actor
        from openrlhf.models import Actor

        ppo_actor.torch_dist_barrier_and_cuda_sync = lambda: None
        ppo_actor.NaiveReplayBuffer = lambda *a, **k: SimpleNamespace()
        actor = Actor(model_dir, attn_implementation="eager", param_dtype="bf16").float()
        optim = torch.optim.AdamW(actor.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda _: 1.0)
        strategy = FakeStrategy(trainer_args(), accumulated_gradient=2)
        trainer = ppo_actor.ActorPPOTrainer(
            strategy, actor, None, optim, sched, micro_train_batch_size=2, vllm_engines=None
        )
        plugin.STATE.trainer = trainer
        full = make_experience(batch=8, seed=2)
        per_rank = 8 // world
        rows = [slice(rank * per_rank + i, rank * per_rank + i + 2) for i in range(0, per_rank, 2)]
        micro = split_experience(full, rows)
        out = list(ppo_actor.iter_grad_accum_global_norm(iter(micro), strategy, len(micro), lambda e: e.action_mask))
        assert [it for it, _ in out] == micro
        torch.save(
            {"plan": torch.cat([e._harness_selected for e in micro]), "tokens": float(out[0][1]["batch_num_tokens"])},
            os.path.join(out_dir, f"rank{rank}.pt"),
        )
    finally:
        dist.destroy_process_group()
