"""A saved pocket model loads back with the same tokens (issue #13 item 6) and `harness export` makes a run a model
directory `harness eval` scores on the run's own task under the run's suite name (issue #16 item 10)."""

import json

import pytest
import yaml

from harness.backends.pocket.models import build_pocket_model, load_hf
from harness.backends.pocket.tokenizer import build_char_tokenizer, load_tokenizer, mark_exact
from harness.cli import main

PROMPTS = ["7 12 to 84:", "use 3 5 7 to make 22 :", "  two  spaces, then end ", "37+48="]


def _bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(PROMPTS * 20 + ["use the numbers to make the target"] * 20, trainer)
    return mark_exact(
        PreTrainedTokenizerFast(
            tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
        )
    )


@pytest.mark.parametrize("make", [build_char_tokenizer, _bpe_tokenizer], ids=["char", "bpe"])
def test_saved_pocket_model_loads_back_with_the_same_tokens(tmp_path, make):
    tok = make()
    model = build_pocket_model("pocket-0.3m", len(tok), 0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    for back in (load_tokenizer(str(tmp_path / "m")), load_hf(str(tmp_path / "m"))[1]):
        for p in PROMPTS:
            ids = tok(p, add_special_tokens=False)["input_ids"]
            assert back(p, add_special_tokens=False)["input_ids"] == ids
            assert back.decode(ids) == p  # spaces kept


def test_the_finding_autotokenizer_drops_the_spaces_of_a_saved_char_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    tok = build_char_tokenizer()
    build_pocket_model("pocket-0.3m", len(tok), 0).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    auto = AutoTokenizer.from_pretrained(str(tmp_path))
    ids = auto("7 12 to 84:", add_special_tokens=False)["input_ids"]
    if auto.decode(ids) == "7 12 to 84:":
        pytest.skip(f"this transformers keeps the saved tokenizer ({type(auto).__name__}); nothing to reproduce")
    assert len(ids) == 8  # three spaces lost: why load_tokenizer exists


def test_char_tokenizer_adds_bos_only_when_asked():
    tok = build_char_tokenizer()
    assert tok("1 2", add_special_tokens=False)["input_ids"][0] != tok.bos_token_id
    assert tok("1 2")["input_ids"][0] == tok.bos_token_id  # what the eval engine asks for, as the RL loop does


def test_export_then_eval_scores_the_runs_own_task_under_its_suite_name(tmp_path, capsys):
    base = {
        "backend": "pocket",
        "method": {"name": "grpo"},
        "model": {"name": "pocket-0.3m", "warm_start": {"enabled": "false"}},
        "task": {"name": "countdown", "test_size": 6, "options": {"n_numbers": 2}},
        "train": {
            "steps": 1,
            "prompts_per_step": 2,
            "samples_per_prompt": 2,
            "updates_per_rollout": 1,
            "max_new_tokens": 4,
            "checkpoint_every": 1,
        },
        "eval": {"every": 0, "n_samples": 1, "temperature": 0.0, "max_problems": 4, "greedy": False},
        "logging": {"progress": False},
    }
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(base))
    rd, out = tmp_path / "rd", tmp_path / "model"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    assert main(["export", str(rd), "--out", str(out)]) == 0
    spec = json.loads((out / "harness_task.json").read_text())
    assert spec["suite"] == "countdown" and spec["options"] == {"n_numbers": 2}
    assert main(["export", str(rd), "--out", str(out)]) == 2  # never overwrites
    capsys.readouterr()
    assert (
        main(["eval", "--model", str(out), "--suites", "countdown", "--out", str(tmp_path / "ev"), "--threads", "1"])
        == 0
    )
    res = json.loads((tmp_path / "ev" / "results.json").read_text())["suites"]["countdown"]
    trained = json.loads((rd / "result.json").read_text())["eval"]["suites"]["countdown"]
    assert res["n_problems"] == trained["n_problems"] == 4
    assert res["max_tokens"] == trained["max_tokens"] and res["temperature"] == trained["temperature"] == 0.0
    gens = [json.loads(x) for x in (tmp_path / "ev" / "countdown.generations.jsonl").read_text().splitlines()]
    from harness.backends.pocket.tasks import make_task

    test = make_task("countdown", 6, {"n_numbers": 2}).test[:4]
    assert sorted(g["prompt"] if "prompt" in g else g["prompt_text"] for g in gens) == sorted(p["prompt"] for p in test)
    assert res["metrics"]["avg@1"] == pytest.approx(trained["metrics"]["avg@1"])  # greedy: the same answers
