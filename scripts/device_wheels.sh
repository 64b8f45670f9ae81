#!/usr/bin/env bash
# Fetch the wheels that scripts/device_check.sh installs on a bare GPU machine (no network there) into
# .device_wheels/ (git-ignored; carried by the device tool). Runs HERE, where PyPI is reachable:
#   pip download --no-deps for CPython 3.12 manylinux x86_64 (the GPU machine's python3 is 3.12), and
#   pip wheel --no-deps for deepspeed (an sdist only; pure-Python build, no ops compiled, ~10 s).
# Writes .device_wheels/MANIFEST.tsv (file, bytes) and prints the total, which must stay well under 64 MiB
# together with the repository. Idempotent: files already there are not fetched again.
# Usage: scripts/device_wheels.sh [DIR]     env: PYTHON (default: .venv/bin/python, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.device_wheels}"
PY="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}"
mkdir -p "$DIR"
PYV="${DEVICE_PYTHON_VERSION:-3.12}"   # the GPU machine's python3 (KINDS.md: 3.12.3)
PLAT=(--only-binary=:all: --python-version "$PYV" --implementation cp --abi "cp${PYV/./}" --abi abi3 --abi none
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
mapfile -t PINS < <(grep -v '^\s*#' scripts/device_wheels.txt | grep -v '^\s*$')
have() {  # a wheel (or deepspeed's built wheel) for this pin is already in DIR
  local name="${1%%==*}" ver="${1##*==}"
  local norm; norm="$(echo "$name" | tr 'A-Z-.' 'a-z__')"
  compgen -G "$DIR/${norm}-${ver}-*.whl" >/dev/null || compgen -G "$DIR/${name}-${ver}-*.whl" >/dev/null
}
for pin in "${PINS[@]}"; do
  have "$pin" && continue
  if [[ "$pin" == deepspeed==* ]]; then
    echo "device_wheels: building $pin (sdist -> pure-Python wheel)"
    "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIR" "$pin"
  else
    echo "device_wheels: $pin"
    "$PY" -m pip download -q --no-deps "${PLAT[@]}" -d "$DIR" "$pin"
  fi
done
( cd "$DIR" && for f in *.whl; do printf '%s\t%s\n' "$f" "$(stat -c %s "$f")"; done ) > "$DIR/MANIFEST.tsv"
total=$(awk -F'\t' '{s += $2} END {print s}' "$DIR/MANIFEST.tsv")
echo "device_wheels: $(wc -l < "$DIR/MANIFEST.tsv") wheels, $((total / 1024)) KiB in $DIR (listed in $DIR/MANIFEST.tsv)"
