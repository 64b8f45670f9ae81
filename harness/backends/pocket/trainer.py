"""The pocket RL loop: rollout -> verifier rewards -> method advantages -> several PPO mini-batch updates.

One step (docs/pocket.md has the full picture):
  1. ``prompts_per_step`` prompts x ``samples_per_prompt`` samples at ``train.temperature`` (KV cache).
  2. Exact-verifier rewards. Optional DAPO dynamic filtering drops groups whose rewards are all equal and
     draws more rollout batches (up to ``max_gen_batches``) to refill the step.
  3. Eval-mode forward: old log-probs and the official entropy metric (T=1, token mean per response, then
     mean over responses). The estimator's extras: the rollout's token entropy, and the log-probs of the
     method's auxiliary model (PRIME's implicit PRM, trained online) and of its frozen reference.
  4. ``method.advantages``; the batch is shuffled and split into ``updates_per_rollout`` mini-batches, each an
     AdamW step (grad-norm clip) over micro-batches weighted by ``ops.micro_batch_weight`` (token-mean: an exact
     token mean; the official code weights by sequence count). A method that ``needs_global_plan`` gets one
     ``selection_plan`` per mini-batch.
  5. ``method.on_step_end(row)`` with the step's metrics row; the method's ``state_dict`` is checkpointed.
Every random draw comes from a generator seeded by (seed, step, purpose), so a resumed run replays exactly.
"""

from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.io import (
    StopRequested,
    append_jsonl,
    atomic_save_torch,
    atomic_write_json,
    json_row,
    jsonl_lines,
    read_jsonl,
    signals_interrupt,
    signals_stop_flag,
    write_jsonl,
)
from harness.kernel import correction as rollout_fix
from harness.kernel import ops
from harness.run import preempt
from harness.run.config import RunConfig
from harness.run.lineage import foreign_checkpoint, lineage
from harness.run.metrics import (
    ENTROPY,
    ENTROPY_AFTER_UPDATE,
    ENTROPY_DELTA,
    ENTROPY_GENERATED,
    ENTROPY_UPDATE_DELTA,
    RESPONSE_LENGTH,
    REWARD_MEAN,
    STEP,
    UPDATE_SKIPPED,
    add_eval,
)
from harness.run.records import RunResult, peak_rss_mb, task_eval_doc, trained_record, write_step_eval
from harness.run.tracking import CHECKPOINT_KEY, Trackers

from . import models
from .generate import Batch, concat_batches, response_logits, sample_problems, score_responses, token_logprobs
from .tasks import make_task
from .tokenizer import TokenizerAdapter, build_char_tokenizer

CKPT = "checkpoints/latest.pt"
# per-step random streams: (seed, step, purpose) -> independent generator
PURPOSES = {"prompts": 1, "rollout": 2, "shuffle": 3, "method": 4, "eval": 5}
_LOSS_KEYS = ("clipfrac", "ppo_kl", "ppo_kl_abs", "entropy/token_mean", *rollout_fix.METRICS)
_COUNT_KEYS = ("selected/below_floor",)  # summed over the step's micro-batches, like selected/count


class CheckpointUnreadable(Exception):
    """A torn or corrupt checkpoint, or a file that is not a pocket checkpoint (moved aside, never trusted)."""


def read_checkpoint(path: Path, device="cpu", mmap: bool = False) -> dict:
    """The pocket checkpoint at ``path``; ``CheckpointUnreadable`` when it cannot be one (``mmap``: for a look at
    its records without reading the weights)."""
    try:
        blob = torch.load(path, map_location=device, weights_only=False, mmap=mmap)
    except Exception as e:  # noqa: BLE001 - torn zip, bad pickle, I/O error: all mean "cannot resume from it"
        raise CheckpointUnreadable(f"{type(e).__name__}: {str(e)[:120]}") from None
    if not isinstance(blob, dict) or "model" not in blob or "step" not in blob:
        raise CheckpointUnreadable("not a pocket trainer checkpoint")
    return blob


def resume_problem(cfg: RunConfig, blob: dict, path: Path, old_threads: int | None = None) -> str | None:
    """Why this run must not continue from the checkpoint ``blob`` (None when it may): another run's lineage
    (a checkpoint written before lineages were recorded: another run id), a checkpoint past this run's last step,
    or another CPU thread count (threads change float reductions: two trajectories under one run id)."""
    step = int(blob["step"])
    foreign = foreign_checkpoint(cfg, blob.get("lineage"), blob.get("run_id"), path, path.parent.parent)
    if foreign:
        return foreign
    if step > cfg.train.steps:
        return (
            f"checkpoint {path} is at step {step}, past this run's {cfg.train.steps} steps (train.steps); resuming "
            f"would not train this run. Use train.steps >= {step}, or another --run-dir"
        )
    threads = blob.get("threads", old_threads)
    if threads is not None and int(threads) != cfg.train.threads:
        return (
            f"train.threads: this run was trained with {threads} thread(s) up to step {step} ({path}); resuming "
            f"with {cfg.train.threads} would change its numbers under the same run id. Resume with "
            f"train.threads={threads}, or use another --run-dir"
        )
    return None


def check_resume(cfg: RunConfig, run_dir: Path, old_config: dict | None = None) -> None:
    """Refuse (``ValueError``), before anything in ``run_dir`` is written, a checkpoint this run must not continue.
    An unreadable checkpoint is no refusal: the trainer moves it aside and starts over."""
    path = Path(run_dir) / CKPT
    if not path.is_file():
        return
    try:
        blob = read_checkpoint(path, mmap=True)
    except CheckpointUnreadable:
        return
    old_threads = ((old_config or {}).get("train") or {}).get("threads")
    problem = resume_problem(cfg, blob, path, old_threads if isinstance(old_threads, int) else None)
    if problem:
        raise ValueError(problem)


