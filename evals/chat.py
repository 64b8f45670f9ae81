"""A prompt as the model sees it: raw, or wrapped in the tokenizer's chat template (both engines)."""


def chat_format(tokenizer, prompt: str, chat: bool | None) -> str:
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat is False or (chat is None and not has_template):
        return prompt
    if not has_template:
        raise ValueError("--chat was requested but the tokenizer has no chat template")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def engine_tokenizer(engine):
    """The tokenizer whose chat template formats prompts for ``engine``: its own (hf), else the model's (vllm):
    a backend's own tokenizer format first, as the hf engine loads it, then ``AutoTokenizer``."""
    tok = getattr(engine, "tokenizer", None)
    if tok is not None:
        return tok
    from transformers import AutoTokenizer

    from harness.backends import load_tokenizer

    from .engines import split_model_path

    path, extra = split_model_path(engine.model_id)
    return (None if extra else load_tokenizer(path)) or AutoTokenizer.from_pretrained(path, **extra)
