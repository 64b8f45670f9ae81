"""What the pocket backend owns in a run config: ``model.warm_start`` (its section, typed when the config loads),
the pocket model sizes and tasks (did-you-mean from their registries), the optimizers it has (``train.optimizer``)
and the mini-batch count a rollout must supply."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ConfigError
from harness.kernel.fields import check_value, opt

# train.optimizer: adamw (betas 0.9, 0.999), adamw_b1_0 (no momentum) or sgd (plain, no momentum)
OPTIMIZERS = ("adamw", "adamw_b1_0", "sgd")


@dataclass
class WarmStartOptions:
    """Supervised warm start of a pocket model: the stand-in for a pretrained base model."""

    enabled: str = opt(
        "auto", kind=str, choices=("auto", "true", "false"), help="auto = on for pocket sizes, off for HF checkpoints"
    )
    target_acc: float = opt(
        0.3,
        kind=float,
        low=0.0,
        high=1.0,
        help="stop once sampled (T=1) accuracy on held-out train problems reaches this",
    )
    max_steps: int = opt(3000, kind=int, low=0)
    batch_size: int = opt(64, kind=int, low=1)
    lr: float = opt(3e-3, kind=float, low=0.0)
    check_every: int = opt(10, kind=int, low=1)
    min_steps: int = opt(50, kind=int, low=0)


WarmStartConfig = WarmStartOptions  # the name it had in harness.run.config


def validate(cfg) -> None:
    """Check the pocket-only settings (``model.warm_start`` is typed already); raise ConfigError."""
    from harness.backends.pocket import models, tasks

    check_value(cfg.train.optimizer, {"kind": str, "choices": OPTIMIZERS}, "train.optimizer")
    models.check_model_name(cfg.model.name)
    if cfg.model.warm_start.enabled == "true" and not models.is_pocket(cfg.model.name):
        raise ConfigError(
            f"model.warm_start.enabled: true only applies to pocket sizes; {cfg.model.name!r} is a "
            f"pretrained checkpoint (allowed here: auto, false)"
        )
    cfg.task.options = tasks.check_task(cfg.task.name, cfg.task.options)
    from harness.backends.pocket.pretrained import check_task_fields

    check_task_fields(cfg.task)
    t = cfg.train
    if t.updates_per_rollout > t.prompts_per_step * t.samples_per_prompt:
        raise ConfigError(
            f"train.updates_per_rollout: {t.updates_per_rollout} mini-batches need at least that many sequences, "
            f"but a rollout has prompts_per_step*samples_per_prompt = {t.prompts_per_step * t.samples_per_prompt}"
        )
    _check_group_size(cfg)


def _check_group_size(cfg) -> None:
    """Estimators with leave-one-out baselines (PRIME) need samples_per_prompt >= their min_group_size."""
    from harness.kernel.method import ADVANTAGES, METHODS

    try:
        advantage = cfg.method_hparams.get("advantage") or METHODS.get(cfg.method_name).hparams()["advantage"].default
        estimator = ADVANTAGES.get(advantage)
    except KeyError:  # an unknown method/estimator is reported by the method section's own check
        return
    if cfg.train.samples_per_prompt < estimator.min_group_size:
        raise ConfigError(
            f"train.samples_per_prompt: {cfg.train.samples_per_prompt}; the {estimator.name} advantage "
            f"estimator needs at least {estimator.min_group_size} responses per prompt"
        )
