#!/usr/bin/env bash
# The SLURM suite on a fresh Debian machine: install the packages, start a single-node cluster with real
# accounting (slurmdbd on MariaDB), run `pytest -m slurm`, and always stop the cluster on exit.
#
#   scripts/ci_slurm.sh                 install (if needed), start, test, stop
#   scripts/ci_slurm.sh --install-only  only the apt packages
#   scripts/ci_slurm.sh -- -k requeue   extra pytest arguments after --
#
# Needs root (apt, daemons). Idempotent: packages already present are not reinstalled, and each run uses a
# fresh cluster directory (a fresh StateSaveLocation and accounting DB) that is removed afterwards.
# Environment: PY (default .venv/bin/python; `make setup` builds it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/sbin:/sbin:$PATH"
PY=${PY:-.venv/bin/python}

[ "$(id -u)" = 0 ] || { echo "ci_slurm: needs root (apt-get, slurm and munge daemons)" >&2; exit 1; }

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurm-wlm)
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "ci_slurm: installing ${missing[*]}"
    apt-get -o DPkg::Lock::Timeout=300 update -q
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q \
      slurm-wlm munge slurmdbd mariadb-server
  fi
}

install_packages
[ "${1:-}" = "--install-only" ] && exit 0
[ "${1:-}" = "--" ] && shift
[ -x "$PY" ] || make setup

D=$(mktemp -d /tmp/harness-slurm.XXXXXX)
cleanup() { scripts/slurm/cluster.sh down "$D" || true; rm -rf "$D"; }
trap cleanup EXIT INT TERM
scripts/slurm/cluster.sh up "$D"
eval "$(scripts/slurm/cluster.sh env "$D")"
"$PY" -m pytest -m slurm tests/slurm -q -p no:cacheprovider "$@"
