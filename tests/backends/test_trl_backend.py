"""``backend: trl`` (TRL 1.16.0's GRPOTrainer running the harness methods) on a pocket task on CPU: the run directory
of docs/contracts.md §2, the official rollout measures against pocket's reference forward, the advantages against
GRPO worked out by hand, every method trains or is refused at load, resume, Ctrl-C and export."""

from __future__ import annotations

import json
import math
import os
import signal

import pytest
import torch

trl = pytest.importorskip("trl")  # the project's 'test' extra installs it (Python >= 3.11)

import harness  # noqa: E402
from harness.backends import get_backend  # noqa: E402
from harness.io import read_jsonl  # noqa: E402
from harness.run.config import ConfigError, load_config  # noqa: E402
from harness.run.runner import run  # noqa: E402

CONTRACT_KEYS = {  # docs/contracts.md §3: what every pocket step logs, and so every trl step
    "step",
    "reward/mean",
    "entropy",
    "cov/term",
    "cov/mean",
    "cov/top_0.02pct",
    "cov/top_0.2pct",
    "cov/top_2pct",
    "cov/top_20pct",
    "cov/top_50pct",
    "selected/count",
    "selected/frac",
    "clipfrac",
    "ppo_kl",
    "response/length",
    "lr",
    "time/rollout",
    "time/score",
    "time/update",
    "time/wall",
}


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("trl-warm-start")


@pytest.fixture
def trl_cfg(tiny, warm_cache):
    """The shared tiny config on backend trl: 1-digit additions, pocket-0.3m warm-started (cached per module)."""
    tiny["backend"] = "trl"
    tiny["model"] = {
        "name": "pocket-0.3m",
        "cache_dir": str(warm_cache),
        "warm_start": {"max_steps": 60, "min_steps": 60, "check_every": 60, "batch_size": 32},
    }
    tiny["task"] = {"name": "arith", "options": {"digits": 1, "ops": "+"}, "test_size": 16}
    return tiny


def _strip(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_trl_trains_a_pocket_task_and_writes_the_run_directory(trl_cfg, tmp_path):
    res = run(load_config(trl_cfg), tmp_path / "run", quiet=True)
    assert res["status"] == "completed" and res["backend"] == "trl"
    assert res["updates"] == {"made": 3, "expected": 3}
    assert res["method"] == "grpo" and res["task"] == "arith" and res["steps"] == 3
    assert res["trl_version"] == "1.16.0" and res["warm_start"]["steps"] == 60
    assert set(res["summary"]) == {"entropy_start", "entropy_end", "reward_start", "reward_end"}
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert CONTRACT_KEYS <= set(r), CONTRACT_KEYS - set(r)
        assert r["rollout/kept_groups"] == 4 and 1 <= r["response/length"] <= 6
    assert "entropy/delta" not in rows[0] and rows[1]["entropy/delta"] == pytest.approx(
        rows[1]["entropy"] - rows[0]["entropy"]
    )
    assert res["summary"]["entropy_start"] == rows[0]["entropy"]
    assert res["summary"]["reward_end"] == rows[2]["reward/mean"]
    assert any(r["reward/mean"] > 0 for r in rows)  # the warm start solves some additions ...
    assert all(r["grad_norm"] > 0 and math.isfinite(r["grad_norm"]) for r in rows)  # ... so the policy learns
    # eval on the held-out split: steps 0, 2 (every 2) and 3 (the end), as SuiteResult
    evals = sorted(p.name for p in (tmp_path / "run" / "eval").iterdir())
    assert evals == ["step_0.json", "step_2.json", "step_3.json"]
    suite = res["eval"]["suites"]["arith"]
    assert res["eval"]["step"] == 3 and suite["primary"] == "avg@2" and suite["n_problems"] == 8
    assert {"avg@2", "pass@2", "greedy"} <= set(suite["metrics"])
    assert (
        rows[1]["eval/arith/avg@2"]
        == json.loads((tmp_path / "run" / "eval" / "step_2.json").read_text())["suites"]["arith"]["metrics"]["avg@2"]
    )
    # one complete checkpoint (the newest), transformers' files plus the harness state
    ckpts = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir() if p.is_dir())
    assert ckpts == ["checkpoint-6"]  # 3 RL steps x 2 optimizer steps
    state = torch.load(tmp_path / "run" / "checkpoints" / "checkpoint-6" / "harness_state.pt", weights_only=False)
    assert state["step"] == 3 and state["run_id"] == res["run_id"]
    # a rerun of a completed run does nothing
    assert run(load_config(trl_cfg), tmp_path / "run", quiet=True)["wall_time_s"] == res["wall_time_s"]


