"""The in-place patches that run the harness method inside OpenRLHF 0.11.2 (applied by ``hook.py``).

* ``ppo_actor.PolicyLoss`` -> ``HarnessPolicyLoss``: the method's ``policy_loss`` (entropy bonus included)
  rescaled to OpenRLHF's global normalisers, so DP and gradient accumulation scale exactly as upstream; vLLM's
  ``rollout_log_probs`` go to it for the method's ``rollout_correction`` (upstream's vllm_kl / is_filter_ratio back).
* ``ActorPPOTrainer.training_step``: hands the loss its experience (for metrics), the entropy of the training
  forward, for a method that ``needs_old_entropy`` the old-log-prob pass's entropy (carried in ``info``), and,
  for a method that ``needs_global_plan``, its slice of the mini-batch selection plan.
* ``ppo_actor.iter_grad_accum_global_norm``: ``method.begin_mini_batch`` before each optimizer-step window (for a
  method that overrides it) and, when the method ``needs_global_plan``, one extra no-grad forward over the window
  (with the entropy when ``needs_entropy``), then ``method.selection_plan`` over it (collectives across DP ranks).
* ``RemoteExperienceMaker.compute_advantages_and_returns``: upstream's (length penalties, returns, logs), then
  the advantages replaced by ``method.advantages`` over the whole rollout; the per-token entropy of the policy
  workers' old-log-prob forward (at the rollout temperature: OpenRLHF scales the logits first) goes to the
  estimator (``extras``) and, for ``needs_old_entropy``, into each experience's ``info``.
* ``BasePPOTrainer.save_logs_and_checkpoints``: appends our ``metrics.jsonl`` line; stops after ``steps``; on the
  job's checkpoint request (harness/run/preempt.py) saves this step through upstream's own checkpoint and ends
  ``fit()`` before the next rollout (no final model); keeps the newest ``openrlhf.keep_hf_checkpoints`` Hugging
  Face copies (``retention.py``).
* ``SamplesGenerator._generate_vllm``: DAPO's cap on generation batches (``train.max_gen_batches``) for upstream's
  dynamic-filtering refills, which have none.

Module globals and class attributes are patched in place (Ray ships actor methods by value; see the
reference note §15.1), never replaced classes.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from harness.backends.openrlhf.flags import PLUGIN_ENV

OLD_ENTROPY_KEY = "harness/old_entropy"  # info entry: (B, A) old-log-prob-pass entropy, taken out before logging
SKIP_METRICS = {"tokens", "ppo_kl", "clipfrac", "selected/count", "entropy/token_mean", "log_ratio/max_abs"}


class _State:
    def __init__(self):
        self.config: dict | None = None
        self.method = None
        self.trainer = None  # the ActorPPOTrainer of this worker (set in ppo_train)
        self.rollout_step = 0  # ppo_train calls in this worker = training steps
        self.capture = False  # Actor.forward stashes entropy while True
        self.entropy = None
        self.generator = None
        self.t0 = time.time()
        self.prev_entropy = None
        self.rollout_entropy = {}  # row key -> token-mean entropy from the old-log-prob forward
        self.rollout_token_entropy = {}  # row key -> (valid tokens,) entropy, for an estimator that needs it
        self.window_plan = {}  # dynamic batching, scope: global: micro-batch index -> its slice of the window's plan
        self.generation = {}  # dynamic filtering since the last logged step (generation_stats)


STATE = _State()


def plugin_config() -> dict:
    if STATE.config is None:
        raw = os.environ.get(PLUGIN_ENV)
        if not raw:
            raise RuntimeError(
                f"{PLUGIN_ENV} is not set in this worker: start OpenRLHF through "
                f"`harness train` / harness.backends.openrlhf.launch, which sets it for every worker"
            )
        STATE.config = json.loads(raw)
    return STATE.config


def configure(config: dict) -> None:
    """Set the plugin config in-process (tests and the launcher); resets the cached method."""
    STATE.config, STATE.method, STATE.generator = dict(config), None, None
    os.environ[PLUGIN_ENV] = json.dumps(config, sort_keys=True, default=str)


def method():
    if STATE.method is None:
        import harness

        section = dict(plugin_config()["method"])
        STATE.method = harness.get_method(section.pop("name"), **section)
    return STATE.method


def generator():
    """CPU generator for random selections (Clip-Cov), seeded with seed (+ rank, so ranks draw independently)."""
    if STATE.generator is None:
        import torch
        import torch.distributed as dist

        cfg = plugin_config()
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        seed = int(cfg.get("seed", 0)) + (rank if cfg.get("seed_offset_per_rank", True) else 0)
        STATE.generator = torch.Generator().manual_seed(seed)
    return STATE.generator


# --------------------------------------------------------------------------------------------- loss
def normaliser_scale(
    mask, token_level: bool, dp_size=1, batch_num_tokens=None, global_batch_size=None, empty_rows: str = "auto"
):
    """``ops.global_normaliser_scale`` for OpenRLHF's ``token_level_loss`` switch (token-mean or
    seq-mean-token-mean), counting empty rows as the method's ``empty_rows`` says (as pocket does)."""
    from harness.kernel.ops import global_normaliser_scale

    mode = "token-mean" if token_level else "seq-mean-token-mean"
    return global_normaliser_scale(mode, mask, dp_size, batch_num_tokens, global_batch_size, empty_rows)


