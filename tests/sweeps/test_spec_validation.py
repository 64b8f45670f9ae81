"""Bad sweep specs fail with one clear error naming the key path, before anything is written or submitted."""

import pytest
import yaml

from harness.cli import main
from harness.sweeps import SpecError, expand, load_spec

BASE = {"backend": "pocket", "method": {"name": "grpo"}, "model": {"name": "pocket-0.3m"}, "train": {"steps": 2}}


def spec(**kw):
    d = {"name": "t", "base": BASE, "grid": {"method": [{"name": "grpo"}, {"name": "kl_cov"}]}}
    d.update(kw)
    return {k: v for k, v in d.items() if v is not None}


def error_of(d) -> str:
    with pytest.raises(SpecError) as e:
        expand(load_spec(d))
    return str(e.value)


def test_unknown_top_level_key_suggests_the_right_one():
    msg = error_of(spec(seed=[0, 1]))
    assert "seed" in msg and "'seeds'" in msg


def test_unknown_axis_key_is_named_with_its_path():
    msg = error_of(spec(grid={"train.lrr": [1e-3, 1e-4]}))
    assert "train.lrr" in msg and "unknown key" in msg and "'lr'" in msg


def test_empty_grid_and_empty_axis():
    assert "grid: empty" in error_of(spec(grid={}))
    assert "grid.method: empty list" in error_of(spec(grid={"method": []}))
    assert "no axes" in error_of(spec(grid=None))


def test_zip_axes_of_different_lengths():
    msg = error_of(spec(zip=[{"model.name": ["pocket-0.3m", "pocket-1m"], "train.lr": [1e-3, 1e-4, 1e-5]}]))
    assert "zip[0]" in msg and "model.name has 2" in msg and "train.lr has 3" in msg


def test_unknown_method_is_caught_with_a_suggestion():
    msg = error_of(spec(grid={"method": [{"name": "grpo"}, {"name": "kl_covv"}]}))
    assert "kl_covv" in msg and "kl_cov" in msg and "cell" in msg


def test_misspelled_resource_key():
    msg = error_of(spec(resources={"default": {"gpus_per_nod": 1}}))
    assert "resources.default.gpus_per_nod" in msg and "gpus_per_node" in msg
    msg = error_of(spec(resources={"groups": [{"match": {"method.name": "grpo"}, "timout_min": 5}]}))
    assert "resources.groups[0].timout_min" in msg and "timeout_min" in msg


def test_bad_resource_values_and_sections():
    assert "resources.default.nodes" in error_of(spec(resources={"default": {"nodes": 0}}))
    assert "resources.defaults" in error_of(spec(resources={"defaults": {}}))
    assert "resources.groups[0].match: required" in error_of(spec(resources={"groups": [{"nodes": 2}]}))


def test_exclude_and_match_paths_must_exist_and_match_something():
    assert "exclude[0].methd.name" in error_of(spec(exclude=[{"methd.name": "grpo"}]))
    assert "exclude[0]: matches no cell" in error_of(spec(exclude=[{"method.name": "gpro"}]))
    assert "removes every cell" in error_of(spec(exclude=[{"method.name": "grpo"}, {"method.name": "kl_cov"}]))
    msg = error_of(spec(resources={"groups": [{"match": {"method.name": "clip_cov"}, "nodes": 2}]}))
    assert "resources.groups[0].match: matches no cell" in msg


def test_overlapping_axes_seeds_and_names():
    assert "overlaps" in error_of(spec(zip=[{"method.k_ratio": [0.1]}]))
    assert "seeds: duplicate" in error_of(spec(seeds=[0, 0]))
    assert "seeds: expected non-negative" in error_of(spec(seeds=[-1]))
    assert "grid.seed" in error_of(spec(grid={"seed": [0, 1]}))
    assert "name:" in error_of(spec(name="a b"))


def test_duplicate_cells_are_refused():
    msg = error_of(spec(grid={"train.steps": [2, 2.0]}))  # the schema reads 2.0 as the integer 2
    assert "resolve to the same run config" in msg


def test_openrlhf_layout_must_match_resources():
    # a layout OpenRLHF accepts (mini-batch 32 = 1 x 32 GPUs): load_config runs the backend's checks first
    base = dict(
        BASE,
        backend="openrlhf",
        openrlhf={"nodes": 4, "gpus_per_node": 8},
        train={"steps": 2, "prompts_per_step": 32, "micro_batch_size": 1},
    )
    msg = error_of(spec(base=base, resources={"default": {"nodes": 2, "gpus_per_node": 8}}))
    assert "nodes=4" in msg and "give nodes=2" in msg


def test_openrlhf_layout_is_derived_from_the_run_config():
    """The cluster layout is written once (openrlhf.nodes / gpus_per_node); the job's resources follow it."""
    base = dict(
        BASE,
        backend="openrlhf",
        openrlhf={"nodes": 4, "gpus_per_node": 8},
        train={"steps": 2, "prompts_per_step": 32, "micro_batch_size": 1},
    )
    cells = expand(load_spec(spec(base=base, resources={"default": {"timeout_min": 10}})))
    assert [(c.resources["nodes"], c.resources["gpus_per_node"]) for c in cells] == [(4, 8), (4, 8)]


def test_cli_bad_spec_is_one_error_line_and_writes_nothing(tmp_path, capsys):
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(spec(zip=[{"model.name": ["pocket-0.3m"], "train.lr": [1e-3, 1e-4]}])))
    runs = tmp_path / "runs"
    assert main(["sweep", str(p), "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "zip[0]" in err[0]
    assert not runs.exists()


def test_cli_missing_spec_and_bad_executor(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    assert "sweep spec not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", str(tmp_path / "nope.yaml"), "--executor", "slurmm"])


def test_cli_only_with_unknown_cell(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec()))
    assert main(["sweep", str(p), "--runs-dir", str(tmp_path / "r"), "--only", "gpro__s0"]) == 2
    assert "--only" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_a_second_concurrent_submission_into_the_same_runs_dir_is_refused(tmp_path, capsys):
    from harness.commands.sweep import submission_lock

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec()))
    runs = tmp_path / "r"
    with submission_lock(runs):
        assert main(["sweep", str(p), "--runs-dir", str(runs), "--executor", "debug"]) == 2
    assert "another `harness sweep` is submitting" in capsys.readouterr().err
    assert not list(runs.glob("*/cell.json"))


def test_slurm_executor_without_sbatch_is_a_clear_error(tmp_path, capsys, monkeypatch):
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(spec()))
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    assert main(["sweep", str(p), "--runs-dir", str(tmp_path / "r"), "--executor", "slurm"]) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
