#!/usr/bin/env bash
# The fast tier, for the edit-test loop: the unit, repository and fuzz tests with fewer generated
# examples (MONKY_FUZZ=quick: tests/conftest.py, tests/fuzz/strategies.py), everything that
# needs no Docker engine and no server process; under a minute here.
# It does not install anything: run scripts/test.sh (the whole suite, CI's command) once first.
# Extra arguments go to pytest (scripts/test-fast.sh -k mask).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH" MONKY_FUZZ="${MONKY_FUZZ:-quick}"
exec pytest -q -p no:cacheprovider -m "not docker" tests/unit tests/repo tests/fuzz "$@"
