#!/usr/bin/env bash
# The cluster rehearsal (issue 34; docs/gpu.md "The cluster rehearsal"): a two-node SLURM cluster on this one machine
# (slurmd n1 at 127.0.0.2, n2 at 127.0.0.3, accounting on MariaDB), then `pytest -m slurm tests/multinode` in the
# OpenRLHF venv: Ray across both nodes through the launcher's head/worker protocol (a clean run, a head that raises,
# a head that dies), one sweeps/rehearsal.yaml cell with openrlhf.nodes: 2 through `harness sweep --executor slurm`,
# and the same cell warned like SLURM before a time limit (checkpoint, requeue, resume). Always tears down: the
# cluster, and any Ray its jobs left (scoped to this run's Ray temp root, never `ray stop`).
#
#   scripts/ci_multinode.sh                 install (if needed), start, test, stop
#   scripts/ci_multinode.sh -- -k ray       extra pytest arguments after --
#
# Needs root (apt, daemons). Environment: OPENRLHF_VENV (default .venv-openrlhf; built by scripts/setup_openrlhf.sh
# when missing), SLURM_CI_PROCTRACK=cgroup to run the cluster with proctrack/cgroup instead of linuxproc.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/sbin:/sbin:$PATH"
VENV="${OPENRLHF_VENV:-.venv-openrlhf}"
[ "$(id -u)" = 0 ] || { echo "ci_multinode: needs root (apt-get, slurm and munge daemons)" >&2; exit 1; }
[ "${1:-}" = "--" ] && shift
t0=$(date +%s)

scripts/ci_slurm.sh --install-only
scripts/setup_openrlhf.sh "$VENV"
D=$(mktemp -d /tmp/harness-multinode.XXXXXX)
export HARNESS_RAY_TMP; HARNESS_RAY_TMP=$(mktemp -d /tmp/hray-ci.XXXXXX)   # short: Ray's socket paths < 108 chars
export RAY_DEDUP_LOGS=0 RAY_USAGE_STATS_ENABLED=0
cleanup() {
  "$VENV/bin/python" - <<'PY' || true
import os
from pathlib import Path
from harness.backends.openrlhf.raycluster import stop_node
for d in sorted(Path(os.environ["HARNESS_RAY_TMP"]).glob("*/*")):
    found, killed = stop_node(d, grace_s=3)
    if found:
        print(f"ci_multinode: stopped {found} Ray processes left in {d}")
PY
  scripts/slurm/cluster.sh down "$D" || true
  rm -rf "$D" "$HARNESS_RAY_TMP"
}
trap cleanup EXIT INT TERM
scripts/slurm/cluster.sh up "$D" --nodes 2
eval "$(scripts/slurm/cluster.sh env "$D")"
PYTHONPATH="$PWD" "$VENV/bin/python" -m pytest -m slurm tests/multinode -q -s -p no:cacheprovider "$@"
echo "ci_multinode: done in $(( $(date +%s) - t0 )) s"
