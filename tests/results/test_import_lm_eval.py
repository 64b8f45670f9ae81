"""`harness table --import-lm-eval FILE`: a model scored by lm-eval as a row of its own beside our runs, its
protocol shown, never pooled with the runs nor compared with them."""

import csv
import io
import json

import pytest

from harness.cli import main

MATH500 = {"n_problems": 500, "n_samples": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 8192}


def lm_eval_doc(max_gen_toks=8192):
    """A results document as `lm_eval --output_path` writes it (keys and shapes of lm-eval 0.4.13): our
    harness_math500 task, lm-eval's gsm8k (two filters), and a group entry that has no config of its own."""
    return {
        "results": {
            "harness_math500": {"alias": "harness_math500", "avg_at_k,all": 0.612, "avg_at_k_stderr,all": "N/A"},
            "gsm8k": {
                "alias": "gsm8k",
                "exact_match,strict-match": 0.731,
                "exact_match_stderr,strict-match": 0.0122,
                "exact_match,flexible-extract": 0.755,
                "exact_match_stderr,flexible-extract": 0.0118,
            },
            "my_group": {"alias": "my_group", "exact_match,none": 0.7},
        },
        "group_subtasks": {"my_group": ["gsm8k"]},
        "configs": {
            "harness_math500": {
                "task": "harness_math500",
                "repeats": 1,
                "num_fewshot": 0,
                "generation_kwargs": {
                    "until": [],
                    "do_sample": False,
                    "temperature": 0.0,
                    "top_p": 1.0,
                    "max_gen_toks": max_gen_toks,
                },
            },
            "gsm8k": {
                "task": "gsm8k",
                "repeats": 1,
                "num_fewshot": 5,
                "generation_kwargs": {"until": ["Question:"], "do_sample": False, "temperature": 0.0},
            },
        },
        "versions": {"harness_math500": 1.0, "gsm8k": 3.0},
        "n-shot": {"harness_math500": 0, "gsm8k": 5},
        "higher_is_better": {"harness_math500": {"avg_at_k": True}, "gsm8k": {"exact_match": True}},
        "n-samples": {
            "harness_math500": {"original": 500, "effective": 500},
            "gsm8k": {"original": 1319, "effective": 1319},
        },
        "config": {"model": "vllm", "model_args": "pretrained=Qwen/Qwen2.5-7B,dtype=bfloat16", "limit": None},
        "lm_eval_version": "0.4.13",
        "date": 1796300000.0,
    }


@pytest.fixture
def runs(tmp_path, mk, suite):
    root = tmp_path / "runs"
    for method, values in (("grpo", (0.40, 0.44)), ("kl_cov", (0.50, 0.52))):
        for seed, v in enumerate(values):
            mk(
                root,
                f"{method}_s{seed}",
                method=method,
                seed=seed,
                model="Qwen/Qwen2.5-7B",
                task="dapo",
                suites={"math500": suite("math500", v, **MATH500)},
            )
    return root