def make_policy_loss_class(base):
    """A subclass of OpenRLHF's ``PolicyLoss`` (same constructor) whose forward is the harness method."""
    import torch

    class HarnessPolicyLoss(base):
        experience = None  # set per micro-batch by the training_step wrapper
        selected = None  # (B, A) bool plan slice for scope: global
        old_entropy = None  # (B, A) old-log-prob-pass entropy, for a method that needs_old_entropy
        step = 0

        def forward(
            self,
            log_probs,
            old_log_probs,
            advantages,
            action_mask=None,
            rollout_log_probs=None,
            dp_size=1,
            batch_num_tokens=None,
            global_batch_size=None,
        ):
            m = method()
            if (m.agg == "token-mean") != bool(self.token_level_loss):
                raise RuntimeError(
                    f"method agg={m.agg!r} but OpenRLHF --actor.loss_agg_mode gives token_level_loss="
                    f"{self.token_level_loss}; launch through harness so the two agree"
                )
            mask = action_mask if action_mask is not None else torch.ones_like(log_probs)
            entropy = STATE.entropy if m.needs_entropy else None
            if m.needs_entropy and entropy is None:
                raise RuntimeError(
                    f"method {m.name} needs the entropy, but the training forward returned none "
                    f"(--actor.entropy_coef must be set)"
                )
            selected = self.selected.to(mask.device) if self.selected is not None else None
            extra = {}
            if m.needs_old_entropy:
                if self.old_entropy is None:
                    raise RuntimeError(
                        f"method {m.name} needs the old policy's entropy, but the experience carries none "
                        f"(openrlhf.log_entropy must be true)"
                    )
                extra["old_entropy"] = self.old_entropy.to(mask.device)
            out = m.policy_loss(
                log_probs,
                old_log_probs,
                advantages,
                mask,
                entropy=entropy,
                step=self.step,
                generator=generator(),
                selected=selected,
                cov_groups=True,
                rollout_log_probs=rollout_log_probs,
                **extra,
            )
            scale = normaliser_scale(
                mask, bool(self.token_level_loss), dp_size, batch_num_tokens, global_batch_size, m.empty_rows
            )
            loss = out.loss * scale
            device = log_probs.device
            if self.experience is not None:
                publish_metrics(self.experience, out.metrics, mask, STATE.entropy)
            clip_ratio = torch.tensor(out.metrics.get("clipfrac", 0.0), device=device)
            ppo_kl = torch.tensor(out.metrics.get("ppo_kl", 0.0), device=device)
            return loss, clip_ratio, ppo_kl, *correction_metrics(m, out.metrics, rollout_log_probs, device)

    HarnessPolicyLoss.__qualname__ = HarnessPolicyLoss.__name__ = "HarnessPolicyLoss"
    return HarnessPolicyLoss


def correction_metrics(m, metrics: dict, rollout_log_probs, device) -> tuple:
    """Upstream's (vllm_kl, is_filter_ratio) of the method's ``rollout_correction`` (logged by OpenRLHF as
    ``train/vllm_kl``, ``train/is_filter_ratio``); (None, None) when it is off. The correction on without vLLM's
    log-probs (upstream's is_correction_level off) is an error, never a silent no-op."""
    import torch

    if m.correction is None:
        return None, None
    if rollout_log_probs is None:
        raise RuntimeError(
            f"method {m.name} has rollout_correction {m.rollout_correction!r} but the experience carries no rollout "
            f"log-probs (vLLM returns them only with --algo.advantage.is_correction_level != off); launch through "
            f"harness, which sets it from the method"
        )
    return tuple(torch.tensor(metrics[f"rollout_correction/{k}"], device=device) for k in ("kl", "filtered_frac"))


def publish_metrics(experience, metrics: dict, mask, entropy) -> None:
    """Method diagnostics into ``experience.info`` (0-dim: token-weighted across micro-batches and ranks by
    OpenRLHF, then logged as ``train/<key>``); per-response mean entropy as a (B,) tensor (sample-weighted)."""
    import torch

    device = mask.device
    for key, value in metrics.items():
        if key in SKIP_METRICS or not isinstance(value, (int, float)):
            continue
        experience.info[key] = torch.tensor(float(value), device=device)
    count = metrics.get("selected/count")
    if isinstance(count, (int, float)) and mask.shape[0]:
        # (B,) sample-weighted: the bridge turns the step mean back into a count (x samples in the step)
        experience.info["harness/selected_per_sample"] = torch.full(
            (mask.shape[0],), float(count) / mask.shape[0], device=device
        )
    if entropy is not None:
        m = mask.float()
        per_row = (entropy.detach().float() * m).sum(-1) / m.sum(-1).clamp_min(1)
        experience.info["harness/entropy"] = per_row


