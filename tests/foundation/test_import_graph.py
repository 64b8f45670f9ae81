"""The layers of the tree (docs/design.md): every package of the project (harness and the folders it maps in: evals,
baselines, methods) has a rank, no module imports a module of a higher rank except a registry (the backend
registry and protocol), there is no import circle, the core config imports no backend, and no module outside
harness/backends names a backend, neither by import nor by a string in its code."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# source folder -> the package it is imported as (harness/__init__.py maps the top-level folders in)
PACKAGES = {
    "harness": "harness",
    "evals": "harness.evals",
    "baselines": "harness.baselines",
    "methods": "harness.methods",
}
# a device check runs each backend's own code on a borrowed machine by design: it may name them
MAY_NAME_BACKENDS = ("harness.devicecheck",)
# The method folders cite peer implementations (verl, TRL, OpenRLHF) as the conventions a loss follows
# (`convention: trl`, `variant: trl`). A method never sees a backend or a config (the contract is plain tensors, and
# the import rule keeps backends out), so such a string there names a peer convention, never a backend.
PEER_CONVENTIONS = ("harness.methods", "harness.baselines")
# Rank of each layer, lowest first: a module imports only its own rank or lower. The root modules (errors, io,
# registry, provenance) are the floor; `harness` itself is the method API's lazy facade over the kernel.
RANKS = {
    "harness.errors": 0,
    "harness.io": 0,
    "harness.registry": 0,
    "harness.provenance": 0,
    "harness": 1,
    "harness.kernel": 1,
    "harness.methods": 2,
    "harness.baselines": 2,
    "harness.evals": 2,
    "harness.data": 3,
    "harness.run": 4,
    "harness.backends": 5,
    "harness.sweeps": 6,
    "harness.results": 6,
    "harness.theory": 6,
    "harness.site": 7,
    "harness.studies": 7,
    "harness.devicecheck": 7,
    "harness.commands": 8,
    "harness.cli": 9,
    "harness.__main__": 9,
}
# registries and the protocol: a lower layer reaches backends only through these (get_backend, Backend)
REGISTRIES = {"harness.backends", "harness.backends.base"}
# the upward imports left, each named (at most 2): the rehearsal's check finds the cells of the sweep it rehearsed
# through the sweep layer's public API
UPWARD_ALLOWED = {("harness.backends.openrlhf.rehearsal.check", "harness.sweeps")}


def _module(path: Path) -> str:
    for folder, package in PACKAGES.items():
        if path.is_relative_to(ROOT / folder):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            return ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
    raise ValueError(path)


def import_graph() -> dict[str, set[str]]:
    """module -> project modules it imports anywhere in its body (inside functions too)."""
    files = [p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    paths = {_module(p): p for p in files}
    graph = {m: set() for m in paths}
    for mod, path in paths.items():
        pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1] + [base] * bool(base))
                subs = [f"{base}.{a.name}" for a in node.names]
                names = [s for s in subs if s in paths] or [base]  # `from pkg import module` -> that module
            else:
                continue
            for name in names:
                while name and name not in paths:
                    name = name.rpartition(".")[0]
                if name and name != mod:
                    graph[mod].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, out = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def rank(module: str) -> int:
    best = max((k for k in RANKS if module == k or module.startswith(k + ".")), key=len)
    return RANKS[best]


def upward_imports(graph) -> list[tuple[str, str]]:
    return sorted(
        (mod, dep)
        for mod, deps in graph.items()
        for dep in deps
        if rank(dep) > rank(mod) and dep not in REGISTRIES and not dep.startswith("harness.methods")
    )


def test_every_module_has_a_layer_and_none_imports_upward():
    graph = import_graph()
    assert all(rank(m) >= 0 for m in graph)  # every module falls under a ranked package (max() raises otherwise)
    root = sorted(p.stem for p in (ROOT / "harness").glob("*.py") if p.stem != "__init__")
    assert len(root) <= 8, root  # the flat root holds only the floor and the entry points
    assert set(upward_imports(graph)) <= UPWARD_ALLOWED


def test_the_layer_check_finds_an_upward_import():
    graph = {"harness.kernel.ops": {"harness.run.config"}, "harness.run.config": {"harness.backends"}}
    assert upward_imports(graph) == [("harness.kernel.ops", "harness.run.config")]


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_package_has_import_cycles():
    graph = import_graph()
    assert "harness.backends.pocket.models" in graph and graph["harness.run.config"]  # the walk saw the package
    assert "harness.evals.suites" in graph and "harness.methods.kl_cov" in graph  # and the mapped folders
    assert cycles(graph) == []


def test_no_module_outside_the_backends_names_a_backend():
    """Sweeps, evals, results and commands reach backends only through harness.backends (get_backend, the
    protocol); a backend's own modules (harness.backends.<name>...) stay behind it."""
    graph = import_graph()
    backends = {m.split(".")[2] for m in graph if m.startswith("harness.backends.") and m.count(".") >= 2}
    backends -= {"base"}
    assert {"pocket", "openrlhf", "trl"} <= backends
    offenders = sorted(
        (mod, dep)
        for mod, deps in graph.items()
        if not mod.startswith("harness.backends") and not mod.startswith(MAY_NAME_BACKENDS)
        for dep in deps
        if dep.startswith("harness.backends.") and dep.split(".")[2] in backends
    )
    assert offenders == []


