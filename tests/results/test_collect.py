"""Collection: run discovery, missing runs, corrupt metrics lines, labels."""

import json
import math

import pytest

from harness.results.collect import CorruptMetricsWarning, collect, final_evals, find_run_dirs


def test_finds_runs_recursively_and_reports_missing(runs_root, mk):
    mk(runs_root / "sweep", "a", seed=0)
    mk(runs_root / "sweep", "b", seed=1, write_result=False)
    mk(runs_root / "sweep", "c", seed=2, status="failed")
    (runs_root / "sweep" / "_submitit" / "x").mkdir(parents=True)
    col = collect([runs_root])
    status = dict(zip(col.runs["run_dir"].map(lambda p: p.rsplit("/", 1)[1]), col.runs["status"]))
    assert status == {"a": "completed", "b": "missing", "c": "failed"}
    detail = col.runs.set_index("status")["detail"]
    assert detail["missing"] == "no result.json" and detail["failed"] == "status failed"
    # the missing run's metrics are still read (for partial curves) but it has no final eval
    assert set(final_evals(col)["run_dir"].map(lambda p: p.rsplit("/", 1)[1])) == {"a"}


def test_bad_paths_raise_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        find_run_dirs([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no run directories under .*result.json"):
        find_run_dirs([tmp_path / "empty"])


def test_corrupt_metrics_line_is_skipped_with_file_and_line(runs_root, mk):
    d = mk(runs_root, "r", steps=4, eval_every=100, extra_lines=['{"step": 99, "entr', "[1, 2]"])
    with pytest.warns(CorruptMetricsWarning) as rec:
        col = collect([d])
    msgs = [str(w.message) for w in rec]
    # steps 1,2 are lines 1-2, the two bad lines are 3 and 4
    assert any(m.startswith(f"{d / 'metrics.jsonl'}:3: skipped corrupt") for m in msgs)
    assert any(m.startswith(f"{d / 'metrics.jsonl'}:4: skipped") for m in msgs)
    assert sorted(col.metrics["step"]) == [1, 2, 3, 4]
    assert len(col.warnings) == 2


def test_null_metric_is_missing_not_zero(runs_root, mk):
    d = mk(runs_root, "r", steps=2, eval_every=100)
    lines = (d / "metrics.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["reward/mean"] = None
    lines[0] = json.dumps(rec)
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    m = collect([d]).metrics.sort_values("step")
    assert math.isnan(m["reward/mean"].iloc[0]) and not math.isnan(m["reward/mean"].iloc[1])


def test_labels_carry_estimator_and_differing_hyperparameters(runs_root, mk):
    mk(runs_root, "e1", method="entropy_bonus", method_config={"coef": 0.001})
    mk(runs_root, "e2", method="entropy_bonus", method_config={"coef": 0.01})
    mk(runs_root, "k", method="kl_cov", advantage="rloo")
    labels = sorted(collect([runs_root]).runs["label"])
    assert labels == ["entropy_bonus(coef=0.001)", "entropy_bonus(coef=0.01)", "kl_cov+rloo"]


def test_a_differing_nested_option_is_named_once(runs_root, mk):
    for name, alpha in (("a", 0.1), ("b", 0.4)):
        mk(runs_root, name, method="entropy_advantage", method_config={"advantage_options": {"alpha": alpha}})
    labels = sorted(collect([runs_root]).runs["label"])
    assert labels == [
        "entropy_advantage(advantage_options.alpha=0.1)",
        "entropy_advantage(advantage_options.alpha=0.4)",
    ]


def test_runs_differing_in_training_settings_are_not_seeds_of_one_row(runs_root, mk):
    import yaml

    for name, lr, seed in [("a", 1e-3, 0), ("b", 1e-3, 1), ("c", 5e-4, 0)]:
        d = mk(runs_root, name, seed=seed)
        cfg = yaml.safe_load((d / "config.yaml").read_text())
        cfg["train"] = {"lr": lr, "device": f"cuda:{seed}"}  # device is ignored, lr is not
        (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    runs = collect([runs_root]).runs
    assert list(runs["label"]) == ["grpo"] * 3  # the method is the same; the setting splits the experiments
    assert sorted(runs["setting"]) == ["train.lr=0.0005", "train.lr=0.001", "train.lr=0.001"]


def test_unfinished_run_without_resolved_defaults_does_not_split_labels(runs_root, mk):
    mk(runs_root, "done", seed=0, method_config={"eps_low": 0.2})
    mk(runs_root, "running", seed=1, write_result=False)  # config.yaml only: no method defaults
    assert sorted(collect([runs_root]).runs["label"]) == ["grpo", "grpo"]


def test_a_late_hyperparameter_at_its_default_is_not_a_seed_of_the_runs_that_set_it(runs_root, mk):
    # a finished run records every hyper-parameter but a late one at its default (rollout_correction: off); the
    # corrected runs are another experiment, never a third seed of the plain one (the rehearsal's grpo cells)
    mk(runs_root, "plain0", seed=0, method_config={"eps_low": 0.2})
    mk(runs_root, "plain1", seed=1, method_config={"eps_low": 0.2})
    mk(runs_root, "fixed", seed=0, method_config={"eps_low": 0.2, "rollout_correction": "icepop"})
    mk(runs_root, "running", seed=2, write_result=False)  # unknown (no resolved defaults yet): neither experiment
    labels = sorted(collect([runs_root]).runs["label"])
    assert labels == ["grpo", "grpo", "grpo(rollout_correction=None)", "grpo(rollout_correction=icepop)"]
