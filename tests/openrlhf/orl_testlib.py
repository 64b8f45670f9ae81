"""Helpers of the OpenRLHF CPU suite (a uniquely named module: the openrlhf wheel installs a top-level ``tests``)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

# scripts/gpu_smoke.sh runs the training-step tests on CUDA with HARNESS_OPENRLHF_TEST_DEVICE=cuda
DEVICE = os.environ.get("HARNESS_OPENRLHF_TEST_DEVICE", "cpu")


def plugin_config(method: dict, run_dir="/tmp/harness-openrlhf-test", steps=0, seed=0) -> dict:
    return {"method": method, "run_dir": str(run_dir), "seed": seed, "steps": steps, "seed_offset_per_rank": True,
            "reward": "math", "run_id": "test", "config": {}}


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
        actor=ns(eps_clip_low_high=eps, dual_clip=None, loss_agg_mode=agg, policy_loss_type="ppo",
                 entropy_coef=entropy_coef, aux_loss_coef=0.0),
        algo=ns(advantage=ns(is_correction_level="off", is_correction_mode="mask", is_correction_gating="ratio",
                             is_correction_threshold=[0.0, 2.0]),
                kl=ns(use_loss=False, init_coef=0.0, estimator="k1", unbiased_gradient=False)),
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
    action_mask = (torch.arange(action_len)[None, :] < lengths[:, None])
    attention_mask = torch.cat([torch.ones(batch, prompt_len, dtype=torch.long), action_mask.long()], dim=1)
    sequences = sequences * attention_mask
    old = -torch.rand(batch, action_len, generator=g) * 4 - 0.5
    if adv is None:
        adv = torch.randn(batch, generator=g)[:, None].expand(batch, action_len).clone()
    exp = Experience(sequences=sequences, attention_mask=attention_mask, action_mask=action_mask,
                     action_log_probs=old * action_mask, advantages=adv * action_mask, info={})
    exp.to_device(torch.device(DEVICE))
    return exp
