"""The rollout-mismatch correction on pocket: the sampling pass plays the rollout engine. With ``train.old_log_probs:
rollout`` its log-probs are also the old ones, so the correction's weight is exactly 1 and a run is bit-identical to
the uncorrected one (alone and in a population); with ``recompute`` the old log-probs are the exact recompute and
the sampling pass's log-probs the rollout's (OpenRLHF's and verl's three policies): the logged fractions show it."""

import copy
import traceback

import pytest
import torch

from harness.backends.pocket.population import Population
from harness.backends.pocket.trainer import PocketTrainer
from harness.io import read_jsonl
from harness.kernel.correction import METRICS
from harness.run.config import load_config
from harness.run.runner import run

FRACTION = "rollout_correction/filtered_frac"
EXACT_ONE = {"scheme": "icepop", "low": 1.0, "high": 1.0}  # keeps a token only when its float32 ratio is exactly 1


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("warm")


def _config(tiny, cache, correction="off", old_log_probs="rollout", name="grpo"):
    d = copy.deepcopy(tiny)
    d["method"] = {"name": name, "rollout_correction": correction}
    # a short supervised warm start: rewards, advantages and gradients are not all zero
    d["model"] = {
        "name": "pocket-0.1m",
        "cache_dir": str(cache),
        "warm_start": {"enabled": "true", "max_steps": 60, "min_steps": 60, "check_every": 60, "target_acc": 0.0},
    }
    d["train"].update(steps=2, old_log_probs=old_log_probs)
    d["eval"]["every"] = 0
    return load_config(d)


def _rows(run_dir, drop=("time/", "rollout_correction/")):
    return [{k: v for k, v in r.items() if not k.startswith(drop)} for r in read_jsonl(run_dir / "metrics.jsonl")]


def _weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)["model"]


def test_rollout_old_log_probs_make_the_correction_the_identity(tiny, cache, tmp_path):
    run(_config(tiny, cache), tmp_path / "plain", quiet=True)
    run(_config(tiny, cache, "tis"), tmp_path / "tis", quiet=True)
    plain, tis = _rows(tmp_path / "plain"), _rows(tmp_path / "tis")
    assert plain == tis and plain[0]["grad_norm"] > 0  # every number of the run, the gradient's norm included
    a, b = _weights(tmp_path / "plain"), _weights(tmp_path / "tis")
    assert all(torch.equal(a[k], b[k]) for k in a)
    for row in read_jsonl(tmp_path / "tis" / "metrics.jsonl"):
        assert set(METRICS) <= set(row)
        assert row[FRACTION] == 0.0 and row["rollout_correction/log_ratio_abs"] == 0.0
        assert row["rollout_correction/coef_mean"] == 1.0


def test_recompute_makes_the_sampling_pass_the_rollout_policy(tiny, cache, tmp_path):
    """The recomputed old log-probs differ from the sampling pass's by rounding (|delta| ~ 1e-7): nothing leaves
    OpenRLHF's default band, while a band that keeps only an exact ratio of 1 drops part of the tokens."""
    run(_config(tiny, cache, "icepop", "recompute"), tmp_path / "band", quiet=True)
    run(_config(tiny, cache, EXACT_ONE, "recompute"), tmp_path / "exact", quiet=True)
    run(_config(tiny, cache, "off", "recompute"), tmp_path / "plain", quiet=True)
    band, exact = read_jsonl(tmp_path / "band" / "metrics.jsonl"), read_jsonl(tmp_path / "exact" / "metrics.jsonl")
    for row in band:
        assert row[FRACTION] == 0.0 and 0 < row["rollout_correction/log_ratio_abs"] < 1e-5
    for row in exact:
        assert 0 < row[FRACTION] < 1
        assert row["rollout_correction/coef_mean"] == pytest.approx(1 - row[FRACTION], abs=1e-6)
    plain = read_jsonl(tmp_path / "plain" / "metrics.jsonl")
    assert exact[0]["grad_norm"] != pytest.approx(plain[0]["grad_norm"], rel=1e-3)  # the weight reached the loss


def test_population_members_carry_the_correction(tiny, cache, tmp_path):
    """A population's old log-probs are the sampling pass's: a member with the correction on trains exactly as
    its twin without it and logs the (zero) fractions."""
    trainers = [
        PocketTrainer(_config(tiny, cache, rc), tmp_path / name, log=lambda *_: None)
        for name, rc in (("plain", "off"), ("seq", "seq_mask"), ("drop", {"scheme": "icepop", "rejected": "drop"}))
    ]
    results = Population(trainers, log=lambda *_: None).run()
    for r in results:
        assert not isinstance(r, BaseException), "".join(traceback.format_exception(r))
    plain = _rows(tmp_path / "plain")
    for name in ("seq", "drop"):
        assert _rows(tmp_path / name) == plain, name
        assert all(row[FRACTION] == 0.0 for row in read_jsonl(tmp_path / name / "metrics.jsonl"))
