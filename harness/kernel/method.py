"""The method contract: one object with two hooks over plain tensors, used unchanged by every backend.

    advantages(scores (B,), group_ids (B,), mask (B,T), **extras) -> (B,T)
    policy_loss(log_probs, old_log_probs, advantages, mask, *, entropy=None, step=0, generator=None,
                selected=None, old_entropy=None) -> LossOutput(loss, metrics)

plus the capabilities a backend reads and calls (it never names a method; defaults are no-ops):
``needs_entropy`` (pass the differentiable token entropy), ``needs_old_entropy`` (pass ``old_entropy=``: the
behaviour policy's detached token entropy at the training temperature, from the old-log-prob pass),
``begin_mini_batch(mask)`` (called before each mini-batch's first micro-batch), ``needs_global_plan`` /
``selection_plan`` (one selection over the whole mini-batch, sliced into every micro-batch's ``selected=``), the
estimator's ``extras`` (``entropy`` = the rollout's detached token entropy at T=1, or the log-probs of
``auxiliary_model()``, e.g. PRIME's implicit PRM), ``micro_batch_weight`` (a micro-batch's share of the
mini-batch aggregate), and per-step state: ``on_step_end(row)`` after each step's updates with that step's metrics
row, ``state_dict()`` / ``load_state_dict()`` saved in checkpoints. Keys ``<method name>/...`` in
``LossOutput.metrics`` are logged to metrics.jsonl by every backend (token-weighted over micro-batches).

Two base classes. ``MethodBase`` is the contract: hyperparameters, estimator, aggregation, input checks,
diagnostics; its ``per_token_loss`` is abstract. ``Method`` (alias ``PPOClipMethod``) adds the PPO clipped
surrogate and the hyperparameters only a clipping method has: ``eps_low``/``eps_high``, verl's dual clip
``clip_ratio_c`` and the log-ratio clamp ``log_ratio_clamp`` (OpenRLHF, verl HEAD: 20), both off by default as in
the official entropy-mechanism fork. A method without a PPO clip (KL-Cov, SAPO) subclasses ``MethodBase`` and
refuses ``eps_*``.

A method is a dataclass of hyperparameters (each declared with ``hparam`` so it is validated and documented) that
registers itself with ``@register_method("name")``. The default ``policy_loss`` does input checks, calls
``per_token_loss`` (the part a method overrides), aggregates with ``agg`` and adds the shared diagnostics.
Advantages come from a registered estimator named by ``advantage`` (grpo, rloo, prime, ...), whose options are
typed and checked like hyperparameters when the method is built, so any loss can be combined with any estimator:
``get_method("kl_cov", advantage="rloo")``.

Run identity: ``to_config()`` is what a run config records and hashes. A hyperparameter added after run ids were
published is declared ``hparam(..., late=True)``: it enters ``to_config()`` only when set to another value than
its default, so every config that leaves it alone keeps its run id. ``retired_hparams`` lists values a method
recorded once but no longer has (the inherited ``eps_*`` of KL-Cov and SAPO, which never did anything): they stay
in ``to_config()`` at that value so old run ids and config files hold, and any other value is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.kernel import correction as rollout_fix
from harness.kernel import ops
from harness.kernel.fields import as_recorded, check_value, default_of, opt, refuse_non_measuring, spec
from harness.kernel.lazy import lazy_import
from harness.kernel.validation import check_group_ids, check_mask, check_sample_tensor, check_token_tensor, valid_tokens
from harness.registry import Registry, suggestion

torch = lazy_import("torch")


def _adopt_method(ref: str, cls) -> type[MethodBase]:
    """A method class named ``package.module:Name`` that its module did not register: registered under ``ref`` (its
    name, so configs, run ids and metrics name the reference every process can import again)."""
    if not (isinstance(cls, type) and issubclass(cls, MethodBase)):
        raise TypeError(f"{cls!r} is not a method class (a subclass of harness.MethodBase)")
    return register_method(ref)(cls)


METHODS: Registry[type[Method]] = Registry(
    "method",
    autoload=["harness.baselines", "harness.methods"],
    entry_points="entropy_harness.methods",
    adopt=_adopt_method,
)
ADVANTAGES: Registry[AdvantageEstimator] = Registry(
    "advantage estimator", autoload=["harness.baselines", "harness.methods"], entry_points="entropy_harness.advantages"
)


class HyperparameterError(ValueError):
    """An unknown or invalid method hyperparameter."""


# |log pi - log pi_old| below this is rounding noise between two forward passes of the same weights (float32
# log-probs of magnitude <= ~20 round at ~1e-6; GRPO's ppo_kl_abs on an unmoved policy is ~3e-6 here): a selected
# token with 0 < |log-ratio| < NOISE_FLOOR is counted in ``selected/below_floor``, the tokens a |log r| penalty
# pushes in a direction set by rounding (an exact 0 pushes nothing; docs/rescue_prereg.md).
NOISE_FLOOR = 1e-4


@dataclass
class LossOutput:
    loss: torch.Tensor  # scalar, differentiable in log_probs
    metrics: dict[str, float]
    penalty: torch.Tensor | None = None  # the method's penalty term alone, aggregated as the loss (part of ``loss``)


@dataclass
class TokenLoss:
    """What ``per_token_loss`` returns: the (B,T) loss, which tokens were PPO-clipped / selected, and optionally a
    scalar ``extra`` term that the method aggregates on its own (added to the aggregated loss)."""

    loss: torch.Tensor
    clipped: torch.Tensor | None = None  # (B,T) bool, tokens where the clipped branch is active
    selected: torch.Tensor | None = None  # (B,T) bool, tokens a covariance method acted on
    metrics: dict[str, float] = field(default_factory=dict)
    log_ratio: torch.Tensor | None = None  # (B,T) log pi - log pi_old as computed (unclamped), reused by diagnostics
    extra: torch.Tensor | None = None  # scalar added after aggregation (CE-GPPO's NLL term on correct responses)
    penalty: torch.Tensor | None = None  # (B,T) the part of ``loss`` that is a penalty (KL-Cov's beta |log r|)


# The one field declaration (harness.kernel.fields.opt) under the names the method API documents: a hyperparameter
# of a method (``hparam(default, help, choices=, low=, high=, low_open=, off=, late=)``) and an advantage-estimator
# option (``register_advantage(options={name: option(default, help, ...)})``) are declared, checked and reported
# exactly like every config field.
hparam = opt
option = opt


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
    specs: dict[str, dataclasses.Field] = field(default_factory=dict)  # option name -> its declaration (``option``)
    check: Callable[[dict], None] | None = None  # cross-option check of the merged options; raises ValueError

    def validate(self, given: dict, merged: dict, owner: str) -> dict:
        """Refuse unknown options and bad values (type of the default, range, choices) when a method is built;
        returns ``given`` as the config records it (``harness.kernel.fields.as_recorded``)."""
        unknown = set(given) - set(self.options)
        if unknown:
            raise HyperparameterError(
                f"{owner}: unknown advantage option(s) {sorted(unknown)} for estimator {self.name!r}; "
                f"valid: {_fmt_defaults(self.options) or '(none)'}"
            )
        out = {}
        for key, value in given.items():
            meta = spec(self.specs.get(key) or opt(self.options[key]))
            out[key] = as_recorded(
                value, check_value(value, meta, f"{owner}.advantage_options.{key}", HyperparameterError)
            )
        if self.check is not None:
            try:
                self.check({**merged, **out})
            except ValueError as e:
                raise HyperparameterError(f"{owner}: advantage option (estimator {self.name!r}): {e}") from None
        return out


def register_advantage(
    name: str,
    *,
    options: dict | None = None,
    extras: tuple[str, ...] = (),
    help: str = "",
    auxiliary: Callable[[dict], AuxiliaryModel] | None = None,
    min_group_size: int = 1,
    check: Callable[[dict], None] | None = None,
):
    """Decorator registering an advantage estimator function under ``name``.

    ``options``: name -> default, or -> ``option(default, help, choices=, low=, high=)`` (typed and range-checked
    when a method is built, like hyperparameters); ``check(options)`` raises ``ValueError`` for a bad combination.
    ``extras`` must be ones a backend can produce: ``ROLLOUT_EXTRAS`` or what ``auxiliary(options)`` provides.
    """

    def deco(fn):
        specs = {k: v for k, v in (options or {}).items() if isinstance(v, dataclasses.Field)}
        refuse_non_measuring(specs.items(), f"advantage estimator {name!r}")
        opts = {k: (default_of(v) if k in specs else v) for k, v in (options or {}).items()}
        producible = set(ROLLOUT_EXTRAS) | (set(auxiliary(opts).provides) if auxiliary else set())
        missing = [e for e in extras if e not in producible]
        if missing:
            raise ValueError(
                f"advantage estimator {name!r}: extras {missing} cannot be produced by a backend; "
                f"allowed: {', '.join(ROLLOUT_EXTRAS)} or the tensors its auxiliary model provides"
            )
        ADVANTAGES.register(
            name,
            AdvantageEstimator(
                name, fn, opts, tuple(extras), help or fn.__doc__ or "", auxiliary, int(min_group_size), specs, check
            ),
        )
        return fn

    return deco


def register_method(name: str):
    """Class decorator: register a Method subclass under ``name`` (duplicate names are an error)."""

    def deco(cls):
        cls = dataclass(cls)  # subclasses only declare hparam fields; make them dataclass fields
        refuse_non_measuring(((f.name, f) for f in dataclasses.fields(cls)), f"method {name!r}")
        cls.name = name
        METHODS.register(name, cls)
        return cls

    return deco


@dataclass
class MethodBase:
    """The method contract: estimator-based advantages, aggregation, input checks and diagnostics around an
    abstract ``per_token_loss``. No clip hyperparameters (a PPO-clip method subclasses ``Method``)."""

    name: ClassVar[str] = "method"
    needs_entropy: ClassVar[bool] = False
    needs_old_entropy: ClassVar[bool] = False  # policy_loss(old_entropy=) is given (STEER, ERC)
    # hyperparameter -> the value configs recorded before the method lost it (see the module docstring)
    retired_hparams: ClassVar[dict[str, Any]] = {}
    retired_reason: ClassVar[str] = ""

    advantage: str = opt("grpo", "advantage estimator (see harness.list_advantages())")
    advantage_options: dict = opt({}, "extra options for the estimator (e.g. prime's beta), validated by it")
    std_normalize: bool = opt(True, "grpo estimator: divide by the group std (False = Dr. GRPO)")
    agg: str = opt("token-mean", "loss aggregation", choices=ops.AGG_MODES)
    empty_rows: str = opt(
        "auto",
        "seq-mean aggregations: rows without a valid token are left out (skip: verl, OpenRLHF) or counted "
        "(count: TRL GSPO/SAPO); auto = each mode's reference (harness.kernel.ops.row_policy)",
        choices=ops.EMPTY_ROWS,
        late=True,
    )
    rollout_correction: object = opt(
        "off",
        "rollout-mismatch correction from the rollout engine's log-probs (OpenRLHF 0.11.2 is_correction_*): off, "
        "tis, icepop, seq_mask, or {scheme or level/mode/gating, low, high, rejected: keep|drop} (docs/methods.md)",
        kind=object,
        late=True,
    )

    def __post_init__(self):
        self._validate()

    def __getattr__(self, item):
        # read-only access to a retired hyperparameter at its recorded value (launch code written before it was
        # retired reads it); it is no field, takes no other value and does nothing
        retired = type(self).retired_hparams
        if item in retired:
            return retired[item]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {item!r}")

    # -- hyperparameters --------------------------------------------------------------------------
    def _validate(self) -> None:
        for f in dataclasses.fields(self):
            value = check_value(getattr(self, f.name), spec(f), f"{self.name}.{f.name}", HyperparameterError)
            setattr(self, f.name, value)
        path = f"{self.name}.rollout_correction"
        self._correction = rollout_fix.resolve(self.rollout_correction, path, HyperparameterError)
        self.rollout_correction = rollout_fix.recorded(self._correction)
        estimator = _estimator(self.advantage, self.name)
        self.advantage_options = estimator.validate(self.advantage_options, self.estimator_options(), self.name)
        if not self.std_normalize and self.advantage != "grpo":
            raise HyperparameterError(
                f"{self.name}: std_normalize=False only applies to advantage='grpo', not {self.advantage!r}"
            )

    @classmethod
    def hparams(cls) -> dict[str, dataclasses.Field]:
        return {f.name: f for f in dataclasses.fields(cls)}

    def to_config(self) -> dict:
        """name + every hyperparameter (a late one only when not at its default) + the retired records."""
        out = {"name": self.name}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("late") and value == default_of(f):
                continue
            out[f.name] = value
        for key, value in type(self).retired_hparams.items():
            out.setdefault(key, value)
        return out

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

    # -- rollout-mismatch correction ------------------------------------------------------------------
    @property
    def correction(self) -> rollout_fix.Correction | None:
        """The resolved ``rollout_correction`` (None: off). A backend that cannot pass ``rollout_log_probs`` to
        ``policy_loss`` refuses a method with one at load (without them the correction is the identity)."""
        return self._correction

    def aggregation_mask(self, mask, old_log_probs, rollout_log_probs):
        """The mask ``policy_loss`` divides by: ``mask``, less the rejected tokens under ``rejected: drop``. A
        backend accumulating micro-batches weights each by ``ops.micro_batch_weight`` of these masks."""
        return rollout_fix.aggregation_mask(self._correction, old_log_probs, rollout_log_probs, mask)

    # -- aggregation ----------------------------------------------------------------------------------
    def aggregate(self, loss_mat: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``ops.agg_loss`` with this method's ``agg`` and ``empty_rows``."""
        return ops.agg_loss(loss_mat, mask, self.agg, self.empty_rows)

    def micro_batch_weight(self, micro_mask: torch.Tensor, mini_mask: torch.Tensor) -> float:
        """Scale of one micro-batch's ``policy_loss`` so that the sum over micro-batches is the mini-batch's
        (``ops.micro_batch_weight`` with this method's ``agg`` and ``empty_rows``; exact with empty rows)."""
        return ops.micro_batch_weight(self.agg, micro_mask, mini_mask, self.empty_rows)

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

    def begin_mini_batch(self, mask) -> None:
        """Called by the backend before the first micro-batch of each mini-batch (optimizer step) with the mask of
        all the mini-batch's rows on this rank; no-op by default (EntroPIC weighs its integral by the row share)."""

    def on_step_end(self, stats: dict) -> None:
        """Called by the backend after each step's updates with that step's metrics row; no-op by default."""

    def state_dict(self) -> dict:
        """Per-step state to checkpoint (empty for stateless methods)."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{self.name}: holds no per-step state but a checkpoint has {sorted(state)}")

    @property
    def has_mini_batch_hook(self) -> bool:
        """Whether the method overrides ``begin_mini_batch`` (a backend that can only sometimes call it refuses)."""
        return type(self).begin_mini_batch is not MethodBase.begin_mini_batch

    @property
    def has_step_state(self) -> bool:
        """Whether the method carries state across steps (it overrides ``on_step_end``)."""
        return type(self).on_step_end is not MethodBase.on_step_end

    # -- loss ---------------------------------------------------------------------------------------
    def per_token_loss(
        self, log_probs, old_log_probs, advantages, mask, *, entropy=None, step=0, generator=None, selected=None
    ) -> TokenLoss:
        """The (B,T) loss per token: what a method defines."""
        raise NotImplementedError(f"{type(self).__name__} must define per_token_loss (or subclass harness.Method)")

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
        rollout_log_probs: torch.Tensor | None = None,
        old_entropy: torch.Tensor | None = None,
    ) -> LossOutput:
        """Aggregated loss (differentiable in log_probs) and diagnostics over the valid tokens given.

        Inputs below float32 are upcast before the ratio (fp16 overflows exp(log-ratio) from ~11). A non-finite
        loss raises ``FloatingPointError`` naming the method and the largest log-ratio. ``cov_groups=True`` adds
        the covariance groups (``cov/...``) of the tokens given (a partition over them: on request only).
        ``rollout_log_probs``: the rollout engine's log-probs of the sampled tokens; with ``rollout_correction``
        on, its weight (detached, from old - rollout) multiplies the per-token loss before aggregation.
        ``old_entropy``: the behaviour policy's (B,T) token entropy (``needs_old_entropy``), passed on to
        ``per_token_loss`` only when given.
        """
        mask = check_mask(mask)
        valid = mask.bool()
        padded = bool(torch.count_nonzero(valid) < valid.numel())
        # padding may hold anything (even NaN): zero it so no masked product can turn it into NaN
        log_probs, old_log_probs, advantages = (
            valid_tokens(name, x, valid, padded, sign)
            for name, x, sign in (
                ("log_probs", log_probs, 0),  # in log-ratio space only the difference matters (see validation)
                ("old_log_probs", old_log_probs, 0),
                ("advantages", advantages, 0),
            )
        )
        if entropy is not None:
            entropy = valid_tokens("entropy", entropy, valid, padded, sign=1)
        if selected is not None:
            selected = check_token_tensor("selected", selected, mask, float_only=False).bool()
        extra = {}
        if old_entropy is not None:
            extra["old_entropy"] = valid_tokens("old_entropy", old_entropy, valid, padded, sign=1).detach()
        tok = self.per_token_loss(
            log_probs,
            old_log_probs,
            advantages,
            mask,
            entropy=entropy,
            step=step,
            generator=generator,
            selected=selected,
            **extra,
        )
        loss_mat, penalty_mat, agg_mask, fix = tok.loss, tok.penalty, mask, None
        if self._correction is not None and rollout_log_probs is not None:
            rollout_log_probs = valid_tokens("rollout_log_probs", rollout_log_probs, valid, padded)
            fix = rollout_fix.apply(self._correction, old_log_probs, rollout_log_probs, mask)
            loss_mat, agg_mask = loss_mat * fix.coef, fix.mask
            penalty_mat = penalty_mat * fix.coef if penalty_mat is not None else None
        loss = self.aggregate(loss_mat, agg_mask)
        penalty = self.aggregate(penalty_mat, agg_mask) if penalty_mat is not None else None
        if tok.extra is not None:
            loss = loss + tok.extra
        loss = self.extra_loss(loss, entropy, mask)
        metrics = self.diagnostics(log_probs, old_log_probs, advantages, mask, entropy, tok, cov_groups)
        if fix is not None:
            metrics.update(fix.metrics)
        if not bool(torch.isfinite(loss.detach())):
            raise FloatingPointError(
                f"method {self.name}: the loss is not finite ({float(loss.detach())}); largest log-ratio "
                f"|log pi - log pi_old| on a valid token: {metrics['log_ratio/max_abs']:.4g} (exp overflows "
                "float32 above ~88.7, float16 "
                f"above ~11: the policy moved too far from the behaviour policy)"
            )
        return LossOutput(loss, metrics, penalty)

    def extra_loss(self, loss: torch.Tensor, entropy, mask) -> torch.Tensor:
        """Terms added after aggregation (the entropy bonus); identity by default."""
        return loss

    def diagnostics(
        self, log_probs, old_log_probs, advantages, mask, entropy, tok: TokenLoss, cov_groups: bool = False
    ) -> dict[str, float]:
        """ppo_kl, ppo_kl_abs, log_ratio/max_abs, clipfrac, tokens, selected/count|frac|below_floor (selected
        tokens with 0 < |log r| < NOISE_FLOOR), entropy/token_mean, the method's own metrics and, on request, the
        covariance groups. Inputs are 0 on padding: plain sums."""
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
                noise = (log_ratio != 0) & (log_ratio.abs() < NOISE_FLOOR)
                extra.append(torch.count_nonzero(tok.selected & valid & noise))
            values = torch.cat([means.double(), torch.stack([e.double() for e in extra])]).tolist()
            out = dict(zip(sums, values))
            out.setdefault("clipfrac", 0.0)
            out["log_ratio/max_abs"] = values[len(sums)]
            out["tokens"] = n_valid
            n_sel = values[len(sums) + 1] if tok.selected is not None else 0.0
            out["selected/count"] = n_sel
            out["selected/frac"] = n_sel / n_valid if n_valid else 0.0
            if tok.selected is not None:
                out["selected/below_floor"] = values[len(sums) + 2]
            if cov_groups:
                out.update(ops.covariance_groups(ops.token_covariance(advantages, log_probs, mask)[valid]))
            out.update(tok.metrics)
        return out


@dataclass
class Method(MethodBase):
    """PPO-clip base: max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) per token. Off by default, as in the
    official entropy-mechanism fork: verl's dual clip (``clip_ratio_c``) and the log-ratio clamp (OpenRLHF, verl
    HEAD: ``log_ratio_clamp`` 20)."""

    eps_low: float = opt(0.2, "PPO clip: ratio >= 1 - eps_low", low=0.0)
    eps_high: float = opt(0.2, "PPO clip: ratio <= 1 + eps_high", low=0.0)
    clip_ratio_c: float = opt(
        0.0,
        "dual clip for A < 0: loss <= -A * c (verl clip_ratio_c, default 3; OpenRLHF --actor.dual_clip); 0 = none",
        low=1.0,
        low_open=True,
        off=0.0,
        late=True,
    )
    log_ratio_clamp: float = opt(
        0.0,
        "clamp log pi - log pi_old to [-c, c] before the ratio (OpenRLHF, verl HEAD: 20); 0 = none",
        low=0.0,
        low_open=True,
        off=0.0,
        late=True,
    )

    def clamp_log_ratio(self, log_ratio: torch.Tensor) -> torch.Tensor:
        """The log-ratio as the ratio sees it: clamped to +/- ``log_ratio_clamp`` when set (no gradient beyond)."""
        c = self.log_ratio_clamp
        return log_ratio.clamp(-c, c) if c > 0 else log_ratio

    def apply_dual_clip(self, loss: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
        """verl's dual clip when ``clip_ratio_c`` is set: for A < 0 the per-token loss is capped at -A * c."""
        return dual_clip(loss, advantages, self.clip_ratio_c) if self.clip_ratio_c > 0 else loss

    def clipped_surrogate(self, log_probs, old_log_probs, advantages):
        """(loss, clipped, log_ratio): the PPO clip with this method's clamp and dual clip; ``clipped`` = the
        clipped branch is active (verl ``pg_clipfrac``), ``log_ratio`` unclamped (for the diagnostics)."""
        log_ratio = log_probs - old_log_probs
        loss, clipped = _ppo_clip(self.clamp_log_ratio(log_ratio), advantages, self.eps_low, self.eps_high)
        return self.apply_dual_clip(loss, advantages), clipped, log_ratio

    def per_token_loss(
        self, log_probs, old_log_probs, advantages, mask, *, entropy=None, step=0, generator=None, selected=None
    ) -> TokenLoss:
        """The PPO clipped surrogate per token: max(-A r, -A clip(r, 1-eps_low, 1+eps_high))."""
        loss, clipped, log_ratio = self.clipped_surrogate(log_probs, old_log_probs, advantages)
        return TokenLoss(loss, clipped=clipped & mask.bool(), log_ratio=log_ratio)


