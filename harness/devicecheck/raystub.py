"""A ``sys.modules`` stand-in for ``ray`` so OpenRLHF 0.11.2's trainer modules import where Ray is not installed.

Only for the device check (the cp312 ray 2.55.0 wheel is 70.3 MiB, over what a GPU-machine call may carry).
``ActorPPOTrainer.training_step`` never calls Ray; the stub covers the module-level names (``ray.remote`` as a
class decorator, ``ray.util.placement_group``/``scheduling_strategies``/``queue``) and anything that would really
need Ray raises ``RuntimeError`` naming the stub. Loaded as a pytest plugin (``-p harness.devicecheck.raystub``)
it installs itself before OpenRLHF is imported; ``write_package`` writes it as an importable package for child
processes (torch.multiprocessing workers). It never shadows a real ray.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types


def _unavailable(name: str):
    def fail(*_a, **_k):
        raise RuntimeError(f"{name} is a stub (harness.devicecheck.raystub): Ray is not installed here")

    return fail


def _remote(*args, **_kwargs):
    """``@ray.remote`` and ``@ray.remote(num_gpus=1)``: return the class or function unchanged."""
    if len(args) == 1 and callable(args[0]) and not _kwargs:
        return args[0]
    return lambda obj: obj


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
    mod.__path__ = []  # a package, so `import ray.util.x` finds the stubbed submodules in sys.modules
    mod.__harness_stub__ = True
    sys.modules[name] = mod
    return mod


def populate(ray: types.ModuleType) -> types.ModuleType:
    """Give ``ray`` (a fresh module) the stubbed names and register its stubbed submodules."""
    names = ("get", "put", "wait", "init", "get_gpu_ids", "kill", "shutdown")
    ray.__dict__.update(
        __version__="0.0.0-harness-stub",
        remote=_remote,
        is_initialized=lambda: False,
        ObjectRef=object,
        __harness_stub__=True,
        **{n: _unavailable(f"ray.{n}") for n in names},
    )
    util = _module("ray.util", placement_group_table=_unavailable("ray.util.placement_group_table"))
    ray.util = util
    util.placement_group = _module(
        "ray.util.placement_group",
        PlacementGroup=object,
        placement_group=_unavailable("ray.util.placement_group.placement_group"),
    )
    util.scheduling_strategies = _module(
        "ray.util.scheduling_strategies",
        PlacementGroupSchedulingStrategy=_unavailable("PlacementGroupSchedulingStrategy"),
        NodeAffinitySchedulingStrategy=_unavailable("NodeAffinitySchedulingStrategy"),
    )
    util.queue = _module("ray.util.queue", Queue=_unavailable("ray.util.queue.Queue"))
    util.collective = _module("ray.util.collective")
    ray._private = _module("ray._private")
    ray._private.services = _module("ray._private.services", get_node_ip_address=lambda: "127.0.0.1")
    ray._private.worker = _module("ray._private.worker", global_worker=None)
    return ray


def real_ray_importable() -> bool:
    if "ray" in sys.modules:
        return not getattr(sys.modules["ray"], "__harness_stub__", False)
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def install() -> bool:
    """Install the stub in this process unless a real ray is importable; True when the stub is (now) in place."""
    if real_ray_importable():
        return False
    if "ray" not in sys.modules:
        populate(_module("ray"))
    return True


PACKAGE_INIT = '''"""Stand-in for ray (not installed here), written by harness.devicecheck.raystub.write_package."""
import sys

from harness.devicecheck.raystub import populate

populate(sys.modules[__name__])
'''


def write_package(folder) -> str:
    """Write an importable ``ray`` stub package under ``folder`` (for child processes: put ``folder`` on their
    PYTHONPATH, e.g. torch.multiprocessing workers); returns the folder as a string."""
    from pathlib import Path

    pkg = Path(folder) / "ray"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(PACKAGE_INIT)
    return str(folder)


def is_stub() -> bool:
    return bool(getattr(sys.modules.get("ray"), "__harness_stub__", False))


def pytest_configure(config):  # pytest plugin hook (-p harness.devicecheck.raystub)
    install()
