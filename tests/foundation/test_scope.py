"""Selection scope: micro-batch selection depends on the split (the official behaviour, verl #7818);
global selection does not, in one process and across data-parallel ranks (real torch.distributed, gloo)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import harness
from harness.kernel import ops

WORKER = Path(__file__).with_name("dist_select_worker.py")
_spec = importlib.util.spec_from_file_location("dist_select_worker", WORKER)
_worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_worker)


def _minibatch(seed=0):
    return _worker.minibatch(seed)  # one construction for this file and the rank workers


def _splits(b, n):
    return [torch.arange(b)[i::n] for i in range(n)]  # interleaved rows: each micro-batch mixes groups


def _fed_in(method, lp, old, adv, mask, n_micro, plan=None):
    """Feed a mini-batch in n micro-batches; return the selected token mask and the accumulated gradient."""
    lp = lp.clone().requires_grad_()
    chosen = torch.zeros_like(mask, dtype=torch.bool)
    total = mask.sum()
    for rows in _splits(len(mask), n_micro):
        out = method.policy_loss(
            lp[rows],
            old[rows],
            adv[rows],
            mask[rows],
            generator=torch.Generator().manual_seed(0),
            selected=None if plan is None else plan[rows],
        )
        (out.loss * mask[rows].sum() / total).backward()  # exact token-mean over the mini-batch
        sel = method.per_token_loss(
            lp[rows].detach(),
            old[rows],
            adv[rows],
            mask[rows],
            generator=torch.Generator().manual_seed(0),  # the same draw as the loss
            selected=None if plan is None else plan[rows],
        ).selected
        chosen[rows] = sel
    return chosen, lp.grad


def test_micro_batch_scope_depends_on_the_split():
    lp, old, adv, mask = _minibatch()
    m = harness.get_method("kl_cov", k_ratio=2e-3)  # N ~ 820 valid tokens -> 1 token if whole
    counts = {n: int(_fed_in(m, lp, old, adv, mask, n)[0].sum()) for n in (1, 2, 8)}
    assert counts == {1: 1, 2: 2, 8: 8}  # one token per micro-batch: the reported micro-batch dependence


@pytest.mark.parametrize("name,hp", [("kl_cov", {"k_ratio": 0.01}), ("clip_cov", {"clip_ratio": 0.01})])
def test_global_scope_selects_the_same_tokens_whole_or_split(name, hp):
    lp, old, adv, mask = _minibatch(1)
    m = harness.get_method(name, scope="global", **hp)
    plan = m.selection_plan(lp, old, adv, mask, generator=torch.Generator().manual_seed(0))
    whole_sel, whole_grad = _fed_in(m, lp, old, adv, mask, 1)
    assert torch.equal(whole_sel, plan) and plan.sum() >= 1
    for n in (2, 8):
        sel, grad = _fed_in(m, lp, old, adv, mask, n, plan=plan)
        assert torch.equal(sel, plan)
        assert torch.allclose(grad, whole_grad, atol=1e-7)  # same selection -> same update
    expected = max(1, int(mask.sum() * (hp.get("k_ratio") or hp["clip_ratio"])))
    if name == "kl_cov":
        assert int(plan.sum()) == expected


def test_global_scope_across_data_parallel_ranks_matches_one_process(tmp_path):
    lp, old, adv, mask = _minibatch(2)
    single = harness.get_method("kl_cov", scope="global", k_ratio=0.01).selection_plan(lp, old, adv, mask)
    for name, key in [("kl_cov", "k_ratio"), ("clip_cov", "clip_ratio")]:
        init = tmp_path / f"init-{name}"
        outs = [tmp_path / f"{name}-{r}.pt" for r in range(2)]
        procs = [
            subprocess.Popen([sys.executable, str(WORKER), str(r), "2", str(init), str(outs[r]), name, f"{key}=0.01"])
            for r in range(2)
        ]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
        merged = torch.zeros_like(mask, dtype=torch.bool)
        for out in outs:
            part = torch.load(out)
            merged[part["rows"]] = part["plan"]
        if name == "kl_cov":
            assert torch.equal(merged, single)  # top-k over both ranks = top-k over the whole mini-batch
        else:
            # a uniform draw of max(1, floor(0.01 N)) among the candidates of the whole mini-batch
            cov = ops.token_covariance(adv, lp, mask)
            ratio = torch.exp(lp - old)
            clipped = -adv * ratio.clamp(0, 2) > -adv * ratio
            cand = (cov > 1) & (cov < 5) & mask.bool() & ~clipped
            assert int(merged.sum()) == min(max(1, int(0.01 * mask.sum())), int(cand.sum()))
            assert bool((merged <= cand).all())


def _two_ranks(tmp_path, name, *hparams) -> torch.Tensor:
    """The plan of 2 real gloo ranks (rows interleaved), merged back into the mini-batch's shape."""
    init = tmp_path / f"init-{name}"
    outs = [tmp_path / f"{name}-{r}.pt" for r in range(2)]
    procs = [
        subprocess.Popen([sys.executable, str(WORKER), str(r), "2", str(init), str(outs[r]), name, *hparams])
        for r in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    lp, _, _, mask = _minibatch(2)
    merged = torch.zeros_like(mask, dtype=torch.bool)
    for out in outs:
        part = torch.load(out)
        merged[part["rows"]] = part["plan"]
    return merged


@pytest.mark.parametrize("selection", ["topk", "quantile"])
def test_high_entropy_global_selection_across_ranks_matches_one_process(tmp_path, selection):
    lp, old, adv, mask = _minibatch(2)
    ent = _worker.entropy(lp)
    m = harness.get_method("high_entropy_tokens", scope="global", selection=selection)
    single = m.selection_plan(lp, old, adv, mask, entropy=ent)
    assert torch.equal(_two_ranks(tmp_path, "high_entropy_tokens", f"selection={selection}"), single)
    valid = ent[mask.bool()]
    if selection == "quantile":  # TRL's rule over the whole population: H >= its 0.8 quantile
        assert torch.equal(single, mask.bool() & (ent >= torch.quantile(valid, 0.8)))
    else:
        assert int(single.sum()) == max(1, int(valid.numel() * 0.2 + 0.9999))
