"""Results: run directories -> leaderboards, figures and entropy-law fits (``harness table|plot|fit``).

from harness.results.collect import collect
from harness.results.table import build_leaderboard, render
from harness.results.fit import fit_entropy_law
from harness.results.report import write_sweep_report
"""