# ------------------------------------------------------------------------------------- actor module
def patch_ppo_actor(module) -> None:
    """Patch ``openrlhf.trainer.ray.ppo_actor`` in place."""
    module.PolicyLoss = make_policy_loss_class(module.PolicyLoss)
    trainer_cls = module.ActorPPOTrainer
    orig_init, orig_step, orig_train = trainer_cls.__init__, trainer_cls.training_step, trainer_cls.ppo_train

    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        STATE.trainer = self  # this process is the policy worker (its Actor's forwards are the policy's)

    def training_step(self, experience, kl_ctl, step, loss_batch_info=None):
        loss_fn, m = self.actor_loss_fn, method()
        STATE.trainer = self
        loss_fn.experience = experience
        if m.needs_global_plan and self.args.train.dynamic_batch_enable:
            experience._harness_selected = dynamic_window_plan(self, step)
        loss_fn.selected = getattr(experience, "_harness_selected", None)
        loss_fn.old_entropy = take_old_entropy(experience)
        publish_padding(experience, bool(self.args.ds.packing_samples))
        loss_fn.step = STATE.rollout_step
        STATE.capture, STATE.entropy = True, None
        saved_coef = self.args.actor.entropy_coef
        if m.needs_entropy and saved_coef is not None:
            self.args.actor.entropy_coef = 0.0  # the bonus is in our loss; upstream still computes and logs it
        try:
            return orig_step(self, experience, kl_ctl, step, loss_batch_info)
        finally:
            self.args.actor.entropy_coef = saved_coef
            STATE.capture, STATE.entropy = False, None
            loss_fn.experience = loss_fn.selected = loss_fn.old_entropy = None

    def ppo_train(self, kl_ctl):
        STATE.trainer = self
        m = method()
        stats = rollout_stats(self.replay_buffer.items) if m.has_step_state else None
        try:
            status = orig_train(self, kl_ctl)
        finally:
            STATE.rollout_step += 1
        if not status:  # no training step ran (upstream's dynamic batching takes whole mini-batches only)
            from harness.backends.openrlhf import bridge

            if self.replay_buffer.items and self.args.train.dynamic_batch_enable:
                warn_short_buffer(self)
            status = {bridge.SKIPPED_KEY: 1.0}  # the bridge marks the row update/skipped
        if stats is not None:  # every rank holds the same all-reduced stats, so every rank's state agrees
            status = {**status, **stats}
            m.on_step_end({"step": STATE.rollout_step, **status})  # the pocket row's 1-based step
        return status

    training_step.__wrapped_original__, ppo_train.__wrapped_original__ = orig_step, orig_train
    __init__.__wrapped_original__ = orig_init
    trainer_cls.__init__, trainer_cls.training_step, trainer_cls.ppo_train = __init__, training_step, ppo_train
    module.iter_grad_accum_global_norm = make_planning_iterator(module.iter_grad_accum_global_norm)
    buffer_cls = module.NaiveReplayBuffer
    orig_append = buffer_cls.append

    def append(self, experience):
        attach_rollout_entropy(experience)
        return orig_append(self, experience)

    append.__wrapped_original__ = orig_append
    buffer_cls.append = append


def take_old_entropy(experience):
    """The experience's (B, A) old-log-prob-pass entropy, removed from ``info`` (it is no metric), or None. The replay
    buffer splits ``info`` per sample and rebatches it as a list of rows at their rollout width; each row is cut or
    zero-padded to the micro-batch's action width (right padding, as the step fields)."""
    import torch

    rows = experience.info.pop(OLD_ENTROPY_KEY, None)
    if rows is None:
        return None
    b, a = experience.action_mask.shape
    out = torch.zeros((b, a), dtype=torch.float32, device=experience.action_mask.device)
    for i, row in enumerate(rows):
        n = min(a, row.shape[-1])
        out[i, :n] = row[:n].float().to(out.device)
    return out


def publish_padding(experience, packed: bool) -> None:
    """The parts of ``batch/pad_frac`` and ``batch/tokens`` for this micro-batch, spread over its rows ((B,):
    OpenRLHF sums sample-weighted values over the step's micro-batches and ranks; the bridge takes the ratios):
    tokens the training forward processes (packed: only the real ones; else rows x padded width), of them padding,
    and 1 per micro-batch."""
    import torch

    mask = experience.attention_mask
    rows, real = mask.shape[0], float(mask.sum())
    forwarded = real if packed else float(mask.numel())
    for key, value in (("forward_tokens", forwarded), ("pad_tokens", forwarded - real), ("micro_batches", 1.0)):
        experience.info[f"harness/{key}"] = torch.full((rows,), value / rows, device=mask.device)


