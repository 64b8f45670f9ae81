"""Pocket model sizes (tiny Qwen2 decoders built from a config, no downloads) and loading of HF checkpoints.

``model.name`` is a pocket size, a local Hugging Face model directory, or a hub id (loaded through the normal
HF cache; nothing is downloaded when the machine is offline and the error says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError, suggestion


@dataclass(frozen=True)
class PocketSize:
    hidden: int
    layers: int
    heads: int
    intermediate: int


# parameter counts (tied embeddings, 66-token vocab) are checked in tests/pocket/test_models.py
SIZES = {
    "pocket-0.1m": PocketSize(hidden=48, layers=4, heads=4, intermediate=160),  # ~0.13M (mechanism sweep)
    "pocket-0.3m": PocketSize(hidden=64, layers=5, heads=4, intermediate=256),  # ~0.34M
    "pocket-1m": PocketSize(hidden=128, layers=5, heads=4, intermediate=384),  # ~1.07M
    "pocket-4m": PocketSize(hidden=256, layers=5, heads=8, intermediate=704),  # ~4.04M
}
MAX_POSITIONS = 128


def is_pocket(name: str) -> bool:
    return name in SIZES


def check_model_name(name: str) -> None:
    """Raise ConfigError unless ``name`` is a pocket size, an HF model directory, or a hub id."""
    if name in SIZES:
        return
    if name.lower().endswith(".gguf"):  # a GGUF file (harness.backends.pocket.pretrained loads it)
        from .pretrained import check_gguf

        return check_gguf(name)
    p = Path(name).expanduser()
    if p.is_dir():
        if not (p / "config.json").exists():
            raise ConfigError(
                f"model.name: {name!r} is a directory without config.json; expected a Hugging Face model "
                "directory (save_pretrained output)"
            )
        return
    looks_local = name.startswith((".", "/", "~")) or name.lower().startswith("pocket")
    if "/" in name and not looks_local and name.count("/") == 1:
        return  # hub id such as Qwen/Qwen2.5-7B: resolved by transformers when the run starts
    hint = suggestion(name, SIZES)
    raise ConfigError(
        f"model.name: unknown model {name!r}.{hint} Allowed: a pocket size ({', '.join(SIZES)}), "
        f"a local Hugging Face model directory, or a hub id like Qwen/Qwen2.5-0.5B"
    )


def build_pocket_model(name: str, vocab_size: int, seed: int):
    """A freshly initialised Qwen2ForCausalLM of the given pocket size (init drawn from ``seed``)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    s = SIZES[name]
    cfg = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.heads,
        intermediate_size=s.intermediate,
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    cfg._attn_implementation = "sdpa"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(cfg)
    return model


def load_hf(name: str, dtype: str = "float32"):
    """(model, hf_tokenizer) from a local directory or a hub id (offline-friendly error)."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.backends.pocket.tokenizer import load_tokenizer

    try:
        tok = load_tokenizer(name)  # the saved tokenizer exactly (AutoTokenizer drops a pocket model's spaces)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype))
    except OSError as e:
        raise FileNotFoundError(
            f"model.name: could not load Hugging Face model {name!r} ({e.__class__.__name__}: "
            f"{str(e).splitlines()[0][:200]}). Offline machines need a local model directory."
        ) from None
    return model, tok


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())
