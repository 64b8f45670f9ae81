"""gsm_arith problems (answers checked by hand-written rules per template), the chat-template tokenizer and
generation that stops on any of several ids."""

import json
import re

import pytest

from harness.backends.pocket import gsm
from harness.backends.pocket.generate import generate
from harness.backends.pocket.models import build_pocket_model
from harness.backends.pocket.pretrained import ChatTokenizer, check_task_fields, resolve_path
from harness.backends.pocket.tasks import make_task
from harness.backends.pocket.tokenizer import build_char_tokenizer
from harness.errors import ConfigError


def _expected(q: str) -> int:
    n = [int(x) for x in re.findall(r"\d+", q)]
    if "more" in q and "packs of 10" in q:
        return n[0] * n[1] - n[2] + 10 * n[3]
    if "already had" in q:
        return n[0] * n[1] + n[2]
    if "takes" in q:
        return n[0] * (n[1] - n[2])
    if "gets" in q:
        return n[0] + n[1]
    if "gives away" in q:
        return n[0] - n[1]
    if "boxes with" in q:
        return n[0] * n[1]
    if "shares" in q:
        assert n[0] % n[1] == 0
        return n[0] // n[1]
    raise AssertionError(q)


def test_answers_follow_the_wording_and_split_is_fixed():
    t = make_task("gsm_arith", 50, {"levels": "1234", "pool": 400})
    probs = t.train + t.test
    assert len(t.test) == 50 and len({p["prompt"] for p in probs}) == len(probs)
    assert {p["level"] for p in probs} == {1, 2, 3, 4}
    for p in probs:
        assert int(p["answer"]) == _expected(p["question"]) >= 0
        assert p["prompt"].endswith(f"Question: {p['question']}\nAnswer:")
    again = make_task("gsm_arith", 50, {"levels": "1234", "pool": 400})
    assert [p["prompt"] for p in again.test] == [p["prompt"] for p in t.test]


def test_grading_needs_a_box():
    t = make_task("gsm_arith", 10, {"levels": "1", "pool": 50, "shots": 0})
    p = t.test[0]
    assert p["prompt"] == f"{p['question']} {gsm.INSTRUCTION}"
    assert t.verify(f"so \\boxed{{{p['answer']}}}", p) == 1.0
    assert t.verify(f"the answer is {p['answer']}", p) == 0.0
    assert t.verify(f"\\boxed{{{int(p['answer']) + 1}}}", p) == 0.0


def test_bad_options_are_named():
    with pytest.raises(ConfigError, match="levels"):
        make_task("gsm_arith", 10, {"levels": "5"})
    with pytest.raises(ConfigError, match="did you mean|Did you mean"):
        make_task("gsm_arith", 10, {"level": "1"})


TEMPLATE = (
    "{% for m in messages %}<bos>{{ m['role'] }}:{{ m['content'] }}<unk>{% endfor %}"
    "{% if add_generation_prompt %}<bos>assistant:{% endif %}"
)


def test_chat_tokenizer_renders_and_finds_end_of_turn():
    hf = build_char_tokenizer()
    hf.chat_template = TEMPLATE
    tok = ChatTokenizer(hf, "auto")
    assert tok.render("1+1=") == "<bos>user:1+1=<unk><bos>assistant:"
    assert tok.stop_ids == [hf.eos_token_id, hf.unk_token_id]
    assert tok.encode_prompt("1+1=") == hf("<bos>user:1+1=<unk><bos>assistant:", add_special_tokens=False)["input_ids"]
    plain = ChatTokenizer(hf, "none", stop=["?"])
    assert plain.render("1+1=") == "1+1=" and plain.stop_ids == [hf.eos_token_id, hf.convert_tokens_to_ids("?")]
    multi = ChatTokenizer(hf, "none", stop=["ab", "?"])  # several tokens: matched in the text by the sampler
    assert multi.stop_ids == plain.stop_ids and multi.stop_strings.strings == ("ab",)


def test_generation_stops_on_any_stop_id():
    tok = build_char_tokenizer()
    model = build_pocket_model("pocket-0.3m", len(tok), seed=0)
    prompt = [tok("12+", add_special_tokens=False)["input_ids"]]
    free = generate(model, prompt, max_new_tokens=6, eos_id=2, pad_id=0, greedy=True)
    first = int(free.responses[0, 0])
    if first == 2:
        pytest.skip("greedy first token is EOS")
    stopped = generate(model, prompt, max_new_tokens=6, eos_id=[2, first], pad_id=0, greedy=True)
    assert stopped.responses.shape[1] == 1 and stopped.mask.tolist() == [[1.0]]


def test_task_stop_and_pkg_paths_are_checked(tmp_path):
    class T:
        stop = "<|im_end|>"

    t = T()
    check_task_fields(t)
    assert t.stop == ["<|im_end|>"]
    t.stop = [3]
    with pytest.raises(ConfigError, match="task.stop"):
        check_task_fields(t)
    with pytest.raises(ConfigError, match="not installed"):
        resolve_path("pkg://no_such_package_xyz/m.gguf")
    assert resolve_path("pkg://harness/__init__.py").is_file()


def test_llama_dir_with_chat_template_trains_exports_and_evaluates(tmp_path, tiny):
    """A tiny random Llama (SmolLM2's architecture: the HF forward, not the Qwen2 fast path) with a chat template:
    one RL step, RUN/model carries the stop ids and the run's suite, and `harness eval` scores it on that suite."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness.cli import main
    from harness.run.config import load_config
    from harness.run.runner import run

    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    d = tmp_path / "tiny-llama"
    LlamaForCausalLM(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    tiny["model"] = {"name": str(d)}
    tiny["task"] = {"name": "arith", "test_size": 8}
    tiny["train"].update(steps=1)
    tiny["eval"] = {"every": 0, "n_samples": 1, "temperature": 0.0, "greedy": False, "max_problems": 4}
    res = run(load_config(tiny), tmp_path / "run", quiet=True)
    assert res["status"] == "completed" and res["eval"]["suites"]["arith"]["n_problems"] == 4
    model_dir = tmp_path / "run" / "model"
    spec = json.loads((model_dir / "harness_task.json").read_text())
    assert (spec["suite"], spec["task"], spec["max_problems"], spec["step"]) == ("arith", "arith", 4, 1)
    gen = json.loads((model_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [tok.eos_token_id, tok.unk_token_id]  # EOS + the template's end of turn (<unk>)
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(model_dir), "--suites", "arith", "--threads", "1", "--out", str(out)]) == 0
    ev = json.loads((out / "results.json").read_text())
    assert ev["suites"]["arith"]["n_problems"] == 4
    from harness.backends.pocket.tokenizer import load_tokenizer

    assert load_tokenizer(str(model_dir)).chat_template == TEMPLATE  # the eval engine renders prompts with it
