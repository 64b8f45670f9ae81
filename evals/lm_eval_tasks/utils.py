"""lm-eval glue for the harness_* task YAMLs in this folder: our data loaders and our graders.

Offline data: pass ``--metadata '{"data_dir": "DIR"}'`` (or ``{"fixtures": true}``) to lm_eval, or set
HARNESS_EVAL_DATA_DIR / HARNESS_EVAL_FIXTURES=1. Needs ``harness.evals`` importable (pip install -e .).
"""

from harness.evals.lm_eval_bridge import load_docs, process_results  # noqa: F401
from harness.evals.suites import SUITES

for _name in SUITES.names():
    globals()[f"load_{_name}"] = (lambda n: lambda **meta: load_docs(n, **meta))(_name)
