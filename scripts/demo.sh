#!/usr/bin/env bash
# The main job: one real tick against loopback reference services (see scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check --prefer-binary -e '.[test]'
exec .venv/bin/python scripts/demo.py "$@"
