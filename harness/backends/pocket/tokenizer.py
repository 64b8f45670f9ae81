"""The pocket tokenizer: one token per character, built here (no downloads), saved as a standard HF tokenizer.

It is a ``PreTrainedTokenizerFast`` so a pocket checkpoint saved with ``save_pretrained`` loads back with
``AutoTokenizer``, and the rest of the backend treats pocket and Hugging Face models the same way.
"""

from __future__ import annotations

import string

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
# every character a pocket task can produce (digits, operators, lower-case words, punctuation, space)
CHARS = string.digits + "+-*/=()[]<>,.:;?! " + string.ascii_lowercase


def build_char_tokenizer(chars: str = CHARS):
    """A character-level ``PreTrainedTokenizerFast`` with <pad>=0, <bos>=1, <eos>=2, <unk>=3."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {PAD: 0, BOS: 1, EOS: 2, UNK: 3}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK)


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
