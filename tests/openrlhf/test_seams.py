"""Drift guard: the private OpenRLHF 0.11.2 seams the plugin patches still have the shape it relies on."""

import importlib.metadata
import inspect

import pytest

pytestmark = pytest.mark.openrlhf


def _params(fn):
    return list(inspect.signature(fn).parameters)


def test_openrlhf_version_is_the_pinned_one():
    from harness.backends.openrlhf.launch import OPENRLHF_VERSION, require_openrlhf

    assert importlib.metadata.version("openrlhf") == OPENRLHF_VERSION == "0.11.2"
    require_openrlhf()


def test_seams():
    import openrlhf.trainer.ppo_trainer as ppo_trainer
    import openrlhf.trainer.ppo_utils.experience_maker as em
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.models.actor import Actor
    from openrlhf.models.loss import PolicyLoss
    from openrlhf.utils.loss_utils import iter_grad_accum_global_norm

    base = (
        ppo_actor.PolicyLoss.__mro__[1]
        if ppo_actor.PolicyLoss.__name__ == "HarnessPolicyLoss"
        else ppo_actor.PolicyLoss
    )
    assert base is PolicyLoss
    assert _params(PolicyLoss.forward) == [
        "self",
        "log_probs",
        "old_log_probs",
        "advantages",
        "action_mask",
        "rollout_log_probs",
        "dp_size",
        "batch_num_tokens",
        "global_batch_size",
    ]
    assert {"clip_eps_low", "clip_eps_high", "token_level_loss"} <= set(_params(PolicyLoss.__init__))
    step = getattr(
        ppo_actor.ActorPPOTrainer.training_step, "__wrapped_original__", ppo_actor.ActorPPOTrainer.training_step
    )
    assert _params(step) == ["self", "experience", "kl_ctl", "step", "loss_batch_info"]
    assert _params(iter_grad_accum_global_norm) == ["data_iter", "strategy", "accumulated_gradient", "mask_fn"]
    assert "iter_grad_accum_global_norm" in inspect.getsource(
        getattr(ppo_actor.ActorPPOTrainer.ppo_train, "__wrapped_original__", ppo_actor.ActorPPOTrainer.ppo_train)
    )
    assert _params(
        getattr(
            em.RemoteExperienceMaker.compute_advantages_and_returns,
            "__wrapped_original__",
            em.RemoteExperienceMaker.compute_advantages_and_returns,
        )
    ) == ["self", "experiences"]
    assert _params(ppo_trainer.BasePPOTrainer.save_logs_and_checkpoints)[:3] == ["self", "global_step", "logs_dict"]
    assert "return_entropy" in _params(Actor.forward) or "kwargs" in _params(Actor.forward)
    src = inspect.getsource(step)
    assert "self.actor_loss_fn(" in src and "experience.info.items()" in src  # metrics plumbing we rely on
    assert "self.args.actor.entropy_coef != 0" in src  # the bonus switch we toggle


def test_checkpoint_seams():
    """The policy's DeepSpeed checkpoint carries our state: PolicyModelActor passes client_states to
    strategy.save_ckpt under <ckpt.path>/_actor and restores it through strategy.load_ckpt at init."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.utils.deepspeed.deepspeed import DeepspeedStrategy

    def original(fn):
        return getattr(fn, "__wrapped_original__", fn)

    assert _params(original(DeepspeedStrategy.save_ckpt))[:7] == [
        "self",
        "model",
        "save_dir",
        "tag",
        "max_num",
        "max_mem",
        "client_state",
    ]
    assert _params(original(DeepspeedStrategy.load_ckpt))[:3] == ["self", "model", "load_dir"]
    actor_cls = ppo_actor.PolicyModelActor.__ray_actor_class__
    save_src = inspect.getsource(actor_cls.save_checkpoint)
    assert 'os.path.join(args.ckpt.path, "_actor")' in save_src and "client_states" in save_src
    init_src = inspect.getsource(actor_cls.init_model_from_pretrained)
    assert 'ckpt_path = os.path.join(args.ckpt.path, "_actor")' in init_src
    assert "strategy.load_ckpt(self.actor.model, ckpt_path)" in init_src


def test_packing_dynamic_batch_and_filtering_seams():
    """What the plug-in relies on for packed / dynamic micro-batches and the generation-batch cap: packing lives in
    Actor.forward (scattered back to (B, A) before the loss); dynamic batching walks the replay buffer's micro-batches
    in order with optimizer steps marked by dynamic_optimizer_step; the filtering loop draws one replacement prompt
    from the iterator it is given, and generate_samples ends the episode only on the exhausted flag."""
    import openrlhf.models.actor as actor_module
    import openrlhf.trainer.ppo_utils.samples_generator as sg
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.trainer.ppo_utils.replay_buffer import NaiveReplayBuffer

    def original(fn):
        return getattr(fn, "__wrapped_original__", fn)

    fwd = inspect.getsource(original(actor_module.Actor.forward))
    assert "unpad_and_slice_tensor(" in fwd and "gather_and_pad_tensor(log_probs" in fwd
    train_src = inspect.getsource(original(ppo_actor.ActorPPOTrainer.ppo_train))
    assert (
        "micro_batches = ((exp, None) for exp in pbar)" in train_src
        and "not self.args.train.dynamic_batch_enable" in (train_src)
    )
    assert "dynamic_optimizer_step" in inspect.getsource(NaiveReplayBuffer.setup_dynamic_batch)
    assert _params(NaiveReplayBuffer.collate_fn) == ["self", "batch"]
    assert _params(original(sg.SamplesGenerator._generate_vllm)) == [
        "self",
        "dataloader_iter",
        "num_prompts",
        "dynamic_filtering",
        "generate_kwargs",
    ]
    loop = inspect.getsource(original(sg.SamplesGenerator._generate_vllm))
    assert "_collect_prompt_batch(dataloader_iter, 1)" in loop
    assert "self._dataloader_iter = None" in inspect.getsource(sg.SamplesGenerator.generate_samples)
