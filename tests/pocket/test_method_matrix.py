"""Every loss x advantage estimator either trains (pocket: all of them, 2 steps) or is refused when the config is
loaded (OpenRLHF: by capability, with an error naming why); backends call the method hooks, never its name."""

import math

import pytest
import torch

import harness
from harness.backends.pocket.trainer import PocketTrainer
from harness.io import read_jsonl
from harness.kernel.method import Method, TokenLoss, hparam, ppo_clip_token_loss, register_method
from harness.run.config import ConfigError, load_config

COMBOS = [(m, a) for m in harness.list_methods() for a in harness.list_advantages()]


def _tiny_cfg(tiny, method, advantage, steps=2):
    tiny["method"] = {"name": method, "advantage": advantage}
    tiny["train"].update(
        steps=steps,
        prompts_per_step=2,
        samples_per_prompt=2,
        updates_per_rollout=2,
        micro_batch_size=2,
        max_new_tokens=3,
        dynamic_filtering=False,
        checkpoint_every=0,
    )
    tiny["eval"].update(every=0, n_samples=1, max_problems=1, greedy=False)
    return tiny


def test_every_loss_with_every_estimator_trains_on_pocket(tiny, tmp_path):
    failures = []
    for i, (name, adv) in enumerate(COMBOS):
        cfg = load_config(_tiny_cfg(dict(tiny, train=dict(tiny["train"]), eval=dict(tiny["eval"])), name, adv))
        tr = PocketTrainer(cfg, tmp_path / f"r{i}", log=lambda *_: None)
        try:
            tr.run()
        except Exception as e:  # collect every failing combination, not only the first
            failures.append(f"{name} x {adv}: {type(e).__name__}: {e}")
            continue
        rows = read_jsonl(tmp_path / f"r{i}" / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2], (name, adv)
        assert all(math.isfinite(r["grad_norm"]) for r in rows), (name, adv)
        if tr.method.auxiliary_model() is not None:
            assert "prm/loss" in rows[0], (name, adv)
        if name == "kl_cov":  # a method's own metrics reach metrics.jsonl on pocket too
            assert rows[0]["kl_cov/beta"] == 1.0, (name, adv)
    assert not failures, "\n".join(failures)


def test_every_loss_with_the_rollout_correction_trains_on_pocket(tiny, tmp_path):
    """Correction x every registered method: with the exact recompute as old log-probs and the sampling pass as
    the rollout's, a band that keeps only exact ratios of 1 drops part of the tokens of every method's loss (of its
    12 a step: a step may keep all)."""
    failures = []
    for i, name in enumerate(harness.list_methods()):
        d = _tiny_cfg(dict(tiny, train=dict(tiny["train"]), eval=dict(tiny["eval"])), name, "grpo")
        d["method"]["rollout_correction"] = {"scheme": "icepop", "low": 1.0, "high": 1.0}
        d["train"]["old_log_probs"] = "recompute"
        try:
            PocketTrainer(load_config(d), tmp_path / f"c{i}", log=lambda *_: None).run()
        except Exception as e:  # collect every failing method, not only the first
            failures.append(f"{name}: {type(e).__name__}: {e}")
            continue
        rows = read_jsonl(tmp_path / f"c{i}" / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2], name
        fractions = [r["rollout_correction/filtered_frac"] for r in rows]
        assert all(0 <= f < 1 for f in fractions) and max(fractions) > 0, (name, fractions)
    assert not failures, "\n".join(failures)


def _openrlhf_cfg(method, advantage):
    return {
        "backend": "openrlhf",
        "seed": 0,
        "method": {"name": method, "advantage": advantage},
        "model": {"name": "Qwen/Qwen2.5-0.5B"},
        "task": {"name": "/data/math.jsonl"},
        "train": {
            "steps": 2,
            "prompts_per_step": 8,
            "samples_per_prompt": 4,
            "updates_per_rollout": 2,
            "micro_batch_size": 2,
            "max_new_tokens": 64,
        },
        "openrlhf": {"nodes": 1, "gpus_per_node": 2},
    }


@pytest.mark.parametrize("name,adv", COMBOS)
def test_openrlhf_accepts_or_refuses_each_combination_at_load_time(name, adv):
    m = harness.get_method(name, advantage=adv)
    reasons = {  # capability -> a phrase the refusal must contain
        "auxiliary model": m.auxiliary_model() is not None,
    }
    try:
        load_config(_openrlhf_cfg(name, adv))
    except ConfigError as e:
        msg = str(e)
        assert "\n" not in msg and len(msg) < 400, msg
        expected = [phrase for phrase, applies in reasons.items() if applies]
        assert expected and any(p in msg for p in expected), f"{name} x {adv} refused without a reason: {msg}"
        return
    assert not any(reasons.values()), f"{name} x {adv} was accepted although OpenRLHF cannot run it"


def test_openrlhf_accepts_the_paper_methods():
    for name in ("grpo", "rloo", "clip_higher", "entropy_bonus", "clip_cov", "kl_cov"):
        load_config(_openrlhf_cfg(name, "rloo" if name == "rloo" else "grpo"))


