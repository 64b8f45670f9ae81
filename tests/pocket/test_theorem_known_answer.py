"""Known answers for the covariance forms the pocket trainer logs (cov/vanilla, cov/first_order beside cov/term)
and for the optimizer option.

The softmax identity dH/dz_j = -p_j (log p_j + H) gives, to first order in the logit change dz,
ΔH = -Cov_{a~p}(log p(a), dz(a)), which ``cov/first_order`` computes from the logits before and after the update.
For one state trained by plain gradient steps with group-centred advantages (GRPO), and logits that move like a
table (dz ∝ the logit gradient), this equals -η·cov/vanilla. The pocket network shares parameters, so the
through-trainer test uses a task with a single training problem answered by one token: one state, one decision,
the case closest to the tabular theorem."""

import copy
import json
import math

import numpy as np
import pytest
import torch

from harness.backends.pocket.trainer import first_order_delta, make_optimizer, vanilla_covariance
from harness.run.config import load_config


def _entropy(z):
    lp = torch.log_softmax(z, -1)
    return -(lp.exp() * lp).sum(-1)


def test_first_order_delta_by_hand():
    """p = (1/4, 3/4), dz = (1, 0): Cov(log p, dz) = 1/4·3/4·(log 1/4 - log 3/4) = -(3/16)·ln 3, so the first-order
    entropy change is +(3/16)·ln 3 per unit of dz; a small step of the exact entropy agrees."""
    z = torch.tensor([[[0.0, math.log(3.0)]]])
    dz = torch.tensor([[[1.0, 0.0]]])
    mask = torch.ones(1, 1)
    want = 3 / 16 * math.log(3)
    assert first_order_delta(z, z + dz, mask) == pytest.approx(want)
    eps = 1e-3
    exact = float(_entropy(z + eps * dz) - _entropy(z))
    assert exact / eps == pytest.approx(want, rel=2e-3)
    assert first_order_delta(torch.zeros(1, 1, 2), torch.tensor([[[1.0, 0.0]]]), mask) == 0.0  # maximum entropy
    # averaged like the entropy metric: token mean per response (padding ignored), then mean over responses
    two = torch.cat([z, z]).expand(2, 2, 2).clone()
    after = two + torch.stack([dz[0, 0], 2 * dz[0, 0]]).expand(2, 2, 2)
    m = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert first_order_delta(two, after, m) == pytest.approx((want + (want + 2 * want) / 2) / 2)


