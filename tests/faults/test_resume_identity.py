"""Issue 29: a run directory's identity is its config, checkpoint lineage and results together; resume never
silently changes the experiment; metrics rows are exactly one per trained step. Real (tiny) pocket runs, real
SIGKILLs, a warm-started config where the fault meets one."""

import json
import os

import torch
import yaml

from harness.cli import main


def _result(rd):
    return json.loads((rd / "result.json").read_text())


def _one_error_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert "Traceback" not in err, err
    assert lines and lines[-1].startswith("error: "), err
    return lines[-1]


# ------------------------------------------------------------------------------ item 2: warm start + bad checkpoint
def test_an_unreadable_checkpoint_of_a_warm_started_run_restarts_from_the_warm_start(tmp_path, capsys, fx):
    """The trainer took 'resuming, skip the warm start' from latest.pt existing; the torn file was moved aside and
    the run trained from an untrained model, counted as finished. Now it replays the same warm-started run."""
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=3))
    ref, rd = tmp_path / "ref", tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(ref)]) == 0
    fx.kill_after_checkpoint(cfg, rd, 2)
    ck = rd / "checkpoints" / "latest.pt"
    ck.write_bytes(ck.read_bytes()[:200])  # torn (copied while written, a bad disk)
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    err = capsys.readouterr().err
    assert "is unreadable" in err and list((rd / "checkpoints").glob("latest.pt.unreadable-*"))
    assert fx.rows_without_times(rd / "metrics.jsonl") == fx.rows_without_times(ref / "metrics.jsonl")
    res = _result(rd)
    assert res["warm_start"] is not None and res["warm_start"]["cached"] is True
    assert res["summary"] == _result(ref)["summary"]


# ------------------------------------------------------------------------------ item 7: no config.yaml
def test_a_run_dir_without_config_yaml_is_refused_and_nothing_changes(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=2, enabled="false"))
    rd = tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    (rd / "config.yaml").unlink()  # e.g. a run copied without it
    before = fx.snapshot(rd)
    capsys.readouterr()
    assert main(["train", str(cfg), "method.name=kl_cov", "--run-dir", str(rd)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "no config.yaml" in line and "result.json" in line and "--force" in line
    assert fx.snapshot(rd) == before  # the completed result is not overwritten by a failed one of kl_cov
    assert _result(rd)["method"] == "grpo" and _result(rd)["status"] == "completed"
    # --force keeps the old files aside and trains the asked run
    assert main(["train", str(cfg), "method.name=kl_cov", "--run-dir", str(rd), "--force"]) == 0
    assert _result(rd)["method"] == "kl_cov"
    (old,) = (rd / "replaced").iterdir()
    assert json.loads((old / "result.json").read_text())["method"] == "grpo"


def test_a_refused_foreign_checkpoint_changes_no_file(tmp_path, capsys, fx):
    """The refusal used to come from the trainer after the runner had moved result.json aside and rewritten
    config.yaml, and then wrote a failed result.json of its own."""
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=2, enabled="false"))
    rd, other = tmp_path / "rd", tmp_path / "other"
    assert main(["train", str(cfg), "seed=1", "--run-dir", str(other)]) == 0
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    res = _result(rd)
    res["status"] = "failed"
    (rd / "result.json").write_text(json.dumps(res))  # a failed attempt, which a rerun would retry
    os.replace(other / "checkpoints" / "latest.pt", rd / "checkpoints" / "latest.pt")  # another run's checkpoint
    before = fx.snapshot(rd)
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "belongs to run" in line and "not to this run" in line
    assert fx.snapshot(rd) == before


def test_a_corrupt_config_yaml_is_named_as_unreadable_not_as_a_different_config(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=1, enabled="false"))
    rd = tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    (rd / "result.json").unlink()
    (rd / "config.yaml").write_text("train: {steps: 1\n")  # cut short
    before = fx.snapshot(rd)
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "config.yaml" in line and "unreadable" in line and "different config" not in line
    assert fx.snapshot(rd) == before


# ------------------------------------------------------------------------------ item 8: threads
def test_a_resume_with_another_thread_count_is_refused_naming_both(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=3, enabled="false"))
    rd = tmp_path / "rd"
    fx.kill_after_checkpoint(cfg, rd, 2)
    before = fx.snapshot(rd)
    capsys.readouterr()
    assert main(["train", str(cfg), "train.threads=2", "--run-dir", str(rd)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "train.threads" in line and "1" in line and "2" in line and "step 2" in line
    assert fx.snapshot(rd) == before
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0  # the same thread count resumes
    assert [r["step"] for r in fx.rows_without_times(rd / "metrics.jsonl")] == [1, 2, 3]


# ------------------------------------------------------------------------------ item 9: metrics rows
def test_a_newline_terminated_bad_last_line_does_not_fail_the_resume(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=3, enabled="false"))
    ref, rd = tmp_path / "ref", tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(ref)]) == 0
    fx.kill_after_checkpoint(cfg, rd, 2)
    with open(rd / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me\n')  # a bad line that ends in a newline (the repair only cuts torn tails)
    capsys.readouterr()
    for _ in range(2):  # it used to fail at the end of the resume, and then on every rerun
        assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    assert fx.rows_without_times(rd / "metrics.jsonl") == fx.rows_without_times(ref / "metrics.jsonl")


def test_a_deleted_checkpoint_does_not_duplicate_rows(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=3, enabled="false"))
    ref, rd = tmp_path / "ref", tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(ref)]) == 0
    fx.kill_after_checkpoint(cfg, rd, 2)
    (rd / "checkpoints" / "latest.pt").unlink()  # the user clears checkpoints to save space
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    assert fx.rows_without_times(rd / "metrics.jsonl") == fx.rows_without_times(ref / "metrics.jsonl")
    assert _result(rd)["updates"] == {"made": 3, "expected": 3}  # not "26 of 20"


