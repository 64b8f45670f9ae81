"""W-REINFORCE advantages by hand, every zoo method documented by `harness methods NAME`, and the zoo sweep running
every registered method (and the QAE authors' two combinations) at >= 5 seeds."""

from pathlib import Path

import pytest
import torch

import harness
from harness.commands.methods import describe
from harness.sweeps.expand import expand
from harness.sweeps.spec import load_spec

ROOT = Path(__file__).resolve().parents[2]

ZOO = (
    "gspo",
    "cispo",
    "sapo",
    "ce_gppo",
    "w_reinforce",
    "adaptive_entropy",
    "high_entropy_tokens",
    "entropy_advantage",
    "qae",
    "clip_low",
    "steer",
    "entropic",
    "erc",
)


def test_w_reinforce_by_hand():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = harness.get_method("w_reinforce").advantages(torch.tensor([1.0, 0.0, 1.0, 0.5]), [0, 0, 1, 1], mask)
    expected = torch.tensor([[0.1, 0.1, 0.0], [-1.0, 0.0, 0.0], [0.1, 0.1, 0.1], [0.5, 0.5, 0.0]])
    assert torch.allclose(adv, expected, rtol=0, atol=1e-7)


def test_w_reinforce_combines_with_any_loss_and_its_weight():
    m = harness.get_method("kl_cov", advantage="w_reinforce", advantage_options={"positive_weight": 1.0})
    adv = m.advantages(torch.tensor([1.0, 0.0]), [0, 0], torch.ones(2, 2))
    assert adv.tolist() == [[1.0, 1.0], [-1.0, -1.0]]  # lambda 1: plain +/-1 REINFORCE
    with pytest.raises(harness.HyperparameterError, match="positive_weight"):
        harness.get_method("grpo", advantage="w_reinforce", advantage_options={"positive_wieght": 1.0})


@pytest.mark.parametrize("name", ZOO)
def test_every_zoo_method_is_documented(name):
    text = describe(name)
    assert "Differs from official" in text
    assert "arXiv" in text  # the source paper
    for f in harness.get_method(name).hparams():
        assert f in text


def test_the_zoo_sweep_runs_every_method_and_both_qae_combinations_at_five_seeds_or_more():
    seeds = {}  # (method, advantage) -> seeds
    for cell in expand(load_spec(ROOT / "sweeps" / "methods_zoo.yaml")):
        method = cell.config["method"]
        seeds.setdefault((method["name"], method["advantage"]), set()).add(cell.config["seed"])
    missing = set(harness.list_methods()) - {name for name, _ in seeds}
    assert not missing, f"sweeps/methods_zoo.yaml lacks {sorted(missing)}"
    assert {("clip_cov", "qae"), ("kl_cov", "qae")} <= set(seeds)  # QAE paper: Clip-Cov + QAE, KL-Cov + QAE
    assert min(len(s) for s in seeds.values()) >= 5
