"""TRL 1.16.0's ``GRPOTrainer`` with the harness method as its advantages and its loss (imports TRL).

What is TRL's and what is ours in one RL step:
  TRL: prompt sampling (``RepeatSampler``), generation (``model.generate``), reward bookkeeping, the shuffle and
  split of the rollout into micro-batches, the training forward (``_get_per_token_logps_and_entropies``: fused LM
  head at the sampling temperature, differentiable entropy), AdamW, grad clipping, checkpoints.
  Ours: prompt token ids (``_tokenize_prompts``: the same ids as pocket), rewards (the task's exact verifier),
  old log-probs and the official entropy (one eval-mode forward after generation; the same forward's entropy at the
  sampling temperature is the old entropy of a method that ``needs_old_entropy``), ``method.advantages`` (B,T),
  the selection plan per mini-batch (``needs_global_plan``), and the loss: ``method.policy_loss`` on TRL's (B,T)
  log-probs, times ``method.micro_batch_weight`` so the micro-batches of one optimizer step sum to the mini-batch
  aggregate (GRPOTrainer declares its loss already scaled for gradient accumulation: transformers adds no factor).
Differences from TRL's own GRPO: no reward scaling or group std epsilon of TRL (the method's estimator decides),
TRL's ``loss_type``/``epsilon``/``beta``/entropy settings unused, no telemetry, no model card.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from harness.kernel import ops

LOSS_KEYS = ("clipfrac", "ppo_kl", "ppo_kl_abs", "entropy/token_mean")  # token-weighted over the step, as pocket


def task_reward(task, problems: list[dict], decode):
    """A TRL reward function: the task's exact verifier on the decoded response (``decode``: the pocket adapter's,
    EOS and padding dropped), problems looked up by the dataset's ``problem`` column."""

    def verifier(prompts, completions, completion_ids, problem, **_):
        return [float(task.verify(decode(ids), problems[int(i)])) for ids, i in zip(completion_ids, problem)]

    return verifier


class HarnessGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages and loss are ``method``'s. ``on_rl_step_end(trainer, row, control)`` is
    called once per RL step, after its last optimizer step, with the step's metrics row."""

    def __init__(
        self, *args, method, tokenizer, updates_per_rollout: int, seed: int, on_rl_step_end, on_checkpoint, **kwargs
    ):
        self.method = method
        self.tok = tokenizer
        self.updates_per_rollout = int(updates_per_rollout)
        self.run_seed = int(seed)
        self.on_rl_step_end = on_rl_step_end
        self.on_checkpoint = on_checkpoint
        self.prev_entropy = None
        self.timing = {"rollout_s": 0.0, "score_s": 0.0, "update_s": 0.0, "eval_s": 0.0}
        self.rl_step = 0
        self.method_generator = None
        self._row: dict = {}
        self._sums: dict = {}
        self._grad_norms: list[float] = []
        self._rollout_end = 0.0
        self.last_rollout = None  # (input_ids, attention_mask, T, mask, per-response entropy) for entropy_after_update
        super().__init__(*args, **kwargs)
        if self.accelerator.num_processes != 1:  # advantages and metrics here read the whole rollout in one process
            raise RuntimeError(
                f"backend: trl trains in one process; this one was launched with {self.accelerator.num_processes} "
                f"(accelerate/torchrun). Run `harness train` directly, or use backend: openrlhf for several GPUs"
            )
        self.add_callback(_RLStepBoundary(self))

    # -- no network, no model card ------------------------------------------------------------------------------
    def _send_telemetry(self):
        """TRL pings the Hub on construction; a research harness does not."""

    def create_model_card(self, *args, **kwargs):
        """No README model card in the checkpoints folder: the run directory documents the run."""

    def _save_checkpoint(self, model, trial):
        """transformers' checkpoint, then ``on_checkpoint(trainer, folder)`` (the harness state, written last)."""
        super()._save_checkpoint(model, trial)
        self.on_checkpoint(self, Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}")

    # -- rollout -------------------------------------------------------------------------------------------------
    def _tokenize_prompts(self, prompts: list):
        """The pocket adapter's prompt ids (BOS, chat template when the task asks for it): pocket's exact tokens."""
        return [self.tok.encode_prompt(p) for p in prompts], None, {}

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        t0 = time.time()
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.timing["score_s"] += time.time() - t0
        self._scores = rewards[:, 0].detach().float().cpu()
        self._groups = [x["problem"] for x in inputs]
        return rewards

    def _generate_and_score_completions(self, inputs):
        """TRL's rollout, then ours: old log-probs and T=1 entropy (eval mode), rollout metrics, advantages."""
        t0, score0 = time.time(), self.timing["score_s"]
        out = super()._generate_and_score_completions(inputs)
        if not self.model.training:  # never used: the harness evaluates with its own sampler (loop.py)
            return out
        self.rl_step = self.state.global_step // self.updates_per_rollout + 1
        n = self.num_generations
        mask = out["completion_mask"].float()
        if "tool_mask" in out:
            mask = mask * out["tool_mask"].float()
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        att = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        T = out["completion_ids"].shape[1]
        old_lp, ent, *old_ent = self.rollout_logprobs(ids, att, T, self.method.needs_old_entropy)
        scores, B = self._scores, mask.shape[0]
        group_ids = torch.arange(B) // n
        problems = torch.tensor([int(p) for p in self._groups]).view(-1, n)
        if not bool((problems == problems[:, :1]).all()):
            raise RuntimeError("TRL's rollout order changed: the responses of one prompt are not consecutive")
        row = {"reward/mean": float(scores.mean()), "rollout/batches": 1, "rollout/kept_groups": B // n}
        row["reward/train_batch"] = row["reward/mean"]
        per_resp = ops.masked_mean(ent, mask, dim=-1)
        row["entropy"] = float(per_resp.mean())
        row["entropy/rollout_token_mean"] = float(ops.masked_mean(ent, mask))
        row["rollout/neg_logprob"] = float(-ops.masked_mean(old_lp, mask))
        if self.prev_entropy is not None:
            row["entropy/delta"] = row["entropy"] - self.prev_entropy
        self.prev_entropy = row["entropy"]
        row["response/length"] = float(mask.sum(-1).mean())
        extras = {"entropy": ent.detach().cpu()} if "entropy" in self.method.estimator_extras() else {}
        adv = self.method.advantages(scores, group_ids, mask.cpu(), **extras).to(mask.device)
        cov = ops.token_covariance(adv, old_lp, mask)[mask.bool()]
        row["cov/term"] = float(cov.mean())
        row.update(ops.covariance_groups(cov.cpu()))
        out["advantages"], out["old_per_token_logps"] = adv, old_lp
        if old_ent:  # split and shuffled with the other (B, T) tensors of the rollout
            out["harness_old_entropy"] = old_ent[0]
        self.last_rollout = (ids, att, T, mask, per_resp)
        self.begin_updates(self.rl_step, row)
        now = time.time()
        self.timing["rollout_s"] += now - t0 - (self.timing["score_s"] - score0)
        self._rollout_end = now
        return out

    @torch.no_grad()
    def rollout_logprobs(self, ids, att, T: int, at_temperature: bool = False):
        """(old log-probs at the sampling temperature, official entropy), eval mode, 0 on padding: TRL's fused-head
        forward, the loss's own (at T=1 it gives both). ``at_temperature``: also the token entropy at the sampling
        temperature (the old entropy of a method that ``needs_old_entropy``)."""
        with _eval_mode(self.model):
            lp, ent_t, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, att, T, batch_size=self.args.per_device_train_batch_size, compute_entropy=True
            )
            ent = self._entropy_at_t1(ids, att, T) if self.temperature != 1.0 else ent_t
        mask = att[:, -T:].to(lp.dtype)
        out = (lp.float() * mask, ent.float() * mask)
        return (*out, ent_t.float() * mask) if at_temperature else out

    @torch.no_grad()
    def official_entropy(self, ids, att, T: int) -> torch.Tensor:
        """The official entropy metric per token (eval mode, T=1), 0 on padding."""
        with _eval_mode(self.model):
            if self.temperature == 1.0:
                _, ent, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, att, T, batch_size=self.args.per_device_train_batch_size, compute_entropy=True
                )
            else:
                ent = self._entropy_at_t1(ids, att, T)
        return ent.float() * att[:, -T:].float()

    def _entropy_at_t1(self, ids, att, T: int) -> torch.Tensor:
        """Token entropy of the response positions at T=1 from the model's plain forward, in micro-batches (the
        fused head divides by the sampling temperature)."""
        parts, mb = [], self.args.per_device_train_batch_size
        for s in range(0, ids.shape[0], mb):
            logits = self.model(input_ids=ids[s : s + mb], attention_mask=att[s : s + mb], use_cache=False).logits
            parts.append(ops.entropy_from_logits(logits[:, -T - 1 : -1].float()))
        return torch.cat(parts)

    def begin_updates(self, step: int, row: dict) -> None:
        """Start an RL step's updates: its row, the method's generator (seed, step) and empty accumulators."""
        from harness.backends.pocket.trainer import make_generator

        self.rl_step = step
        self._row = dict(row)
        self._sums, self._grad_norms = {"tokens": 0.0, "selected": 0.0}, []
        self.method_generator = make_generator(self.run_seed, step, "method")

    # -- updates -------------------------------------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch):
        """TRL's buffered micro-batch, plus, at the first micro-batch of each optimizer step, every micro-batch's
        share of the mini-batch aggregate and (``needs_global_plan``) its slice of the mini-batch's plan."""
        inputs = super()._prepare_inputs(generation_batch)
        if self.model.training:
            k = self._step % self.args.steps_per_generation
            if k % self.args.gradient_accumulation_steps == 0:
                self.plan_mini_batch(self._buffered_inputs[k : k + self.args.gradient_accumulation_steps])
        return inputs

    def plan_mini_batch(self, chunks: list[dict]) -> None:
        """Attach ``harness_weight`` (and ``harness_selected``) to each micro-batch dict of one mini-batch; the method's
        ``begin_mini_batch`` with the mini-batch's mask."""
        m = self.method
        masks = [_loss_mask(c) for c in chunks]
        mini_mask = torch.cat(masks)
        for c, mk in zip(chunks, masks):
            c["harness_weight"] = m.micro_batch_weight(mk, mini_mask)
        m.begin_mini_batch(mini_mask)
        if not m.needs_global_plan:
            return
        with torch.no_grad():
            parts = [self._token_logprobs(self.model, c, m.needs_entropy) for c in chunks]
        lp = torch.cat([p[0] for p in parts])
        ent = torch.cat([p[1] for p in parts]) if m.needs_entropy else None
        old = torch.cat([c["old_per_token_logps"] for c in chunks])
        adv = torch.cat([c["advantages"] for c in chunks])
        plan = m.selection_plan(lp, old, adv, mini_mask, entropy=ent, generator=self.method_generator)
        start = 0
        for c, mk in zip(chunks, masks):
            c["harness_selected"] = None if plan is None else plan[start : start + mk.shape[0]]
            start += mk.shape[0]

    def _token_logprobs(self, model, inputs: dict, with_entropy: bool):
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        lp, ent, _ = self._get_per_token_logps_and_entropies(
            model, ids, att, inputs["completion_ids"].shape[1], compute_entropy=with_entropy
        )
        return lp, ent

    def _compute_loss(self, model, inputs):
        """``method.policy_loss`` on TRL's training forward, weighted by the micro-batch's share of its mini-batch."""
        m = self.method
        mask = _loss_mask(inputs)
        lp, ent = self._token_logprobs(model, inputs, m.needs_entropy)
        extra = {"old_entropy": inputs["harness_old_entropy"]} if m.needs_old_entropy else {}
        out = m.policy_loss(
            lp,
            inputs["old_per_token_logps"],
            inputs["advantages"],
            mask,
            entropy=ent if m.needs_entropy else None,
            step=self.rl_step,
            generator=self.method_generator,
            selected=inputs.get("harness_selected"),
            **extra,
        )
        self._accumulate(out.metrics, float(mask.sum()))
        return out.loss * inputs.get("harness_weight", 1.0)

    def _accumulate(self, metrics: dict, n_tok: float) -> None:
        own, s = f"{self.method.name}/", self._sums
        s["tokens"] += n_tok
        s["selected"] += metrics.get("selected/count", 0.0)
        for k, v in metrics.items():
            if k in LOSS_KEYS or k.startswith(own):
                s[k] = s.get(k, 0.0) + v * n_tok

    def _get_grad_norm(self, model, grad_norm=None):
        gn = super()._get_grad_norm(model, grad_norm=grad_norm)
        value = float(gn)
        if not math.isfinite(value):
            raise FloatingPointError(
                f"method {self.method.name}: non-finite gradient norm ({value}) at step {self.rl_step}"
            )
        self._grad_norms.append(value)
        return gn

    def update_metrics(self) -> dict:
        """The loss diagnostics of the RL step so far: token-weighted means, selected count and fraction, grad norm."""
        s = dict(self._sums)
        tokens, selected = s.pop("tokens"), s.pop("selected")
        out = {k: v / max(tokens, 1.0) for k, v in s.items()}
        out["selected/count"] = selected
        out["selected/frac"] = selected / max(tokens, 1.0)
        if self._grad_norms:
            out["grad_norm"] = sum(self._grad_norms) / len(self._grad_norms)
        return out

    def end_rl_step(self, control) -> None:
        row = {"step": self.rl_step, **self._row, **self.update_metrics()}
        row["lr"] = float(self.optimizer.param_groups[0]["lr"])
        self.timing["update_s"] += time.time() - self._rollout_end
        self._metrics["train"].clear()  # TRL's own metric lists (never logged here) would grow every step
        self.on_rl_step_end(self, row, control)

    def entropy_after_update(self) -> dict:
        """The official entropy of the rollout just trained on, with the updated weights (pocket's
        ``train.entropy_after_update``): ``entropy/after_update`` and ``entropy/update_delta``."""
        ids, att, T, mask, before = self.last_rollout
        after = ops.masked_mean(self.official_entropy(ids, att, T), mask, dim=-1)
        return {"entropy/after_update": float(after.mean()), "entropy/update_delta": float((after - before).mean())}


@contextmanager
def _eval_mode(model):
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def _loss_mask(inputs: dict) -> torch.Tensor:
    mask = inputs["completion_mask"].float()
    return mask * inputs["tool_mask"].float() if "tool_mask" in inputs else mask


class _RLStepBoundary(TrainerCallback):
    """Calls ``trainer.end_rl_step`` after the last optimizer step of each RL step."""

    def __init__(self, trainer: HarnessGRPOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.trainer.updates_per_rollout == 0:
            self.trainer.end_rl_step(control)
        return control
