"""Expansion: grid x zip x seeds - exclude, ids = resolved-config hashes, readable unique aliases, resources."""

import importlib.util
import re
from pathlib import Path

import pytest

from harness.run.config import load_config
from harness.sweeps import expand, load_spec
from harness.sweeps.resources import group_by_resources
from harness.sweeps.spec import SpecError

SWEEPS = Path(__file__).resolve().parents[2] / "sweeps"
BASE = {"backend": "pocket", "method": {"name": "grpo"}, "model": {"name": "pocket-0.3m"}, "train": {"steps": 2}}


def cells_of(**kw):
    d = {"name": "t", "base": BASE}
    d.update(kw)
    return expand(load_spec(d))


def test_cartesian_product_with_zip_exclude_and_seeds():
    cells = cells_of(
        grid={"method": [{"name": "grpo"}, {"name": "clip_higher"}, {"name": "kl_cov", "k_ratio": 0.002}]},
        zip=[{"model.name": ["pocket-0.3m", "pocket-1m"], "train.lr": [1e-3, 5e-4]}],
        exclude=[{"model.name": "pocket-1m", "method": {"name": "clip_higher"}}],
        seeds=[0, 1],
    )
    assert len(cells) == (3 * 2 - 1) * 2
    combos = {(c.config["model"]["name"], c.config["method"]["name"], c.config["seed"]) for c in cells}
    assert ("pocket-1m", "clip_higher", 0) not in combos and ("pocket-0.3m", "clip_higher", 1) in combos
    for c in cells:  # zip: lr moves with the model
        assert c.config["train"]["lr"] == {"pocket-0.3m": 1e-3, "pocket-1m": 5e-4}[c.config["model"]["name"]]
    kl = [c for c in cells if c.config["method"]["name"] == "kl_cov"]
    assert all(c.config["method"]["k_ratio"] == 0.002 for c in kl)


def test_mapping_value_replaces_the_subtree():
    base = dict(BASE, method={"name": "kl_cov", "k_ratio": 0.5})
    cells = cells_of(base=base, grid={"method": [{"name": "grpo"}, {"name": "kl_cov"}]})
    assert cells[0].config["method"]["name"] == "grpo"
    assert "k_ratio" not in cells[0].config["method"]  # no stale k_ratio left from base (grpo has none)
    assert cells[1].config["method"]["k_ratio"] == 0.002  # kl_cov's default, not base's 0.5


def test_ids_are_the_run_ids_of_the_resolved_configs_and_stable():
    cells = cells_of(grid={"method": [{"name": "grpo"}, {"name": "kl_cov"}]}, seeds=[0, 1])
    for c in cells:
        assert c.id == load_config(c.config).run_id()
        assert len(c.id) == 12 and int(c.id, 16) >= 0
    again = cells_of(grid={"method": [{"name": "grpo"}, {"name": "kl_cov"}]}, seeds=[0, 1])
    assert [c.id for c in cells] == [c.id for c in again]
    assert len({c.id for c in cells}) == 4


def test_resources_do_not_change_the_identity():
    a = cells_of(grid={"method": [{"name": "grpo"}]}, seeds=[0])
    b = cells_of(grid={"method": [{"name": "grpo"}]}, seeds=[0], resources={"default": {"timeout_min": 7}})
    assert a[0].id == b[0].id and b[0].resources["timeout_min"] == 7


def test_aliases_are_readable_model_first_and_unique():
    cells = cells_of(
        grid={"method": [{"name": "kl_cov", "k_ratio": 0.002}, {"name": "kl_cov", "k_ratio": 0.02}, {"name": "grpo"}]},
        zip=[{"model.name": ["pocket-0.3m", "pocket-1m"]}],
        seeds=[0],
    )
    aliases = [c.alias for c in cells]
    assert len(set(aliases)) == len(aliases)
    assert "pocket-0.3m__grpo__s0" in aliases
    assert "pocket-1m__kl_cov-k_ratio0.02__s0" in aliases  # same method name twice: the other keys spell it out
    assert all(c.dirname == f"{c.alias}__{c.id}" for c in cells)


def test_single_value_axes_stay_out_of_the_alias():
    cells = cells_of(grid={"method": [{"name": "grpo"}], "train.lr": [1e-3, 1e-4]}, seeds=[3])
    assert [c.alias for c in cells] == ["lr0.001__s3", "lr0.0001__s3"]