PPOClipMethod = Method  # the PPO-clip base under its descriptive name


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


def dual_clip(loss: torch.Tensor, advantages: torch.Tensor, c: float) -> torch.Tensor:
    """Dual-clip PPO (Ye et al. 2019, verl ``clip_ratio_c``): for A < 0 the per-token loss is capped at -A * c."""
    return torch.where(advantages < 0, torch.minimum(loss, -advantages * c), loss)


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


def _drop_retired(name: str, cls, hparams: dict) -> dict:
    """Accept a retired hyperparameter at the value configs recorded (it does nothing); refuse any other."""
    fields = cls.hparams()
    out = dict(hparams)
    for key, recorded in cls.retired_hparams.items():
        if key in out and key not in fields:
            if out[key] != recorded or isinstance(out[key], bool):
                raise HyperparameterError(
                    f"{name}: {key}={out[key]!r} is refused: {name} has no such hyperparameter "
                    f"({cls.retired_reason or 'it does nothing'}); configs record it at {recorded!r} only to keep "
                    f"their run ids. Remove it."
                )
            del out[key]
    return out


def get_method(name: str, **hparams) -> MethodBase:
    """Build a registered method; unknown names and hyperparameters get errors listing the valid ones."""
    cls = METHODS.get(name)
    hparams = _drop_retired(name, cls, hparams)
    fields = cls.hparams()
    unknown = [k for k in hparams if k not in fields]
    if unknown:
        valid = _fmt_defaults({k: default_of(f) for k, f in fields.items()})
        clip = (
            f" Only clipping methods take {unknown[0]}."
            if unknown[0] in ("eps_low", "eps_high", "clip_ratio_c", "log_ratio_clamp")
            else ""
        )
        raise HyperparameterError(
            f"unknown hyperparameter {unknown[0]!r} for method {name!r}."
            f"{suggestion(unknown[0], fields)}{clip} "
            f"Valid (with defaults): {valid}"
        )
    return cls(**hparams)
