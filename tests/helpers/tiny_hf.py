"""A tiny Hugging Face model directory (Qwen2, 2 layers, pocket's char tokenizer) saved by the tests themselves."""

from pathlib import Path


def save_tiny_qwen(directory) -> Path:
    """Save the model and its tokenizer into ``directory`` (untrained weights, seed-dependent); returns it."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from harness.backends.pocket.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    Qwen2ForCausalLM(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return Path(directory)
