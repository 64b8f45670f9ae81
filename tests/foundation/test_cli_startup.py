"""`harness --help` and the commands that need no tensors start without importing torch or pandas (issue 28):
each command module registers its parser with light imports and loads the heavy parts inside its handler."""

import subprocess
import sys

from harness.results.cli import FORMATS


def _imported_after(code: str) -> set[str]:
    heavy = "('torch', 'pandas', 'transformers')"
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m for m in {heavy} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def test_help_imports_no_torch_pandas_or_transformers():
    code = "from harness.cli import build_parser\nbuild_parser().format_help()"
    assert _imported_after(code) == set()


def test_import_harness_is_light_and_the_method_api_loads_on_use():
    assert _imported_after("import harness") == set()
    assert "torch" in _imported_after("import harness\nharness.get_method('grpo')")


def test_table_formats_listed_by_the_cli_are_the_tables():
    from harness.results.table import FORMATS as TABLE_FORMATS

    assert sorted(FORMATS) == sorted(TABLE_FORMATS)
