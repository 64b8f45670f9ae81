"""OpenRLHF CPU suite: real OpenRLHF 0.11.2 modules with the flash_attn/vllm CPU stubs (scripts/setup_openrlhf.sh).

Every test here carries the ``openrlhf`` marker (excluded from the default run). ``torch.compile`` is made the
identity before OpenRLHF is imported (its ``compute_entropy`` is compiled; eager gives the same numbers and
avoids a minute of CPU compilation), as upstream's own CPU tests do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.backends.openrlhf.rehearsal import stubs as cpu_stubs

sys.path.insert(0, str(Path(__file__).parent))
from orl_testlib import DEVICE, FakeStrategy, plugin_config  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def openrlhf_cpu_stubs():
    """Only when a test of this directory runs (never in the default run, where they are deselected):
    stub flash_attn/vllm and make torch.compile the identity, before anything imports OpenRLHF."""
    os.environ["HARNESS_OPENRLHF_CPU_STUBS"] = "1"
    cpu_stubs.install()
    torch.compile = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)  # noqa: E731
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.openrlhf)


@pytest.fixture
def configure():
    """configure(method_dict) sets the plugin config in-process; restored afterwards."""
    from harness.backends.openrlhf import plugin

    saved = os.environ.get("HARNESS_OPENRLHF_PLUGIN")

    def _set(method: dict, **kw):
        plugin.configure(plugin_config(method, **kw))
        return plugin

    yield _set
    plugin.STATE.__init__()
    if saved is None:
        os.environ.pop("HARNESS_OPENRLHF_PLUGIN", None)
    else:
        os.environ["HARNESS_OPENRLHF_PLUGIN"] = saved


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A random 2-layer Llama (vocab 64) saved with save_pretrained: OpenRLHF's Actor needs a path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    path = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return str(path)


@pytest.fixture
def make_trainer(tiny_model_dir, monkeypatch):
    """make_trainer(args, packing=False) -> a real ActorPPOTrainer (patched ppo_actor) around a real openrlhf Actor on
    CPU (``packing``: OpenRLHF's sample packing in the Actor's forwards)."""
    from harness.backends.openrlhf import hook

    hook.install()
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.models import Actor

    assert getattr(ppo_actor, hook.PATCHED_FLAG, False), "the hook did not patch ppo_actor"
    monkeypatch.setattr(ppo_actor, "torch_dist_barrier_and_cuda_sync", lambda: None)
    monkeypatch.setattr(ppo_actor, "NaiveReplayBuffer", lambda *a, **k: SimpleNamespace())

    def _make(args, accumulated_gradient=1, seed=0, packing=False):
        torch.manual_seed(seed)
        actor = Actor(tiny_model_dir, attn_implementation="eager", param_dtype="bf16", packing_samples=packing)
        actor = actor.float().to(DEVICE)
        optim = torch.optim.AdamW(actor.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda _: 1.0)
        strategy = FakeStrategy(args, accumulated_gradient)
        return ppo_actor.ActorPPOTrainer(
            strategy, actor, None, optim, sched, micro_train_batch_size=2, vllm_engines=None
        )

    return _make
