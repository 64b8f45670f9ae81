"""`harness --help` and the commands that need no tensors start without importing torch or pandas (issue 28):
each command module registers its parser with light imports and loads the heavy parts inside its handler."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands.table import FORMATS

ROOT = Path(__file__).resolve().parents[2]


def _imported_after(code: str) -> set[str]:
    heavy = "('torch', 'pandas', 'transformers')"
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m for m in {heavy} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_help_imports_no_torch_pandas_or_transformers():
    code = "from harness.cli import build_parser\nbuild_parser().format_help()"
    assert _imported_after(code) == set()


def test_import_harness_is_light_and_torch_loads_on_first_tensor_use():
    assert _imported_after("import harness") == set()
    assert _imported_after("import harness\nharness.get_method('grpo')") == set()  # methods import torch lazily
    first_use = "import harness.kernel.ops as ops\nops.masked_mean(ops.torch.ones(2), ops.torch.ones(2))"
    assert "torch" in _imported_after(first_use)


@pytest.mark.parametrize(
    "argv",
    [
        ["methods"],
        ["methods", "kl_cov"],
        ["sweep", "sweeps/quickstart.yaml", "--dry-run"],  # config and method validation, population planning
        ["sweep", "sweeps/paper_qwen25.yaml", "--dry-run"],  # OpenRLHF commands and memory plans
        ["train", "sweeps/configs/pocket_countdown.yaml", "--dry-run"],
        ["status", "sweeps/quickstart.yaml", "--runs-dir", "{tmp}/none"],  # every cell's state, from the spec
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_commands_that_need_no_tensors_import_no_torch(argv, tmp_path):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if argv[0] == "sweep":
        argv += ["--runs-dir", str(tmp_path / "runs")]
    code = (
        "import contextlib, io, sys\n"
        f"sys.argv = ['harness', *{argv!r}]\n"
        "from harness.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(sys.argv[1:])\n"
        "assert code == 0, code\n"
    )
    assert "torch" not in _imported_after(code)


def test_a_lazy_module_is_the_real_module_once_used():
    import harness.kernel.lazy as lazy

    assert lazy.lazy_import("sys") is sys  # imported already: the module itself
    proxy = lazy.LazyModule("json")
    assert "not imported yet" in repr(proxy) or "json" in sys.modules
    assert proxy.dumps([1]) == "[1]" and proxy.dumps is __import__("json").dumps
    with pytest.raises(AttributeError):
        _ = proxy.no_such_name


def test_table_formats_listed_by_the_cli_are_the_tables():
    from harness.commands.table import METRICS
    from harness.results.table import FORMATS as TABLE_FORMATS
    from harness.results.table import METRICS as TABLE_METRICS

    assert sorted(FORMATS) == sorted(TABLE_FORMATS)
    assert list(METRICS) == list(TABLE_METRICS)  # --metric's choices, default first
