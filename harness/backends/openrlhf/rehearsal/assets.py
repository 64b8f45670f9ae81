"""The CPU rehearsal's model: a tiny Hugging Face model that answers some of the prepared training problems.

``python -m harness.backends.openrlhf.rehearsal.assets --train DATA.jsonl --out DIR`` writes ``DIR/model/``: a
2-layer Llama (164k parameters) with a byte-level BPE tokenizer and a chat template, loadable by
``AutoTokenizer`` / ``AutoModelForCausalLM`` as OpenRLHF and ``harness eval`` load any model. ``DATA.jsonl`` is
what ``harness data prepare dapo-math-17k --source sample`` writes (``{prompt, answer}``, the paper's template).

The model is trained by supervised fine-tuning to answer ``\\boxed{<gold>}`` on every other training problem
and on the shipped fixture rows of the seven math eval suites, for 48 epochs. On the 30-row DAPO sample, sampled
at T = 1 it answers those training problems right 70% of the time and the other half never (0.0); the eval
fixtures 83% at T = 0.6 and 87.5% greedy (8 samples each, measured when this recipe was fixed). So rewards are
mixed, dynamic filtering keeps some groups and drops others, and the eval suites score above 0. The model has
*memorised* those answers: its scores measure the plumbing, not mathematical ability, and that is all the
rehearsal claims. Deterministic (one thread, fixed seed); a ``DIR`` whose manifest matches is reused.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from harness.io import jsonl_lines

EVAL_SUITES = ("aime24", "aime25", "amc23", "math500", "minerva", "olympiadbench", "omnimath")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<pad>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>"]
VERSION = 1  # bump when the recipe changes (the manifest then differs and the model is rebuilt)


def read_train(path: Path) -> list[dict]:
    rows = [row for _, row in jsonl_lines(path)]
    return [{"prompt": r["prompt"], "answer": str(r["answer"])} for r in rows]


def eval_rows() -> list[dict]:
    """The shipped fixture rows of the seven math suites, rendered with each suite's template (what the
    in-loop eval and `harness eval` show the model)."""
    from harness.evals.suites import get_suite

    rows = []
    for name in EVAL_SUITES:
        suite = get_suite(name)
        for r in suite.load(fixtures=True):
            rows.append({"prompt": r["prompt_text"], "answer": str(r["answer"])})
    return rows


def build_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    hf.chat_template = CHAT_TEMPLATE
    return hf


def chat(tokenizer, prompt: str) -> str:
    messages = [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def train_model(tokenizer, pairs: list[tuple[str, str]], seed: int, epochs: int, log=print):
    """A 2-layer Llama trained on ``chat(prompt) -> answer<eos>`` (loss on the answer tokens only)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg)
    examples = []
    for prompt, answer in pairs:
        p = tokenizer(chat(tokenizer, prompt), add_special_tokens=False)["input_ids"]
        a = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        examples.append((p + a, [-100] * len(p) + a))
    examples.sort(key=lambda e: len(e[0]))  # batches of similar length: little padding
    batches = [_batch(examples[i : i + 8], tokenizer.pad_token_id) for i in range(0, len(examples), 8)]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for epoch in range(epochs):
        total = 0.0
        for input_ids, attention_mask, labels in batches:
            loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() / len(batches)
        if epoch % 20 == 0 or epoch == epochs - 1:
            log(f"rehearsal model: SFT epoch {epoch}/{epochs} loss {total:.4f}")
    return model.eval()


def _batch(examples, pad: int):
    """Left-padded (input_ids, attention_mask, labels) of a list of (ids, labels)."""
    import torch

    width = max(len(ids) for ids, _ in examples)
    ids = torch.tensor([[pad] * (width - len(i)) + i for i, _ in examples])
    labels = torch.tensor([[-100] * (width - len(lab)) + lab for _, lab in examples])
    mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i, _ in examples])
    return ids, mask, labels


def build(train_file: Path, out: Path, *, seed: int = 0, vocab_size: int = 640, sft_epochs: int = 48, log=print):
    """Write ``out/model/`` and ``out/manifest.json``; reuse them when the manifest matches the inputs."""
    out = Path(out)
    train, evals = read_train(train_file), eval_rows()
    recipe = {"version": VERSION, "seed": seed, "vocab": vocab_size, "sft_epochs": sft_epochs}
    digest = hashlib.sha256(json.dumps({**recipe, "train": train, "evals": evals}, sort_keys=True).encode())
    digest = digest.hexdigest()[:16]
    manifest_path = out / "manifest.json"
    if manifest_path.is_file() and json.loads(manifest_path.read_text()).get("digest") == digest:
        log(f"rehearsal model: {out / 'model'} up to date ({digest})")
        return json.loads(manifest_path.read_text())
    import torch

    torch.set_num_threads(1)  # on a shared 2-core machine one thread is 50x faster than contended threads
    t0 = time.time()
    memorised = train[::2] + evals  # every other training problem, every eval fixture
    tokenizer = build_tokenizer([text for r in train + evals for text in (r["prompt"], r["answer"])], vocab_size)
    pairs = [(r["prompt"], f"\\boxed{{{r['answer']}}}") for r in memorised]
    model = train_model(tokenizer, pairs, seed, sft_epochs, log)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    manifest = {
        "digest": digest,
        "train_file": str(train_file),
        "train_rows": len(train),
        "memorised_train_rows": len(train[::2]),
        "memorised_eval_rows": len(evals),
        "eval_suites": list(EVAL_SUITES),
        "model_params": sum(p.numel() for p in model.parameters()),
        "build_s": round(time.time() - t0, 1),
        **recipe,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    log(f"rehearsal model: {out / 'model'} built in {manifest['build_s']} s")
    return manifest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="prepared {prompt, answer} JSONL (harness data prepare)")
    p.add_argument("--out", required=True, help="folder for model/ and manifest.json")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(json.dumps(build(Path(args.train), Path(args.out), seed=args.seed), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