def _tiny_trainer(temperature=1.0, method="grpo", n=4, state=None):
    """A HarnessGRPOTrainer on pocket-0.3m: ``state`` (a warm start), else fresh with the embedding x 8 (peaked
    distributions); 2 prompts x n samples per rollout."""
    from datasets import Dataset
    from trl import GRPOConfig

    from harness.backends.pocket.models import build_pocket_model
    from harness.backends.pocket.tasks import make_task
    from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer
    from harness.backends.trl.trainer import HarnessGRPOTrainer, task_reward

    hf = build_char_tokenizer()
    tok = TokenizerAdapter(hf)
    model = build_pocket_model("pocket-0.3m", len(tok), 0)
    if state is not None:
        model.load_state_dict(state)
    else:
        with torch.no_grad():
            model.get_input_embeddings().weight.mul_(8.0)
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = tok.eos_id, tok.pad_id
    task = make_task("arith", 16, {"digits": 1, "ops": "+"})
    args = GRPOConfig(
        output_dir="/tmp/harness-test-trl",
        use_cpu=True,
        per_device_train_batch_size=n,
        gradient_accumulation_steps=1,
        steps_per_generation=2,
        num_generations=n,
        max_completion_length=5,
        temperature=temperature,
        bf16=False,
        report_to="none",
        logging_strategy="no",
        save_strategy="no",
        disable_tqdm=True,
        beta=0.0,
        seed=0,
    )
    data = Dataset.from_dict({"prompt": [p["prompt"] for p in task.train], "problem": list(range(len(task.train)))})
    trainer = HarnessGRPOTrainer(
        model=model,
        reward_funcs=[task_reward(task, task.train, tok.decode)],
        args=args,
        train_dataset=data,
        processing_class=hf,
        method=harness.get_method(method),
        tokenizer=tok,
        updates_per_rollout=2,
        seed=0,
        on_rl_step_end=lambda *a: None,
        on_checkpoint=lambda *a: None,
    )
    return trainer, tok, task


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_measures_are_pockets_reference_forward(temperature):
    """Old log-probs at the sampling temperature and the official entropy at T=1 (token mean per response, then
    mean) equal pocket's reference path: the transformers forward, log_softmax and the streaming entropy."""
    from harness.backends.pocket.generate import Batch, token_logprobs

    trainer, _, _ = _tiny_trainer(temperature)
    g = torch.Generator().manual_seed(0)
    prompt = torch.tensor([[0, 0, 1, 5, 6], [1, 7, 8, 9, 10]])
    pmask = (prompt != 0).long()
    pmask[1, 0] = 1
    comp = torch.randint(4, 50, (2, 4), generator=g)
    cmask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    ids, att = torch.cat([prompt, comp * cmask], 1), torch.cat([pmask, cmask], 1)
    lp, ent = trainer.rollout_logprobs(ids, att, 4)
    batch = Batch(ids, att, 5, comp * cmask, cmask.float())
    ref_lp, _ = token_logprobs(trainer.model, batch, temperature, reference=True)
    _, ref_ent = token_logprobs(trainer.model, batch, 1.0, with_entropy=True, reference=True)
    torch.testing.assert_close(lp, ref_lp, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(ent, ref_ent, atol=2e-5, rtol=1e-5)
    assert float(ent[0, 3]) == 0.0 and float(lp[0, 3]) == 0.0  # padding
    if temperature != 1.0:  # the two temperatures really differ here
        at_1 = token_logprobs(trainer.model, batch, 1.0, reference=True)[0].detach()
        assert float((lp - at_1).abs().max()) > 1e-2
    # the old entropy of a method that needs_old_entropy (STEER, ERC): at the sampling temperature, not T=1
    *same, old_ent = trainer.rollout_logprobs(ids, att, 4, at_temperature=True)
    _, ref_old = token_logprobs(trainer.model, batch, temperature, with_entropy=True, reference=True)
    torch.testing.assert_close(old_ent, ref_old, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(same[1], ent)
    if temperature != 1.0:
        assert float((old_ent - ent).abs().max()) > 1e-2


def test_rollout_rewards_and_advantages_are_grpo_by_hand(trl_cfg):
    """One real rollout through TRL's generation (warm-started policy): rewards are the task's verifier on the
    decoded responses, the responses of a prompt are one group, and the advantages are (s - group mean) /
    (unbiased group std + 1e-6) on every response token (0 on padding)."""
    from harness.backends.pocket.tasks import make_task
    from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer
    from harness.backends.pocket.warmstart import load_or_train

    task = make_task("arith", 16, {"digits": 1, "ops": "+"})
    warm, _ = load_or_train(load_config(trl_cfg), TokenizerAdapter(build_char_tokenizer()), task, log=lambda *a: None)
    trainer, tok, task = _tiny_trainer(n=8, state=warm)
    trainer.model.train()
    inputs = [{"prompt": task.train[i]["prompt"], "problem": i} for i in [2] * 8 + [7] * 8]
    out = trainer._generate_and_score_completions(inputs)
    mask = out["completion_mask"].float()
    texts = [tok.decode(r[m.bool()].tolist()) for r, m in zip(out["completion_ids"], mask)]
    scores = torch.tensor([task.verify(t, task.train[x["problem"]]) for t, x in zip(texts, inputs)])
    assert all(0 < float(scores[g : g + 8].sum()) < 8 for g in (0, 8))  # both groups mixed: advantages non-zero
    assert trainer._row["reward/mean"] == pytest.approx(float(scores.mean()))
    for gi in range(2):
        s = scores[8 * gi : 8 * gi + 8].tolist()
        mean = sum(s) / 8
        std = (sum((x - mean) ** 2 for x in s) / 7) ** 0.5
        for j in range(8):
            row = 8 * gi + j
            expect = (s[j] - mean) / (std + 1e-6)
            adv = out["advantages"][row]
            assert torch.allclose(adv[mask[row].bool()], torch.tensor(expect), atol=1e-6)
            assert bool((adv[~mask[row].bool()] == 0).all())
    lp, ent = trainer.rollout_logprobs(
        torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
        torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
        mask.shape[1],
    )
    torch.testing.assert_close(out["old_per_token_logps"], lp)
    per_resp = (ent * mask).sum(-1) / mask.sum(-1)
    assert trainer._row["entropy"] == pytest.approx(float(per_resp.mean()), abs=1e-6)
    assert trainer._row["response/length"] == pytest.approx(float(mask.sum(-1).mean()))


def _matrix_cfg(cfg, method, advantage=None):
    cfg["method"] = {"name": method, **({"advantage": advantage} if advantage else {})}
    cfg["train"].update(steps=2, checkpoint_every=0)
    cfg["eval"].update(every=0, n_samples=1, max_problems=2, greedy=False)
    return cfg


def test_every_method_trains_or_is_refused_at_load(trl_cfg, tmp_path):
    """Every registered method with its own estimator, and every estimator with the GRPO loss: 2 steps, or a
    ConfigError at load that names why (only an auxiliary model, PRIME's PRM, is refused)."""
    import copy

    from harness.kernel.method import ADVANTAGES

    combos = [(m, None) for m in harness.list_methods()] + [("grpo", a) for a in harness.list_advantages()]
    trained, refused, failures = [], [], []
    for i, (name, adv) in enumerate(combos):
        cfg = _matrix_cfg(copy.deepcopy(trl_cfg), name, adv)
        try:
            loaded = load_config(cfg)
        except ConfigError as e:
            refused.append((name, adv))
            assert "auxiliary model" in str(e) and "backend: pocket" in str(e), e
            continue
        try:
            run(loaded, tmp_path / f"r{i}", quiet=True)
        except Exception as e:  # collect every failing combination
            failures.append(f"{name} x {adv}: {type(e).__name__}: {e}")
            continue
        rows = read_jsonl(tmp_path / f"r{i}" / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2], (name, adv)
        assert all(math.isfinite(r["grad_norm"]) for r in rows), (name, adv)
        if name == "kl_cov":  # the method's own metrics reach metrics.jsonl
            assert rows[0]["kl_cov/beta"] == 1.0 and rows[0]["selected/count"] >= 1
        trained.append((name, adv))
    assert not failures, "\n".join(failures)
    aux = {a for a in harness.list_advantages() if ADVANTAGES.get(a).auxiliary is not None}
    assert set(refused) == {(n, a) for n, a in combos if (a or harness.get_method(n).advantage) in aux}
    assert len(trained) == len(combos) - len(refused) >= 17


@pytest.mark.parametrize(
    "change,match",
    [
        ({"train": {"dynamic_filtering": True}}, "dynamic_filtering: true is not supported on the trl backend"),
        ({"train": {"updates_per_rollout": 3}}, "updates_per_rollout: 3 does not divide the rollout of"),
        ({"train": {"micro_batch_size": 3}}, "micro_batch_size: 3 does not divide the mini-batch of 8"),
        ({"method": {"name": "prime"}}, "auxiliary model .*prm"),
        ({"method": {"name": "grpo", "rollout_correction": "tis"}}, "rollout_correction: 'tis' is not supported"),
        ({"model": {"name": "pocket-9m"}}, "unknown model 'pocket-9m'"),
    ],
)
def test_refused_at_load_with_the_reason(tiny, change, match):
    tiny["backend"] = "trl"
    for section, values in change.items():
        tiny[section] = {**tiny.get(section, {}), **values} if section != "method" else values
    with pytest.raises(ConfigError, match=match):
        load_config(tiny)


def test_micro_batch_larger_than_the_mini_batch_is_one_micro_batch(tiny):
    from harness.backends.trl.options import batch_layout

    tiny["backend"] = "trl"
    tiny["train"]["micro_batch_size"] = 64
    layout = batch_layout(load_config(tiny))
    assert (layout.micro, layout.grad_accum, layout.updates, layout.steps_per_generation) == (8, 1, 2, 2)


def test_crash_resumes_from_the_checkpoint_and_replays_the_same_steps(trl_cfg, tmp_path, monkeypatch):
    """A crash in step 3 of 4 (checkpoints every step): the rerun resumes at step 2 and logs steps 3 and 4 exactly as
    an uninterrupted run does (transformers restores weights, Adam, RNG and the sampler; we the method state)."""
    from harness.backends.trl.loop import TRLRun

    trl_cfg["method"] = {"name": "entropy_bonus", "coef": 0.05}
    trl_cfg["train"].update(steps=4, checkpoint_every=1)
    trl_cfg["eval"]["every"] = 0
    ref = run(load_config(trl_cfg), tmp_path / "ref", quiet=True)
    real = TRLRun.on_rl_step_end

    def crash_in_step_3(self, trainer, row, control):
        if row["step"] == 3:
            raise RuntimeError("simulated crash")
        return real(self, trainer, row, control)

    monkeypatch.setattr(TRLRun, "on_rl_step_end", crash_in_step_3)
    with pytest.raises(RuntimeError, match="simulated crash"):
        run(load_config(trl_cfg), tmp_path / "crashed", quiet=True)
    assert len(read_jsonl(tmp_path / "crashed" / "metrics.jsonl")) == 2
    monkeypatch.setattr(TRLRun, "on_rl_step_end", real)
    res = run(load_config(trl_cfg), tmp_path / "crashed", quiet=True)
    assert res["status"] == "completed" and res["updates"] == {"made": 4, "expected": 4}
    assert "resumed from" in (tmp_path / "crashed" / "train.log").read_text()
    resumed, uninterrupted = (read_jsonl(tmp_path / name / "metrics.jsonl") for name in ("crashed", "ref"))
    assert _strip(resumed) == _strip(uninterrupted)
    assert res["summary"] == ref["summary"]


def test_ctrl_c_saves_a_checkpoint_between_steps_and_the_rerun_resumes(trl_cfg, tmp_path, monkeypatch):
    from harness.backends.trl.loop import TRLRun

    trl_cfg["train"].update(steps=3, checkpoint_every=0)
    trl_cfg["eval"]["every"] = 0
    trl_cfg["logging"]["tensorboard"] = True
    real = TRLRun.on_rl_step_end

    def sigint_in_step_1(self, trainer, row, control):
        if row["step"] == 1:
            os.kill(os.getpid(), signal.SIGINT)  # deferred to the end of the step by the trainer's handler
        return real(self, trainer, row, control)

    monkeypatch.setattr(TRLRun, "on_rl_step_end", sigint_in_step_1)
    with pytest.raises(KeyboardInterrupt):
        run(load_config(trl_cfg), tmp_path / "run", quiet=True)
    assert not (tmp_path / "run" / "result.json").exists()
    assert "checkpoint saved" in (tmp_path / "run" / "train.log").read_text()
    assert (tmp_path / "run" / "checkpoints" / "checkpoint-2" / "harness_state.pt").is_file()
    monkeypatch.setattr(TRLRun, "on_rl_step_end", real)
    res = run(load_config(trl_cfg), tmp_path / "run", quiet=True)
    assert res["status"] == "completed"
    assert [r["step"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3]
    first, second = read_jsonl(tmp_path / "run" / "trackers.jsonl")  # the resumed attempt reuses the tracker run
    assert first["resumed_step"] is None and second["resumed_step"] == 1 and second["id"] == first["id"]
    assert list((tmp_path / "run" / first["tensorboard"]).glob("events.out.tfevents.*"))


def test_export_is_a_model_directory_harness_eval_loads(trl_cfg, tmp_path):
    from transformers import AutoModelForCausalLM

    from harness.backends import load_tokenizer
    from harness.run.records import read_model_run

    trl_cfg["train"].update(steps=2, entropy_after_update=True)
    cfg = load_config(trl_cfg)
    res = run(cfg, tmp_path / "run", quiet=True)
    rows = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert all(
        r["entropy/update_delta"] == pytest.approx(r["entropy/after_update"] - r["entropy"], abs=1e-6) for r in rows
    )
    assert any(r["entropy/update_delta"] != 0 for r in rows)  # the update moved the entropy of its own batch
    backend = get_backend("trl")
    out = backend.export(cfg, tmp_path / "run", tmp_path / "model")
    assert out == tmp_path / "model"
    marker = read_model_run(out)
    assert marker["backend"] == "trl" and marker["run_id"] == res["run_id"] and marker["step"] == 2
    task = json.loads((out / "harness_task.json").read_text())
    assert task["suite"] == "arith" and task["protocol"]["n_samples"] == 2
    from harness.backends.pocket.tokenizer import build_char_tokenizer

    tok = load_tokenizer(out)  # pocket's exact loader recognises the char tokenizer (spaces kept)
    assert tok is not None and tok("7 12 to 84:")["input_ids"] == build_char_tokenizer()("7 12 to 84:")["input_ids"]
    exported = AutoModelForCausalLM.from_pretrained(out)
    ckpt = AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "checkpoints" / "checkpoint-4")
    assert all(torch.equal(a, b) for a, b in zip(exported.state_dict().values(), ckpt.state_dict().values()))
    assert backend.export(cfg, tmp_path / "run") == tmp_path / "run" / "export" / "step_2"
    with pytest.raises(ValueError, match="not empty"):
        backend.export(cfg, tmp_path / "run", tmp_path / "model")


def test_after_training_stage_scores_the_exported_model(trl_cfg, tmp_path):
    """``eval.after_training``: the runner exports through the trl backend and scores the run's own task with
    ``harness eval``'s pipeline; the result is attached at the final step."""
    trl_cfg["train"]["steps"] = 2
    trl_cfg["eval"].update(every=0, after_training=True, protocol="section", max_new_tokens=6)
    cfg = load_config(trl_cfg)
    res = run(cfg, tmp_path / "r", quiet=True)
    assert res["status"] == "completed" and list(res["eval"]["suites"]) == ["arith"]
    suite = res["eval"]["suites"]["arith"]
    assert suite["stage"] == "after_training" and res["eval"]["step"] == 2 and suite["n_problems"] == 8
    marker = json.loads((tmp_path / "r" / "export" / "step_2" / "harness_run.json").read_text())
    assert (marker["backend"], marker["run_id"], marker["step"]) == ("trl", cfg.run_id(), 2)


def test_another_trl_version_is_refused_with_the_install_line(monkeypatch):
    from harness.backends.trl.loop import require_trl

    assert require_trl() is trl
    monkeypatch.setattr(trl, "__version__", "1.17.0")
    with pytest.raises(
        RuntimeError, match=r"written against TRL 1\.16\.0 .*installed: 1\.17\.0.*pip install 'trl==1\.16\.0'"
    ):
        require_trl()
