"""Rollout-mismatch correction: the per-token weight of OpenRLHF 0.11.2's ``is_correction_*`` (TIS, ICEPOP,
seq-mask-tis, the binary-KL / TV trust region), declared on every method as ``rollout_correction``.

The rollout engine samples with its own numerics, so its log-probs of the sampled tokens (``rollout_log_probs``)
differ from the trainer's old log-probs. With ``delta = old_log_probs - rollout_log_probs`` (detached) and
``w = exp(delta)`` per token, a gate reads a statistic per unit (``level``: token, or per sequence) and
``mode: clip`` clamps it to [low, high] (TIS: only the token ratio; two-sided as upstream) while ``mode: mask``
zeroes the units outside [low, high] (inclusive), survivors keeping their own unclamped token ratio ``w``. The
statistic (``gating``): the ratio (per sequence its geometric mean, exp of the mean delta) or a divergence between
the two policies' probabilities of the sampled token (``binary_kl`` = KL(Bern(p_rollout) || Bern(p_train)),
``tv`` = |p_rollout - p_train|; per sequence their arithmetic mean), upper bound only (low = 0).

The weight multiplies the method's whole per-token loss (the penalty included) before aggregation. Masked tokens
stay in the denominator (``rejected: keep``, OpenRLHF and verl's IcePop); ``rejected: drop`` takes them out of it
(verl's ``rollout_rs``, slime after its PR 657). Without rollout log-probs the correction is the identity.

What differs from upstream: a sequence-level filter fraction counts only rows with a valid token (upstream's mean
over rows counts a padding-only row as filtered: its statistic is 0/0); ``rejected: drop`` is ours.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import suggestion
from harness.kernel.fields import build, opt
from harness.kernel.lazy import lazy_import

torch = lazy_import("torch")

OFF = "off"
LEVELS = ("off", "token", "seq")
MODES = ("mask", "clip")
GATINGS = ("ratio", "binary_kl", "tv")
REJECTED = ("keep", "drop")
RATIO_BAND = (0.5, 5.0)  # OpenRLHF 0.11.2's default --algo.advantage.is_correction_threshold
PROB_CLAMP = 1e-6  # the divergences' probability clamp (upstream's, keeps the binary-KL logs finite)
# preset -> (level, mode, gating): the schemes OpenRLHF 0.11.2 names in its CLI help
SCHEMES = {
    "tis": ("token", "clip", "ratio"),
    "icepop": ("token", "mask", "ratio"),
    "seq_mask": ("seq", "mask", "ratio"),
}
PREFIX = "rollout_correction/"  # the metrics' keys
METRICS = tuple(PREFIX + k for k in ("filtered_frac", "coef_mean", "log_ratio_abs", "kl"))


@dataclass
class _Given:
    """The keys a ``rollout_correction`` mapping may hold (typed and refused by the one field language)."""

    scheme: str | None = opt(None, "a preset for level/mode/gating", kind="str?", choices=(*SCHEMES, OFF))
    level: str | None = opt(None, "the gated unit: token, seq (its mean), off", kind="str?", choices=LEVELS)
    mode: str | None = opt(
        None, "mask: zero units outside [low, high]; clip: clamp the token ratio", kind="str?", choices=MODES
    )
    gating: str | None = opt(
        None,
        "the statistic: the ratio or a divergence of the sampled token's probabilities",
        kind="str?",
        choices=GATINGS,
    )
    low: float | None = opt(None, "lower bound (ratio: 0.5; a divergence: 0 only)", kind="float?", low=0.0)
    high: float | None = opt(
        None, "upper bound (ratio: 5.0; a divergence: required)", kind="float?", low=0.0, low_open=True
    )
    rejected: str = opt(
        "keep", "masked tokens keep their place in the denominator (OpenRLHF) or drop it (verl rs)", choices=REJECTED
    )


@dataclass(frozen=True)
class Correction:
    """A resolved, switched-on correction."""

    level: str
    mode: str
    gating: str
    low: float
    high: float
    rejected: str = "keep"

    def record(self) -> str | dict:
        """What a config records: the preset's name when it is one at its default band, else every key."""
        for name, spec in SCHEMES.items():
            if (self.level, self.mode, self.gating) == spec and (self.low, self.high) == RATIO_BAND:
                if self.rejected == "keep":
                    return name
        return {k: getattr(self, k) for k in ("level", "mode", "gating", "low", "high", "rejected")}


def recorded(c: Correction | None) -> str | dict:
    """What a config records for a resolved correction: ``off``, a preset's name, or every key."""
    return OFF if c is None else c.record()