def dynamic_window_plan(trainer, step: int):
    """``scope: global`` under dynamic batching: upstream's ``ppo_train`` feeds the replay buffer's token-budget
    micro-batches in order (no shuffling) and steps the optimizer where ``dynamic_optimizer_step`` is 1. Before the
    first micro-batch of such a window, the window's micro-batches are collated as upstream collates them and
    planned at once (:func:`plan_window`); each micro-batch then takes its slice."""
    buffer = trainer.replay_buffer
    ends = buffer.dynamic_optimizer_step
    if step == 0 or ends[step - 1]:
        last = next(i for i in range(step, len(ends)) if ends[i])
        window = [buffer.collate_fn([buffer[i]]) for i in range(step, last + 1)]
        plan_window(window)
        STATE.window_plan = {step + j: getattr(e, "_harness_selected", None) for j, e in enumerate(window)}
    return STATE.window_plan.pop(step)


def warn_short_buffer(trainer) -> None:
    """A step whose samples on a GPU fill no mini-batch trains nothing under dynamic batching (upstream's
    ``setup_dynamic_batch`` takes whole mini-batches only; fixed micro-batches train a partial one): say so once."""
    import torch.distributed as dist

    rank0 = not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0
    if rank0:
        print(
            f"harness: WARNING step {STATE.rollout_step}: {len(trainer.replay_buffer.items)} samples on this GPU fill "
            f"no mini-batch (--train.batch_size {trainer.args.train.batch_size} over the GPUs); upstream's dynamic "
            "batching trains whole mini-batches only: no update this step (update/skipped)",
            flush=True,
        )


def rollout_stats(items) -> dict[str, float]:
    """The step's rollout measures an adaptive method reads (the pocket backend's keys), over every DP rank:
    ``rollout/neg_logprob`` = -token-mean old log-prob and ``entropy/rollout_token_mean`` = the token-mean
    entropy of the old-log-prob pass (each row's mean weighted by its tokens; missing if not measured)."""
    import torch
    import torch.distributed as dist

    sums = torch.zeros(4, dtype=torch.float64)  # sum log-prob, tokens, sum entropy, tokens with entropy
    for item in items:
        m = item.action_mask.detach().cpu().double()
        n = m.sum()
        sums[0] += (item.action_log_probs.detach().cpu().double() * m).sum()
        sums[1] += n
        ent = item.info.get("harness/entropy_rollout")
        if ent is not None and bool(torch.isfinite(torch.as_tensor(ent))):
            sums[2] += float(ent) * n
            sums[3] += n
    if dist.is_available() and dist.is_initialized():
        device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
        sums = sums.to(device)
        dist.all_reduce(sums)
        sums = sums.cpu()
    lp, n, ent, n_ent = sums.tolist()
    out = {"rollout/neg_logprob": -lp / n} if n else {}
    if n_ent:
        out["entropy/rollout_token_mean"] = ent / n_ent
    return out


def patch_actor_model(module) -> None:
    """``Actor.forward``: stash the training forward's entropy for the loss (only while a step is running)."""
    actor_cls = module.Actor
    orig_forward = actor_cls.forward

    def forward(self, *args, **kwargs):
        if _is_rollout_logprob_pass(self, args, kwargs):
            return rollout_forward(orig_forward, self, *args, **kwargs)
        out = orig_forward(self, *args, **kwargs)
        if STATE.capture and kwargs.get("return_entropy"):
            output = out[1] if isinstance(out, tuple) else out
            entropy = getattr(output, "entropy", None)
            action_mask = kwargs.get("action_mask", args[1] if len(args) > 1 else None)
            if entropy is not None and action_mask is not None:
                entropy = entropy[:, -action_mask.shape[1] :]
            STATE.entropy = entropy
        return out

    forward.__wrapped_original__ = orig_forward
    actor_cls.forward = forward


def _is_rollout_logprob_pass(actor, args, kwargs) -> bool:
    """The old-log-prob forward of make_experience (PolicyModelActor.forward): the policy worker's own Actor
    (not a reference model), eval mode, no grad, plain call."""
    import torch

    trainer = STATE.trainer
    if trainer is None or getattr(trainer, "actor", None) is not actor:
        return False
    return (
        plugin_config().get("log_entropy", True)
        and not STATE.capture
        and not actor.training
        and not torch.is_grad_enabled()
        and len(args) >= 3
        and not kwargs.get("return_output")
        and not kwargs.get("return_entropy")
    )


def _row_keys(sequences, attention_mask) -> list[int]:
    """A key per row from its unpadded tokens (the replay buffer re-pads rows differently)."""
    seqs, masks = sequences.detach().cpu(), attention_mask.detach().cpu().bool()
    return [hash(seqs[i][masks[i]].numpy().tobytes()) for i in range(seqs.shape[0])]


