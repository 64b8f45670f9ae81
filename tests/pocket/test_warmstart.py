"""The warm start trains toward a partial success rate and is cached per (size, task, seed, settings)."""

import torch

from harness.backends.pocket.tasks import make_task
from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer
from harness.backends.pocket.warmstart import cache_key, load_or_train
from harness.run.config import load_config


def test_warm_start_is_cached_and_learns(tiny, tmp_path):
    tiny["model"] = {
        "name": "pocket-0.3m",
        "cache_dir": str(tmp_path),
        "warm_start": {"max_steps": 40, "min_steps": 20, "check_every": 20, "batch_size": 32, "target_acc": 1.0},
    }
    tiny["task"] = {"name": "arith", "options": {"digits": 1, "ops": "+"}}
    cfg = load_config(tiny)
    tok = TokenizerAdapter(build_char_tokenizer())
    task = make_task("arith", 200, {"digits": 1, "ops": "+"})
    state, info = load_or_train(cfg, tok, task, log=lambda *_: None)
    assert info["cached"] is False and info["steps"] == 40  # target 1.0 not reached -> max_steps
    files = list((tmp_path / "pocket").glob("*.pt"))
    assert len(files) == 1
    again, info2 = load_or_train(cfg, tok, task, log=lambda *_: None)
    assert info2["cached"] is True and all(torch.equal(state[k], again[k]) for k in state)
    # supervised training moved the weights away from the seed's initialisation
    from harness.backends.pocket.models import build_pocket_model

    init = build_pocket_model("pocket-0.3m", len(tok), 0).state_dict()
    assert any(not torch.equal(init[k], state[k]) for k in state)
    # the key separates seeds and settings
    other = load_config(tiny, ["seed=1"])
    assert cache_key(other, len(tok)) != cache_key(cfg, len(tok))
    # and thread counts: another count rounds differently, so it trains (and caches) its own warm start
    threads = load_config(tiny, [f"train.threads={cfg.train.threads + 1}"])
    assert cache_key(threads, len(tok)) != cache_key(cfg, len(tok))
