"""The old policy's entropy (``needs_old_entropy``, STEER and ERC) on pocket, alone and in a population: the token
entropy of the behaviour policy at the *training* temperature (the sampling pass's entropy is at T=1), the one the
first mini-batch's training forward sees; and ``begin_mini_batch`` once per mini-batch with its rows."""

import copy

import pytest
import torch

import harness
from harness.backends.pocket.trainer import PocketTrainer
from harness.kernel.method import Method, TokenLoss, register_method
from harness.run.config import load_config


@pytest.fixture
def recorder():
    calls = []

    @register_method("toy_old_entropy")
    class ToyOldEntropy(Method):
        """PPO clip that records what the backend passes: old and current entropy, rows, mini-batch starts."""

        needs_entropy = True
        needs_old_entropy = True

        def begin_mini_batch(self, mask):
            calls.append(("begin", int(mask.shape[0])))

        def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, old_entropy=None, **_):
            calls.append(("loss", old_entropy.clone(), entropy.detach().clone(), mask.clone(), log_probs.shape[0]))
            loss, clipped, log_ratio = self.clipped_surrogate(log_probs, old_log_probs, advantages)
            return TokenLoss(loss, clipped=clipped & mask.bool(), log_ratio=log_ratio)

    yield calls
    harness.METHODS.unregister("toy_old_entropy")


def _cfg(tiny, temperature, old_log_probs="rollout"):
    cfg = copy.deepcopy(tiny)
    cfg["method"] = {"name": "toy_old_entropy"}
    cfg["train"].update(
        steps=1,
        temperature=temperature,
        old_log_probs=old_log_probs,
        prompts_per_step=2,
        samples_per_prompt=4,
        updates_per_rollout=2,
        micro_batch_size=2,
        checkpoint_every=0,
    )
    cfg["eval"].update(every=0)
    return load_config(cfg)


def _first_mini_batch(calls):
    """(old entropy, training-forward entropy, mask) of the first mini-batch's micro-batches, concatenated."""
    losses = [c for c in calls if c[0] == "loss"]
    first = losses[:2]  # 4 rows per mini-batch, 2 per micro-batch
    return (torch.cat([c[i] for c in first]) for i in (1, 2, 3))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_old_entropy_is_the_behaviour_policys_at_the_training_temperature(tiny, tmp_path, recorder, temperature):
    tr = PocketTrainer(_cfg(tiny, temperature), tmp_path / "run", log=lambda *_: None)
    tr.run()
    old, cur, mask = _first_mini_batch(recorder)
    valid = mask.bool()
    assert bool(valid.any()) and float(old[valid].min()) > 0
    # the first mini-batch is on-policy: its training forward's entropy is the old entropy up to the rounding of
    # another pass (the sampling pass, or an eval-mode forward at the temperature)
    torch.testing.assert_close(old[valid], cur[valid], rtol=1e-4, atol=1e-5)
    assert [c for c in recorder if c[0] == "begin"] == [("begin", 4), ("begin", 4)]  # once per mini-batch


def test_old_entropy_is_not_the_t1_entropy_when_the_temperature_differs(tiny, tmp_path, recorder, monkeypatch):
    """At T = 0.7 the sampling pass's T=1 entropy (what the estimators' ``entropy`` extra and the official metric
    read) is not what the loss gets: the old entropy is the distribution at 0.7 (lower), as the training forward's."""
    seen = {}
    orig = PocketTrainer._old_entropy

    def spy(self, batch, ent_t1):
        seen["t1"] = ent_t1.clone()
        return orig(self, batch, ent_t1)

    monkeypatch.setattr(PocketTrainer, "_old_entropy", spy)
    tr = PocketTrainer(_cfg(tiny, 0.7), tmp_path / "run", log=lambda *_: None)
    tr.run()
    losses = [c for c in recorder if c[0] == "loss"]
    # the update shuffles the rows: compare the sorted valid entries of the rollout (4 micro-batches of 2 rows)
    old_vals = torch.cat([c[1][c[3].bool()] for c in losses[:4]]).sort().values
    t1_vals = seen["t1"][seen["t1"] != 0].sort().values
    assert old_vals.numel() == t1_vals.numel() and float((t1_vals - old_vals).abs().max()) > 1e-2
    assert float(old_vals.mean()) < float(t1_vals.mean())  # a sharper distribution has less entropy


def test_recompute_gives_the_exact_old_entropy(tiny, tmp_path, recorder):
    """``train.old_log_probs: recompute``: the old entropy comes from the same no-grad forward of the same
    micro-batch shapes, so on the first mini-batch it equals the training forward's entropy exactly."""
    tr = PocketTrainer(_cfg(tiny, 0.7, "recompute"), tmp_path / "run", log=lambda *_: None)
    tr.run()
    old, cur, mask = _first_mini_batch(recorder)
    assert torch.equal(old[mask.bool()], cur[mask.bool()])


def test_population_members_get_the_same_old_entropy_as_separate_runs(tiny, tmp_path, recorder):
    from harness.backends.pocket.population import Population

    cfg = _cfg(tiny, 0.7)
    PocketTrainer(cfg, tmp_path / "alone", log=lambda *_: None).run()
    alone = [c for c in recorder if c[0] == "loss"]
    recorder.clear()
    other = load_config({**cfg.to_dict(), "seed": 1})
    members = [PocketTrainer(c, tmp_path / n, log=lambda *_: None) for c, n in ((cfg, "p0"), (other, "p1"))]
    results = Population(members, log=lambda *_: None).run()
    assert not any(isinstance(r, BaseException) for r in results), results
    member0 = [c for c in recorder if c[0] == "loss"][::2]  # members alternate within each micro-batch
    assert len(member0) == len(alone)
    for a, b in zip(alone, member0):
        torch.testing.assert_close(b[1][b[3].bool()], a[1][a[3].bool()], rtol=1e-4, atol=1e-5)
    assert ("begin", 4) in recorder
