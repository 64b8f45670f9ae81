"""Ray ``worker_process_setup_hook``: installs the harness method into OpenRLHF inside every worker.

Stdlib only, and lazy: it registers a post-import finder, so OpenRLHF modules are patched right after a
worker imports them and workers that never import them (vLLM engines, plain tasks) stay untouched. Targets
already imported are patched at once. The patch functions live in ``plugin.py`` (imported only when a target
module is). ``HARNESS_OPENRLHF_CPU_STUBS=1`` also installs the CPU stubs (tests only);
``HARNESS_OPENRLHF_REHEARSAL=1`` (``openrlhf.rehearsal: true``) installs the CPU rehearsal's stand-ins and adds its
patches after the plug-in's (``cpu_rehearsal.py``; it refuses to run where CUDA is available).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys

# module -> "module:function" patching it (resolved lazily)
TARGETS = {
    "openrlhf.trainer.ray.ppo_actor": "harness.backends.openrlhf.plugin:patch_ppo_actor",
    "openrlhf.trainer.ppo_utils.experience_maker": "harness.backends.openrlhf.plugin:patch_experience_maker",
    "openrlhf.trainer.ppo_trainer": "harness.backends.openrlhf.plugin:patch_ppo_trainer",
    "openrlhf.models.actor": "harness.backends.openrlhf.plugin:patch_actor_model",
    "openrlhf.utils.deepspeed.deepspeed": "harness.backends.openrlhf.plugin:patch_strategy",
    "openrlhf.trainer.ppo_utils.samples_generator": "harness.backends.openrlhf.plugin:patch_samples_generator",
}
PATCHED_FLAG = "__harness_patched__"
REHEARSAL_ENV = "HARNESS_OPENRLHF_REHEARSAL"  # = cpu_rehearsal.ENV (not imported: this module stays stdlib-only)


def _patchers(name: str) -> list[str]:
    out = [TARGETS[name]] if name in TARGETS else []
    if os.environ.get(REHEARSAL_ENV) == "1":
        from harness.backends.openrlhf.rehearsal.cpu import TARGETS as REHEARSAL

        out += [REHEARSAL[name]] if name in REHEARSAL else []
    return out


def _targets() -> set[str]:
    names = set(TARGETS)
    if os.environ.get(REHEARSAL_ENV) == "1":
        from harness.backends.openrlhf.rehearsal.cpu import TARGETS as REHEARSAL

        names |= set(REHEARSAL)
    return names


def _run_patch(module) -> None:
    if getattr(module, PATCHED_FLAG, False):
        return
    for target in _patchers(module.__name__):
        mod_name, fn_name = target.split(":")
        getattr(importlib.import_module(mod_name), fn_name)(module)
    setattr(module, PATCHED_FLAG, True)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of each target module so the patch runs right after the module body."""

    def __init__(self, targets: set[str]):
        self.targets = targets

    def find_spec(self, name, path=None, target=None):
        if name not in self.targets:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        real_exec = spec.loader.exec_module

        def exec_module(module, _real=real_exec):
            _real(module)
            _run_patch(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Idempotent. Called by Ray in every worker process (and by the launcher / tests in-process)."""
    if os.environ.get(REHEARSAL_ENV) == "1":
        from harness.backends.openrlhf.rehearsal import cpu as cpu_rehearsal

        cpu_rehearsal.install()
    elif os.environ.get("HARNESS_OPENRLHF_CPU_STUBS") == "1":
        from harness.backends.openrlhf.rehearsal import stubs as cpu_stubs

        cpu_stubs.install()
    targets = _targets()
    finder = next((f for f in sys.meta_path if isinstance(f, _PostImportFinder)), None)
    if finder is None:
        sys.meta_path.insert(0, _PostImportFinder(targets))
    else:
        finder.targets |= targets
    for name in targets:
        if name in sys.modules:
            _run_patch(sys.modules[name])
