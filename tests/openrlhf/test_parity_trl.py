"""Backend parity, OpenRLHF side: on the parity batch and weights of tests/backends/parity_lib.py, OpenRLHF 0.11.2's
real ``ActorPPOTrainer.training_step`` with the harness plug-in (``HarnessPolicyLoss``; for a method that
``needs_global_plan``, the plug-in's ``plan_window`` first), one call per micro-batch with OpenRLHF's global
normalisers, gives pocket's loss and gradient; and so does TRL's loss path when TRL is installed here (the project's
``test`` extra brings it): the three backends in one process.

Only DeepSpeed is replaced (``FakeStrategy``, no optimizer step); the plug-in's Clip-Cov generator is set to pocket's
(seed, step, "method") stream so the random draws agree (the launcher seeds it with seed + rank).

    .venv-openrlhf/bin/python tests/openrlhf/test_parity_trl.py    # the OpenRLHF (and TRL) rows of the docs table
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
import parity_lib as P  # noqa: E402

pytestmark = pytest.mark.openrlhf
LOSS_TOL, GRAD_TOL = 2e-6, 2e-6
ORL_CASES = [c for c, cfg in P.CASES.items() if cfg.get("agg", "token-mean") in P.OPENRLHF_AGGS]


def openrlhf_loss_and_grad(model, tok, b: P.ParityBatch, method, workdir: Path, configure):
    """One optimizer window of ``ActorPPOTrainer.training_step`` over the micro-batches of ``b`` (rows in order);
    ``configure(method_dict, seed=)`` sets the plug-in's config (the suite's fixture)."""
    import openrlhf.trainer.ray.ppo_actor as ppo_actor
    from openrlhf.models import Actor
    from openrlhf.trainer.ppo_utils.experience import Experience
    from orl_testlib import FakeStrategy, trainer_args

    from harness.backends.openrlhf import hook, plugin
    from harness.backends.pocket.trainer import make_generator

    hook.install()
    configure(method.to_config(), seed=P.SEED)
    plugin.STATE.generator = make_generator(P.SEED, P.STEP, "method")
    plugin.STATE.rollout_step = P.STEP
    m = plugin.method()
    path = workdir / "model"
    if not path.exists():
        P.save_model(model, tok, path)
    actor = Actor(str(path), attn_implementation="eager", param_dtype="bf16").float()
    actor.model.load_state_dict(model.state_dict())  # exactly pocket's float32 weights
    B = len(P.SCORES)
    agg = "token-mean" if m.agg == "token-mean" else "seq-mean-token-mean"
    args = trainer_args(entropy_coef=0.0 if m.needs_entropy else None, agg=agg)
    strategy = FakeStrategy(args, accumulated_gradient=B // P.MICRO)
    strategy.optimizer_step = lambda *a, **k: None
    optim = torch.optim.SGD(actor.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(optim, lambda _: 1.0)
    trainer = ppo_actor.ActorPPOTrainer(
        strategy, actor, None, optim, sched, micro_train_batch_size=P.MICRO, vllm_engines=None
    )
    plugin.STATE.trainer = trainer
    exps = [
        Experience(
            sequences=b.input_ids[s : s + P.MICRO],
            attention_mask=b.attention_mask[s : s + P.MICRO],
            action_mask=b.completion_mask[s : s + P.MICRO].bool(),
            action_log_probs=b.old_log_probs[s : s + P.MICRO],
            advantages=b.advantages[s : s + P.MICRO],
            info={},
        )
        for s in range(0, B, P.MICRO)
    ]
    if m.needs_global_plan:
        plugin.plan_window(exps)
    norms = {
        "dp_size": 1,
        "batch_num_tokens": b.completion_mask.sum(),
        "global_batch_size": torch.tensor(float(B)),
    }
    losses = [trainer.training_step(e, kl_ctl=0.0, step=0, loss_batch_info=norms) for e in exps]
    loss = sum(float(s["metrics"]["policy_loss"]) for s in losses)
    return loss, P.flat_grads(actor.model)


@pytest.fixture
def orl_loss(monkeypatch, tmp_path, configure):
    """``orl_loss(model, tok, batch, method)`` on OpenRLHF's actor module patched as the CPU suite patches it (no
    barrier, no replay buffer); the plug-in's state is reset afterwards by ``configure``."""
    from harness.backends.openrlhf import hook

    hook.install()
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    monkeypatch.setattr(ppo_actor, "torch_dist_barrier_and_cuda_sync", lambda: None)
    monkeypatch.setattr(ppo_actor, "NaiveReplayBuffer", lambda *a, **k: SimpleNamespace())
    return lambda model, tok, b, m: openrlhf_loss_and_grad(model, tok, b, m, tmp_path, configure)


