#!/usr/bin/env bash
# The main job, on a fresh machine, in one command: a tick, a no-op tick, `status`, `plan` after
# a new revision (when this version has it) and `doctor`, against loopback reference services,
# a real registry and the real Docker engine (see scripts/demo.py).
# When no Docker engine answers, this starts one with scripts/docker-up.sh (which installs
# docker.io and friends with apt-get and starts dockerd), or says exactly why it cannot.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check --prefer-binary -e '.[test]'

ready() {  # the engine, the compose plugin and the registry tools the demo uses
  command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 &&
    docker compose version >/dev/null 2>&1 &&
    command -v docker-registry >/dev/null 2>&1 && command -v htpasswd >/dev/null 2>&1
}

if ! ready; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "demo: no Docker engine (with compose, docker-registry, htpasswd) answers for user" >&2
    echo "demo: $(id -un), and setting one up" >&2
    echo "demo: needs root (scripts/docker-up.sh installs packages with apt-get and starts" >&2
    echo "demo: dockerd). Run \`sudo scripts/docker-up.sh\` (or add $(id -un) to the docker" >&2
    echo "demo: group if an engine already runs), then run scripts/demo.sh again." >&2
    exit 1
  fi
  echo "demo: no Docker engine (or compose, docker-registry, htpasswd); running scripts/docker-up.sh"
  if ! MONKY_VENV="$PWD/.venv" scripts/docker-up.sh; then
    echo "demo: scripts/docker-up.sh could not start the engine (its words are above);" >&2
    echo "demo: the demo needs a running Docker engine and the compose plugin." >&2
    exit 1
  fi
fi
exec .venv/bin/python scripts/demo.py "$@"
