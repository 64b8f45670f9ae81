"""The method contract: one object with two hooks over plain tensors, used unchanged by every backend.

    advantages(scores (B,), group_ids (B,), mask (B,T), **extras) -> (B,T)
    policy_loss(log_probs, old_log_probs, advantages, mask, *, entropy=None, step=0, generator=None,
                selected=None) -> LossOutput(loss, metrics)

plus the capabilities a backend reads and calls (it never names a method; defaults are no-ops):
``needs_entropy`` (pass the differentiable token entropy), ``needs_global_plan`` / ``selection_plan`` (one
selection over the whole mini-batch, sliced into every micro-batch's ``selected=``), the estimator's ``extras``
(``entropy`` = the rollout's detached token entropy at T=1, or the log-probs of ``auxiliary_model()``, e.g.
PRIME's implicit PRM), and per-step state: ``on_step_end(row)`` after each step's updates with that step's
metrics row, ``state_dict()`` / ``load_state_dict()`` saved in checkpoints. Keys ``<method name>/...`` in
``LossOutput.metrics`` are logged to metrics.jsonl by every backend (token-weighted over micro-batches).

A method is a dataclass of hyperparameters (each declared with ``hparam`` so it is validated and
documented) that registers itself with ``@register_method("name")``. The default ``policy_loss`` does input
checks, calls ``per_token_loss`` (the part a method overrides), aggregates with ``agg`` and adds the shared
diagnostics. Advantages come from a registered estimator named by ``advantage`` (grpo, rloo, prime), so any
loss can be combined with any estimator: ``get_method("kl_cov", advantage="rloo")``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from harness import ops
from harness.registry import Registry, suggestion
from harness.validation import check_group_ids, check_mask, check_sample_tensor, check_token_tensor, valid_tokens

METHODS: Registry[type[Method]] = Registry(
    "method", autoload=["harness.baselines", "harness.methods"], entry_points="entropy_harness.methods"
)
ADVANTAGES: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", autoload=["harness.baselines", "harness.methods"], entry_points="entropy_harness.advantages"
)


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
    clipped: torch.Tensor | None = None  # (B,T) bool, tokens where the clipped branch is active
    selected: torch.Tensor | None = None  # (B,T) bool, tokens a covariance method acted on
    metrics: dict[str, float] = field(default_factory=dict)
    log_ratio: torch.Tensor | None = None  # (B,T) log pi - log pi_old as computed (unclamped), reused by diagnostics


def hparam(default, help: str, *, choices=None, low=None, high=None, low_open: bool = False):
    """A documented, validated hyperparameter field. ``low_open`` makes the lower bound strict."""
    meta = {"help": help, "choices": choices, "low": low, "high": high, "low_open": low_open}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


ROLLOUT_EXTRAS = ("entropy",)  # estimator extras every backend produces from the rollout itself


@dataclass(frozen=True)
class AuxiliaryModel:
    """A second trainable model an estimator needs (PRIME's implicit PRM); the backend runs it.

    The backend keeps two copies of the policy as training starts (after any warm start): a trainable one
    (AdamW, ``lr``, no weight decay, grad-norm clip ``grad_clip``, 0 = none) and a frozen reference. Each step
    it computes the rollout's log-probs under both at the sampling temperature and, ``update="before"``, first
    takes one optimizer step on ``loss(model_log_probs, reference_log_probs, mask, scores, beta=beta)`` (a mean
    over responses, differentiable in the first argument) and re-runs the trainable model; ``"after"`` updates
    after reading its log-probs. The two log-probs are the estimator extras named by ``provides``
    (trainable, reference). The update's loss is logged as ``<name>/loss``.
    """

    name: str
    provides: tuple[str, str]
    loss: Callable[..., torch.Tensor]
    beta: float
    lr: float = 1e-6
    grad_clip: float = 10.0
    update: str = "before"


@dataclass
class AdvantageEstimator:
    """A registered advantage estimator: ``fn(scores, group, n_groups, mask, options, **extras) -> (B,T)``."""

    name: str
    fn: Callable[..., torch.Tensor]
    options: dict[str, Any]  # option name -> default
    extras: tuple[str, ...] = ()  # required keyword tensors: ROLLOUT_EXTRAS or the auxiliary model's
    help: str = ""
    auxiliary: Callable[[dict], AuxiliaryModel] | None = None  # options -> the auxiliary model it needs
    min_group_size: int = 1  # responses per prompt it needs (leave-one-out baselines: 2)


def register_advantage(
    name: str,
    *,
    options: dict | None = None,
    extras: tuple[str, ...] = (),
    help: str = "",
    auxiliary: Callable[[dict], AuxiliaryModel] | None = None,
    min_group_size: int = 1,
):
    """Decorator registering an advantage estimator function under ``name``.

    ``extras`` must be ones a backend can produce: ``ROLLOUT_EXTRAS`` or what ``auxiliary(options)`` provides.
    """

    def deco(fn):
        opts = dict(options or {})
        producible = set(ROLLOUT_EXTRAS) | (set(auxiliary(opts).provides) if auxiliary else set())
        missing = [e for e in extras if e not in producible]
        if missing:
            raise ValueError(
                f"advantage estimator {name!r}: extras {missing} cannot be produced by a backend; "
                f"allowed: {', '.join(ROLLOUT_EXTRAS)} or the tensors its auxiliary model provides"
            )
        ADVANTAGES.register(
            name,
            AdvantageEstimator(name, fn, opts, tuple(extras), help or fn.__doc__ or "", auxiliary, int(min_group_size)),
        )
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
            expected = (
                f.type
                if isinstance(f.type, type)
                else {"float": float, "int": int, "bool": bool, "str": str, "dict": dict}.get(str(f.type))
            )
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                setattr(self, f.name, value)
            if expected is not None and (
                not isinstance(value, expected) or (expected is not bool and isinstance(value, bool))
            ):
                raise HyperparameterError(
                    f"{self.name}: hyperparameter {f.name!r} must be {expected.__name__}, "
                    f"got {value!r} ({type(value).__name__})"
                )
            if meta.get("choices") is not None and value not in meta["choices"]:
                raise HyperparameterError(
                    f"{self.name}: {f.name}={value!r} is not allowed; allowed: {', '.join(map(str, meta['choices']))}"
                )
            low, high = meta.get("low"), meta.get("high")
            if low is not None and (value < low or (meta.get("low_open") and value == low)):
                raise HyperparameterError(
                    f"{self.name}: {f.name}={value!r} must be {'>' if meta.get('low_open') else '>='} {low}"
                )
            if high is not None and value > high:
                raise HyperparameterError(f"{self.name}: {f.name}={value!r} must be <= {high}")
        estimator = _estimator(self.advantage, self.name)
        unknown = set(self.advantage_options) - set(estimator.options)
        if unknown:
            raise HyperparameterError(
                f"{self.name}: unknown advantage option(s) {sorted(unknown)} for estimator {self.advantage!r}; "
                f"valid: {_fmt_defaults(estimator.options) or '(none)'}"
            )
        if not self.std_normalize and self.advantage != "grpo":
            raise HyperparameterError(
                f"{self.name}: std_normalize=False only applies to advantage='grpo', not {self.advantage!r}"
            )

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
            raise ValueError(
                f"advantage estimator {self.advantage!r} takes no extra input(s) {sorted(unknown)}; "
                f"it takes: {', '.join(estimator.extras) or '(none)'}"
            )
        missing = [e for e in estimator.extras if extras.get(e) is None]
        if missing:
            raise ValueError(
                f"advantage estimator {self.advantage!r} needs {', '.join(missing)} (B,T) tensors "
                f"passed as keyword arguments"
            )
        for e in estimator.extras:
            check_token_tensor(e, extras[e], mask)
        group, n_groups = ops.group_index(group_ids)
        adv = estimator.fn(scores, group, n_groups, mask.float(), self.estimator_options(), **extras)
        return (adv * mask.float()).float()

    def auxiliary_model(self) -> AuxiliaryModel | None:
        """The auxiliary model the estimator needs (None: none). Methods may override its training settings."""
        estimator = ADVANTAGES.get(self.advantage)
        return estimator.auxiliary(self.estimator_options()) if estimator.auxiliary else None

    def estimator_extras(self) -> tuple[str, ...]:
        """The extra (B,T) tensors the backend must pass to ``advantages`` (see ``AdvantageEstimator.extras``)."""
        return ADVANTAGES.get(self.advantage).extras

    # -- capabilities: global selection plan, per-step state ------------------------------------------
    @property
    def needs_global_plan(self) -> bool:
        """True: the backend calls ``selection_plan`` once per mini-batch and slices it into ``selected=``."""
        return False

    def selection_plan(
        self, log_probs, old_log_probs, advantages, mask, *, entropy=None, generator=None
    ) -> torch.Tensor | None:
        """(B,T) bool plan over a whole mini-batch from detached inputs; None for methods that select nothing."""
        return None

    def on_step_end(self, stats: dict) -> None:
        """Called by the backend after each step's updates with that step's metrics row; no-op by default."""

    def state_dict(self) -> dict:
        """Per-step state to checkpoint (empty for stateless methods)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{self.name}: holds no per-step state but a checkpoint has {sorted(state)}")

    @property
    def has_step_state(self) -> bool:
        """Whether the method carries state across steps (it overrides ``on_step_end``)."""
        return type(self).on_step_end is not Method.on_step_end

    # -- loss ---------------------------------------------------------------------------------------
    def per_token_loss(
        self, log_probs, old_log_probs, advantages, mask, *, entropy=None, step=0, generator=None, selected=None
    ) -> TokenLoss:
        """The PPO clipped surrogate per token: max(-A r, -A clip(r, 1-eps_low, 1+eps_high))."""
        log_ratio = log_probs - old_log_probs
        loss, clipped = _ppo_clip(log_ratio, advantages, self.eps_low, self.eps_high)
        return TokenLoss(loss, clipped=clipped & mask.bool(), log_ratio=log_ratio)

    def policy_loss(
        self,
        log_probs,
        old_log_probs,
        advantages,
        mask,
        *,
        entropy=None,
        step: int = 0,
        generator: torch.Generator | None = None,
        selected: torch.Tensor | None = None,
        cov_groups: bool = False,
    ) -> LossOutput:
        """Aggregated loss (differentiable in log_probs) and diagnostics over the valid tokens given.

        Inputs below float32 are upcast before the ratio (fp16 overflows exp(log-ratio) from ~11). A non-finite
        loss raises ``FloatingPointError`` naming the method and the largest log-ratio. ``cov_groups=True`` adds
        the covariance groups (``cov/...``) of the tokens given (a partition over them: on request only).
        """
        mask = check_mask(mask)
        valid = mask.bool()
        padded = bool(torch.count_nonzero(valid) < valid.numel())
        # padding may hold anything (even NaN): zero it so no masked product can turn it into NaN
        log_probs, old_log_probs, advantages = (
            valid_tokens(name, x, valid, padded)
            for name, x in (("log_probs", log_probs), ("old_log_probs", old_log_probs), ("advantages", advantages))
        )
        if entropy is not None:
            entropy = valid_tokens("entropy", entropy, valid, padded)
        if selected is not None:
            selected = check_token_tensor("selected", selected, mask, float_only=False).bool()
        tok = self.per_token_loss(
            log_probs,
            old_log_probs,
            advantages,
            mask,
            entropy=entropy,
            step=step,
            generator=generator,
            selected=selected,
        )
        loss = ops.agg_loss(tok.loss, mask, self.agg)
        loss = self.extra_loss(loss, entropy, mask)
        metrics = self.diagnostics(log_probs, old_log_probs, advantages, mask, entropy, tok, cov_groups)
        if not bool(torch.isfinite(loss.detach())):
            raise FloatingPointError(
                f"method {self.name}: the loss is not finite ({float(loss.detach())}); largest log-ratio "
                f"|log pi - log pi_old| on a valid token: {metrics['log_ratio/max_abs']:.4g} (exp overflows "
                "float32 above ~88.7, float16 "
                f"above ~11: the policy moved too far from the behaviour policy)"
            )
        return LossOutput(loss, metrics)

    def extra_loss(self, loss: torch.Tensor, entropy, mask) -> torch.Tensor:
        """Terms added after aggregation (the entropy bonus); identity by default."""
        return loss

    def diagnostics(
        self, log_probs, old_log_probs, advantages, mask, entropy, tok: TokenLoss, cov_groups: bool = False
    ) -> dict[str, float]:
        """ppo_kl, ppo_kl_abs, log_ratio/max_abs, clipfrac, tokens, selected/count|frac, entropy/token_mean, the
        method's own metrics and, on request, the covariance groups. Inputs are 0 on padding: plain sums."""
        with torch.no_grad():
            valid = mask.bool()
            count = torch.count_nonzero(valid)
            n_valid = float(count)
            log_ratio = (
                tok.log_ratio if tok.log_ratio is not None else log_probs - old_log_probs
            ).detach()  # 0 on padding
            sums = {"ppo_kl": -log_ratio.sum(), "ppo_kl_abs": torch.linalg.vector_norm(log_ratio, 1)}
            if tok.clipped is not None:
                sums["clipfrac"] = torch.count_nonzero(tok.clipped & valid)
            if entropy is not None:
                sums["entropy/token_mean"] = entropy.detach().sum()
            # float32 means with the verl denominator (sum(mask) + 1e-8), as ops.masked_mean; one sync
            means = torch.stack([v.float() for v in sums.values()]) / (count.float() + ops.EPS_MEAN)
            extra = [torch.stack(torch.aminmax(log_ratio)).abs().max() if log_ratio.numel() else count * 0.0]
            if tok.selected is not None:
                extra.append(torch.count_nonzero(tok.selected & valid))
            values = torch.cat([means.double(), torch.stack([e.double() for e in extra])]).tolist()
            out = dict(zip(sums, values))
            out.setdefault("clipfrac", 0.0)
            out["log_ratio/max_abs"] = values[len(sums)]
            out["tokens"] = n_valid
            n_sel = values[len(sums) + 1] if tok.selected is not None else 0.0
            out["selected/count"] = n_sel
            out["selected/frac"] = n_sel / n_valid if n_valid else 0.0
            if cov_groups:
                out.update(ops.covariance_groups(ops.token_covariance(advantages, log_probs, mask)[valid]))
            out.update(tok.metrics)
        return out


def ppo_clip_token_loss(log_probs, old_log_probs, advantages, eps_low: float, eps_high: float):
    """Per-token PPO loss max(l1, l2) with l1 = -A r, l2 = -A clip(r, 1-eps_low, 1+eps_high), r = exp(logp - old).

    Returns (loss, clipped) where clipped = l2 > l1 (the official ``pg_clipfrac`` / Clip-Cov's clip_by_origin).
    """
    return _ppo_clip(log_probs - old_log_probs, advantages, eps_low, eps_high)


def _ppo_clip(log_ratio, advantages, eps_low: float, eps_high: float):
    ratio = torch.exp(log_ratio)
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
        valid = _fmt_defaults(
            {k: (f.default if f.default is not dataclasses.MISSING else f.default_factory()) for k, f in fields.items()}
        )
        raise HyperparameterError(
            f"unknown hyperparameter {unknown[0]!r} for method {name!r}."
            f"{suggestion(unknown[0], fields)} "
            f"Valid (with defaults): {valid}"
        )
    return cls(**hparams)