OPTIMIZERS = ("adamw", "adamw_b1_0", "sgd")


def make_optimizer(train, params, fused: bool) -> torch.optim.Optimizer:
    """``train.optimizer``: adamw (betas 0.9, 0.999: the default), adamw_b1_0 (no momentum: each step follows
    its own batch's gradient, rescaled per parameter) or sgd (plain gradient steps, no momentum: the update whose
    first-order entropy change Theorem 1 describes for tabular logits)."""
    if train.optimizer == "sgd":
        return torch.optim.SGD(params, lr=train.lr, momentum=0.0, weight_decay=train.weight_decay)
    betas = (0.0, 0.999) if train.optimizer == "adamw_b1_0" else (0.9, 0.999)
    return torch.optim.AdamW(params, lr=train.lr, betas=betas, weight_decay=train.weight_decay, fused=fused)


def vanilla_covariance(adv: torch.Tensor, logp: torch.Tensor, entropy: torch.Tensor, mask: torch.Tensor) -> float:
    """``cov/vanilla``: token mean of Â·π(a)·(log π(a) + H), the one-sample estimate of Cov_{a~π}(log π(a),
    π(a)·A(a)) (the plain-gradient form of Theorem 1; ``cov/term`` is the natural-gradient form). π(a) and
    log π(a) of the sampled token at the training temperature, H the state's T = 1 entropy."""
    valid = mask.bool()
    lp = logp.detach().float()
    term = adv.detach().float() * lp.exp() * (lp + entropy.detach().float())
    return float(term[valid].mean()) if bool(valid.any()) else float("nan")


def first_order_delta(before: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> float:
    """``cov/first_order``: −Cov_{a~π}(log π(a), z'(a) − z(a)) per state, from the logits z before and z' after
    the step's updates (the exact first-order entropy change of a softmax), averaged like the entropy metric
    (token mean per response, mean over responses), so it estimates ``entropy/update_delta``."""
    logp = torch.log_softmax(before, dim=-1)
    p = logp.exp()
    dz = after - before
    cov = (p * logp * dz).sum(-1) - (p * logp).sum(-1) * (p * dz).sum(-1)
    return float(ops.masked_mean(-cov, mask.float(), dim=-1).mean())


def entropy_change(ent_after: torch.Tensor, mask: torch.Tensor, before: torch.Tensor) -> dict:
    """``entropy/after_update`` (the official metric of the trained batch with the updated weights) and
    ``entropy/update_delta`` (minus the per-response entropy ``before`` the update)."""
    after = ops.masked_mean(ent_after, mask, dim=-1)
    return {ENTROPY_AFTER_UPDATE: float(after.mean()), ENTROPY_UPDATE_DELTA: float((after - before).mean())}


def make_generator(seed: int, step: int, purpose: str, device="cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + step * 7919 + PURPOSES[purpose] * 104_729) % (2**63))
    return g


@dataclass
class GenerateRequest:
    """One ``PocketTrainer._generate`` call that a plan (``rollout_plan``, ``eval_plan``) asks for; population
    training (population.py) answers the requests of many runs with one batched generation."""

    problems: list
    n: int
    temperature: float
    generator: torch.Generator | None
    options: dict = field(default_factory=dict)  # the other keyword arguments of ``_generate``


def run_plan(plan, answer):
    """Drive a plan generator: send it ``answer(request)`` for each request it yields; returns what it returns."""
    try:
        request = next(plan)
        while True:
            request = plan.send(answer(request))
    except StopIteration as done:
        return done.value


def add_loss_metrics(sums: dict, metrics: dict, n_tok: float, own: str) -> float:
    """Add one micro-batch's ``policy_loss`` metrics to the mini-batch sums (token-weighted means, the max
    |log-ratio|); returns its selected-token count."""
    for k, v in metrics.items():
        if k in _LOSS_KEYS or k.startswith(own):  # token-weighted means over the mini-batch
            sums[k] = sums.get(k, 0.0) + v * n_tok
        elif k in _COUNT_KEYS:
            sums[k] = sums.get(k, 0.0) + v
    if "log_ratio/max_abs" in metrics:
        sums["log_ratio/max_abs"] = max(sums.get("log_ratio/max_abs", 0.0), metrics["log_ratio/max_abs"])
    return metrics.get("selected/count", 0.0)


def update_metrics(sums: dict, tokens_total: float, sel_count: float, grad_norms: list) -> dict:
    """The step's update metrics from the mini-batch sums."""
    out = {k: v / max(tokens_total, 1.0) for k, v in sums.items() if k != "log_ratio/max_abs"}
    out.update({k: sums[k] for k in _COUNT_KEYS if k in sums})
    out["selected/count"] = sel_count
    out["selected/frac"] = sel_count / max(tokens_total, 1.0)
    out["grad_norm"] = sum(grad_norms) / max(len(grad_norms), 1)
    return out


def add_grads(acc: list, term, params: list, row: int | None = None) -> None:
    """Add d term / d params into ``acc`` (one tensor per parameter; row ``row`` of each when the parameters are
    a population's stacked leaves), leaving ``.grad`` and the graph as they are (the training backward follows)."""
    grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
    grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    if row is not None:
        grads = [g[row] for g in grads]
    if acc:
        for a, g in zip(acc, grads):
            a += g
    else:
        acc.extend(grads)


def grad_norm(grads: list) -> float:
    """The L2 norm of a gradient given as one tensor per parameter."""
    return float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))


