"""One run on the TRL backend: the policy (pocket size with pocket's warm start, or a transformers model), the
task as a dataset and reward, ``HarnessGRPOTrainer``, and the run directory of docs/contracts.md §2.

Per RL step (after its ``updates_per_rollout`` optimizer steps) one ``metrics.jsonl`` row: the rollout measures
(reward, official entropy, covariance, response length), the loss diagnostics (token-weighted over the step),
grad norm, lr, times, and on eval steps ``eval/<task>/<metric>``; then ``method.on_step_end(row)``. Checkpoints
every ``train.checkpoint_every`` steps and at the end; a rerun resumes from the newest complete one.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from harness.io import append_jsonl, read_jsonl, write_jsonl
from harness.run.lineage import lineage
from harness.run.metrics import add_eval
from harness.run.records import RunResult, trained_record
from harness.run.tracking import CHECKPOINT_KEY, Trackers

from . import checkpoints, options


def require_trl():
    """TRL, at the pinned version the trainer subclass is written against; else one line naming the fix."""
    try:
        import trl
    except ImportError:
        raise RuntimeError(
            f"backend: trl needs TRL {options.TRL_VERSION}: pip install 'trl=={options.TRL_VERSION}' (the project's "
            f"'trl' and 'test' extras install it)"
        ) from None
    if trl.__version__ != options.TRL_VERSION:
        raise RuntimeError(
            f"backend: trl is written against TRL {options.TRL_VERSION} (it overrides private GRPOTrainer methods); "
            f"installed: {trl.__version__}. pip install 'trl=={options.TRL_VERSION}'"
        )
    return trl


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"train.device: {name!r} but torch sees no CUDA device here; use cpu or auto")
    return torch.device(name)


def build_tokenizer(cfg):
    """The tokenizer adapter pocket would use for this model: the pocket char tokenizer, or the model's own
    (loaded exactly when a harness export wrote it) with the chat template and stop ids of ``task``."""
    from harness.backends.pocket import models
    from harness.backends.pocket.tokenizer import TokenizerAdapter, build_char_tokenizer, load_tokenizer

    if models.is_pocket(cfg.model.name):
        return TokenizerAdapter(build_char_tokenizer())
    from harness.backends.pocket.pretrained import make_tokenizer

    return make_tokenizer(load_tokenizer(cfg.model.name), cfg.task)


def build_policy(cfg, task, resuming: bool, log):
    """(model, tokenizer adapter, warm-start info, warm-start seconds): a pocket size built and warm-started exactly
    as the pocket backend does (same cache), or a transformers model (a local directory or a hub id)."""
    from harness.backends.pocket import models

    tok = build_tokenizer(cfg)
    if not models.is_pocket(cfg.model.name):
        from transformers import AutoModelForCausalLM

        try:
            model = AutoModelForCausalLM.from_pretrained(cfg.model.name, dtype=getattr(torch, cfg.model.dtype))
        except OSError as e:
            raise FileNotFoundError(
                f"model.name: could not load {cfg.model.name!r} ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                f"offline machines need a local model directory"
            ) from None
        return model, tok, None, 0.0
    model = models.build_pocket_model(cfg.model.name, len(tok), cfg.seed)
    info, seconds = None, 0.0
    if cfg.model.warm_start.enabled != "false" and not resuming:  # a checkpoint holds the weights
        from harness.backends.pocket.warmstart import load_or_train

        t0 = time.time()
        state, info = load_or_train(cfg, tok, task, log=log)
        seconds = time.time() - t0
        model.load_state_dict(state)
    return model, tok, info, seconds


class TRLRun:
    """Builds the trainer for one run and writes its run directory."""

    def __init__(self, cfg, run_dir, log=print):
        self.cfg, self.run_dir, self.log = cfg, Path(run_dir), log or (lambda *a: None)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.stop: dict = {}
        self.last_eval = None
        self.warm_info, self.warm_s = None, 0.0

    # ------------------------------------------------------------------------------------------- set-up
    def setup(self) -> None:
        import harness
        from harness.backends.pocket.tasks import make_task

        require_trl()
        from datasets import Dataset
        from trl import GRPOConfig

        from .trainer import HarnessGRPOTrainer, task_reward

        cfg = self.cfg
        torch.set_num_threads(cfg.train.threads)
        torch.manual_seed(cfg.seed)
        self.device = resolve_device(cfg.train.device)
        self.method = harness.get_method(cfg.method_name, **cfg.method_hparams)
        options.check_method(self.method)
        self.task = make_task(cfg.task.name, cfg.task.test_size, cfg.task.options)
        if len(self.task.train) < cfg.train.prompts_per_step:
            raise ValueError(
                f"train.prompts_per_step: {cfg.train.prompts_per_step} is more than the task's "
                f"{len(self.task.train)} training problems"
            )
        self.resume_from = checkpoints.latest(self.run_dir, self.log)
        self.resume_state = None
        if self.resume_from is not None:
            self.resume_state = checkpoints.read_state(self.resume_from)
            checkpoints.check_lineage(self.resume_state, cfg, self.resume_from)
        resuming = self.resume_from is not None
        model, self.tok, self.warm_info, self.warm_s = build_policy(cfg, self.task, resuming, self.log)
        model.to(self.device)
        stops = list(getattr(self.tok, "stop_ids", [self.tok.eos_id]))
        model.generation_config.eos_token_id = stops if len(stops) > 1 else stops[0]  # TRL stops on these
        model.generation_config.pad_token_id = self.tok.pad_id
        if self.tok.hf.pad_token_id is None:
            self.tok.hf.pad_token = self.tok.hf.eos_token
        layout = options.batch_layout(cfg)
        args = GRPOConfig(
            **options.grpo_settings(cfg, str(self.run_dir / "checkpoints"), layout, self.device.type == "cpu")
        )
        data = Dataset.from_dict(
            {"prompt": [p["prompt"] for p in self.task.train], "problem": list(range(len(self.task.train)))}
        )
        self.trainer = HarnessGRPOTrainer(
            model=model,
            reward_funcs=[task_reward(self.task, self.task.train, self.tok.decode)],
            args=args,
            train_dataset=data,
            processing_class=self.tok.hf,
            method=self.method,
            tokenizer=self.tok,
            updates_per_rollout=layout.updates,
            seed=cfg.seed,
            on_rl_step_end=self.on_rl_step_end,
            on_checkpoint=self.on_checkpoint,
        )
        self.trainer.timing["warm_start_s"] = self.warm_s
        self.trackers = Trackers.open(cfg, self.run_dir, self.resume_state)  # a fresh tracker run unless resuming

    def resume(self) -> int:
        """Load the harness state of the newest complete checkpoint (transformers loads the rest); trim
        metrics.jsonl to it. Returns the RL step resumed at (0: fresh start)."""
        if self.resume_from is None:
            return 0
        state, tr = self.resume_state, self.trainer
        self.method.load_state_dict(state.get("method_state", {}))
        tr.prev_entropy = state.get("prev_entropy")
        tr.timing.update(state.get("timing", {}))
        self.warm_info = state.get("warm_start", self.warm_info)
        step = int(state["step"])
        rows = read_jsonl(self.metrics_path)
        kept = [r for r in rows if r.get("step", 0) <= step]
        if len(kept) != len(rows):
            write_jsonl(self.metrics_path, kept)
        self.log(f"resumed from {self.resume_from} at step {step}")
        return step

    # ------------------------------------------------------------------------------------------- hooks
    def on_rl_step_end(self, trainer, row: dict, control) -> None:
        cfg, step = self.cfg, row["step"]
        timing = trainer.timing
        if cfg.train.entropy_after_update:
            row.update(trainer.entropy_after_update())
        for key in ("rollout", "score", "update"):
            row[f"time/{key}"] = round(timing[f"{key}_s"] - self._timing_before[f"{key}_s"], 4)
        now = time.time()
        row["time/step"] = now - self._step_start
        row["time/wall"] = now - self._t_start
        if (cfg.eval.every > 0 and step % cfg.eval.every == 0) or step == cfg.train.steps:
            self.last_eval = self.evaluate(step)
            add_eval(row, self.last_eval)
        self.method.on_step_end(row)
        append_jsonl(self.metrics_path, row)
        self.trackers.log(row, step)
        every = cfg.train.checkpoint_every
        if (every > 0 and step % every == 0) or step == cfg.train.steps or self.stop:
            control.should_save = True
        self._timing_before, self._step_start = dict(timing), time.time()

    def on_checkpoint(self, trainer, folder: Path) -> None:
        step = trainer.state.global_step // trainer.updates_per_rollout
        checkpoints.write_state(
            folder,
            {
                "step": step,
                "run_id": self.cfg.run_id(),
                "lineage": lineage(self.cfg),
                "method_state": self.method.state_dict(),
                "prev_entropy": trainer.prev_entropy,
                "timing": dict(trainer.timing),
                "warm_start": self.warm_info,
                CHECKPOINT_KEY: self.trackers.checkpoint_state(),  # the attempt resuming from here reuses it
            },
        )
        checkpoints.keep_only(self.run_dir, folder)
        if self.stop:
            from harness.io import StopRequested

            raise StopRequested(self.stop["stop"])

    def evaluate(self, step: int) -> dict:
        from .evaluation import evaluate

        t0 = time.time()
        doc = evaluate(self.cfg, self.trainer.model, self.tok, self.task, step, self.run_dir, self.device)
        self.trainer.timing["eval_s"] += time.time() - t0
        return doc

    # ------------------------------------------------------------------------------------------- main
    def run(self) -> RunResult:
        from harness.backends.pocket import models
        from harness.io import StopRequested, signals_stop_flag

        cfg = self.cfg
        self.setup()
        start = self.resume()
        self._t_start = self._step_start = time.time()
        self._timing_before = dict(self.trainer.timing)
        if start == 0 and cfg.eval.every > 0:
            self.last_eval = self.evaluate(0)
            self.trackers.log_eval(self.last_eval)
        try:
            with signals_stop_flag(self.stop):
                if start < cfg.train.steps:
                    self.trainer.train(resume_from_checkpoint=str(self.resume_from) if self.resume_from else None)
        except StopRequested as e:
            self.log(
                f"interrupted ({e}) after step {self.trainer.rl_step}; checkpoint saved under "
                f"{self.run_dir / 'checkpoints'}. Run the same command again to resume."
            )
            raise KeyboardInterrupt from None
        except BaseException:
            self.trackers.close()  # stopped early: no final summary to log
            raise
        rows = read_jsonl(self.metrics_path)
        step = max([int(r["step"]) for r in rows if "step" in r] or [start])
        if self.last_eval is None or self.last_eval["step"] != step:
            self.last_eval = self.evaluate(step)
        n_params = models.n_params(self.trainer.model)
        extra = {"warm_start": self.warm_info, "trl_version": options.TRL_VERSION}
        result = trained_record(cfg, self.method, n_params, step, rows, self.last_eval, self.trainer.timing, extra)
        self.trackers.finish(cfg, result, step)  # the final summary and eval results
        return result


def train(cfg, run_dir, log=print) -> RunResult:
    return TRLRun(cfg, run_dir, log).run()
