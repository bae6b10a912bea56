#!/usr/bin/env bash
# The main job, on a fresh machine, in one command: a tick, a no-op tick, `status`, `plan` after
# a new revision (when this version has it) and `doctor`, against loopback reference services,
# a real registry and the real Docker engine (see scripts/demo.py).
# When no Docker engine answers, this starts one with scripts/docker-up.sh (which installs
# docker.io and friends with apt-get and starts dockerd), or says exactly why it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."

missing() {  # why the engine, the compose plugin or the registry tools are not usable; "" if all are
  local words
  if ! command -v docker >/dev/null 2>&1; then
    echo "there is no docker client on PATH"
  elif ! words=$(docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null) ||
    ! docker info --format '{{.ServerVersion}}' 2>/dev/null | grep -q .; then
    echo "\`docker info\` gets no answer from an engine for user $(id -un): ${words##*$'\n'}"
  elif ! docker compose version >/dev/null 2>&1; then
    echo "the docker compose plugin is missing"
  elif ! command -v docker-registry >/dev/null 2>&1 || ! command -v htpasswd >/dev/null 2>&1; then
    echo "docker-registry or htpasswd (the demo's registry) is not installed"
  fi
}

why=$(missing)
if [[ -n $why ]]; then
  echo "demo: $why"
  if [[ $(id -u) -ne 0 ]]; then
    echo "demo: setting it up needs root (scripts/docker-up.sh installs packages with apt-get" >&2
    echo "demo: and starts dockerd): run \`sudo scripts/docker-up.sh\` (or add $(id -un) to" >&2
    echo "demo: the docker group if an engine already runs), then scripts/demo.sh again." >&2
    exit 1
  fi
  echo "demo: running scripts/docker-up.sh"
  if ! MONKY_VENV="$PWD/.venv" bash -c 'source scripts/heartbeat.sh; waiting "setting up the engines (scripts/docker-up.sh)" scripts/docker-up.sh'; then
    echo "demo: scripts/docker-up.sh could not start the engine (its words are above);" >&2
    echo "demo: the demo needs a running Docker engine and the compose plugin." >&2
    exit 1
  fi
fi
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
# shellcheck source=scripts/heartbeat.sh
source scripts/heartbeat.sh  # waiting WHAT CMD...: says every 20 s what it waits for
waiting "installing the venv's packages" \
  .venv/bin/pip install -q --disable-pip-version-check --prefer-binary -e '.[test]'
exec .venv/bin/python scripts/demo.py "$@"