def rollout_forward(orig_forward, actor, sequences, action_mask, attention_mask, *args, **kwargs):
    """The old-log-prob forward, also returning the entropy: each response's token-mean entropy, measured
    before the update in eval mode (the official `entropy`), is kept by row key for the replay buffer."""
    log_probs, output = orig_forward(
        actor, sequences, action_mask, attention_mask, *args, return_output=True, return_entropy=True, **kwargs
    )
    entropy = output.entropy[:, -action_mask.shape[1] :].float()
    m = action_mask.float()
    per_row = ((entropy * m).sum(-1) / m.sum(-1).clamp_min(1)).cpu()
    if len(STATE.rollout_entropy) > 1_000_000:
        STATE.rollout_entropy.clear()
    keys = _row_keys(sequences, attention_mask)
    for key, value in zip(keys, per_row.tolist()):
        STATE.rollout_entropy[key] = value
    if "entropy" in method().estimator_extras() or method().needs_old_entropy:  # kept until the driver fetches it
        valid = action_mask.bool()
        for i, key in enumerate(keys):
            STATE.rollout_token_entropy[key] = entropy[i][valid[i]].detach().cpu()
    return log_probs


def take_rollout_token_entropy(actor=None, keys=()) -> dict:
    """Runs in a policy worker (``handle.__ray_call__``): the stored per-token entropies of these rows. The
    store is emptied: the driver asks once per rollout, after all its forwards, so any other row is stale."""
    store, STATE.rollout_token_entropy = STATE.rollout_token_entropy, {}
    return {k: store[k] for k in set(keys) if k in store}


def rollout_token_entropy(experiences, fetch) -> list:
    """Each experience's (B, A) rollout entropy from the policy workers' old-log-prob pass (``fetch(keys)`` ->
    {key: valid-token entropies}), placed on its valid tokens; an error if a row was not measured."""
    import torch

    keys = [_row_keys(e.sequences, e.attention_mask) for e in experiences]
    found = fetch([k for ks in keys for k in ks])
    out = []
    for e, ks in zip(experiences, keys):
        valid = e.action_mask.bool().cpu()
        ent = torch.zeros(valid.shape, dtype=torch.float32)
        for i, key in enumerate(ks):
            values = found.get(key)
            if values is None or values.numel() != int(valid[i].sum()):
                raise RuntimeError(
                    "the rollout entropy of a response was not measured by the policy workers' old-log-prob "
                    "forward (openrlhf.log_entropy must be true)"
                )
            ent[i, valid[i]] = values.float()
        out.append(ent.to(e.action_mask.device))
    return out


def ray_fetch(group):
    """``fetch`` for :func:`rollout_token_entropy` over an OpenRLHF RayActorGroup's workers."""

    def fetch(keys):
        import ray

        found = {}
        handles = group._actor_handlers
        for part in ray.get([h.__ray_call__.remote(take_rollout_token_entropy, keys) for h in handles]):
            found.update(part)
        return found

    return fetch


def attach_rollout_entropy(experience) -> None:
    """``info["harness/entropy_rollout"]`` (B,) for an experience entering the replay buffer; NaN (= not
    measured, dropped by the bridge) for rows whose forward was not seen, so every item has the key."""
    import torch

    if not plugin_config().get("log_entropy", True):
        return
    keys = _row_keys(experience.sequences, experience.attention_mask)
    values = [STATE.rollout_entropy.get(k, float("nan")) for k in keys]  # equal responses share one key
    for key in set(keys):
        STATE.rollout_entropy.pop(key, None)
    experience.info["harness/entropy_rollout"] = torch.tensor(values, dtype=torch.float32)


def make_planning_iterator(orig_iter):
    """Wrap ``iter_grad_accum_global_norm``: for a method that ``needs_global_plan``, plan the selection over each
    optimizer-step window before its first micro-batch is trained (decided per call, from the method)."""

    def planned(data_iter, strategy, accumulated_gradient, mask_fn):
        m = method()
        starts = m.has_mini_batch_hook
        if not (m.needs_global_plan or starts):  # the loss selects per micro-batch
            yield from orig_iter(data_iter, strategy, accumulated_gradient, mask_fn)
            return
        gas = max(int(accumulated_gradient), 1)
        window = []

        def release():
            items = [it for it, _ in window]
            if starts:
                m.begin_mini_batch(_cat_masks([it.action_mask for it in items]))
            if m.needs_global_plan:
                plan_window(items)
            yield from window

        for item, info in orig_iter(data_iter, strategy, accumulated_gradient, mask_fn):
            window.append((item, info))
            if len(window) == gas:
                yield from release()
                window = []
        if window:
            yield from release()

    return planned


def _cat_masks(masks):
    """The window's masks as one (rows, max width) tensor (right zero padding)."""
    import torch

    width = max(mk.shape[1] for mk in masks)
    return torch.cat([torch.nn.functional.pad(mk.float(), (0, width - mk.shape[1])) for mk in masks])