def test_a_torn_row_of_a_checkpointed_step_is_restored(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=3, enabled="false"))
    ref, rd = tmp_path / "ref", tmp_path / "rd"
    assert main(["train", str(cfg), "--run-dir", str(ref)]) == 0
    fx.kill_after_checkpoint(cfg, rd, 2)
    m = rd / "metrics.jsonl"
    lines = m.read_text().splitlines(keepends=True)
    m.write_text(lines[0] + lines[1][:40])  # step 2's row torn although step 2 is checkpointed
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 0
    assert fx.rows_without_times(m) == fx.rows_without_times(ref / "metrics.jsonl")  # step 2's row is back
    assert "has no row" not in capsys.readouterr().err


def test_a_corrupt_warm_start_cache_entry_is_retrained_and_named(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=2))
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "a")]) == 0
    (entry,) = (tmp_path / "cache" / "pocket").glob("*.pt")
    entry.write_bytes(entry.read_bytes()[:300])
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(tmp_path / "b")]) == 0
    err = capsys.readouterr().err
    assert str(entry) in err and "unreadable" in err
    assert list(entry.parent.glob(entry.name + ".unreadable-*"))  # kept aside
    first, again = _result(tmp_path / "a")["warm_start"], torch.load(entry, weights_only=False)["info"]
    assert (again["steps"], again["probe_acc"]) == (first["steps"], first["probe_acc"])  # retrained in its place
    # the retrained warm start is the same model: the run is the same run
    assert fx.rows_without_times(tmp_path / "b" / "metrics.jsonl") == fx.rows_without_times(
        tmp_path / "a" / "metrics.jsonl"
    )


# ------------------------------------------------------------------------------ item 12: checkpoints, files
def test_a_longer_checkpoint_of_the_same_lineage_is_refused(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=2, enabled="false"))
    long, rd = tmp_path / "long", tmp_path / "rd"
    assert main(["train", str(cfg), "train.steps=3", "--run-dir", str(long)]) == 0  # the same run, longer
    fx.kill_after_checkpoint(cfg, rd, 1)
    os.replace(long / "checkpoints" / "latest.pt", rd / "checkpoints" / "latest.pt")
    before = fx.snapshot(rd)
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 2  # the resume reached step 3 of 2
    line = _one_error_line(capsys.readouterr().err)
    assert "step 3" in line and "2 steps" in line
    assert fx.snapshot(rd) == before


def test_a_legacy_checkpoint_of_another_model_size_is_one_line(tmp_path, capsys, fx):
    cfg = fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=2, enabled="false"))
    big, rd = tmp_path / "big", tmp_path / "rd"
    assert main(["train", str(cfg), "model.name=pocket-1m", "--run-dir", str(big)]) == 0
    fx.kill_after_checkpoint(cfg, rd, 1)
    blob = torch.load(big / "checkpoints" / "latest.pt", weights_only=False)
    for key in ("lineage", "threads", "metrics"):  # written before lineage was recorded
        blob.pop(key, None)
    torch.save(blob, rd / "checkpoints" / "latest.pt")
    before = fx.snapshot(rd)
    capsys.readouterr()
    assert main(["train", str(cfg), "--run-dir", str(rd)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "latest.pt" in line
    assert fx.snapshot(rd) == before


def test_a_non_utf8_config_names_the_file(tmp_path, capsys):
    p = tmp_path / "run.yaml"
    p.write_bytes(b"seed: 0\nname: caf\xe9\n")  # latin-1, as an old editor saves it
    assert main(["train", str(p), "--dry-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(p) in line and "UTF-8" in line


def test_duplicate_keys_in_a_run_config_are_refused_naming_key_and_lines(tmp_path, capsys, fx):
    base = fx.warm_base(tmp_path, steps=2, enabled="false")
    text = yaml.safe_dump(base, sort_keys=False) + "train:\n  steps: 5\n"  # a second train: block (replaced the 1st)
    p = tmp_path / "run.yaml"
    p.write_text(text)
    assert main(["train", str(p), "--dry-run"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    first = 1 + text.splitlines().index("train:")
    second = len(text.splitlines()) - 1
    assert str(p) in line and "'train'" in line and f"line {second}" in line and f"line {first}" in line
    p.write_text("seed: 0\nmethod: {name: grpo, name: kl_cov}\n")  # nested, in a flow mapping
    assert main(["train", str(p), "--dry-run"]) == 2
    assert "'name'" in _one_error_line(capsys.readouterr().err)
    assert main(["train", str(cfg_ok(tmp_path, fx)), "method={name: grpo, name: kl_cov}", "--dry-run"]) == 2
    assert "'name'" in _one_error_line(capsys.readouterr().err)


def cfg_ok(tmp_path, fx):
    return fx.write_cfg(tmp_path, fx.warm_base(tmp_path, steps=2, enabled="false"), "ok.yaml")
