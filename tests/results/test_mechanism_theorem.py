"""The theorem-ladder analysis (harness.studies.theorem) on synthetic runs with known per-run r."""

import json
import math

import numpy as np
import pytest
import yaml

from harness.results.collect import collect
from harness.studies.theorem import analyse_theorem, main

T975_DF2 = 0.95 * math.sqrt(2 / (1 - 0.95**2))
N = 20
X = np.cos(2 * np.pi * np.arange(N) / N)  # X and Y: orthogonal, zero mean, equal norm over a full period
Y = np.sin(2 * np.pi * np.arange(N) / N)


def _run(root, mk, name, opt, lr, seed, r_fo, r_term, h=1.0):
    d = mk(root, name, seed=seed, steps=N)
    cfg = yaml.safe_load((d / "config.yaml").read_text())
    cfg["train"] = {"optimizer": opt, "lr": lr}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    dh = 0.01 * X - 0.02  # mean relative step 0.02 / h
    rows = []
    for i in range(N):
        rows.append(
            {
                "step": i + 1,
                "entropy": h,
                "entropy/update_delta": float(dh[i]),
                "cov/first_order": float(r_fo * X[i] + math.sqrt(1 - r_fo**2) * Y[i]),
                "cov/term": float(r_term * X[i] + math.sqrt(1 - r_term**2) * Y[i]),
                "cov/vanilla": float(-X[i]),
            }
        )
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_per_cell_r_and_the_first_rung_verdicts(runs_root, mk, tmp_path):
    for s, (rf, rt) in enumerate([(0.99, -0.5), (0.995, -0.6), (0.98, -0.7)]):
        _run(runs_root, mk, f"sgd_small{s}", "sgd", 1e-4, s, rf, rt)
        _run(runs_root, mk, f"sgd_big{s}", "sgd", 1e-1, s, 0.2, 0.3)
    res = analyse_theorem(collect([runs_root]))
    small = next(c for c in res["cells"] if c["lr"] == 1e-4)
    z = np.arctanh([-0.5, -0.6, -0.7])
    r = small["forms"]["cov/term"]["r"]
    assert r["estimate"] == pytest.approx(math.tanh(z.mean()))
    assert r["hi"] == pytest.approx(math.tanh(z.mean() + T975_DF2 * z.std(ddof=1) / math.sqrt(3)))
    assert small["forms"]["cov/vanilla"]["r"]["estimate"] == pytest.approx(-1.0)
    assert small["median_rel_step"]["mean"] == pytest.approx(np.median(np.abs(0.01 * X - 0.02)))
    assert small["mean_rel_delta_h"]["mean"] == pytest.approx(-0.02)
    # verdicts only at the smallest lr of each optimizer: 2 + 1 + 1 tests in one family
    v = res["verdicts"]
    assert v["families"] == {"theorem": {"size": 4}}
    by = {c["claim"]: c for c in v["claims"]}
    assert set(by) == {"first_order", "natural_form", "plain_form"} and by["first_order"]["cell"] == "sgd lr 0.0001"
    assert by["first_order"]["verdict"] == "reproduces" and by["plain_form"]["verdict"] == "reproduces"
    assert by["natural_form"]["tests"][0]["outcome"] in ("pass", "unresolved")
    assert main([str(runs_root), "--out", str(tmp_path / "t")]) == 0
    md = (tmp_path / "t" / "theorem.md").read_text()
    assert "| sgd | 0.0001 | 3 |" in md and "| sgd | 0.1 | 3 |" in md


def test_no_update_delta_is_an_error(runs_root, mk, tmp_path, capsys):
    mk(runs_root, "g0")
    assert main([str(runs_root), "--out", str(tmp_path / "t")]) == 2
    assert "entropy/update_delta" in capsys.readouterr().err
