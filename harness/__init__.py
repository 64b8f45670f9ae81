"""Entropy-control harness: the public method API.

    import harness
    harness.list_methods()                      # ['clip_cov', 'clip_higher', 'entropy_bonus', 'grpo', ...]
    m = harness.get_method("kl_cov", k_ratio=2e-3, advantage="rloo")
    adv = m.advantages(scores, group_ids, mask)
    out = m.policy_loss(log_probs, old_log_probs, adv, mask)   # out.loss, out.metrics

New methods: subclass ``harness.Method`` in one file under methods/ and decorate it with
``@harness.register_method("name")``.
"""

from harness.method import (
    ADVANTAGES,
    METHODS,
    HyperparameterError,
    LossOutput,
    Method,
    TokenLoss,
    get_method,
    hparam,
    list_advantages,
    list_methods,
    ppo_clip_token_loss,
    register_advantage,
    register_method,
)
from harness.ops import entropy_from_logits

__all__ = [
    "ADVANTAGES",
    "METHODS",
    "HyperparameterError",
    "LossOutput",
    "Method",
    "TokenLoss",
    "entropy_from_logits",
    "get_method",
    "hparam",
    "list_advantages",
    "list_methods",
    "ppo_clip_token_loss",
    "register_advantage",
    "register_method",
]
