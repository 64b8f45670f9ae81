"""result.json summary rule and the crash-safe file helpers."""

import json

import pytest

from harness.backends.pocket.trainer import make_generator
from harness.io import append_jsonl, atomic_write_json, read_jsonl
from harness.run.records import summarize_metrics


def test_summary_means_over_first_and_last_tenth():
    rows = [{"step": i + 1, "entropy": float(i), "reward/mean": float(10 * i)} for i in range(25)]
    s = summarize_metrics(rows)  # 10% of 25 steps -> 2 steps each end
    assert s == {"entropy_start": 0.5, "entropy_end": 23.5, "reward_start": 5.0, "reward_end": 235.0}
    one = summarize_metrics(rows[:3])  # fewer than 10 steps -> one step each end
    assert one["entropy_start"] == 0.0 and one["entropy_end"] == 2.0
    rows[0].pop("entropy")  # a missing value is skipped, never counted as 0
    assert summarize_metrics(rows)["entropy_start"] == 1.0


def test_jsonl_survives_a_torn_last_line_and_nan_becomes_null(tmp_path):
    p = tmp_path / "m.jsonl"
    append_jsonl(p, {"step": 1, "x": float("nan")})
    append_jsonl(p, {"step": 2, "x": 1.5})
    with open(p, "a") as f:
        f.write('{"step": 3, "x"')  # killed mid-write
    assert read_jsonl(p) == [{"step": 1, "x": None}, {"step": 2, "x": 1.5}]
    p.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"m.jsonl:2: not valid JSON"):
        read_jsonl(p)
    atomic_write_json(tmp_path / "r.json", {"a": float("inf")})
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": None}
    assert not list(tmp_path.glob(".*.tmp"))


def test_step_generators_are_independent_and_reproducible():
    a = make_generator(0, 5, "rollout")
    b = make_generator(0, 5, "rollout")
    import torch

    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))
    draws = {
        (s, p): float(torch.rand(1, generator=make_generator(0, s, p))) for s in (1, 2) for p in ("prompts", "rollout")
    }
    assert len(set(draws.values())) == 4
