"""One data-parallel rank for test_scope.py: global-scope selection over its rows, written to a file.

Run as a script (not imported by pytest): python dist_select_worker.py RANK WORLD INIT_FILE OUT_FILE METHOD KEY=VALUE...
(values parsed as YAML). A method that needs the entropy gets ``entropy(lp)``.
"""

import sys

import torch
import torch.distributed as dist
import yaml

import harness


def minibatch(seed=2, b=16, t=64):
    g = torch.Generator().manual_seed(seed)
    adv = (torch.randn(b, 1, generator=g) * 1.5).expand(b, t).contiguous()
    lp = -torch.rand(b, t, generator=g) * 6
    old = lp + 0.05 * torch.randn(b, t, generator=g)
    mask = (torch.rand(b, t, generator=g) < 0.8).float()
    return lp, old, adv, mask


def entropy(lp):
    """A stand-in token entropy for the selection tests: distinct values, a function of the log-probs."""
    return -lp * 0.5 + 0.01


if __name__ == "__main__":
    rank, world, init_file, out_file, name = sys.argv[1:6]
    hparams = {k: yaml.safe_load(v) for k, v in (a.split("=", 1) for a in sys.argv[6:])}
    rank, world = int(rank), int(world)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        lp, old, adv, mask = minibatch()
        rows = torch.arange(len(mask))[rank::world]
        m = harness.get_method(name, scope="global", **hparams)
        plan = m.selection_plan(
            lp[rows],
            old[rows],
            adv[rows],
            mask[rows],
            entropy=entropy(lp[rows]) if m.needs_entropy else None,
            generator=torch.Generator().manual_seed(100 + rank),
        )
        torch.save({"rows": rows, "plan": plan}, out_file)
    finally:
        dist.destroy_process_group()
