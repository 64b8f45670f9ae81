"""The worker_process_setup_hook takes effect in real local Ray workers (Ray 2.55, CPU).

Driver-side patching cannot reach OpenRLHF's actors (they run in other processes and Ray ships their methods
by value), so the check is made inside workers: a task importing ppo_actor sees our PolicyLoss, the real
``PolicyModelActor`` (num_gpus=0) resolves our loss and trainer through the globals its by-value methods use,
and a worker that never imports OpenRLHF stays free of it (vLLM engines must not get DeepSpeed imported).
"""

import json
import os

import pytest
from orl_testlib import plugin_config

pytestmark = pytest.mark.openrlhf


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    from harness.backends.openrlhf.flags import PLUGIN_ENV
    from harness.backends.openrlhf.launch import runtime_env

    env = {
        PLUGIN_ENV: json.dumps(plugin_config({"name": "kl_cov", "k_ratio": 0.01, "scope": "global"})),
        "HARNESS_OPENRLHF_CPU_STUBS": "1",
    }
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env(env))
    try:
        yield ray
    finally:
        ray.shutdown()


def test_hook_is_named_in_runtime_env():
    from harness.backends.openrlhf.launch import runtime_env

    env = runtime_env({"X": "1"})
    assert env["worker_process_setup_hook"] == "harness.backends.openrlhf.hook.install"
    assert env["env_vars"]["X"] == "1" and "PYTHONPATH" in env["env_vars"]


def test_plain_worker_stays_clean(ray_cluster):
    ray = ray_cluster

    @ray.remote
    def probe():
        import sys

        return {m: m in sys.modules for m in ("openrlhf", "deepspeed")}, os.getpid()

    loaded, pid = ray.get(probe.remote(), timeout=180)
    assert pid != os.getpid()
    assert loaded == {"openrlhf": False, "deepspeed": False}


def test_worker_importing_ppo_actor_gets_our_loss(ray_cluster):
    ray = ray_cluster

    @ray.remote
    def probe():
        import openrlhf.trainer.ppo_utils.experience_maker as em
        import openrlhf.trainer.ray.ppo_actor as ppo_actor

        from harness.backends.openrlhf import plugin

        return {
            "loss": ppo_actor.PolicyLoss.__name__,
            "base": ppo_actor.PolicyLoss.__mro__[1].__module__,
            "step": ppo_actor.ActorPPOTrainer.training_step.__name__,
            "advantages": em.RemoteExperienceMaker.compute_advantages_and_returns.__qualname__,
            "method": plugin.method().to_config(),
        }

    out = ray.get(probe.remote(), timeout=300)
    assert out["loss"] == "HarnessPolicyLoss" and out["base"] == "openrlhf.models.loss"
    assert out["step"] == "training_step" and "patch_experience_maker" in out["advantages"]
    assert out["method"]["name"] == "kl_cov" and out["method"]["scope"] == "global"
    assert out["method"]["k_ratio"] == 0.01


def test_real_policy_model_actor_sees_the_patch(ray_cluster):
    """OpenRLHF's own @ray.remote PolicyModelActor: the ActorPPOTrainer its init_model_from_pretrained
    would build (looked up in its by-value globals) constructs our loss."""
    ray = ray_cluster
    from harness.backends.openrlhf import hook

    hook.install()
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

    actor = PolicyModelActor.options(num_gpus=0, num_cpus=0).remote(1, 0, "127.0.0.1", 29555)

    def inspect(self):
        fn = type(self).init_model_from_pretrained
        fn = getattr(fn, "__wrapped__", fn)
        init_globals = fn.__globals__
        if "ActorPPOTrainer" not in init_globals:
            return {"keys": sorted(init_globals)[:50], "mod": fn.__module__, "qual": fn.__qualname__}
        trainer_cls = init_globals["ActorPPOTrainer"]
        init = getattr(trainer_cls.__init__, "__wrapped_original__", trainer_cls.__init__)  # upstream's body
        return {
            "trainer_loss": init.__globals__["PolicyLoss"].__name__,
            "step_wrapped": hasattr(trainer_cls.training_step, "__wrapped_original__"),
            "pid": os.getpid(),
        }

    out = ray.get(actor.__ray_call__.remote(inspect), timeout=300)
    assert out["pid"] != os.getpid()
    assert out["trainer_loss"] == "HarnessPolicyLoss"
    assert out["step_wrapped"]
    ray.kill(actor)


def test_driver_fetches_the_rollout_entropy_from_a_real_policy_actor(ray_cluster, configure):
    """entropy_advantage across processes: per-token entropies held by a real PolicyModelActor worker (as its
    old-log-prob forward leaves them) reach the patched compute_advantages_and_returns in this process through
    ``__ray_call__``; the advantages equal the hand formula and the worker's store is emptied."""
    import torch
    from orl_testlib import experience_maker, make_experience
    from test_rollout_entropy import hand_entropy_advantage

    ray = ray_cluster
    from harness.backends.openrlhf import hook, plugin

    hook.install()
    import openrlhf.trainer.ppo_utils.experience_maker as em
    from openrlhf.trainer.ray.ppo_actor import PolicyModelActor

    configure({"name": "entropy_advantage"})
    exps = [make_experience(batch=4, seed=21), make_experience(batch=4, seed=22)]
    g = torch.Generator().manual_seed(0)
    entropy = [torch.rand(e.action_mask.shape, generator=g) * 3 * e.action_mask for e in exps]
    stored = {}
    for e, ent in zip(exps, entropy):
        for key, row, valid in zip(plugin._row_keys(e.sequences, e.attention_mask), ent, e.action_mask.bool()):
            stored[key] = row[valid]
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    for i, e in enumerate(exps):
        e.rewards, e.index = rewards[4 * i : 4 * i + 4].clone(), list(range(4 * i, 4 * i + 4))
        e.kl = torch.zeros_like(e.action_mask, dtype=torch.float32)

    actor = PolicyModelActor.options(num_gpus=0, num_cpus=0).remote(1, 0, "127.0.0.1", 29556)

    def put(self, values):
        from harness.backends.openrlhf import plugin

        plugin.STATE.rollout_token_entropy.update(values)
        return os.getpid()

    def left(self):
        from harness.backends.openrlhf import plugin

        return len(plugin.STATE.rollout_token_entropy)

    try:
        assert ray.get(actor.__ray_call__.remote(put, stored), timeout=300) != os.getpid()
        group = type("Group", (), {"_actor_handlers": [actor]})()
        maker = experience_maker("group_norm", 4, actor_model_group=group)
        out = em.RemoteExperienceMaker.compute_advantages_and_returns(maker, exps)
        got = torch.cat([e.advantages for e in out])
        mask = torch.cat([e.action_mask.float() for e in out])
        torch.testing.assert_close(got, hand_entropy_advantage(rewards, 4, torch.cat(entropy), mask))
        assert ray.get(actor.__ray_call__.remote(left), timeout=60) == 0
    finally:
        ray.kill(actor)
