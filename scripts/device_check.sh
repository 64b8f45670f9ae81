#!/usr/bin/env bash
# GPU checks of the harness on a borrowed GPU machine as it is (no network, no venv): docs/gpu.md.
#
#   scripts/device_check.sh --out DIR            # on the GPU machine: full sizes, <= 8 minutes
#   scripts/device_check.sh --out DIR --cpu      # here: every check at small sizes, the CPU standing in
#   (also --only environment,losses,entropy,pocket,openrlhf; --device cuda:1)
#
# Writes DIR/device_check.json (the report) and DIR/device_check.log. Never downloads anything: wheels in
# .device_wheels/ (made here by scripts/device_wheels.sh, carried along) are installed with --no-index into
# $HARNESS_DEVICE_SITE (default /tmp/harness-device-site), and only those whose distribution is missing on the
# machine and whose tags fit its python. env: PYTHON (default python3; may carry flags, e.g. "python3 -S"),
# HARNESS_DEVICE_WHEELS (wheel folder, default .device_wheels; empty = install nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
read -ra PY <<< "${PYTHON:-python3}"
WHEELS="${HARNESS_DEVICE_WHEELS-.device_wheels}"
SITE="${HARNESS_DEVICE_SITE:-/tmp/harness-device-site}"
if [[ -n "$WHEELS" ]] && compgen -G "$WHEELS/*.whl" >/dev/null; then
  mapfile -t TODO < <("${PY[@]}" - "$WHEELS" <<'PYEOF'
import glob, importlib.metadata as md, os, sys
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
ours = set(sys_tags())
for w in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    name, _, _, tags = parse_wheel_filename(os.path.basename(w))
    try:
        md.version(name)
        continue                      # the machine has it: never shadow its own version
    except md.PackageNotFoundError:
        pass
    if ours & set(tags):
        print(w)
    else:
        print(f"device_check: skipping {os.path.basename(w)}: no tag fits this python", file=sys.stderr)
PYEOF
  )
  if (( ${#TODO[@]} )); then
    echo "device_check: installing ${#TODO[@]} missing wheel(s) from $WHEELS into $SITE (no index, no deps)" >&2
    "${PY[@]}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "${TODO[@]}" || echo "device_check: wheel install failed; the checks report what is missing" >&2
    rm -rf "$SITE/tests"   # openrlhf's wheel ships a top-level `tests` package
  fi
fi
export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "${PY[@]}" -m harness.devicecheck "$@"
