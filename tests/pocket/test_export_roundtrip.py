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


# ----------------------------------------------------------------------------- file modes and the model card
def _train_tiny(tmp_path):
    base = {
        "backend": "pocket",
        "method": {"name": "kl_cov", "k_ratio": 0.01},
        "model": {"name": "pocket-0.3m", "warm_start": {"enabled": "false"}},
        "task": {"name": "countdown", "test_size": 6, "options": {"n_numbers": 2}},
        "train": {"steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2, "updates_per_rollout": 1},
        "eval": {"every": 0, "n_samples": 1, "temperature": 0.0, "max_problems": 4, "greedy": False},
        "logging": {"progress": False},
    }
    base["train"].update(max_new_tokens=4, checkpoint_every=1)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(base))
    rd = tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    return rd


def _modes(root):
    import stat

    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


def _under_umask(mask, fn):
    import os

    old = os.umask(mask)
    try:
        return fn()
    finally:
        os.umask(old)


def test_exported_files_follow_the_umask(tmp_path, capsys):
    rd = _train_tiny(tmp_path)
    for mask, file_mode, dir_mode in ((0o022, 0o644, 0o755), (0o027, 0o640, 0o750)):
        out = tmp_path / f"model_{mask:o}"
        assert _under_umask(mask, lambda out=out: main(["export", str(rd), "--out", str(out)])) == 0
        modes = _modes(out)
        assert "model.safetensors" in modes  # save_pretrained writes it 0600 whatever the umask
        assert {k: v for k, v in modes.items() if k != "."} == {k: file_mode for k in modes if k != "."}, mask
        assert modes["."] == dir_mode


def test_an_export_carries_a_model_card(tmp_path, capsys):
    rd = _train_tiny(tmp_path)
    out = tmp_path / "model"
    assert main(["export", str(rd), "--out", str(out)]) == 0
    result = json.loads((rd / "result.json").read_text())
    card = (out / "README.md").read_text()
    front, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert yaml.safe_load(front) == {
        "library_name": "transformers",
        "tags": ["entropy-harness", "reinforcement-learning", "kl_cov"],
    }
    assert body.lstrip("\n").startswith("# kl_cov on pocket-0.3m (countdown, seed 0, step 2)\n")
    assert f"from run `{result['run_id']}` (pocket backend" in body
    assert "| k_ratio | 0.01 |" in body  # the method's hyperparameters
    greedy = result["eval"]["suites"]["countdown"]
    m = greedy["metrics"]
    row = f"| countdown | **avg@1** | {m['avg@1']:.4g} ± {m['avg@1_stderr']:.4g} | 4 | 1 |"
    assert row in body  # the eval table: the primary metric with its stderr and the protocol
    assert "- status: completed" in body and "- policy updates: 2 of 2 steps" in body
    prov = result["provenance"]
    assert "when the run finished (result.json)" in body and f"sha256 {prov['datasets'][0]['sha256'][:16]}" in body
    config = body.split("```yaml\n")[1].split("```")[0]
    assert yaml.safe_load(config) == yaml.safe_load((rd / "config.yaml").read_text())  # the exact run config


def test_an_export_before_the_result_uses_the_in_training_eval(tmp_path):
    """What the after-training stage exports: no result.json yet; the card takes the eval of the exported step."""
    from harness.backends import get_backend
    from harness.run.config import load_config

    rd = _train_tiny(tmp_path)
    final = json.loads((rd / "result.json").read_text())["eval"]["suites"]["countdown"]["metrics"]["avg@1"]
    (rd / "result.json").unlink()
    out = get_backend("pocket").export(load_config(rd / "config.yaml"), rd)
    card = (out / "README.md").read_text()
    assert out == rd / "export" / "step_2"
    assert f"| countdown | **avg@1** | {final:.4g}" in card and "eval/step_2.json (the in-training eval" in card
    assert "Recorded at export (the run had no result yet)." in card and "- status:" not in card


def test_openrlhf_export_copies_with_the_umask_and_writes_the_card(tmp_path):
    """OpenRLHF's own save keeps whatever modes it wrote; the copy ``--out`` makes gets the umask's."""
    import os

    from harness.backends import get_backend
    from harness.run.config import load_config

    cfg = {
        "backend": "openrlhf",
        "method": {"name": "clip_higher"},
        "model": {"name": "Qwen/Qwen2.5-7B"},
        "task": {"name": "/data/dapo.jsonl"},
        "train": {
            "steps": 10,
            "prompts_per_step": 16,
            "samples_per_prompt": 8,
            "max_new_tokens": 1024,
            "micro_batch_size": 2,
            "updates_per_rollout": 4,
        },
        "openrlhf": {"nodes": 1, "gpus_per_node": 8},
    }
    config = load_config(cfg)
    rd = tmp_path / "rd"
    final = rd / "checkpoints" / "final"
    final.mkdir(parents=True)
    for name, mode in (("config.json", 0o600), ("model.safetensors", 0o600), ("tokenizer.json", 0o644)):
        (final / name).write_text("{}")
        os.chmod(final / name, mode)
    os.chmod(final, 0o700)
    (rd / "config.yaml").write_text(config.to_yaml())
    out = _under_umask(0o022, lambda: get_backend("openrlhf").export(config, rd, tmp_path / "copy"))
    modes = _modes(out)
    assert modes == {
        ".": 0o755,
        "config.json": 0o644,
        "model.safetensors": 0o644,
        "tokenizer.json": 0o644,
        "harness_run.json": 0o644,
        "README.md": 0o644,
    }
    card = (out / "README.md").read_text()
    assert "base_model: Qwen/Qwen2.5-7B" in card and "# clip_higher on Qwen/Qwen2.5-7B (dapo, seed 0, step 10)" in card
    assert "No evaluation recorded for this step yet." in card
