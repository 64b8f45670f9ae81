"""Sweeps: a YAML spec expands to cells (one resolved run config each), submitted through submitit.

    spec = load_spec("sweeps/quickstart.yaml")
    cells = expand(spec)                       # validated with harness.run.config.load_config
    submit_cells(cells, runs_dir, executor="local")
    sweep_status(runs_dir)                     # rebuilt from the cell directories, never from a job id

Modules, one job each (dotted key paths live in ``harness.run.keypaths``): ``spec`` (parse + validate the YAML),
``resources``
(resource keys -> submitit parameters), ``expand`` (grid x zip x seeds - exclude -> cells, ids, aliases),
``cells`` (the cell directory: materialise, job records), ``job`` (what runs inside a job), ``submit``
(job arrays per resource group), ``status`` (pending/running/done/failed from the cell directories and
the scheduler); the commands ``harness sweep`` and ``harness status`` live in ``harness.commands.sweep`` and
``harness.commands.status``.
"""

from harness.sweeps.cells import cell_dir
from harness.sweeps.expand import Cell, expand
from harness.sweeps.spec import SpecError, SweepSpec, load_spec

__all__ = ["Cell", "SpecError", "SweepSpec", "cell_dir", "expand", "load_spec"]