def _write(tmp_path, doc, name="qwen7b_results.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _table(capsys, *argv):
    assert main(["table", *argv]) == 0
    return capsys.readouterr().out


def test_an_lm_eval_model_is_a_row_of_its_own_with_its_protocol(tmp_path, runs, capsys):
    f = _write(tmp_path, lm_eval_doc())
    rows = list(csv.DictReader(io.StringIO(_table(capsys, str(runs), "--import-lm-eval", str(f), "--format", "csv"))))
    (imported,) = [r for r in rows if r["source"] == "lm-eval"]
    assert imported["model"] == "Qwen/Qwen2.5-7B" and imported["method"] == "lm-eval (qwen7b_results.json)"
    assert float(imported["math500_mean"]) == pytest.approx(61.2)  # our suite's column, in percent
    assert float(imported["gsm8k_mean"]) == pytest.approx(73.1)  # strict-match: the first higher-is-better metric
    assert imported["math500_n"] == imported["math500_ci"] == imported["delta_avg_suites"] == imported["best"] == ""
    assert imported["avg_suites_mean"] == ""  # no average over a different set of tasks
    assert imported["protocol"] == (
        "math500: avg_at_k,all; problems=500, n=1, T=0.0, top_p=1.0, max_tokens=8192, fewshot=0 | "
        "gsm8k: exact_match,strict-match; problems=1319, n=1, T=0.0, top_p=1.0, max_tokens=256, fewshot=5"
    )
    assert "my_group" not in rows[0]  # a group entry is not a task
    grpo = next(r for r in rows if r["method"] == "grpo")
    assert float(grpo["math500_mean"]) == pytest.approx(42.0) and grpo["math500_n"] == "2"  # not pooled
    kl = next(r for r in rows if r["method"] == "kl_cov")
    assert float(kl["delta_avg_suites"]) == pytest.approx(9.0)  # Δ vs grpo unchanged by the import
    assert [r["source"] for r in rows] == ["runs", "runs", "lm-eval"]

    md = _table(capsys, str(runs), "--import-lm-eval", str(f))
    line = next(x for x in md.splitlines() if "lm-eval (qwen7b_results.json)" in x)
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[:4] == ["Qwen/Qwen2.5-7B", "lm-eval (qwen7b_results.json)", "lm-eval (imported)", "61.2"]
    assert "73.1" in cells and not any("n=" in c for c in cells)
    note = next(x for x in md.splitlines() if x.startswith("- IMPORTED (lm-eval 0.4.13): "))
    assert "never pooled with runs nor compared with them" in note and "fewshot=5" in note
    assert "FLAG: Qwen/Qwen2.5-7B (lm-eval)" not in md  # same protocol as the runs' math500


def test_a_different_protocol_in_a_shared_column_is_flagged(tmp_path, runs, capsys):
    f = _write(tmp_path, lm_eval_doc(max_gen_toks=4096))
    md = _table(capsys, str(runs), "--import-lm-eval", str(f))
    assert (
        "- FLAG: Qwen/Qwen2.5-7B (lm-eval) math500 protocol (avg_at_k,all; problems=500, n=1, T=0.0, top_p=1.0, "
        "max_tokens=4096, fewshot=0) differs from the runs' in that column" in md
    )


def test_import_alone_and_several_files(tmp_path, capsys):
    a = _write(tmp_path, lm_eval_doc(), "a.json")
    doc = lm_eval_doc()
    doc["config"]["model_args"] = {"pretrained": "org/other-1.5B"}
    doc["configs"]["gsm8k"]["generation_kwargs"].update(do_sample=True, temperature=0.6, top_p=0.95)
    b = _write(tmp_path, doc, "b.json")
    rows = list(
        csv.DictReader(
            io.StringIO(_table(capsys, "--import-lm-eval", str(a), "--import-lm-eval", str(b), "--format", "csv"))
        )
    )
    assert {(r["model"], r["method"]) for r in rows} == {
        ("Qwen/Qwen2.5-7B", "lm-eval (a.json)"),
        ("org/other-1.5B", "lm-eval (b.json)"),
    }
    other = next(r for r in rows if r["model"] == "org/other-1.5B")
    assert "gsm8k: exact_match,strict-match; problems=1319, n=1, T=0.6, top_p=0.95" in other["protocol"]
    assert all(r["best"] == "" for r in rows)  # different models: nothing ranked across them


@pytest.mark.parametrize(
    "content, message",
    [
        ({"harness_math500": {"avg_at_k,all": 0.5}}, "not an lm-eval results document (needs 'results' and 'configs'"),
        ("{not json", "not readable JSON"),
        ({"results": {"t": {"alias": "t"}}, "configs": {"t": {}}}, "no task with a usable score (t: no higher-is-"),
    ],
)
def test_a_file_that_is_not_lm_eval_output_is_refused_by_name(tmp_path, capsys, content, message):
    f = tmp_path / "x.json"
    f.write_text(content if isinstance(content, str) else json.dumps(content))
    assert main(["table", "--import-lm-eval", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --import-lm-eval {f}: ") and message in err[0]


def test_a_missing_file_is_named(tmp_path, capsys):
    assert main(["table", "--import-lm-eval", str(tmp_path / "none.json")]) == 2
    assert f"--import-lm-eval {tmp_path / 'none.json'}: no such file" in capsys.readouterr().err


def test_help_texts_name_the_95_percent_intervals(capsys):
    """The top-level help lists `table` with its 95% intervals (it said "mean ± std"); `harness mechanism --help`
    printed "95%%" (a description is not %-formatted, a sub-command's help is)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert "mean ± 95% CI over seeds" in " ".join(top.split()) and "± std" not in top
    with pytest.raises(SystemExit):
        main(["mechanism", "--help"])
    mech = capsys.readouterr().out
    assert "paired 95% CIs" in " ".join(mech.split()) and "%%" not in mech
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    table = " ".join(capsys.readouterr().out.split())
    assert "95% Student-t interval over seeds" in table and "--import-lm-eval FILE" in table and "%%" not in table