def test_vanilla_covariance_by_hand():
    """Token mean of Â·π(a)·(log π(a) + H) over valid tokens."""
    adv = torch.tensor([[2.0, 2.0], [-1.0, 0.0]])
    logp = torch.log(torch.tensor([[0.5, 0.9], [0.25, 0.1]]))
    ent = torch.tensor([[1.0, 0.2], [1.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    terms = [2 * 0.5 * (math.log(0.5) + 1.0), 2 * 0.9 * (math.log(0.9) + 0.2), -1 * 0.25 * (math.log(0.25) + 1.5)]
    assert vanilla_covariance(adv, logp, ent, mask) == pytest.approx(sum(terms) / 3)


def test_the_tabular_identity_for_one_state():
    """A softmax table trained by one plain-gradient step on -(1/N)·Σ Â_i log π(a_i) with Σ Â_i = 0: the exact
    first-order change equals -η·cov/vanilla of the sampled tokens."""
    g = torch.Generator().manual_seed(0)
    z = torch.randn(6, generator=g, dtype=torch.float64)
    actions = torch.tensor([0, 2, 2, 5, 1, 0, 3, 2])
    adv = torch.randn(8, generator=g, dtype=torch.float64)
    adv = adv - adv.mean()
    zz = z.clone().requires_grad_(True)
    loss = -(adv * torch.log_softmax(zz, -1)[actions]).mean()
    (grad,) = torch.autograd.grad(loss, zz)
    eta = 0.7
    lp = torch.log_softmax(z, -1)
    h = float(-(lp.exp() * lp).sum())
    van = vanilla_covariance(adv[None], lp[actions][None], torch.full((1, 8), h, dtype=torch.float64), torch.ones(1, 8))
    fo = first_order_delta(z[None, None], (z - eta * grad)[None, None], torch.ones(1, 1))
    assert fo == pytest.approx(-eta * van, rel=1e-6)  # vanilla_covariance works in float32


@pytest.mark.parametrize(
    "name,cls,betas",
    [
        ("adamw", torch.optim.AdamW, (0.9, 0.999)),
        ("adamw_b1_0", torch.optim.AdamW, (0.0, 0.999)),
        ("sgd", torch.optim.SGD, None),
    ],
)
def test_optimizer_option(tiny, name, cls, betas):
    tiny["train"]["optimizer"] = name
    cfg = load_config(tiny)
    opt = make_optimizer(cfg.train, torch.nn.Linear(2, 2).parameters(), fused=False)
    assert type(opt) is cls and opt.param_groups[0]["lr"] == cfg.train.lr
    if betas:
        assert opt.param_groups[0]["betas"] == betas
    else:
        assert opt.param_groups[0]["momentum"] == 0.0
    default = copy.deepcopy(tiny)
    default["train"].pop("optimizer")
    assert (load_config(default).run_id() == cfg.run_id()) == (name == "adamw")  # the default keeps every run id
    tiny["train"]["optimizer"] = "adam"
    with pytest.raises(Exception, match="train.optimizer"):
        load_config(tiny)


def test_one_decision_token_with_plain_sgd_follows_the_theorem(tiny, tmp_path):
    """Through the real trainer: one training problem, one-token answers, plain SGD at lr 1e-5 (median per-step
    |ΔH|/H ~ 6e-5): the logged cov/first_order tracks the measured entropy change of each update (r > 0.99,
    slope ~ 1), and both covariance forms of Theorem 1 are strongly anti-correlated with it."""
    from harness.run.runner import run

    task = tmp_path / "one.jsonl"
    task.write_text(
        json.dumps({"prompt": "3+4=", "answer": "7"}) + "\n" + json.dumps({"prompt": "1+1=", "answer": "2"})
    )
    tiny["model"] = {
        "name": "pocket-0.1m",
        "warm_start": {"enabled": "true", "target_acc": 0.5, "min_steps": 0, "check_every": 1},
        "cache_dir": str(tmp_path / "cache"),
    }
    tiny["task"] = {"name": str(task), "test_size": 1}  # one problem held out, one trained on: a single state
    tiny["train"].update(
        {
            "steps": 30,
            "prompts_per_step": 1,
            "samples_per_prompt": 64,
            "updates_per_rollout": 1,
            "micro_batch_size": 64,
            "dynamic_filtering": True,
            "max_new_tokens": 1,
            "lr": 1e-5,
            "optimizer": "sgd",
            "entropy_after_update": True,
            "checkpoint_every": 0,
            "grad_clip": 0.0,
        }
    )
    tiny["eval"] = {"every": 0, "n_samples": 1}
    run(load_config(tiny), tmp_path / "run", quiet=True)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "entropy/update_delta" in r]
    assert len(rows) >= 20
    dh = np.array([r["entropy/update_delta"] for r in rows])
    col = {k: np.array([r[k] for r in rows]) for k in ("cov/first_order", "cov/term", "cov/vanilla")}
    r = {k: np.corrcoef(v, dh)[0, 1] for k, v in col.items()}
    assert r["cov/first_order"] > 0.99
    assert np.polyfit(col["cov/first_order"], dh, 1)[0] == pytest.approx(1.0, abs=0.05)
    assert r["cov/term"] < -0.85 and r["cov/vanilla"] < -0.85
    assert np.median(np.abs(dh) / np.array([x["entropy"] for x in rows])) < 1e-3  # a first-order step size
