"""The power analysis a registration quotes (harness.studies.power): the noncentral-t power of a two-sided paired t
test against G*Power's published values, and the per-seed spread read from study A's committed archive against the
rescue estimates the mechanism analysis computed from the same runs by its own code."""

import json
import math
from pathlib import Path

import pytest

from harness.studies.power import detectable, power, seeds_for, study_spread

ROOT = Path(__file__).resolve().parents[2]


def test_power_matches_g_power():
    # G*Power 3.1, t test, one sample / matched pairs, two tails, alpha 0.05, power 0.8:
    # d = 0.5 -> total sample size 34, actual power 0.8077775; d = 0.8 -> 15, actual power 0.8213105
    assert power(0.5, 1.0, 34) == pytest.approx(0.8077775, abs=1e-7)
    assert power(0.8, 1.0, 15) == pytest.approx(0.8213105, abs=1e-7)
    assert seeds_for(0.5, 1.0) == 34 and seeds_for(0.8, 1.0) == 15
    assert power(0.5, 1.0, 34, alpha=0.025) < power(0.5, 1.0, 34)  # a Holm step's smaller level costs power
    assert power(-0.5, 1.0, 34) == power(0.5, 1.0, 34)  # two-sided
    assert power(0.0, 1.0, 10) == pytest.approx(0.05)  # no effect: the test's level
    assert power(detectable(1.0, 34), 1.0, 34) == pytest.approx(0.8, abs=1e-6)


def test_study_a_spread_agrees_with_the_mechanism_analysis():
    s = study_spread(ROOT / "results" / "mechanism" / "runs")
    claims = json.loads((ROOT / "results" / "mechanism" / "mechanism.json").read_text())["verdicts"]["claims"]
    est = {c["claim"]: c["tests"][0]["estimate"] for c in claims if c["claim"].startswith("rescue")}
    assert s["seeds"] == [1000, 1001, 1002, 1003, 1004]
    assert math.exp(s["log_entropy_ratio"]["mean"]) == pytest.approx(est["rescue_entropy"], rel=1e-9)
    assert s["score_difference"]["mean"] == pytest.approx(est["rescue_score"], rel=1e-9)
    assert s["log_entropy_ratio"]["sd"] == pytest.approx(0.618, abs=5e-4)  # the numbers
    assert s["score_difference"]["sd"] == pytest.approx(0.094, abs=5e-4)
    assert seeds_for(s["log_entropy_ratio"]["mean"], s["log_entropy_ratio"]["sd"]) == 27
    assert seeds_for(0.05, s["score_difference"]["sd"]) == 30