def test_resource_groups_override_the_default_and_split_arrays():
    cells = cells_of(
        grid={"model.name": ["pocket-0.3m", "pocket-1m"], "method": [{"name": "grpo"}, {"name": "rloo"}]},
        resources={
            "default": {"timeout_min": 10, "cpus_per_task": 2},
            "groups": [
                {"match": {"model.name": "pocket-1m"}, "timeout_min": 30, "additional_parameters": {"mail-type": "END"}}
            ],
        },
    )
    by_model = {c.config["model"]["name"]: c.resources for c in cells}
    assert by_model["pocket-0.3m"]["timeout_min"] == 10 and by_model["pocket-1m"]["timeout_min"] == 30
    assert by_model["pocket-1m"]["cpus_per_task"] == 2
    groups = group_by_resources(cells)
    assert [len(g) for _, g in groups] == [2, 2]
    assert {g[0].config["model"]["name"] for _, g in groups} == {"pocket-0.3m", "pocket-1m"}


def test_paths_to_a_yaml_base(tmp_path):
    (tmp_path / "run.yaml").write_text("backend: pocket\nmethod: {name: grpo}\ntrain: {steps: 3}\n")
    (tmp_path / "s.yaml").write_text("name: t\nbase: run.yaml\nseeds: [0, 1]\n")
    cells = expand(load_spec(tmp_path / "s.yaml"))
    assert [c.config["train"]["steps"] for c in cells] == [3, 3] and [c.alias for c in cells] == ["s0", "s1"]


@pytest.mark.parametrize("name", ["paper_qwen25", "entropy_law_scaling", "entropy_bonus_alpha"])
def test_paper_specs_validate(name):
    cells = expand(load_spec(SWEEPS / f"{name}.yaml"))
    assert cells and all(c.config["backend"] == "openrlhf" for c in cells)
    if name == "paper_qwen25":
        assert len(cells) == 2 * 4 * 3
        k = {
            (c.config["model"]["name"], c.config["method"]["k_ratio"])
            for c in cells
            if c.config["method"]["name"] == "kl_cov"
        }
        assert k == {("Qwen/Qwen2.5-7B", 0.002), ("Qwen/Qwen2.5-32B", 0.0002)}
        lr = {(c.config["model"]["name"], c.config["train"]["lr"]) for c in cells}
        assert lr == {("Qwen/Qwen2.5-7B", 5e-7), ("Qwen/Qwen2.5-32B", 1e-6)}
        t = cells[0].config["train"]
        assert (
            t["prompts_per_step"],
            t["samples_per_prompt"],
            t["prompts_per_step"] // t["updates_per_rollout"],
            t["max_new_tokens"],
        ) == (256, 8, 32, 8192)
        assert {c.resources["nodes"] for c in cells} == {4}
    if name == "entropy_bonus_alpha":
        assert sorted({c.config["method"]["coef"] for c in cells}) == [1e-4, 1e-3, 5e-3, 1e-2]
    if name == "entropy_law_scaling":
        sizes = {c.config["model"]["name"].split("-")[-1] for c in cells}
        assert sizes == {"0.5B", "1.5B", "3B", "7B", "32B"}


@pytest.mark.parametrize("path", sorted(p.name for p in SWEEPS.glob("*.yaml")))
def test_every_sweep_spec_in_the_repo_expands(path):
    """Specs are discovered, not listed by hand: a new or edited spec that no longer validates fails here. A spec
    whose model ships in a Python package that is not installed (SmolLM2: ``make setup-slow``) must be refused
    with an error naming the package and how to get it."""
    missing = [m for m in re.findall(r"pkg://(\w+)/", _spec_text(SWEEPS / path)) if importlib.util.find_spec(m) is None]
    if missing:
        with pytest.raises(SpecError, match=rf"{missing[0]}.*not installed.*make setup-slow"):
            expand(load_spec(SWEEPS / path))
        return
    cells = expand(load_spec(SWEEPS / path))
    assert cells and len({c.id for c in cells}) == len(cells) and len({c.dirname for c in cells}) == len(cells)


def _spec_text(path):
    """The spec and every config file it names (a model is usually set in the base config)."""
    text = path.read_text()
    for name in re.findall(r"[\w./-]+\.yaml", text):
        for folder in (SWEEPS, SWEEPS.parent):
            if (folder / name).is_file():
                text += (folder / name).read_text()
                break
    return text
