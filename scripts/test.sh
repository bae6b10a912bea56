#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): install what the tests need, start the
# real Docker engine, run every gate, then pytest. Fails loudly; never skips Docker tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "python venv (.venv) with the package and its test extras"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
# --prefer-binary: openziti installs only as its 0.6.0 wheel here (newer releases are sdists whose
# build downloads the C SDK).
.venv/bin/pip install -q --disable-pip-version-check --prefer-binary -e '.[test]'

step "system packages and the Docker engine"
MONKY_VENV="$PWD/.venv" scripts/docker-up.sh

export PATH="$PWD/.venv/bin:$PATH"

step "ruff format --check"
ruff format --check .
step "ruff check"
ruff check .
step "mypy --strict src tests"
mypy --strict src tests

step "bash -n and shellcheck on every shell script"
mapfile -t scripts < <(git ls-files '*.sh' 'packaging/install.sh' '.ci/run' 'packaging/debian/*inst' 'packaging/debian/*rm' | sort -u)
for s in "${scripts[@]}"; do bash -n "$s"; done
shellcheck -S warning "${scripts[@]}"

if [[ -d ansible ]]; then
  step "yamllint and ansible-lint (production profile)"
  yamllint -s ansible .gitlab-ci.yml
  (cd ansible && ansible-lint --offline --profile production)
fi

step "pytest"
pytest "$@"

# The estate's engine kind: the engine-facing e2e files again on the second engine (Docker 26,
# containerd image store; scripts/docker-up.sh started it), with DOCKER_HOST pointing at it (the
# lab's docker commands and the agent's docker.host follow it). Only for the whole suite.
if (($# == 0)); then
  step "pytest on the second engine (Docker 26, containerd image store)"
  DOCKER_HOST=unix:///run/monky-docker26/docker.sock pytest -m docker \
    tests/e2e/test_tick_docker.py tests/e2e/test_lifecycle.py tests/e2e/test_bake_engine.py \
    tests/e2e/test_rollback.py tests/e2e/test_repin.py tests/e2e/test_prune.py \
    tests/e2e/test_jobs.py tests/e2e/test_drift.py tests/e2e/test_policy_allowlist.py \
    tests/e2e/test_kill_replacement.py \
    tests/integration/box/test_preflight.py tests/integration/box/test_verify_docker.py
fi