def nonfinite_gradient(method: str, gn: float, step: int, sums: dict) -> FloatingPointError:
    return FloatingPointError(
        f"method {method}: non-finite gradient norm ({gn}) at step {step}; largest |log-ratio| on a "
        f"valid token of the mini-batch {sums.get('log_ratio/max_abs', float('nan')):.4g}"
    )


def _readable_rows(path: Path) -> tuple[list[dict], list[int]]:
    """The JSON-object lines of a JSONL file and the numbers of the lines that are not (torn, garbled)."""
    if not path.exists():
        return [], []
    rows, bad = [], []
    for ln, obj in jsonl_lines(path, on_bad=lambda ln, why: bad.append(ln)):
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            bad.append(ln)
    return rows, sorted(bad)


class PocketTrainer:
    def __init__(self, cfg: RunConfig, run_dir: str | Path, log=print):
        self.cfg, self.run_dir, self.log = cfg, Path(run_dir), log
        self.timing = {"rollout_s": 0.0, "score_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "warm_start_s": 0.0}
        self.prev_entropy = None
        self.start_step = 0
        self.stop = {}
        self.rows: list[dict] = []  # metrics rows of steps 1..current, as metrics.jsonl holds them

    # ------------------------------------------------------------------------------------ set-up
    def setup(self) -> None:
        import harness

        cfg = self.cfg
        torch.set_num_threads(cfg.train.threads)
        torch.manual_seed(cfg.seed)
        dev = cfg.train.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        if dev.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"train.device: {dev!r} but torch sees no CUDA device here; use cpu or auto")
        self.device = torch.device(dev)
        self.method = harness.get_method(cfg.method_name, **cfg.method_hparams)
        self.task = make_task(cfg.task.name, cfg.task.test_size, cfg.task.options)
        self.warm_info = None
        # read (not just find) the checkpoint first: only a usable one holds the weights that replace the warm start
        self.resume_blob = self._load_checkpoint()
        if models.is_pocket(cfg.model.name):
            self.tok = TokenizerAdapter(build_char_tokenizer())
            self.model = models.build_pocket_model(cfg.model.name, len(self.tok), cfg.seed)
            if cfg.model.warm_start.enabled != "false" and self.resume_blob is None:
                from .warmstart import load_or_train, restore

                t0 = time.time()
                state, self.warm_info = load_or_train(cfg, self.tok, self.task, log=self.log)
                self.timing["warm_start_s"] = time.time() - t0
                restore(self.model, state, self.warm_info)
        else:
            if cfg.model.warm_start.enabled == "true":
                raise ValueError(
                    "model.warm_start.enabled: true only applies to pocket sizes; "
                    f"{cfg.model.name!r} is a pretrained checkpoint (use auto or false)"
                )
            from .pretrained import load_pretrained, make_tokenizer

            model, hf_tok = load_pretrained(cfg.model.name, cfg.model.dtype)  # GGUF file, HF dir or hub id
            self.model, self.tok = model, make_tokenizer(hf_tok, cfg.task)  # chat template, stop ids
        self.model.to(self.device)
        self.model.config.use_cache = True
        # fused AdamW: one kernel per tensor instead of ~10 (same update up to float rounding; 2.6x faster here)
        fused = self.device.type in ("cpu", "cuda")
        self.opt = make_optimizer(cfg.train, self.model.parameters(), fused)
        self.aux = self.method.auxiliary_model()
        if self.aux is not None:
            # the auxiliary model and its frozen reference both start from the (warm-started) policy (PRIME)
            self.aux_model = copy.deepcopy(self.model)
            self.ref = copy.deepcopy(self.model).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
            self.aux_opt = torch.optim.AdamW(self.aux_model.parameters(), lr=self.aux.lr, weight_decay=0.0, fused=fused)
        self.trackers = Trackers.open(cfg, self.run_dir, self.resume_blob)  # a fresh tracker run unless resuming

    # ------------------------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, step: int) -> None:
        blob = {
            "step": step,
            "model": self.model.state_dict(),
            "opt": self.opt.state_dict(),
            "prev_entropy": self.prev_entropy,
            "timing": self.timing,
            "run_id": self.cfg.run_id(),
            "lineage": lineage(self.cfg),
            "warm_start": self.warm_info,
            "method_state": self.method.state_dict(),
            "threads": self.cfg.train.threads,
            "metrics": list(self.rows),  # rows of steps 1..step: what metrics.jsonl holds again on resume
            CHECKPOINT_KEY: self.trackers.checkpoint_state(),  # the attempt resuming from here reuses its tracker run
        }
        if self.aux is not None:  # keys "<name>", "<name>_opt", "ref" (PRIME: prm, prm_opt, as before)
            blob.update(
                {
                    self.aux.name: self.aux_model.state_dict(),
                    f"{self.aux.name}_opt": self.aux_opt.state_dict(),
                    "ref": self.ref.state_dict(),
                }
            )
        atomic_save_torch(self.run_dir / CKPT, blob)

    def _load_checkpoint(self) -> dict | None:
        """The checkpoint to resume from, or None (none, or unreadable: moved aside, the run starts over from its
        warm start); another run's checkpoint is refused."""
        path = self.run_dir / CKPT
        if not path.exists():
            return None
        try:
            blob = read_checkpoint(path, self.device)
        except CheckpointUnreadable as e:  # torn/corrupt file: keep it aside, train from the start (no data lost)
            aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(path, aside)
            self.log(f"warning: checkpoint {path} is unreadable ({e}); moved to {aside}, training from step 0")
            return None
        problem = resume_problem(self.cfg, blob, path)
        if problem:
            raise ValueError(problem)
        return blob

    def maybe_resume(self) -> None:
        blob, self.resume_blob = self.resume_blob, None
        if blob is None:
            self._restore_metrics(None)
            return
        path = self.run_dir / CKPT
        try:
            self.model.load_state_dict(blob["model"])
            self.opt.load_state_dict(blob["opt"])
            if self.aux is not None:
                self.aux_model.load_state_dict(blob[self.aux.name])
                self.ref.load_state_dict(blob["ref"])  # the frozen warm-started policy, not this process's init
                self.aux_opt.load_state_dict(blob[f"{self.aux.name}_opt"])
        except (RuntimeError, KeyError, ValueError) as e:  # e.g. a checkpoint of another model size
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(
                f"checkpoint {path} does not fit this run's model {self.cfg.model.name} ({first[:160]}); move it "
                f"out of {self.run_dir} or use another --run-dir"
            ) from None
        self.method.load_state_dict(blob.get("method_state", {}))
        self.start_step = int(blob["step"])
        self.prev_entropy = blob["prev_entropy"]
        self.timing.update(blob.get("timing", {}))
        self.warm_info = blob.get("warm_start", self.warm_info)
        self._restore_metrics(blob)
        self.log(f"resumed from {path} at step {self.start_step}")

    def _restore_metrics(self, blob: dict | None) -> None:
        """Make metrics.jsonl hold exactly one row per step up to the checkpoint (none without one): the rows the
        checkpoint carries, so a torn, garbled or cut row of a checkpointed step comes back, rows of steps that
        are trained again go, and a deleted checkpoint cannot leave rows that the retrained steps would repeat.
        A checkpoint from before rows were carried keeps the file's readable rows up to its step."""
        mpath = self.run_dir / "metrics.jsonl"
        rows, bad = _readable_rows(mpath)
        if blob is not None and isinstance(blob.get("metrics"), list):
            want = [dict(r) for r in blob["metrics"]]
        else:
            last: dict[int, dict] = {}
            for r in rows:
                if isinstance(r.get(STEP), int) and 0 < r[STEP] <= self.start_step:
                    last[r[STEP]] = r  # a repeated step (older runs): its latest row
            want = [last[k] for k in sorted(last)]
            have = set(last)
            lost = [k for k in range(1, self.start_step + 1) if k not in have]
            if lost:
                self.log(
                    f"warning: metrics.jsonl has no row for step(s) {', '.join(map(str, lost[:8]))} up to the "
                    f"checkpoint (lost with a torn or cut file); the weights are resumed, those rows stay missing"
                )
        if bad:
            self.log(
                f"warning: {mpath} line(s) {', '.join(map(str, bad[:8]))} are not JSON rows; dropped (every step "
                f"up to the checkpoint keeps its row, later steps are trained again)"
            )
        dropped = sum(1 for r in rows if not isinstance(r.get(STEP), int) or r[STEP] > self.start_step)
        if dropped:
            self.log(f"{mpath}: {dropped} row(s) after step {self.start_step} dropped: those steps are trained again")
        if rows != want or bad:
            write_jsonl(mpath, want)
        self.rows = want

    # ------------------------------------------------------------------------------------ rollout
    def _generate(
        self, problems, n, temperature, generator, greedy=False, top_p=1.0, max_new_tokens=None, with_logprobs=False
    ):
        return sample_problems(
            self.model,
            self.tok,
            problems,
            n,
            temperature,
            generator,
            max_new_tokens=max_new_tokens or self.cfg.train.max_new_tokens,
            top_p=top_p,
            greedy=greedy,
            with_logprobs=with_logprobs,
            stop_strings=getattr(self.tok, "stop_strings", None),  # multi-token task.stop strings
        )

    def _score(self, batch: Batch, problems, n) -> torch.Tensor:
        return score_responses(batch, self.tok, self.task, problems, n)

    def _answer(self, request: GenerateRequest):
        return self._generate(request.problems, request.n, request.temperature, request.generator, **request.options)

    def rollout(self, step: int) -> dict:
        return run_plan(self.rollout_plan(step), self._answer)

    def rollout_plan(self, step: int):
        """``rollout`` as a generator: yields each generation (``GenerateRequest``), receives its Batch."""
        cfg = self.cfg.train
        n, want = cfg.samples_per_prompt, cfg.prompts_per_step
        gp = make_generator(self.cfg.seed, step, "prompts")
        gs = make_generator(self.cfg.seed, step, "rollout", self.device)
        kept_batches, kept_scores, kept_groups, all_scores, gen_entropy = [], [], 0, [], []
        for _ in range(cfg.max_gen_batches if cfg.dynamic_filtering else 1):
            idx = torch.randint(len(self.task.train), (want,), generator=gp).tolist()
            problems = [self.task.train[i] for i in idx]
            t0 = time.time()
            batch = yield GenerateRequest(problems, n, cfg.temperature, gs, {"with_logprobs": True})
            t1 = time.time()
            scores = self._score(batch, problems, n)
            self.timing["rollout_s"] += t1 - t0
            self.timing["score_s"] += time.time() - t1
            all_scores.append(scores)
            if batch.entropy is not None:  # every generated response, before filtering (the fast path records it)
                gen_entropy.append(ops.masked_mean(batch.entropy, batch.mask, dim=-1).cpu())
            groups = scores.view(want, n)
            keep = torch.ones(want, dtype=torch.bool)
            if cfg.dynamic_filtering:
                keep = groups.max(1).values != groups.min(1).values
                keep &= torch.cumsum(keep.long(), 0) <= want - kept_groups  # never more than the step needs
            rows = keep.repeat_interleave(n).nonzero().squeeze(-1)
            if len(rows):
                kept_batches.append(batch.index(rows.to(batch.input_ids.device)))
                kept_scores.append(scores[rows])
                kept_groups += int(keep.sum())
            if kept_groups >= want:
                break
        gen_scores = torch.cat(all_scores)
        out = {
            REWARD_MEAN: float(gen_scores.mean()),
            "rollout/batches": len(all_scores),
            "rollout/kept_groups": kept_groups,
        }
        if gen_entropy:  # the official entropy (T=1, token mean per response, mean over responses) of all generated
            out[ENTROPY_GENERATED] = float(torch.cat(gen_entropy).mean())
        if cfg.dynamic_filtering:
            out["filter/kept_frac"] = kept_groups / (want * len(all_scores))
        if not kept_batches:
            return {"metrics": out, "batch": None}
        batch = concat_batches(kept_batches, self.tok.pad_id).to(self.device)
        scores = torch.cat(kept_scores)
        group_ids = torch.arange(kept_groups).repeat_interleave(n)
        out["reward/train_batch"] = float(scores.mean())
        return {"metrics": out, "batch": batch, "scores": scores, "group_ids": group_ids}

    # ------------------------------------------------------------------------------------ one step
    def _logprobs_chunked(self, model, batch: Batch, temperature: float, with_entropy: bool, grad: bool = False):
        mb = self.cfg.train.micro_batch_size
        lps, ents = [], []
        with torch.set_grad_enabled(grad):
            for s in range(0, batch.input_ids.shape[0], mb):
                lp, ent = token_logprobs(model, batch.index(slice(s, s + mb)), temperature, with_entropy)
                lps.append(lp)
                ents.append(ent)
        return torch.cat(lps), (torch.cat(ents) if with_entropy else None)

    def _aux_update(self, batch: Batch, ref_lp, scores) -> float:
        """One optimizer step of the auxiliary model on its loss (a mean over responses: rows weight micro-batches)."""
        aux = self.aux
        self.aux_model.train()
        self.aux_opt.zero_grad(set_to_none=True)
        mb, B, total = self.cfg.train.micro_batch_size, batch.input_ids.shape[0], 0.0
        for s in range(0, B, mb):
            sl = slice(s, s + mb)
            sub = batch.index(sl)
            lp, _ = token_logprobs(self.aux_model, sub, self.cfg.train.temperature)
            loss = aux.loss(lp, ref_lp[sl], sub.mask, scores[sl].to(lp.device), beta=aux.beta)
            (loss * sub.input_ids.shape[0] / B).backward()
            total += float(loss.detach()) * sub.input_ids.shape[0] / B
        torch.nn.utils.clip_grad_norm_(
            self.aux_model.parameters(), aux.grad_clip if aux.grad_clip > 0 else float("inf")
        )
        self.aux_opt.step()
        return total

    def _estimator_extras(self, batch: Batch, ent, scores, metrics: dict) -> dict:
        """The (B,T) extras the method's estimator declares: rollout entropy, auxiliary-model log-probs."""
        wanted, extras, cfg = self.method.estimator_extras(), {}, self.cfg.train
        if "entropy" in wanted:
            extras["entropy"] = ent.cpu()
        if self.aux is not None:
            with torch.no_grad():
                ref_lp, _ = self._logprobs_chunked(self.ref, batch, cfg.temperature, False)
            if self.aux.update == "before":
                metrics[f"{self.aux.name}/loss"] = self._aux_update(batch, ref_lp, scores)
            self.aux_model.eval()
            with torch.no_grad():
                aux_lp, _ = self._logprobs_chunked(self.aux_model, batch, cfg.temperature, False)
            if self.aux.update == "after":
                metrics[f"{self.aux.name}/loss"] = self._aux_update(batch, ref_lp, scores)
            model_key, ref_key = self.aux.provides
            extras.update({model_key: aux_lp.cpu(), ref_key: ref_lp.cpu()})
        return extras

    def train_step(self, step: int) -> dict:
        cfg, m = self.cfg.train, self.method
        ro = self.rollout(step)
        metrics = dict(ro["metrics"])
        batch = ro["batch"]
        t0 = time.time()
        metrics["lr"] = self.opt.param_groups[0]["lr"]
        if batch is None:  # every group filtered out: nothing to learn from this step
            metrics[UPDATE_SKIPPED] = 1
            self.timing["update_s"] += time.time() - t0
            return metrics
        mask = batch.mask
        self.model.eval()
        # official entropy metric: eval mode, T=1, token-mean per response, then mean over responses.
        # The fast path took both from the sampling pass itself (same weights, eval mode): no second forward.
        if batch.logp is not None:
            old_lp, ent = batch.logp, batch.entropy
        else:
            with torch.no_grad():
                old_lp, ent = self._logprobs_chunked(self.model, batch, 1.0, True)
                if cfg.temperature != 1.0:
                    old_lp, _ = self._logprobs_chunked(self.model, batch, cfg.temperature, False)
        per_resp = self._rollout_metrics(mask, old_lp, ent, metrics)
        extras = self._estimator_extras(batch, ent, ro["scores"], metrics)
        adv = m.advantages(ro["scores"], ro["group_ids"], mask.cpu(), **extras).to(self.device)
        self._covariance_metrics(adv, old_lp, ent, mask, metrics)
        old_ent = self._old_entropy(batch, ent) if m.needs_old_entropy else None
        logits_before = self._response_logits(batch) if cfg.entropy_after_update else None
        metrics.update(self._update(step, batch, old_lp, adv, old_ent))
        if cfg.entropy_after_update:
            metrics.update(self._entropy_after_update(batch, per_resp))
            metrics["cov/first_order"] = first_order_delta(logits_before, self._response_logits(batch), mask)
        self.timing["update_s"] += time.time() - t0
        return metrics

    def _old_entropy(self, batch: Batch, ent_t1) -> torch.Tensor:
        """The behaviour policy's token entropy at the training temperature (``needs_old_entropy``): the T=1 entropy
        of the old-log-prob pass when the temperature is 1, else a no-grad eval-mode forward at the temperature."""
        if self.cfg.train.temperature == 1.0:
            return ent_t1
        with torch.no_grad():
            return self._logprobs_chunked(self.model, batch, self.cfg.train.temperature, True)[1]

    def _rollout_metrics(self, mask, old_lp, ent, metrics: dict) -> torch.Tensor:
        """The official entropy metric (and its change since the last step), the rollout's mean negative log-prob
        and response length into ``metrics``; returns the per-response entropy."""
        per_resp = ops.masked_mean(ent, mask, dim=-1)
        metrics[ENTROPY] = float(per_resp.mean())
        metrics["entropy/rollout_token_mean"] = float(ops.masked_mean(ent, mask))
        metrics["rollout/neg_logprob"] = float(-ops.masked_mean(old_lp, mask))
        if self.prev_entropy is not None:
            metrics[ENTROPY_DELTA] = metrics[ENTROPY] - self.prev_entropy
        self.prev_entropy = metrics[ENTROPY]
        metrics[RESPONSE_LENGTH] = float(mask.sum(-1).mean())
        return per_resp

    @staticmethod
    def _covariance_metrics(adv, old_lp, ent, mask, metrics: dict) -> None:
        """The batch covariance term over the rollout (old = current policy at the start of the step)."""
        cov = ops.token_covariance(adv, old_lp, mask)[mask.bool()]
        metrics["cov/term"] = float(cov.mean())
        metrics["cov/vanilla"] = vanilla_covariance(adv, old_lp, ent, mask)
        metrics.update(ops.covariance_groups(cov.cpu()))

    def _response_logits(self, batch: Batch) -> torch.Tensor:
        """(B, T, V) logits at T = 1 of the batch's response positions, eval mode, no grad, by micro-batch."""
        self.model.eval()
        mb = self.cfg.train.micro_batch_size
        with torch.no_grad():
            return torch.cat(
                [
                    response_logits(self.model, batch.index(slice(s, s + mb))).float()
                    for s in range(0, batch.input_ids.shape[0], mb)
                ]
            )

    def _entropy_after_update(self, batch: Batch, before: torch.Tensor) -> dict:
        """The official entropy metric of the batch just trained on, with the updated weights: the same states
        as ``entropy``, so ``entropy/update_delta`` is this step's update's effect alone (Theorem 1's ΔH)."""
        self.model.eval()
        with torch.no_grad():
            _, ent = self._logprobs_chunked(self.model, batch, 1.0, True)
        return entropy_change(ent, batch.mask, before)

    def _update(self, step: int, batch: Batch, old_lp, adv, old_ent=None) -> dict:
        cfg, m = self.cfg.train, self.method
        B = batch.input_ids.shape[0]
        g_shuffle = make_generator(self.cfg.seed, step, "shuffle")
        g_method = make_generator(self.cfg.seed, step, "method")
        perm = torch.randperm(B, generator=g_shuffle).to(self.device)
        use_plan = m.needs_global_plan
        sums, tokens_total, sel_count, grad_norms, extra = {}, 0.0, 0.0, [], {}
        self.model.train()
        minis = [rows for rows in torch.tensor_split(perm, cfg.updates_per_rollout) if len(rows)]
        rollout_lp = old_lp  # the sampling pass's: the rollout engine's log-probs (method.rollout_correction)
        if cfg.old_log_probs == "recompute":
            old_lp, old_ent = self._recomputed_old_log_probs(batch, old_lp, minis, old_ent)
        for i, mini_rows in enumerate(minis):
            mini = batch.index(mini_rows)
            mini_old, mini_adv = old_lp[mini_rows], adv[mini_rows]
            mini_old_ent = old_ent[mini_rows] if old_ent is not None else None
            m.begin_mini_batch(mini.mask)
            plan = None
            if use_plan:
                cur, cur_ent = self._logprobs_chunked(self.model, mini, cfg.temperature, m.needs_entropy)
                plan = m.selection_plan(cur, mini_old, mini_adv, mini.mask, entropy=cur_ent, generator=g_method)
            self.opt.zero_grad(set_to_none=True)
            penalty = [] if i == 0 else None  # the penalty's own gradient, on the first (on-policy) mini-batch
            n_tok, mini_sums, n_sel = self.accumulate_gradients(
                step,
                mini,
                mini_old,
                mini_adv,
                plan,
                g_method,
                penalty_grads=penalty,
                rollout=rollout_lp[mini_rows],
                mini_old_ent=mini_old_ent,
            )
            if penalty:
                extra["penalty/grad_norm"] = grad_norm(penalty)
            tokens_total += n_tok
            sel_count += n_sel
            for k, v in mini_sums.items():
                sums[k] = sums.get(k, 0.0) + v
            clip = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
            gn = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip))
            grad_norms.append(gn)
            if not math.isfinite(gn):
                raise nonfinite_gradient(m.name, gn, step, mini_sums)
            self.opt.step()
        return {**update_metrics(sums, tokens_total, sel_count, grad_norms), **extra}

    def _recomputed_old_log_probs(self, batch: Batch, sampled, minis, old_ent=None):
        """``train.old_log_probs: recompute``: (old log-probs, old entropy or None) from a no-grad forward of every
        micro-batch the update will train on, with the training forward's exact shapes and mode, before the first
        update: on the first mini-batch log r is then exactly 0 (the sampling pass's log-probs differ by rounding
        noise), and a method's old entropy (``needs_old_entropy``) equals the first mini-batch's entropy exactly."""
        cfg, m = self.cfg.train, self.method
        out = sampled.clone()
        ent_out = old_ent.clone() if old_ent is not None else None
        with torch.no_grad():
            for rows in minis:
                mini = batch.index(rows)
                for s in range(0, mini.input_ids.shape[0], cfg.micro_batch_size):
                    lp, ent = token_logprobs(
                        self.model,
                        mini.index(slice(s, s + cfg.micro_batch_size)),
                        cfg.temperature,
                        m.needs_entropy or ent_out is not None,
                    )
                    out[rows[s : s + cfg.micro_batch_size]] = lp
                    if ent_out is not None:
                        ent_out[rows[s : s + cfg.micro_batch_size]] = ent
        return out, ent_out

    def accumulate_gradients(
        self,
        step,
        mini: Batch,
        mini_old,
        mini_adv,
        plan,
        generator,
        penalty_grads=None,
        rollout=None,
        mini_old_ent=None,
    ):
        """Backward of one mini-batch's loss over its micro-batches; returns (tokens, metric sums, selected). With
        a list ``penalty_grads``, the gradient of the method's penalty term alone is summed into it (one tensor per
        parameter; left empty for a method without a penalty) without touching the parameters' ``.grad``.
        ``rollout``: the sampling pass's log-probs of the mini-batch (``policy_loss``'s ``rollout_log_probs``);
        ``mini_old_ent``: the mini-batch's old entropy, passed as ``old_entropy=`` (``needs_old_entropy``)."""

        cfg, m = self.cfg.train, self.method
        sums, n_tokens, n_sel, own = {}, 0.0, 0.0, f"{m.name}/"
        mini_agg = m.aggregation_mask(mini.mask, mini_old, rollout) if rollout is not None else mini.mask
        for s in range(0, mini.input_ids.shape[0], cfg.micro_batch_size):
            sl = slice(s, s + cfg.micro_batch_size)
            micro = mini.index(sl)
            lp, ent = token_logprobs(self.model, micro, cfg.temperature, with_entropy=m.needs_entropy)
            extra = {"old_entropy": mini_old_ent[sl]} if mini_old_ent is not None else {}
            out = m.policy_loss(
                lp,
                mini_old[sl],
                mini_adv[sl],
                micro.mask,
                entropy=ent,
                step=step,
                generator=generator,
                selected=plan[sl] if plan is not None else None,
                rollout_log_probs=rollout[sl] if rollout is not None else None,
                **extra,
            )
            micro_agg = m.aggregation_mask(micro.mask, mini_old[sl], rollout[sl]) if rollout is not None else micro.mask
            weight = ops.micro_batch_weight(m.agg, micro_agg, mini_agg)
            if penalty_grads is not None and out.penalty is not None:
                add_grads(penalty_grads, out.penalty * weight, [p for p in self.model.parameters() if p.requires_grad])
            (out.loss * weight).backward()
            n_tok = float(micro.mask.sum())
            n_tokens += n_tok
            n_sel += add_loss_metrics(sums, out.metrics, n_tok, own)
        return n_tokens, sums, n_sel

    # ------------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, step: int) -> dict:
        return run_plan(self.eval_plan(step), self._answer)

    def eval_plan(self, step: int):
        """``evaluate`` as a generator: yields each generation (``GenerateRequest``), receives its Batch."""
        from .generate import eval_metrics

        ec, cfg = self.cfg.eval, self.cfg
        t0 = time.time()
        problems = self.task.test[: ec.max_problems] if ec.max_problems else self.task.test
        k = ec.n_samples
        max_new = ec.max_new_tokens or cfg.train.max_new_tokens
        g = make_generator(cfg.seed, step, "eval", self.device)
        options = {"top_p": ec.top_p, "max_new_tokens": max_new, "greedy": ec.temperature == 0}
        b = yield GenerateRequest(problems, k, ec.temperature, g, options)
        metrics, sc = eval_metrics(b, self.tok, self.task, problems, k)
        if ec.greedy:
            bg = yield GenerateRequest(problems, 1, 1.0, None, {"greedy": True, "max_new_tokens": max_new})
            metrics["greedy"] = float(self._score(bg, problems, 1).mean())
        doc = task_eval_doc(cfg, step, len(problems), metrics)
        write_step_eval(self.run_dir, doc)
        # per-problem grades (rows: problems in test-split order, columns: samples) for paired tests across steps
        atomic_write_json(
            self.run_dir / "eval" / f"step_{step}.per_problem.json", {"step": step, "correct": sc.tolist()}
        )
        self.timing["eval_s"] += time.time() - t0
        return doc

    # ------------------------------------------------------------------------------------ main loop
    def run(self) -> RunResult:
        from tqdm.auto import tqdm

        cfg = self.cfg
        steps, ev_every = cfg.train.steps, cfg.eval.every
        last_eval = None
        try:  # nothing to save during set-up: Ctrl-C / SIGTERM stops it at once (the warm start too)
            with signals_interrupt():
                self.setup()
                self.maybe_resume()
                if self.start_step == 0 and ev_every > 0:
                    last_eval = self.evaluate(0)
                    self.trackers.log_eval(last_eval)
        except KeyboardInterrupt as e:
            self.log(
                f"interrupted during set-up ({e or 'SIGINT'}), before step {self.start_step + 1}; nothing trained. "
                f"Run the same command again to resume."
            )
            raise
        t_start = time.time()
        bar = tqdm(
            total=steps,
            initial=self.start_step,
            desc=f"{cfg.method_name}/{cfg.model.name}",
            leave=False,
            disable=not cfg.logging.progress,
            mininterval=0.5,
            dynamic_ncols=True,
        )
        step = self.start_step
        try:
            with signals_stop_flag(self.stop):
                while step < steps:
                    if not self.stop and preempt.requested(self.run_dir):  # the sweep job's SIGUSR2 (time limit)
                        self.stop["stop"] = "checkpoint requested by the job"
                    if self.stop:
                        raise StopRequested(self.stop["stop"])
                    t0, before = time.time(), dict(self.timing)
                    row = {STEP: step + 1}
                    row.update(self.train_step(step + 1))
                    step += 1
                    for key in ("rollout", "score", "update"):
                        row[f"time/{key}"] = round(self.timing[f"{key}_s"] - before[f"{key}_s"], 4)
                    row["time/step"] = time.time() - t0
                    row["time/wall"] = time.time() - t_start
                    if self.eval_due(step):
                        last_eval = self.evaluate(step)
                        add_eval(row, last_eval)
                    self.record_step(row, step)
                    if self.checkpoint_due(step):
                        self.save_checkpoint(step)
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{row.get('reward/mean', float('nan')):.2f}",
                        H=f"{row.get('entropy', float('nan')):.3f}",
                        refresh=False,
                    )
        except StopRequested as e:  # first Ctrl-C / SIGTERM / the job's request: stopped cleanly between steps
            self.save_checkpoint(step)
            preempt.record_saved(self.run_dir, step)
            self.log(
                f"interrupted ({e}) after step {step}; checkpoint saved to {self.run_dir / CKPT}. "
                f"Run the same command again to resume."
            )
            raise KeyboardInterrupt from None
        except KeyboardInterrupt:  # second Ctrl-C mid-step: the weights are half-updated, keep the last checkpoint
            self.log(f"aborted during step {step + 1}; resume restarts from the last checkpoint")
            raise
        finally:
            bar.close()
            if step < steps:  # stopped early: no final summary to log
                self.trackers.close()
        return self.finish(step, last_eval)

    def eval_due(self, step: int) -> bool:
        every = self.cfg.eval.every
        return (every > 0 and step % every == 0) or step == self.cfg.train.steps

    def checkpoint_due(self, step: int) -> bool:
        every = self.cfg.train.checkpoint_every
        return (every > 0 and step % every == 0) or step == self.cfg.train.steps

    def record_step(self, row: dict, step: int) -> None:
        """The end of a step: the method's state update, the metrics row (flushed before this step's checkpoint,
        which carries it) and the trackers."""
        self.method.on_step_end(row)  # adaptive methods update their state from the step's row
        append_jsonl(self.run_dir / "metrics.jsonl", row)
        self.rows.append(json_row(row))
        self.trackers.log(row, step)

    def finish(self, step: int, last_eval: dict | None) -> RunResult:
        """After the last step: the final eval (unless the last step had it), the timing line, the HF export of a
        pretrained model, the run's result and the trackers' summary."""
        cfg = self.cfg
        rows = read_jsonl(self.run_dir / "metrics.jsonl")
        if last_eval is None or last_eval["step"] != step:
            last_eval = self.evaluate(step)
        self.log(self.timing_line(step))
        if not models.is_pocket(cfg.model.name):  # an HF directory `harness eval --model RUN/model` loads
            from harness.backends.pocket.export import write_task_spec

            from .pretrained import export_hf

            write_task_spec(export_hf(self.model, self.tok, self.run_dir / "model"), cfg, step)
            self.log(f"model exported to {self.run_dir / 'model'} (harness eval --model {self.run_dir / 'model'})")
        n_params, extra = models.n_params(self.model), {"warm_start": self.warm_info}
        result = trained_record(cfg, self.method, n_params, step, rows, last_eval, self.timing, extra)
        self.trackers.finish(cfg, result, step)  # the final summary and eval results
        return result

    def timing_line(self, step: int) -> str:
        t = self.timing
        return (
            f"timing over {step} steps: rollout {t['rollout_s']:.1f}s, scoring {t['score_s']:.1f}s, "
            f"update {t['update_s']:.1f}s, eval {t['eval_s']:.1f}s, warm start {t['warm_start_s']:.1f}s; "
            f"peak RSS {peak_rss_mb():.0f} MB"
        )


def _make_sinks(cfg: RunConfig, run_dir: Path) -> Trackers:
    """The run's trackers as an iterable of sinks (``log``, ``close``); harness.run.tracking has the full interface."""
    return Trackers.open(cfg, run_dir)
