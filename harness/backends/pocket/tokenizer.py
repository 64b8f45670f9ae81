"""The pocket tokenizer: one token per character, built here (no downloads), saved as a standard HF tokenizer.

It is a ``PreTrainedTokenizerFast`` saved with ``save_pretrained``. Load a saved model directory's tokenizer with
``load_tokenizer``, not ``AutoTokenizer``: transformers 5 replaces the saved tokenizer of a ``qwen2`` model directory
by ``Qwen2Tokenizer`` (it distrusts hub tokenizer classes of that model type), which drops the spaces of
``7 12 to 84:``. Tokenizers built here are marked ``harness_tokenizer: exact`` in tokenizer_config.json and load
back from their own tokenizer.json, the same tokens as in training.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# every character a pocket task can produce (digits, operators, lower-case words, punctuation, space)
CHARS = string.digits + "+-*/=()[]<>,.:;?! " + string.ascii_lowercase


def build_char_tokenizer(chars: str = CHARS):
    """A character-level ``PreTrainedTokenizerFast`` with <pad>=0, <bos>=1, <eos>=2, <unk>=3."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, BOS: 1, EOS: 2, UNK: 3}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    # a caller that adds special tokens (``harness eval``'s engine) gets <bos> first, as the RL loop does
    tk.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return mark_exact(
        PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK)
    )


EXACT_KEY = "harness_tokenizer"


def mark_exact(tokenizer):
    """Mark a fast tokenizer so that ``load_tokenizer`` reloads it from its own tokenizer.json."""
    tokenizer.init_kwargs[EXACT_KEY] = "exact"
    return tokenizer


def exact_on_disk(d: Path) -> bool:
    """Saved by this harness (the mark), or a word-level tokenizer.json (a pocket char tokenizer saved before the
    mark existed; no Hugging Face model family has one, so a family class could only change it)."""
    try:
        cfg = json.loads((d / "tokenizer_config.json").read_text())
        if cfg.get(EXACT_KEY) == "exact":
            return True
        return json.loads((d / "tokenizer.json").read_text()).get("model", {}).get("type") == "WordLevel"
    except (OSError, ValueError):
        return False


def load_tokenizer(name: str, **kwargs):
    """The tokenizer of a local model directory or hub id: exactly the saved tokenizer.json for tokenizers built
    here (see the module note), else ``AutoTokenizer``."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    d = Path(str(name))
    if "gguf_file" not in kwargs and d.is_dir() and (d / "tokenizer.json").is_file() and exact_on_disk(d):
        return mark_exact(PreTrainedTokenizerFast.from_pretrained(str(d), **kwargs))
    return AutoTokenizer.from_pretrained(name, **kwargs)


class TokenizerAdapter:
    """The few operations the RL loop needs, over any HF tokenizer (pocket char tokenizer or a local HF dir)."""

    def __init__(self, hf_tokenizer):
        self.hf = hf_tokenizer
        eos = hf_tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tokenizer has no eos_token; the RL loop needs one to end responses")
        self.eos_id = int(eos)
        pad = hf_tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else self.eos_id
        self.bos_id = hf_tokenizer.bos_token_id
        self._cache: dict[str, list[int]] = {}

    def encode_prompt(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = list(self.hf(text, add_special_tokens=False)["input_ids"])
            if self.bos_id is not None and (not ids or ids[0] != self.bos_id):
                ids = [int(self.bos_id)] + ids
            self._cache[text] = ids
        return ids

    def encode_answer(self, text: str) -> list[int]:
        """Response tokens for supervised warm start: the answer followed by EOS."""
        return list(self.hf(text, add_special_tokens=False)["input_ids"]) + [self.eos_id]

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids if int(i) != self.eos_id and int(i) != self.pad_id]
        return self.hf.decode(ids, skip_special_tokens=True)

    def __len__(self) -> int:
        return len(self.hf)