def import_trl_loss():
    """TRL's loss path (parity_lib.trl_loss_and_grad), or None when TRL is not installed in this venv. TRL's modules
    are imported while the CPU vLLM stub is hidden: TRL parses the version of any vLLM it finds, and the stub's
    ('0.0.0-harness-stub') is not a PEP 440 version. TRL uses no vLLM here."""
    if importlib.util.find_spec("trl") is None:
        return None
    saved = sys.modules.get("vllm")
    sys.modules["vllm"] = None
    try:
        import trl.trainer.grpo_trainer  # noqa: F401

        import harness.backends.trl.trainer  # noqa: F401
    finally:
        if saved is None:
            sys.modules.pop("vllm", None)
        else:
            sys.modules["vllm"] = saved
    return P.trl_loss_and_grad


@pytest.fixture
def trl_loss():
    return import_trl_loss()


@pytest.mark.parametrize("case", ORL_CASES)
def test_backends_match_pocket(case, orl_loss, trl_loss):
    """OpenRLHF's loss and gradient equal pocket's; with TRL installed here, TRL's too: the three in one process."""
    d = P.measure(case, orl_loss)
    assert d["loss_diff"] <= LOSS_TOL, d
    assert d["grad_diff"] <= GRAD_TOL, d
    if P.CASES[case]["name"] in ("clip_cov", "kl_cov", "high_entropy_tokens"):
        assert d["selected"] > 0, d
    if trl_loss is not None:
        t = P.measure(case, trl_loss)
        assert t["loss"] == d["loss"]  # the same pocket reference
        assert t["loss_diff"] <= LOSS_TOL and t["grad_diff"] <= GRAD_TOL, t


if __name__ == "__main__":  # the OpenRLHF (and TRL) columns of the docs/backends.md parity table
    import tempfile

    from harness.backends.openrlhf.rehearsal import stubs as cpu_stubs

    cpu_stubs.install()
    torch.compile = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)  # as the suite's conftest
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from orl_testlib import plugin_config

    from harness.backends.openrlhf import hook, plugin

    hook.install()  # patch OpenRLHF's actor module first, then stub what the suite stubs
    import openrlhf.trainer.ray.ppo_actor as ppo_actor

    ppo_actor.torch_dist_barrier_and_cuda_sync = lambda: None
    ppo_actor.NaiveReplayBuffer = lambda *a, **k: SimpleNamespace()
    set_config = lambda method, **kw: plugin.configure(plugin_config(method, **kw))  # noqa: E731
    trl = import_trl_loss()
    print("| case | pocket loss | selected | OpenRLHF: loss diff | grad diff | TRL: loss diff | grad diff |")
    with tempfile.TemporaryDirectory() as tmp:
        for case in ORL_CASES:
            orl = lambda model, tok, b, m: openrlhf_loss_and_grad(model, tok, b, m, Path(tmp), set_config)  # noqa: E731
            d = P.measure(case, orl)
            t = P.measure(case, trl) if trl else {"loss_diff": float("nan"), "grad_diff": float("nan")}
            print(
                f"| {case} | {d['loss']:.6f} | {d['selected']:.0f} | {d['loss_diff']:.1e} | {d['grad_diff']:.1e} | "
                f"{t['loss_diff']:.1e} | {t['grad_diff']:.1e} |",
                flush=True,
            )