def resolve(value, path: str, error: type[Exception] = ValueError) -> Correction | None:
    """``value`` (``off``, a preset name, or a mapping of ``_Given``'s keys) as a Correction, None when off; bad
    values raise ``error`` naming ``path`` and what is allowed."""
    if value is None or value is False or value == OFF:
        return None
    if isinstance(value, str):
        if value not in SCHEMES:
            raise error(
                f"{path}: {value!r} is not a correction.{suggestion(value, [*SCHEMES, OFF])} Allowed: off, "
                f"{', '.join(SCHEMES)}, or a mapping of scheme|level, mode, gating, low, high, rejected"
            )
        value = {"scheme": value}
    if not isinstance(value, dict):
        raise error(f"{path}: expected off, a preset ({', '.join(SCHEMES)}) or a mapping, got {value!r}")
    given = build(_Given, value, path, error)
    if given.scheme is not None:
        named = [k for k in ("level", "mode", "gating") if getattr(given, k) is not None]
        if named:
            raise error(
                f"{path}: scheme {given.scheme!r} sets level, mode and gating; drop {', '.join(named)} or the scheme"
            )
        if given.scheme == OFF:
            return None
        level, mode, gating = SCHEMES[given.scheme]
    else:
        level, mode, gating = given.level or "token", given.mode or "mask", given.gating or "ratio"
    if level == OFF:
        return None
    ratio = gating == "ratio"
    low = given.low if given.low is not None else (RATIO_BAND[0] if ratio else 0.0)
    high = given.high if given.high is not None else (RATIO_BAND[1] if ratio else None)
    if high is None:
        raise error(f"{path}: gating {gating!r} needs an upper bound high (a divergence, e.g. 0.01)")
    if mode == "clip" and (level != "token" or not ratio):
        raise error(
            f"{path}: mode clip needs level token and gating ratio (only a token's ratio is a weight that "
            f"can be clamped; a sequence statistic or a divergence is a filter: use mode mask)"
        )
    if not ratio and low > 0:
        raise error(f"{path}: gating {gating!r} takes an upper bound only (low must be 0, got {low})")
    if low > high:
        raise error(f"{path}: low {low} is above high {high}")
    if given.rejected == "drop" and mode != "mask":
        raise error(f"{path}: rejected drop needs mode mask (clip rejects no token)")
    return Correction(level, mode, gating, float(low), float(high), given.rejected)


@dataclass
class Applied:
    """The correction of one call: ``coef`` (B,T) multiplies the per-token loss; ``mask`` is what the aggregation
    divides by (the input mask, or without the rejected tokens under ``drop``); ``metrics`` its diagnostics."""

    coef: torch.Tensor
    mask: torch.Tensor
    metrics: dict[str, float]


def apply(c: Correction, old_log_probs, rollout_log_probs, mask) -> Applied:
    """The weight of ``c`` from the detached log-probs (0 on padding), OpenRLHF 0.11.2's ``PolicyLoss.forward``."""
    with torch.no_grad():
        valid = mask.bool()
        old_log_probs, rollout_log_probs = (
            x.detach().masked_fill(~valid, 0.0) for x in (old_log_probs, rollout_log_probs)
        )
        m = mask.to(old_log_probs.dtype)
        delta = old_log_probs - rollout_log_probs  # log(pi_train / pi_rollout), 0 on padding
        token_w = delta.exp()  # not clamped: an overflow to inf is masked to 0 or clamped below
        seq = c.level == "seq"
        lengths = m.sum(-1, keepdim=True)
        if c.gating == "ratio":
            stat = (delta.sum(-1, keepdim=True) / lengths.clamp_min(1.0)).exp() if seq else token_w
        else:
            p = rollout_log_probs.exp().clamp(PROB_CLAMP, 1 - PROB_CLAMP)
            q = old_log_probs.exp().clamp(PROB_CLAMP, 1 - PROB_CLAMP)
            if c.gating == "binary_kl":
                stat = p * (p / q).log() + (1 - p) * ((1 - p) / (1 - q)).log()
            else:
                stat = (p - q).abs()
            if seq:
                stat = (stat * m).sum(-1, keepdim=True) / lengths.clamp_min(1.0)
        if c.mode == "clip":
            coef = stat.clamp(c.low, c.high)
            filtered = (stat < c.low) | (stat > c.high)
        else:
            keep = (stat >= c.low) & (stat <= c.high)
            coef = torch.where(keep, token_w, torch.zeros_like(token_w))
            filtered = ~keep
        coef = coef.expand_as(m)
        agg_mask = mask
        if c.rejected == "drop":
            agg_mask = (valid & ~filtered.expand_as(valid)).to(mask.dtype)
        n = m.sum()
        if seq:
            rows = lengths.squeeze(-1) > 0
            frac = filtered.squeeze(-1)[rows].float().sum() / rows.sum().clamp_min(1)
        else:
            frac = (filtered & valid).float().sum() / n.clamp_min(1.0)
        sums = torch.stack(
            [
                frac,
                (coef * m).sum() / n.clamp_min(1.0),
                delta.abs().sum() / n.clamp_min(1.0),
                -delta.sum() / n.clamp_min(1.0),
            ]
        )
        metrics = dict(zip(METRICS, sums.double().tolist()))
    return Applied(coef, agg_mask, metrics)


def aggregation_mask(c: Correction | None, old_log_probs, rollout_log_probs, mask):
    """The mask a method's aggregation divides by (``mask`` unless ``rejected: drop`` removes tokens): what a
    backend accumulating micro-batches weights them by (``ops.micro_batch_weight``) for an exact mini-batch."""
    if c is None or c.rejected != "drop" or rollout_log_probs is None:
        return mask
    return apply(c, old_log_probs, rollout_log_probs, mask).mask