# -- per-step state: a toy adaptive method resumes bit-identically ------------------------------------------
@pytest.fixture
def toy_stateful():
    @register_method("toy_stateful")
    class ToyStateful(Method):
        """Entropy bonus whose coefficient is the sum of the rollout entropies seen so far (state that matters)."""

        needs_entropy = True
        scale: float = hparam(0.01, "coefficient per nat of rollout entropy seen")

        def __post_init__(self):
            super().__post_init__()
            self.total, self.steps = 0.0, 0

        def on_step_end(self, stats):
            self.total += stats["entropy/rollout_token_mean"] + stats["rollout/neg_logprob"]
            self.steps = stats["step"]

        def state_dict(self):
            return {"total": self.total, "steps": self.steps}

        def load_state_dict(self, d):
            self.total, self.steps = d["total"], d["steps"]

        def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
            loss, clipped = ppo_clip_token_loss(log_probs, old_log_probs, advantages, self.eps_low, self.eps_high)
            return TokenLoss(
                loss, clipped=clipped & mask.bool(), metrics={"toy_stateful/coef": self.scale * self.total}
            )

        def extra_loss(self, loss, entropy, mask):
            return loss - self.scale * self.total * harness.kernel.ops.agg_loss(entropy, mask)

    yield ToyStateful
    harness.METHODS.unregister("toy_stateful")


def _strip(rows):  # wall-clock timings differ; the shorter run evaluated at its last step (2)
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "eval/"))} for r in rows]


def test_stateful_method_resumes_bit_identically(tiny, tmp_path, toy_stateful):
    def cfg(steps):
        c = _tiny_cfg(dict(tiny, train=dict(tiny["train"]), eval=dict(tiny["eval"])), "toy_stateful", "grpo", steps)
        c["method"].pop("advantage")
        return load_config(c)

    ref = PocketTrainer(cfg(4), tmp_path / "ref", log=lambda *_: None)
    ref.run()
    PocketTrainer(cfg(2), tmp_path / "resumed", log=lambda *_: None).run()  # stops after step 2 (checkpoint)
    blob = torch.load(tmp_path / "resumed" / "checkpoints" / "latest.pt", weights_only=False)
    assert blob["method_state"]["steps"] == 2 and blob["method_state"]["total"] > 0
    resumed = PocketTrainer(cfg(4), tmp_path / "resumed", log=lambda *_: None)
    resumed.run()
    rows = read_jsonl(tmp_path / "resumed" / "metrics.jsonl")
    assert _strip(rows) == _strip(read_jsonl(tmp_path / "ref" / "metrics.jsonl"))
    assert resumed.method.state_dict() == ref.method.state_dict()
    for a, b in zip(resumed.model.state_dict().values(), ref.model.state_dict().values()):
        assert torch.equal(a, b)
    # the method's own metric reaches metrics.jsonl (token-weighted over micro-batches: a constant here)
    assert rows[0]["toy_stateful/coef"] == 0.0 and rows[3]["toy_stateful/coef"] > rows[2]["toy_stateful/coef"] > 0

    # a resume that lost the state (reset in the checkpoint) diverges: the state really drives the loss
    PocketTrainer(cfg(2), tmp_path / "lost", log=lambda *_: None).run()
    path = tmp_path / "lost" / "checkpoints" / "latest.pt"
    blob = torch.load(path, weights_only=False)
    blob["method_state"] = {"total": 0.0, "steps": 0}
    torch.save(blob, path)
    PocketTrainer(cfg(4), tmp_path / "lost", log=lambda *_: None).run()
    assert _strip(read_jsonl(tmp_path / "lost" / "metrics.jsonl"))[3] != _strip(rows)[3]


# -- a non-finite gradient stops the run with the method's name (it used to skip the update silently) ----------
class _InfGrad(torch.autograd.Function):
    """Identity forward, infinite backward: a finite loss whose gradient is not."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * math.inf


@pytest.fixture
def toy_inf_grad():
    @register_method("toy_inf_grad")
    class ToyInfGrad(Method):
        def per_token_loss(self, log_probs, old_log_probs, advantages, mask, **_):
            loss, clipped = ppo_clip_token_loss(_InfGrad.apply(log_probs), old_log_probs, advantages, 0.2, 0.2)
            return TokenLoss(loss, clipped=clipped & mask.bool())

    yield ToyInfGrad
    harness.METHODS.unregister("toy_inf_grad")


def test_non_finite_gradient_raises_naming_the_method(tiny, tmp_path, toy_inf_grad):
    cfg = _tiny_cfg(dict(tiny, train=dict(tiny["train"]), eval=dict(tiny["eval"])), "toy_inf_grad", "grpo")
    cfg["method"].pop("advantage")
    tr = PocketTrainer(load_config(cfg), tmp_path / "run", log=lambda *_: None)
    with pytest.raises(
        FloatingPointError,
        match=r"method toy_inf_grad: non-finite gradient norm .* step 1; largest "
        r"\|log-ratio\| on a valid token of the mini-batch \d",
    ):
        tr.run()


def test_openrlhf_rows_keep_the_methods_own_metrics():
    from harness.backends.openrlhf.bridge import to_harness_metrics

    status = {"adaptive_entropy/coef": 0.003, "kl_cov/beta": 1.0, "other/thing": 2.0, "cov/mean": 0.1}
    row = to_harness_metrics(status, 3, method_name="adaptive_entropy")
    assert row["adaptive_entropy/coef"] == 0.003 and row["kl_cov/beta"] == 1.0 and row["cov/mean"] == 0.1
    assert "other/thing" not in row and row["openrlhf/other/thing"] == 2.0
    assert "openrlhf/adaptive_entropy/coef" in to_harness_metrics(status, 3)  # without the name: not the method's
