"""What the TRL backend checks when a config is loaded (pure Python: TRL need not be installed to load a config).

The backend has no section of its own: every TRL setting it uses is derived from the core ``train``/``model``/
``task`` sections (``grpo_settings``), so a run config reads the same on pocket and TRL. It shares pocket's
models, tasks and warm start, so pocket's checks apply first; then what TRL 1.16.0's GRPOTrainer cannot do is
refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ConfigError

TRL_VERSION = "1.16.0"  # the trainer subclass overrides private GRPOTrainer methods of exactly this release


@dataclass(frozen=True)
class BatchLayout:
    """One RL step in TRL's units: ``micro`` sequences per forward/backward (per_device_train_batch_size),
    ``grad_accum`` micro-batches per optimizer step (one mini-batch), ``steps_per_generation`` micro-batches per
    rollout (all ``updates`` mini-batches)."""

    micro: int
    grad_accum: int
    updates: int

    @property
    def steps_per_generation(self) -> int:
        return self.grad_accum * self.updates


def batch_layout(cfg) -> BatchLayout:
    """The rollout split as pocket splits it, refused where TRL cannot split it the same way: TRL cuts a rollout
    into equal micro-batches, so the rollout must divide into ``updates_per_rollout`` mini-batches and each
    mini-batch into micro-batches of min(micro_batch_size, mini-batch) sequences."""
    t = cfg.train
    rollout = t.prompts_per_step * t.samples_per_prompt
    if rollout % t.updates_per_rollout:
        raise ConfigError(
            f"train.updates_per_rollout: {t.updates_per_rollout} does not divide the rollout of "
            f"prompts_per_step*samples_per_prompt = {rollout} sequences; the trl backend (TRL's GRPOTrainer) splits a "
            f"rollout into equal mini-batches. Allowed: a divisor of {rollout}"
        )
    mini = rollout // t.updates_per_rollout
    micro = min(t.micro_batch_size, mini)
    if mini % micro:
        raise ConfigError(
            f"train.micro_batch_size: {t.micro_batch_size} does not divide the mini-batch of {mini} sequences "
            f"(rollout {rollout} / updates_per_rollout {t.updates_per_rollout}); the trl backend accumulates equal "
            f"micro-batches. Allowed: a divisor of {mini}, or any value >= {mini} (one micro-batch)"
        )
    return BatchLayout(micro=micro, grad_accum=mini // micro, updates=t.updates_per_rollout)


def check_method(method) -> None:
    """Refuse what the TRL backend cannot run, naming why; every other method trains."""
    if method.correction is not None:
        raise ConfigError(
            f"method.rollout_correction: {method.rollout_correction!r} is not supported on the trl backend: it needs "
            f"the rollout engine's log-probs of the sampled tokens, which TRL {TRL_VERSION}'s GRPOTrainer keeps only "
            f"when it samples with vLLM (sampling_per_token_logps, use_vllm), and this backend samples with "
            f"transformers' generate (without them the correction would silently do nothing). Allowed here: off"
        )
    aux = method.auxiliary_model()
    if aux is not None:
        raise ConfigError(
            f"method {method.name} with advantage: {method.advantage} is not supported on the trl backend: the "
            f"estimator's auxiliary model ({aux.name}, e.g. PRIME's implicit PRM) is a second trainable model that "
            f"TRL {TRL_VERSION}'s GRPOTrainer has no role for. Run it with backend: pocket."
        )


def validate(cfg) -> None:
    """Pocket's model/task/warm-start checks, then the TRL-only refusals; raise ConfigError."""
    from harness.backends.pocket import options as pocket_options
    from harness.backends.pocket.pretrained import is_gguf

    if cfg.train.optimizer != "adamw":
        raise ConfigError(
            f"train.optimizer: {cfg.train.optimizer!r} is not supported on the trl backend (GRPOTrainer builds its "
            f"own AdamW); allowed here: adamw"
        )
    if cfg.train.old_log_probs != "rollout":
        raise ConfigError(
            "train.old_log_probs: 'recompute' is pocket's exact pass; TRL's GRPOTrainer computes its own old "
            "log-probs (docs/backends.md): allowed here: rollout"
        )
    pocket_options.validate(cfg)
    if cfg.train.dynamic_filtering:
        raise ConfigError(
            "train.dynamic_filtering: true is not supported on the trl backend: TRL's GRPOTrainer trains on every "
            "group it sampled (no DAPO resampling of equal-reward groups). Allowed here: false"
        )
    if is_gguf(cfg.model.name):
        raise ConfigError(
            f"model.name: {cfg.model.name!r} is a GGUF file; the trl backend trains transformers models only "
            f"(a pocket size, a Hugging Face model directory or a hub id)"
        )
    if not str(cfg.train.device).startswith(("cpu", "cuda", "auto")):
        raise ConfigError(f"train.device: {cfg.train.device!r} is not supported on the trl backend; allowed: cpu, cuda")
    batch_layout(cfg)
    import harness

    check_method(harness.get_method(cfg.method_name, **cfg.method_hparams))


def grpo_settings(cfg, output_dir: str, layout: BatchLayout, use_cpu: bool) -> dict:
    """GRPOConfig keyword arguments for this run: pocket's schedule and sampling in TRL's units. TRL's own loss,
    advantage and KL settings are left at values that do nothing here (the harness method replaces them)."""
    t = cfg.train
    return dict(
        output_dir=output_dir,
        use_cpu=use_cpu,
        seed=cfg.seed,
        max_steps=t.steps * layout.updates,
        learning_rate=t.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=t.weight_decay,
        max_grad_norm=t.grad_clip,  # 0 = no clipping (transformers clips only when > 0)
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        optim="adamw_torch",
        per_device_train_batch_size=layout.micro,
        gradient_accumulation_steps=layout.grad_accum,
        steps_per_generation=layout.steps_per_generation,
        num_generations=t.samples_per_prompt,
        num_iterations=1,
        max_completion_length=t.max_new_tokens,
        temperature=t.temperature,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.0,
        beta=0.0,  # no reference model
        mask_truncated_completions=False,  # pocket trains on truncated responses too
        bf16=False,  # TRL's default is True; the model's own dtype is model.dtype
        fp16=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        report_to="none",
        logging_strategy="no",  # metrics.jsonl is written by the harness (loop.py)
        save_strategy="no",  # checkpoints are requested by the harness at RL-step boundaries
        disable_tqdm=not cfg.logging.progress,
        dataloader_num_workers=0,
        log_completions=False,
        shuffle_dataset=True,
    )