def plan_window(experiences) -> None:
    """No-grad forward of the current policy over every micro-batch of the window, one ``selection_plan`` call
    over their union (padded to a common width), and each micro-batch's slice stored on the experience."""
    import torch

    trainer, m = STATE.trainer, method()
    if trainer is None:
        raise RuntimeError("global selection planning needs ActorPPOTrainer.ppo_train (not patched?)")
    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
    lps, ents = [], []
    trainer.actor.train()
    with torch.no_grad():
        for e in experiences:
            e.to_device(device)
            if m.needs_entropy:
                lp, output = trainer.actor(
                    e.sequences,
                    e.action_mask,
                    attention_mask=e.attention_mask,
                    ring_attn_group=trainer.strategy.ring_attn_group,
                    return_output=True,
                    return_entropy=True,
                )
                ents.append(output.entropy[:, -e.action_mask.shape[1] :].float())
            else:
                lp = trainer.actor(
                    e.sequences,
                    e.action_mask,
                    attention_mask=e.attention_mask,
                    ring_attn_group=trainer.strategy.ring_attn_group,
                )
            lps.append(lp.float())
    width = max(e.action_mask.shape[1] for e in experiences)

    def cat(tensors):
        return torch.cat([torch.nn.functional.pad(t.float(), (0, width - t.shape[1])) for t in tensors])

    masks = [e.action_mask for e in experiences]
    plan = m.selection_plan(
        cat(lps),
        cat([e.action_log_probs for e in experiences]),
        cat([e.advantages for e in experiences]),
        cat(masks),
        entropy=cat(ents) if ents else None,
        generator=generator(),
    )
    if plan is None:
        return
    row = 0
    for e, mask in zip(experiences, masks):
        b, a = mask.shape
        e._harness_selected = plan[row : row + b, :a].to(mask.device)
        row += b


# ------------------------------------------------------------------------------- experience maker
def harness_advantages(experiences, n_samples_per_prompt: int, extras: dict | None = None):
    """Our method's advantages over the whole rollout (groups = index // n); returns per-experience (B, A).
    ``extras``: name -> per-experience (B, A) tensors (the estimator's extras, e.g. the rollout entropy)."""
    import torch

    m = method()
    index = torch.tensor([i for e in experiences for i in e.index], dtype=torch.long)
    scores = torch.cat([e.rewards.float().reshape(-1) for e in experiences])
    width = max(e.action_mask.shape[1] for e in experiences)

    def cat(tensors):
        return torch.cat([torch.nn.functional.pad(t.float().cpu(), (0, width - t.shape[1])) for t in tensors])

    mask = cat([e.action_mask for e in experiences])
    adv = m.advantages(
        scores, index // int(n_samples_per_prompt), mask, **{k: cat(v) for k, v in (extras or {}).items()}
    )
    out, row = [], 0
    for e in experiences:
        b, a = e.action_mask.shape
        out.append(adv[row : row + b, :a])
        row += b
    return out


def covariance_term(experiences) -> float | None:
    """Batch covariance term: token-level mean of (A - mean A)(log pi_old - mean log pi_old) over the rollout."""
    import torch

    from harness.kernel.ops import covariance_term as term

    if any(e.action_log_probs is None for e in experiences):
        return None
    valid = [e.action_mask.bool() for e in experiences]
    a = torch.cat([e.advantages.float()[v] for e, v in zip(experiences, valid)])[None]
    lp = torch.cat([e.action_log_probs.float()[v] for e, v in zip(experiences, valid)])[None]
    return term(a, lp, torch.ones_like(a))


def patch_experience_maker(module) -> None:
    cls = module.RemoteExperienceMaker
    orig = cls.compute_advantages_and_returns

    def compute_advantages_and_returns(self, experiences):
        experiences = orig(self, experiences)  # length penalties, returns, info["return"], group_reward_std
        extras, m = {}, method()
        if "entropy" in m.estimator_extras() or m.needs_old_entropy:  # one fetch: the workers hand it over once
            token_entropy = rollout_token_entropy(experiences, ray_fetch(self.actor_model_group))
            if "entropy" in m.estimator_extras():
                extras["entropy"] = token_entropy
            if m.needs_old_entropy:
                for e, ent in zip(experiences, token_entropy):
                    e.info[OLD_ENTROPY_KEY] = ent
        n = self.strategy.args.rollout.n_samples_per_prompt
        for e, adv in zip(experiences, harness_advantages(experiences, n, extras)):
            e.advantages = adv.to(e.action_mask.device)
        cov = covariance_term(experiences)
        if cov is not None:
            import torch

            for e in experiences:
                e.info["cov/term"] = torch.full((e.action_mask.shape[0],), cov)
        return experiences

    compute_advantages_and_returns.__wrapped_original__ = orig
    cls.compute_advantages_and_returns = compute_advantages_and_returns


# ------------------------------------------------------------------------ rollout (dynamic filtering cap)
class CappedPrompts:
    """The prompt loader's iterator, ending after ``limit`` prompts: upstream's refill loop then dispatches no more
    replacements for filtered groups. ``source_exhausted``: the loader itself ended; ``refused``: draws past the cap."""

    def __init__(self, source, limit: int):
        self.source, self.left, self.source_exhausted, self.refused = source, int(limit), False, 0

    def __iter__(self):
        return self

    def __next__(self):
        if self.left <= 0:
            self.refused += 1
            raise StopIteration
        try:
            batch = next(self.source)  # (index, prompts, labels, images): one prompt (upstream's loader batch 1)
        except StopIteration:
            self.source_exhausted = True
            raise
        self.left -= len(batch[1])
        return batch


