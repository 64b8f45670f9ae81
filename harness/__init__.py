"""Entropy-control harness: the public method API.

    import harness
    harness.list_methods()                      # ['clip_cov', 'clip_higher', 'entropy_bonus', 'grpo', ...]
    m = harness.get_method("kl_cov", k_ratio=2e-3, advantage="rloo")
    adv = m.advantages(scores, group_ids, mask)
    out = m.policy_loss(log_probs, old_log_probs, adv, mask)   # out.loss, out.metrics

New methods: subclass ``harness.Method`` in one file under methods/ and decorate it with
``@harness.register_method("name")``.
"""

import importlib as _importlib
from pathlib import Path as _Path

# One import root: the repository keeps methods/, baselines/ and evals/ at its top (where users look for them), but
# they are imported as harness.methods, harness.baselines and harness.evals, so installing this project adds no
# generic top-level names (PyPI's `evals` would overwrite ours). A wheel maps the folders into harness/
# (pyproject.toml, package-dir); a source tree or an editable install finds them next to this package.
_REPO = _Path(__file__).resolve().parent.parent
if (_REPO / "methods" / "__init__.py").is_file() and not (_Path(__file__).parent / "methods").exists():
    __path__.append(str(_REPO))  # noqa: F821 (the package's own __path__)

# The method API loads on first use (PEP 562): `harness --help` and the pure-Python commands start without torch.
_LAZY = {
    name: "harness.method"
    for name in (
        "ADVANTAGES",
        "METHODS",
        "HyperparameterError",
        "LossOutput",
        "Method",
        "MethodBase",
        "PPOClipMethod",
        "TokenLoss",
        "get_method",
        "hparam",
        "list_advantages",
        "list_methods",
        "option",
        "ppo_clip_token_loss",
        "register_advantage",
        "register_method",
    )
} | {"entropy_from_logits": "harness.ops"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


__all__ = sorted(_LAZY)
