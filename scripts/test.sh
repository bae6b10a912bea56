#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run calls this): install what the tests need, start the
# real Docker engine, run every gate, then pytest. Fails loudly; never skips Docker tests.
#
# pytest runs on several workers (pytest-xdist): the first engine's whole suite on
# MONKY_TEST_WORKERS (default 6) and, at the same time, the second engine's files on
# MONKY_TEST_WORKERS_SECOND (default 3). The engine-facing tests mostly wait (stable windows,
# bakes, restarts), so they overlap well on two cores. Extra arguments select tests for the first
# engine only (scripts/test.sh tests/e2e/test_jobs.py -x).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/heartbeat.sh

step() { printf '\n==> %s (%s)\n' "$*" "$(date +%T)"; }

# The `ziti` program for the e2e tier's OpenZiti network (tests/e2e/test_ziti_tick.py and the
# fault tests: monky_deployd_testkit.zitinet), built from the Go module proxy once per machine
# (minutes cold; a warm machine finds /opt/monky-ziti/<version>/ziti at once): in the background
# from the start. pytest does not wait for it: the session fixture ziti_net runs
# scripts/ziti-up.sh itself, which waits on this build's lock, so only the worker that needs the
# network waits. Its exit status is checked at the end.
ziti_log="$(mktemp /tmp/monky-ziti-build.XXXXXX)"
step "ziti (scripts/ziti-up.sh) in the background (log: $ziti_log)"
scripts/ziti-up.sh >"$ziti_log" 2>&1 &
ziti_build=$!

step "python venv (.venv) with the package and its test extras"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
# --prefer-binary: openziti installs only as its 0.6.0 wheel here (newer releases are sdists whose
# build downloads the C SDK).
waiting "installing the venv's packages" \
  .venv/bin/pip install -q --disable-pip-version-check --prefer-binary -e '.[test]'

step "system packages and the Docker engine"
MONKY_VENV="$PWD/.venv" waiting "setting up the engines (scripts/docker-up.sh)" scripts/docker-up.sh

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

workers="${MONKY_TEST_WORKERS:-6}" second_workers="${MONKY_TEST_WORKERS_SECOND:-3}"
if (($# > 0)); then
  step "pytest on $workers workers: $*"
  exec pytest -n "$workers" --dist worksteal "$@"
fi

# The estate's engine kind: the engine-facing files again on the second engine (Docker 26,
# containerd image store; scripts/docker-up.sh started it), with DOCKER_HOST pointing at it (the
# lab's docker commands and the agent's docker.host follow it). Its tests hold that engine
# shared, a test that restarts it holds it alone (monky_deployd_testkit.engines.in_use); those
# restart tests run in this pass only.
second_log="$(mktemp /tmp/monky-pytest-second-engine.XXXXXX)"
step "pytest on the second engine (Docker 26, containerd image store), $second_workers workers, in the background (log: $second_log)"
DOCKER_HOST=unix:///run/monky-docker26/docker.sock pytest -n "$second_workers" --dist worksteal --durations=25 -m docker \
  tests/e2e/test_tick_docker.py tests/e2e/test_lifecycle.py tests/e2e/test_bake_engine.py \
  tests/e2e/test_rollback.py tests/e2e/test_repin.py tests/e2e/test_prune.py \
  tests/e2e/test_jobs.py tests/e2e/test_drift.py tests/e2e/test_policy_allowlist.py \
  tests/e2e/test_policy_names.py tests/e2e/test_builds_names.py tests/e2e/test_held_paths.py \
  tests/e2e/test_attack45_paths.py \
  tests/e2e/test_kill_replacement.py tests/e2e/test_judged_model.py tests/e2e/test_bundle_check.py \
  tests/e2e/test_one_reading.py \
  tests/e2e/test_environment_values.py \
  tests/integration/box/test_preflight.py tests/integration/box/test_verify_docker.py \
  tests/integration/box/test_policy_names_engine.py tests/integration/box/test_image_refs.py \
  >"$second_log" 2>&1 &
second=$!
trap 'kill "$second" 2>/dev/null || true' EXIT  # interrupted: the background pass stops too

step "pytest on the first engine (Docker 20.10), $workers workers"
first_rc=0
pytest -n "$workers" --dist worksteal --durations=25 -m "not second_engine_restart" || first_rc=$?

step "pytest on the second engine: its output (it ran beside the first)"
tail -n +1 --pid="$second" -f "$second_log"
second_rc=0
wait "$second" || second_rc=$?
ziti_rc=0
wait "$ziti_build" || ziti_rc=$?
((ziti_rc == 0)) || cat "$ziti_log"
printf '\n==> done (%s): first engine exit %d, second engine exit %d, ziti build exit %d\n' \
  "$(date +%T)" "$first_rc" "$second_rc" "$ziti_rc"
((first_rc == 0 && second_rc == 0 && ziti_rc == 0))
