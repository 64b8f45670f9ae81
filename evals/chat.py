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
