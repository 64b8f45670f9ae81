"""maj@k on pocket's held-out eval (issue 38: `harness table --metric maj` and `--metric pass` on a k >= 4 pocket
eval). A response votes with its task's answer key: for countdown the value and the numbers it uses, all that
``verify`` reads, so ``7*12`` and ``12*7`` vote together.

Hand-computed, countdown "7 12 to 84" (numbers 7, 12) and "3 5 to 8" (numbers 3, 5), k = 4:

* problem 1: ``7*12``, ``12*7``, ``7+12``, ``7+12`` -> grades 1, 1, 0, 0; classes (84: 2), (19: 2), a tie broken by
  the class seen first (correct): maj 1; avg 0.5; pass@4 1.
* problem 2: ``3*5``, ``3*5``, ``5+3``, ``3+`` -> grades 0, 0, 1, 0; ``3+`` does not evaluate (no vote); classes
  (15: 2), (8: 1): maj 0; avg 0.25; pass@4 1.

maj@4 = 0.5 (stderr 0.5), avg@4 = 0.375, pass@4 = 1."""

import json

import pytest
import torch

from harness.backends.pocket.generate import Batch, eval_metrics
from harness.backends.pocket.tasks import make_task
from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer
from harness.cli import main

P1 = {"prompt": "7 12 to 84:", "answer": "7*12", "numbers": [7, 12], "target": 84}
P2 = {"prompt": "3 5 to 8:", "answer": "3+5", "numbers": [3, 5], "target": 8}
RESPONSES = ["7*12", "12*7", "7+12", "7+12", "3*5", "3*5", "5+3", "3+"]


def _batch(tok, texts):
    ids = [tok.encode_answer(t) for t in texts]
    width = max(map(len, ids))
    res = torch.tensor([r + [tok.pad_id] * (width - len(r)) for r in ids])
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in ids])
    prompt = torch.full((len(texts), 1), tok.bos_id)
    full = torch.cat([prompt, res], 1)
    return Batch(full, torch.ones_like(full), 1, res, mask)


def test_countdown_answer_keys_vote_by_value_and_numbers():
    task = make_task("countdown", options={"n_numbers": 2})
    assert task.answer_key("7*12") == task.answer_key(" 12*7") == (84, (7, 12))
    assert task.answer_key("7*12") != task.answer_key("7*12+0")  # another number used: graded apart
    assert task.answer_key("3+") is None and task.answer_key("") is None
    ordered = make_task("countdown", options={"n_numbers": 2, "ordered": True})
    assert ordered.answer_key("7 * 12") == "7*12" != ordered.answer_key("12*7")  # ordered: one text is right
    assert make_task("arith").answer_key(" 12 ") == "12"


def test_pocket_eval_metrics_hold_maj_at_k_by_hand():
    tok = TokenizerAdapter(build_char_tokenizer())
    task = make_task("countdown", options={"n_numbers": 2})
    metrics, grades = eval_metrics(_batch(tok, RESPONSES), tok, task, [P1, P2], 4)
    assert grades.tolist() == [[1, 1, 0, 0], [0, 0, 1, 0]]
    assert metrics["avg@4"] == pytest.approx(0.375) and metrics["pass@4"] == 1.0
    assert metrics["maj@4"] == 0.5 and metrics["maj@4_stderr"] == pytest.approx(0.5)


def test_table_metric_maj_and_pass_on_a_pocket_run_with_k_4(tiny, tmp_path, capsys):
    tiny["eval"]["n_samples"] = 4
    tiny["train"]["steps"] = 2
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps(tiny))
    run = tmp_path / "runs" / "r"
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 0
    held = json.loads((run / "result.json").read_text())["eval"]["suites"]["countdown"]["metrics"]
    assert {"avg@4", "pass@4", "maj@4", "maj@4_stderr"} <= set(held)
    capsys.readouterr()
    for metric in ("maj", "pass"):
        assert main(["table", str(tmp_path / "runs"), "--metric", metric, "--format", "csv"]) == 0
        lines = capsys.readouterr().out.splitlines()
        row = dict(zip(lines[0].split(","), lines[1].split(",")))
        assert row["metric"] == metric
        assert float(row["countdown_mean"]) == pytest.approx(100 * held[f"{metric}@4"], abs=1e-4)
        assert float(row["countdown_se"]) == pytest.approx(100 * held[f"{metric}@4_stderr"], abs=1e-4)