def backend_strings(source: str, names) -> list[tuple[int, str]]:
    """(line, string) of each string constant in ``source`` (docstrings excepted) that uses a backend name as a config
    value, key or prefix: the whole string (``"pocket"``), or the name before ``.``, ``:``, ``/`` or ``-`` and more
    (``openrlhf.nodes``, ``pocket-0.3m``, ``openrlhf.log``, ``harness.backends.pocket.models``); prose
    ("the openrlhf backend") and a document's file name (``docs/pocket.md``) are not."""
    pattern = re.compile(rf"(?<![\w])({'|'.join(map(re.escape, names))})(?!\.md\b)(?=$|[.:/-]\w)")
    tree = ast.parse(source)
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return sorted(
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        if pattern.search(node.value)
    )


def test_the_string_check_finds_a_backend_name():
    source = (
        'def f(cfg):\n    """On pocket: openrlhf.nodes is read (a docstring may name them)."""\n'
        '    if cfg.backend == "pocket":\n        return "openrlhf.log", f"{cfg}pocket-0.3m"\n'
        '    return "see docs/pocket.md", "the openrlhf backend", "pocketful", "trl"\n'
    )
    found = backend_strings(source, ("pocket", "openrlhf", "trl"))
    assert found == [(3, "pocket"), (4, "openrlhf.log"), (4, "pocket-0.3m"), (5, "trl")]


def test_no_module_outside_the_backends_names_a_backend_in_its_code():
    """The core reaches backend knowledge through the protocol (defaults, sections, log files, packages, suite
    capabilities), never by a backend's name written into a string of its code."""
    graph = import_graph()
    names = {m.split(".")[2] for m in graph if m.startswith("harness.backends.") and m.count(".") >= 2} - {"base"}
    assert {"pocket", "openrlhf", "trl"} <= names
    files = [p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {text!r}"
        for path in files
        if not _module(path).startswith(("harness.backends", *MAY_NAME_BACKENDS, *PEER_CONVENTIONS))
        for line, text in backend_strings(path.read_text(), sorted(names))
    ]
    assert offenders == []


def test_core_config_imports_no_backend():
    assert not any(
        m.startswith("harness.backends") for m in import_graph()["harness.run.config"] - {"harness.backends"}
    )
    code = "import sys, harness.run.config; print(sorted(m for m in sys.modules if m.startswith('harness.backends')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_cli_and_a_dry_run_sweep_work_without_submitit(tmp_path):
    """The device machine and laptops without submitit can still list methods, train and plan a sweep; submitit is
    imported only when cells are submitted."""
    code = (
        "import sys; sys.modules['submitit'] = None\n"
        "from harness.cli import main\n"
        "assert main(['methods']) == 0\n"
        f"assert main(['sweep', {str(ROOT / 'sweeps' / 'quickstart.yaml')!r}, '--dry-run',"
        f" '--runs-dir', {str(tmp_path / 'runs')!r}]) == 0\n"
        "assert 'submitit' not in [m for m, v in sys.modules.items() if v is not None]\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
