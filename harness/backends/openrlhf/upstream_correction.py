"""OpenRLHF 0.11.2's ``--algo.advantage.is_correction_*`` flags <-> the method's ``rollout_correction``.

Two directions, one spelling recorded. ``flags(method)``: the launcher's flags from the method's correction (the
switch that makes vLLM return the sampled tokens' log-probs). ``canonical(data)``: a raw run config whose
``openrlhf.extra_flags`` carries upstream's flags, rewritten so that the method's ``rollout_correction`` holds the
correction they spell and the flags are gone, before anything is typed or hashed: the upstream spelling and the
harness spelling are one config and one run id. The plug-in's loss applies the correction either way.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping

from harness.backends.openrlhf.options import OpenRLHFConfigError
from harness.errors import suggestion
from harness.kernel import correction as rollout_fix

PREFIX = "--algo.advantage.is_correction_"
KEYS = ("level", "mode", "gating", "threshold")  # 0.11.2's four (0.11.0's _enable/_type are gone)
DEFAULTS = {"level": "off", "mode": "mask", "gating": "ratio"}  # upstream's argparse defaults
CHOICES = {"level": rollout_fix.LEVELS, "mode": rollout_fix.MODES, "gating": rollout_fix.GATINGS}  # = upstream's
SPELLING = f"openrlhf.extra_flags {PREFIX}*"


def flags(method) -> list[str]:
    """Upstream's ``--algo.advantage.is_correction_*`` from the method's ``rollout_correction``: the switch that
    makes vLLM return the sampled tokens' log-probs (``logprobs=1``, ``processed_logprobs``) into the
    experience's ``rollout_log_probs``, which the plug-in hands to the method's loss; upstream's PolicyLoss
    constructor checks the same settings. Nothing when the correction is off (upstream's default)."""
    c = method.correction
    if c is None:
        return []
    if c.rejected != "keep":
        raise OpenRLHFConfigError(
            f"method.rollout_correction: rejected {c.rejected!r} is not supported on the OpenRLHF backend: its "
            f"global normalisers (aggregate_loss's batch_num_tokens / global_batch_size) count every token of the "
            f"optimizer step, so rejected tokens stay in the denominator. Allowed here: keep"
        )
    values = {"level": [c.level], "mode": [c.mode], "gating": [c.gating], "threshold": [repr(c.low), repr(c.high)]}
    return [x for key, v in values.items() for x in (PREFIX + key, *v)]


def canonical(data: Mapping) -> Mapping:
    """``data`` with upstream's is_correction_* flags in ``openrlhf.extra_flags`` moved into
    ``method.rollout_correction`` (a new mapping; ``data`` unchanged; as given when there are none). Flags without
    a level are refused (upstream ignores them at its default level off), and so is a method correction that
    differs from the flags'."""
    section = data.get("openrlhf")
    extra = section.get("extra_flags") if isinstance(section, Mapping) else None
    if not isinstance(extra, Mapping):
        return data  # parse_options names a bad section
    given = {k[len(PREFIX) :]: v for k, v in extra.items() if str(k).startswith(PREFIX)}
    if not given:
        return data
    out = copy.deepcopy(dict(data))
    out["openrlhf"]["extra_flags"] = {k: v for k, v in extra.items() if not str(k).startswith(PREFIX)}
    spelled = _spelled(given)
    method = out.get("method")
    if not isinstance(method, dict):
        return out  # no method mapping: the schema names that
    if "rollout_correction" in method:
        mine = rollout_fix.resolve(method["rollout_correction"], "method.rollout_correction", OpenRLHFConfigError)
        if mine != spelled:
            raise OpenRLHFConfigError(
                f"{SPELLING} spell rollout_correction {json.dumps(rollout_fix.recorded(spelled))} and "
                f"method.rollout_correction is {json.dumps(rollout_fix.recorded(mine))}; give the correction once "
                f"(method.rollout_correction is the harness spelling; the flags are rewritten into it)"
            )
    method["rollout_correction"] = rollout_fix.recorded(spelled)
    return out


def _spelled(given: Mapping) -> rollout_fix.Correction | None:
    """The correction upstream reads from the flags ``given`` (key suffix -> value), its defaults for the rest."""
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        raise OpenRLHFConfigError(
            f"openrlhf.extra_flags: {', '.join(PREFIX + k for k in unknown)} is not an OpenRLHF 0.11.2 flag "
            f"(0.11.0's is_correction_enable/_type were replaced); allowed: {', '.join(PREFIX + k for k in KEYS)}"
        )
    words = {k: _word(given.get(k, default), k) for k, default in DEFAULTS.items()}
    if words["level"] == "off":
        if set(given) - {"level"}:
            raise OpenRLHFConfigError(
                f"openrlhf.extra_flags: {', '.join(PREFIX + k for k in sorted(set(given) - {'level'}))} without "
                f"{PREFIX}level token|seq does nothing upstream (its level defaults to off); add the level, or set "
                f"method.rollout_correction (off, {', '.join(rollout_fix.SCHEMES)} or a mapping)"
            )
        return None
    low, high = _threshold(given.get("threshold", list(rollout_fix.RATIO_BAND)))
    return rollout_fix.resolve({**words, "low": low, "high": high}, SPELLING, OpenRLHFConfigError)


def _word(value, key: str) -> str:
    """A flag's one word (``token`` or ``[token]``), one of upstream's choices."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    choices = CHOICES[key]
    if value not in choices:
        hint = suggestion(value, choices) if isinstance(value, str) else ""
        raise OpenRLHFConfigError(
            f"openrlhf.extra_flags: {PREFIX}{key} {value!r} is not allowed.{hint} Allowed: {', '.join(choices)}"
        )
    return value


def _threshold(value) -> tuple[float, float]:
    """``LOW HIGH`` or a single ``HIGH`` (then [0, HIGH], as upstream reads it)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) not in (1, 2) or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        raise OpenRLHFConfigError(
            f"openrlhf.extra_flags: {PREFIX}threshold takes HIGH or [LOW, HIGH] (numbers), got {value!r}"
        )
    return (0.0, float(values[0])) if len(values) == 1 else (float(values[0]), float(values[1]))
