#!/usr/bin/env bash
# CI for the results site in a real browser: install Debian's chromium and chromium-driver (idempotent; root), the
# project's `browser` extra (selenium) into .venv, then run the `browser` suite (tests/site/test_browser.py).
# Nothing is downloaded at test time: selenium drives /usr/bin/chromium through /usr/bin/chromedriver.
# Usage: scripts/ci_browser.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium chromium-driver
fi
make setup
.venv/bin/python -m pip install -q -c constraints.txt -e ".[browser]"
SE_OFFLINE=true .venv/bin/python -m pytest -q -m browser tests/site "$@"
