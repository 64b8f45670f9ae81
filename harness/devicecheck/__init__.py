"""Device check: five checks of the harness on one GPU machine as it is (``scripts/device_check.sh``).

    python -m harness.devicecheck --out DIR [--cpu] [--only environment,losses,...]

Writes ``DIR/device_check.json`` (one report) and ``DIR/device_check.log``. Checks: ``environment``,
``losses`` (every method's policy_loss on the device vs CPU; covariance methods' time ratio to GRPO),
``entropy`` (entropy_from_logits vs the logsumexp route: peak extra memory and time), ``pocket`` (real pocket
runs with ``train.device`` set, first step replayed from the CPU run's rollout), ``openrlhf`` (the loss
plug-in inside OpenRLHF's training step, via the OpenRLHF test suite on the device). ``--cpu`` runs all of
them at small sizes with the CPU standing in for the device (the test suite runs it). docs/gpu.md.
"""

from harness.devicecheck.core import CHECKS, main, run_checks

__all__ = ["CHECKS", "main", "run_checks"]
