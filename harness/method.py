"""The method contract: one object with two hooks over plain tensors, used unchanged by every backend.

    advantages(scores (B,), group_ids (B,), mask (B,T), **extras) -> (B,T)
    policy_loss(log_probs, old_log_probs, advantages, mask, *, entropy=None, step=0, generator=None,
                selected=None) -> LossOutput(loss, metrics)

A method is a dataclass of hyperparameters (each declared with ``hparam`` so it is validated and
documented) that registers itself with ``@register_method("name")``. The default ``policy_loss`` does input
checks, calls ``per_token_loss`` (the part a method overrides), aggregates with ``agg`` and adds the shared
diagnostics. Advantages come from a registered estimator named by ``advantage`` (grpo, rloo, prime), so any
loss can be combined with any estimator: ``get_method("kl_cov", advantage="rloo")``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch

from harness import ops
from harness.registry import Registry, suggestion
from harness.validation import check_group_ids, check_mask, check_sample_tensor, check_token_tensor

METHODS: Registry[type["Method"]] = Registry("method", autoload=["baselines", "methods"])
ADVANTAGES: Registry["AdvantageEstimator"] = Registry("advantage estimator", autoload=["baselines", "methods"])


class HyperparameterError(ValueError):
    """An unknown or invalid method hyperparameter."""


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, differentiable in log_probs
    metrics: dict[str, float]


@dataclass
class TokenLoss:
    """What ``per_token_loss`` returns: the (B,T) loss and which tokens were PPO-clipped / selected."""
    loss: torch.Tensor
    clipped: torch.Tensor | None = None   # (B,T) bool, tokens where the clipped branch is active
    selected: torch.Tensor | None = None  # (B,T) bool, tokens a covariance method acted on
    metrics: dict[str, float] = field(default_factory=dict)


def hparam(default, help: str, *, choices=None, low=None, high=None, low_open: bool = False):
    """A documented, validated hyperparameter field. ``low_open`` makes the lower bound strict."""
    meta = {"help": help, "choices": choices, "low": low, "high": high, "low_open": low_open}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class AdvantageEstimator:
    """A registered advantage estimator: ``fn(scores, group, n_groups, mask, options, **extras) -> (B,T)``."""
    name: str
    fn: Callable[..., torch.Tensor]
    options: dict[str, Any]          # option name -> default
    extras: tuple[str, ...] = ()     # required keyword tensors (PRIME's process-reward inputs)
    help: str = ""


def register_advantage(name: str, *, options: dict | None = None, extras: tuple[str, ...] = (), help: str = ""):
    """Decorator registering an advantage estimator function under ``name``."""
    def deco(fn):
        ADVANTAGES.register(name, AdvantageEstimator(name, fn, dict(options or {}), tuple(extras), help or fn.__doc__ or ""))
        return fn
    return deco


def register_method(name: str):
    """Class decorator: register a Method subclass under ``name`` (duplicate names are an error)."""
    def deco(cls):
        cls = dataclass(cls)  # subclasses only declare hparam fields; make them dataclass fields
        cls.name = name
        METHODS.register(name, cls)
        return cls
    return deco


@dataclass
class Method:
    """Base method: estimator-based advantages and the PPO clipped surrogate (no dual-clip, no log-ratio clamp,
    as in the official entropy-mechanism fork)."""

    name: ClassVar[str] = "method"
    needs_entropy: ClassVar[bool] = False

    advantage: str = hparam("grpo", "advantage estimator (see harness.list_advantages())")
    advantage_options: dict = hparam({}, "extra options for the estimator (e.g. prime's beta), validated by it")
    std_normalize: bool = hparam(True, "grpo estimator: divide by the group std (False = Dr. GRPO)")
    eps_low: float = hparam(0.2, "PPO clip: ratio >= 1 - eps_low", low=0.0)
    eps_high: float = hparam(0.2, "PPO clip: ratio <= 1 + eps_high", low=0.0)
    agg: str = hparam("token-mean", "loss aggregation", choices=ops.AGG_MODES)

    def __post_init__(self):
        self._validate()

    # -- hyperparameters --------------------------------------------------------------------------
    def _validate(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            expected = f.type if isinstance(f.type, type) else {"float": float, "int": int, "bool": bool,
                                                                 "str": str, "dict": dict}.get(str(f.type))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                setattr(self, f.name, value)
            if expected is not None and (not isinstance(value, expected) or
                                         (expected is not bool and isinstance(value, bool))):
                raise HyperparameterError(f"{self.name}: hyperparameter {f.name!r} must be {expected.__name__}, "
                                          f"got {value!r} ({type(value).__name__})")
            if meta.get("choices") is not None and value not in meta["choices"]:
                raise HyperparameterError(f"{self.name}: {f.name}={value!r} is not allowed; "
                                          f"allowed: {', '.join(map(str, meta['choices']))}")
            low, high = meta.get("low"), meta.get("high")
            if low is not None and (value < low or (meta.get("low_open") and value == low)):
                raise HyperparameterError(f"{self.name}: {f.name}={value!r} must be {'>' if meta.get('low_open') else '>='} {low}")
            if high is not None and value > high:
                raise HyperparameterError(f"{self.name}: {f.name}={value!r} must be <= {high}")
        estimator = _estimator(self.advantage, self.name)
        unknown = set(self.advantage_options) - set(estimator.options)
        if unknown:
            raise HyperparameterError(
                f"{self.name}: unknown advantage option(s) {sorted(unknown)} for estimator {self.advantage!r}; "
                f"valid: {_fmt_defaults(estimator.options) or '(none)'}")
        if not self.std_normalize and self.advantage != "grpo":
            raise HyperparameterError(f"{self.name}: std_normalize=False only applies to advantage='grpo', "
                                      f"not {self.advantage!r}")

    @classmethod
    def hparams(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}

    def to_config(self) -> dict:
        return {"name": self.name, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    # -- advantages -------------------------------------------------------------------------------
    def estimator_options(self) -> dict:
        estimator = ADVANTAGES.get(self.advantage)
        opts = dict(estimator.options)
        if "std_normalize" in opts:
            opts["std_normalize"] = self.std_normalize
        opts.update(self.advantage_options)
        return opts

    def advantages(self, scores, group_ids, mask, **extras) -> torch.Tensor:
        """Token-level advantages (B,T) from outcome scores (B,) grouped by prompt; 0 on padding."""
        mask = check_mask(mask)
        batch = mask.shape[0]
        scores = check_sample_tensor("scores", scores, batch)
        group_ids = check_group_ids(group_ids, batch)
        estimator = ADVANTAGES.get(self.advantage)
        unknown = set(extras) - set(estimator.extras)
        if unknown:
            raise ValueError(f"advantage estimator {self.advantage!r} takes no extra input(s) {sorted(unknown)}; "
                             f"it takes: {', '.join(estimator.extras) or '(none)'}")
        missing = [e for e in estimator.extras if extras.get(e) is None]
        if missing:
            raise ValueError(f"advantage estimator {self.advantage!r} needs {', '.join(missing)} (B,T) tensors "
                             f"passed as keyword arguments")
        for e in estimator.extras:
            check_token_tensor(e, extras[e], mask)
        group, n_groups = ops.group_index(group_ids)
        adv = estimator.fn(scores, group, n_groups, mask.float(), self.estimator_options(), **extras)
        return (adv * mask.float()).float()

    # -- loss ---------------------------------------------------------------------------------------
    def per_token_loss(self, log_probs, old_log_probs, advantages, mask, *, step=0, generator=None,
                       selected=None) -> TokenLoss:
        """The PPO clipped surrogate per token: max(-A r, -A clip(r, 1-eps_low, 1+eps_high))."""
        loss, clipped = ppo_clip_token_loss(log_probs, old_log_probs, advantages, self.eps_low, self.eps_high)
        return TokenLoss(loss, clipped=clipped & mask.bool())

    def select_tokens(self, log_probs, old_log_probs, advantages, mask, generator=None) -> torch.Tensor | None:
        """Global-scope selection plan over a whole mini-batch; None for methods that select nothing."""
        return None

    def policy_loss(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, step: int = 0,
                    generator: torch.Generator | None = None, selected: torch.Tensor | None = None) -> LossOutput:
        """Aggregated loss (differentiable in log_probs) and diagnostics over the valid tokens given."""
        mask = check_mask(mask)
        log_probs = check_token_tensor("log_probs", log_probs, mask)
        old_log_probs = check_token_tensor("old_log_probs", old_log_probs, mask)
        advantages = check_token_tensor("advantages", advantages, mask)
        if entropy is not None:
            entropy = check_token_tensor("entropy", entropy, mask)
        if selected is not None:
            selected = check_token_tensor("selected", selected, mask, float_only=False).bool()
        # padding may hold anything (even NaN): zero it so no masked product can turn it into NaN
        valid = mask.bool()
        log_probs, old_log_probs, advantages = (x.masked_fill(~valid, 0.0) for x in (log_probs, old_log_probs, advantages))
        if entropy is not None:
            entropy = entropy.masked_fill(~valid, 0.0)
        tok = self.per_token_loss(log_probs, old_log_probs, advantages, mask, step=step, generator=generator,
                                  selected=selected)
        loss = ops.agg_loss(tok.loss, mask, self.agg)
        loss = self.extra_loss(loss, entropy, mask)
        return LossOutput(loss, self.diagnostics(log_probs, old_log_probs, advantages, mask, entropy, tok))

    def extra_loss(self, loss: torch.Tensor, entropy, mask) -> torch.Tensor:
        """Terms added after aggregation (the entropy bonus); identity by default."""
        return loss

    def diagnostics(self, log_probs, old_log_probs, advantages, mask, entropy, tok: TokenLoss) -> dict[str, float]:
        with torch.no_grad():
            m = mask.float()
            n_valid = float(m.sum())
            log_ratio = log_probs.detach().float() - old_log_probs.detach().float()
            out = {
                "ppo_kl": float(ops.masked_mean(-log_ratio, m)),
                "ppo_kl_abs": float(ops.masked_mean(log_ratio.abs(), m)),
                "clipfrac": float(ops.masked_mean(tok.clipped.float(), m)) if tok.clipped is not None else 0.0,
                "tokens": n_valid,
            }
            n_sel = float((tok.selected & mask.bool()).sum()) if tok.selected is not None else 0.0
            out["selected/count"] = n_sel
            out["selected/frac"] = n_sel / n_valid if n_valid else 0.0
            if entropy is not None:
                out["entropy/token_mean"] = float(ops.masked_mean(entropy.detach().float(), m))
            valid = mask.bool()
            cov = ops.token_covariance(advantages, log_probs, mask)[valid]
            out.update(ops.covariance_groups(cov))
            out.update(tok.metrics)
        return out


def ppo_clip_token_loss(log_probs, old_log_probs, advantages, eps_low: float, eps_high: float):
    """Per-token PPO loss max(l1, l2) with l1 = -A r, l2 = -A clip(r, 1-eps_low, 1+eps_high), r = exp(logp - old).

    Returns (loss, clipped) where clipped = l2 > l1 (the official ``pg_clipfrac`` / Clip-Cov's clip_by_origin).
    """
    ratio = torch.exp(log_probs - old_log_probs)
    l1 = -advantages * ratio
    l2 = -advantages * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    return torch.maximum(l1, l2), l2 > l1


# -- public lookup ------------------------------------------------------------------------------------
def _estimator(name: str, method: str) -> AdvantageEstimator:
    try:
        return ADVANTAGES.get(name)
    except KeyError as e:
        raise HyperparameterError(f"{method}: advantage={name!r}: {e}") from None


def _fmt_defaults(d: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in d.items())


def list_methods() -> list[str]:
    """Names of every registered method."""
    return METHODS.names()


def list_advantages() -> list[str]:
    return ADVANTAGES.names()


def get_method(name: str, **hparams) -> Method:
    """Build a registered method; unknown names and hyperparameters get errors listing the valid ones."""
    cls = METHODS.get(name)
    fields = cls.hparams()
    unknown = [k for k in hparams if k not in fields]
    if unknown:
        valid = _fmt_defaults({k: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
                               for k, f in fields.items()})
        raise HyperparameterError(f"unknown hyperparameter {unknown[0]!r} for method {name!r}."
                                  f"{suggestion(unknown[0], fields)} "
                                  f"Valid (with defaults): {valid}")
    return cls(**hparams)