def patch_samples_generator(module) -> None:
    """``SamplesGenerator._generate_vllm`` with dynamic filtering: the official ``max_num_gen_batches`` (verl's DAPO
    trainer) as a cap of ``train.max_gen_batches x`` the rollout's prompts drawn for one step. Upstream replaces every
    filtered group with a new prompt until the batch is full, with no cap; verl raises at its cap, here the step
    trains on the groups kept so far (as the pocket backend), logs ``filter/gen_cap_hit`` and prints a warning."""
    cls = module.SamplesGenerator
    orig = cls._generate_vllm

    def _generate_vllm(self, dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs):
        cap = plugin_config().get("max_gen_batches")
        if not dynamic_filtering or not cap:
            return orig(self, dataloader_iter, num_prompts, dynamic_filtering, **generate_kwargs)
        prompts = CappedPrompts(dataloader_iter, int(cap) * int(num_prompts))
        experiences, drawn, _ = orig(self, prompts, num_prompts, dynamic_filtering, **generate_kwargs)
        kept = len(experiences) // max(int(self.args.rollout.n_samples_per_prompt), 1)
        record_generation(drawn, kept, num_prompts, int(cap), prompts.refused > 0)
        return experiences, drawn, prompts.source_exhausted

    _generate_vllm.__wrapped_original__ = orig
    cls._generate_vllm = _generate_vllm


def record_generation(drawn: int, kept: int, wanted: int, cap: int, capped: bool) -> None:
    """Add one refill loop's counts to the step's (a step may run several: each draws within its own cap, so the
    wanted prompts add up too); at the cap, one warning line."""
    g = STATE.generation
    g["drawn"], g["kept"], g["wanted"] = g.get("drawn", 0) + drawn, g.get("kept", 0) + kept, g.get("wanted", 0) + wanted
    g["capped"] = g.get("capped", 0) or int(capped)
    if capped:
        print(
            f"harness: WARNING dynamic filtering reached train.max_gen_batches = {cap}: {drawn} prompts drawn, "
            f"{kept} of {wanted} groups kept; the step trains on the groups kept",
            flush=True,
        )


def generation_stats() -> dict[str, float]:
    """The step's dynamic-filtering counts (pocket's keys; ``rollout/batches`` = prompts drawn / the rollout's
    prompts, as upstream refills one prompt at a time), emptied for the next step; none without dynamic filtering."""
    g, STATE.generation = STATE.generation, {}
    if not g.get("drawn"):
        return {}
    return {
        "rollout/batches": g["drawn"] / g["wanted"],
        "rollout/kept_groups": float(g["kept"]),
        "filter/kept_frac": g["kept"] / g["drawn"],
        "filter/gen_cap_hit": float(g["capped"]),
    }


# ------------------------------------------------------------------------------- checkpoint (state)
STATE_KEY = "harness_plugin"  # our entry in the policy's DeepSpeed client_state


def _is_policy_ckpt(path) -> bool:
    return os.path.basename(os.path.normpath(str(path))) == "_actor"  # PolicyModelActor's <ckpt.path>/_actor


def patch_strategy(module) -> None:
    """``DeepspeedStrategy.save_ckpt`` / ``load_ckpt`` (policy checkpoints only): the method's per-step state and
    the loss's step counter ride in DeepSpeed's ``client_state``, so a resumed run continues them. Patched on the
    strategy class: ``PolicyModelActor``'s own methods reach Ray workers by value and cannot be patched."""
    cls = module.DeepspeedStrategy
    orig_save, orig_load = cls.save_ckpt, cls.load_ckpt

    def save_ckpt(self, model, save_dir, tag=None, max_num=3, max_mem=1000, client_state=None, *args, **kwargs):
        if _is_policy_ckpt(save_dir):
            state = {"method": method().name, "state": method().state_dict(), "rollout_step": STATE.rollout_step}
            client_state = {**(client_state or {}), STATE_KEY: state}
        return orig_save(self, model, save_dir, tag, max_num, max_mem, client_state, *args, **kwargs)

    def load_ckpt(self, model, load_dir, *args, **kwargs):
        load_path, states = orig_load(self, model, load_dir, *args, **kwargs)
        saved = (states or {}).get(STATE_KEY) if _is_policy_ckpt(load_dir) else None
        if saved is not None:
            if saved["method"] != method().name:
                raise RuntimeError(
                    f"checkpoint {load_path} was written by method {saved['method']!r}, this run is "
                    f"{method().name!r}: resume with the same method or start in a new run directory"
                )
            method().load_state_dict(saved["state"])
            STATE.rollout_step = int(saved["rollout_step"])
        return load_path, states

    save_ckpt.__wrapped_original__, load_ckpt.__wrapped_original__ = orig_save, orig_load
    cls.save_ckpt, cls.load_ckpt = save_ckpt, load_ckpt


