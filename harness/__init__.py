"""Entropy-control harness: the public method API.

    import harness
    harness.list_methods()                      # ['clip_cov', 'clip_higher', 'entropy_bonus', 'grpo', ...]
    m = harness.get_method("kl_cov", k_ratio=2e-3, advantage="rloo")
    adv = m.advantages(scores, group_ids, mask)
    out = m.policy_loss(log_probs, old_log_probs, adv, mask)   # out.loss, out.metrics

New methods: subclass ``harness.Method`` in one file under methods/ and decorate it with
``@harness.register_method("name")``. The layers: ``harness.kernel`` (the method contract), ``harness.run`` (a
run's lifecycle), ``harness.backends``, then sweeps, results, studies, site and the commands (docs/design.md).
"""

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
from pathlib import Path as _Path

# One import root: the repository keeps methods/, baselines/ and evals/ at its top (where users look for them), but
# they are imported as harness.methods, harness.baselines and harness.evals, so installing this project adds no
# generic top-level names (PyPI's `evals` would overwrite ours). A wheel maps the folders into harness/
# (pyproject.toml, package-dir); a source tree or an editable install finds exactly these three next to this package.
_REPO = _Path(__file__).resolve().parent.parent
_FOLDERS = ("methods", "baselines", "evals")
# Import paths from before the layered tree (plugins and scripts use them): the same module object, not a copy.
MOVED = {
    "harness.method": "harness.kernel.method",
    "harness.ops": "harness.kernel.ops",
    "harness.selection": "harness.kernel.selection",
    "harness.covariance": "harness.kernel.covariance",
    "harness.validation": "harness.kernel.validation",
    "harness.lazy": "harness.kernel.lazy",
    "harness.schema": "harness.kernel.fields",
    "harness.config": "harness.run.config",
    "harness.keypaths": "harness.run.keypaths",
    "harness.runner": "harness.run.runner",
    "harness.rundir": "harness.run.rundir",
    "harness.records": "harness.run.records",
    "harness.metrics": "harness.run.metrics",
    "harness.tracking": "harness.run.tracking",
    "harness.after_training": "harness.run.after_training",
    "harness.exported": "harness.run.exported",
    "harness.model_card": "harness.run.model_card",
    "harness.results.mechanism": "harness.studies.mechanism",
    "harness.results.mechanism_plots": "harness.studies.mechanism_plots",
    "harness.results.mechanism_probe": "harness.studies.probe",
    "harness.results.mechanism_theorem": "harness.studies.theorem",
    "harness.results.mechanism_verdicts": "harness.studies.verdicts",
}


class _Finder(_abc.MetaPathFinder, _abc.Loader):
    """Finds harness.methods / .baselines / .evals in the source tree, and the old import paths in ``MOVED``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return _util.spec_from_loader(fullname, self)
        head, _, folder = fullname.partition(".")
        if head == "harness" and folder in _FOLDERS and not (_Path(__file__).parent / folder).exists():
            init = _REPO / folder / "__init__.py"
            if init.is_file():
                return _util.spec_from_file_location(fullname, init, submodule_search_locations=[str(init.parent)])
        return None

    def create_module(self, spec):
        return _importlib.import_module(MOVED[spec.name])  # the module itself: its attributes are kept as they are

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _Finder())

# The method API loads on first use (PEP 562): `harness --help` and the pure-Python commands start without torch.
_LAZY = {
    name: "harness.kernel.method"
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
} | {"entropy_from_logits": "harness.kernel.ops"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'harness' has no attribute {name!r}")


__all__ = sorted(_LAZY)
