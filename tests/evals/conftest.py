"""A tiny real transformers model that the tests train and save themselves (char tokenizer, 2-layer Llama).

It memorises fixed responses for a few prompts, so an end-to-end eval has a known answer: two problems are
answered right, one wrong, one without a box.
"""

import json

import pytest

TINY_PROBLEMS = [  # (problem, gold answer, what the model is trained to say)
    ("2+3?", "5", "\\boxed{5}"),
    ("4+4?", "8", "so \\boxed{8}"),
    ("9-7?", "2", "\\boxed{3}"),
    ("1+1?", "2", "no idea"),
]
TINY_EXPECTED_GREEDY = 0.5


# a chat template of three characters: a user turn is <text>, the assistant's turn starts after =
TINY_CHAT_TEMPLATE = "{% for m in messages %}<{{ m['content'] }}>{% endfor %}{% if add_generation_prompt %}={% endif %}"


def tiny_chat_texts() -> list[tuple[str, str]]:
    """The tiny chat model's training pairs: each problem in the chat template answered right (boxed gold), the
    same problem raw answered "no idea": it scores 1.0 only when its template is applied, 0.0 without."""
    chat = [(f"<{p}>=", f"\\boxed{{{a}}}") for p, a, _ in TINY_PROBLEMS]
    return chat + [(p, "no idea") for p, _, _ in TINY_PROBLEMS]


def build_tiny_model(out_dir, steps: int = 300, texts=None, chat_template: str | None = None):
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    texts = texts or [(p, r) for p, _, r in TINY_PROBLEMS]
    chars = sorted({c for p, r in texts for c in p + r} | set("0123456789+-?{}\\ abcdefghijklmnopqrstuvwxyz"))
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    if chat_template:
        tok.chat_template = chat_template
    cfg = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    seqs = [tok(p + r)["input_ids"] + [1] for p, r in texts]
    width = max(map(len, seqs))
    ids = torch.tensor([[0] * (width - len(s)) + s for s in seqs])  # left padded, like generation
    mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(s) for s in seqs])[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on a shared machine: threads only add contention
    for _ in range(steps):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.02:
            break
    torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture(scope="session")
def tiny_chat_model(tmp_path_factory):
    """The tiny model trained on ``tiny_chat_texts`` with ``TINY_CHAT_TEMPLATE`` saved in its tokenizer."""
    out = tmp_path_factory.mktemp("tiny_chat_model")
    return str(build_tiny_model(out, steps=600, texts=tiny_chat_texts(), chat_template=TINY_CHAT_TEMPLATE))


@pytest.fixture()
def tiny_data(tmp_path):
    """A --data-dir with math500.jsonl holding the tiny problems (hub field schema)."""
    d = tmp_path / "data"
    d.mkdir()
    with open(d / "math500.jsonl", "w") as f:
        for i, (p, a, _) in enumerate(TINY_PROBLEMS):
            f.write(json.dumps({"problem": p, "answer": a, "unique_id": f"tiny/{i}"}) + "\n")
    return d