# ------------------------------------------------------------------------------------ trainer (logs)
def patch_ppo_trainer(module) -> None:
    """``BasePPOTrainer``: our metrics.jsonl row at every step (written before the step's checkpoint, so a
    checkpoint never lacks its row), the eval results of eval steps, and the end of ``fit()`` after ``steps``
    (also when a run resumes from its last checkpoint)."""
    from harness.backends.openrlhf import bridge, retention
    from harness.run import preempt

    cls = module.BasePPOTrainer
    orig, orig_best, orig_states = cls.save_logs_and_checkpoints, cls.save_best_checkpoint, cls.init_checkpoint_states

    def stop_fit(self):
        # the next generate_samples call reports an exhausted loader: fit() ends and train() saves the final model
        self.samples_generator.generate_samples = lambda *a, **k: ([], 0.0, 0, True)

    def stop_on_request(self, step):
        # this step's eval still runs; the next rollout raises: fit() ends without train()'s final model
        def stopped(*args, **kwargs):
            raise preempt.CheckpointedOnRequest(f"checkpoint of step {step} saved on the job's request")

        self.samples_generator.generate_samples = stopped

    def save_logs_and_checkpoints(self, global_step, logs_dict=None, client_states=None):
        cfg = plugin_config()
        if logs_dict:
            logs_dict = {**logs_dict, **generation_stats()}
            row = bridge.to_harness_metrics(
                logs_dict,
                global_step,
                STATE.prev_entropy,
                time.time() - STATE.t0,
                method_name=(cfg.get("method") or {}).get("name"),
            )
            STATE.prev_entropy = row.get("entropy", STATE.prev_entropy)
            bridge.append_metrics(cfg["run_dir"], row)
        steps = int(cfg.get("steps", 0))
        if steps and global_step >= steps and hasattr(self, "samples_generator"):
            if self.args.ckpt.save_steps != float("inf"):
                self.args.ckpt.save_steps = 1  # checkpoint the last step too
            stop_fit(self)
        elif preempt.requested(cfg["run_dir"]) and hasattr(self, "samples_generator"):
            self.args.ckpt.save_steps = 1  # the job asked for a checkpoint: upstream saves this step, then we stop
            with retention.rotation(self.args, global_step, cfg.get("keep_hf_checkpoints")):
                out = orig(self, global_step, logs_dict, client_states)
            preempt.record_saved(cfg["run_dir"], global_step)
            stop_on_request(self, global_step)
            return out
        with retention.rotation(self.args, global_step, cfg.get("keep_hf_checkpoints")):  # HF copies: keep K
            return orig(self, global_step, logs_dict, client_states)

    def save_best_checkpoint(self, eval_metrics, global_step, client_states=None):
        cfg = plugin_config()
        if cfg.get("eval") and eval_metrics:  # fit() evaluates right after the step's logs and checkpoint
            payload = bridge.eval_payload(eval_metrics, global_step, cfg["eval"])
            bridge.write_eval(cfg["run_dir"], payload)
            bridge.add_to_row(cfg["run_dir"], global_step, bridge.eval_metrics_row(payload))
        return orig_best(self, eval_metrics, global_step, client_states)

    def init_checkpoint_states(self):
        states = orig_states(self)
        step = int((states or {}).get("global_step", 0))
        if step:  # resuming: entropy/delta continues from the last logged row; a run at its end trains no more
            cfg = plugin_config()
            STATE.prev_entropy = (bridge.logged_row(cfg["run_dir"], step) or {}).get("entropy")
            if int(cfg.get("steps", 0) or 0) and step >= int(cfg["steps"]) and hasattr(self, "samples_generator"):
                stop_fit(self)
        return states

    patched = {
        "save_logs_and_checkpoints": save_logs_and_checkpoints,
        "save_best_checkpoint": save_best_checkpoint,
        "init_checkpoint_states": init_checkpoint_states,
    }
    # `@ray.remote class PPOTrainer(BasePPOTrainer)` ran in the module body, before this patch: Ray's actor class
    # (``__ray_metadata__.modified_class``, what Ray pickles for the worker) holds a tracing wrapper of every method,
    # inherited ones included, around the functions of that moment; it gets ours too (found by the CPU rehearsal:
    # without it no metrics.jsonl row was written and `steps` never stopped a real run)
    modified = getattr(getattr(getattr(module, "PPOTrainer", None), "__ray_metadata__", None), "modified_class", None)
    for name, fn in patched.items():
        setattr(cls, name, fn)
        if modified is not None:
            setattr(modified, name, fn)


def describe() -> dict[str, Any]:
    """What the plugin would do with the current config (for logs and tests)."""
    m = method()
    return {"method": m.name, "needs_global_plan": m.needs_global_plan, "needs_entropy": m.needs_entropy}
