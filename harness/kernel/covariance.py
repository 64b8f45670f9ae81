"""Shared base of the covariance methods (Clip-Cov, KL-Cov): the token covariance over a selection scope.

A contract-level base (no clip hyperparameters): Clip-Cov adds the PPO clip (``class ClipCov(CovarianceMethod,
Method)``), KL-Cov has none.

Cov(y_i) = (A_i - mean A)(log pi(y_i) - mean log pi) over the valid tokens of the population, with the
current log-probs detached. The population is the tensors given (``scope="micro_batch"``, the official
behaviour) or the whole mini-batch across ranks (``scope="global"``, see harness.kernel.selection).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.kernel import ops
from harness.kernel.fields import opt
from harness.kernel.lazy import lazy_import
from harness.kernel.method import MethodBase
from harness.kernel.selection import SCOPES, covariance_means, distributed_active

torch = lazy_import("torch")


@dataclass
class CovarianceMethod(MethodBase):
    scope: str = opt(
        "micro_batch", "selection population: micro_batch (official) or global (mini-batch, all ranks)", choices=SCOPES
    )

    def covariance(self, log_probs, advantages, mask) -> tuple[torch.Tensor, int, bool]:
        """(B,T) token covariance (0 on padding), population size N, and whether collectives are used."""
        active = distributed_active(self.scope)
        mean_a, mean_lp, n = covariance_means(advantages, log_probs, mask, active)
        return ops.token_covariance(advantages, log_probs, mask, means=(mean_a, mean_lp)), n, active

    @property
    def needs_global_plan(self) -> bool:
        return self.scope == "global"

    def selection_rule(self, log_probs, old_log_probs, advantages, mask, generator=None) -> torch.Tensor:
        """The method's rule: (B,T) bool tokens it acts on over the population given (inputs detached)."""
        raise NotImplementedError

    def selection_plan(self, log_probs, old_log_probs, advantages, mask, *, entropy=None, generator=None):
        """The rule over a whole mini-batch (``scope="global"``: across ranks too), for the backends to slice."""
        with torch.no_grad():
            return self.selection_rule(log_probs.detach(), old_log_probs.detach(), advantages.detach(), mask, generator)
