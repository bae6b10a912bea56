#!/usr/bin/env bash
# The `ziti` program (controller, edge router and CLI in one binary), built from the Go module
# proxy once per machine, and a one-box OpenZiti network on 127.0.0.1 for the tests and by hand.
#
#   scripts/ziti-up.sh            build (or find) the binary; prints its path
#   scripts/ziti-up.sh start DIR [TENANCY_PORT OPENBAO_PORT]
#                                 build, then start a network in DIR (PKI, controller, tunneler-
#                                 enabled edge router, the tenancy and OpenBao services hosted to
#                                 127.0.0.1:TENANCY_PORT / :OPENBAO_PORT (default 18080, 8200), their
#                                 policies, an enrolled identity DIR/identities/box.json) in the
#                                 foreground; DIR/network.json says the ports; Ctrl-C stops it
#
# The release is pinned (MONKY_ZITI_VERSION, default below): the line production runs whose module
# the Go module proxy serves whole (v1.6.0; see README's test section for why this one). `go install
# github.com/openziti/ziti/ziti@<v>` is refused by the proxy here, so the build is a small main
# module of our own (go.mod + tools.go) written into the cache dir. The binary lands in
# $MONKY_ZITI_ROOT/<version>/ziti (default /opt/monky-ziti): a warm machine finds it and does not
# rebuild. A lock keeps two callers (scripts/test.sh's background build and a test) from building
# twice. build.json beside the binary records the cold build's seconds and the binary's size.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${MONKY_ZITI_VERSION:-v1.6.0}"
root="${MONKY_ZITI_ROOT:-/opt/monky-ziti}"
dir="$root/$version"
bin="$dir/ziti"

build() {
  mkdir -p "$dir/src"
  exec 9>"$dir/.build.lock"
  flock 9
  if [[ -x "$bin" ]]; then
    return 0
  fi
  command -v go >/dev/null || PATH="/usr/local/go/bin:$PATH" # the toolchain's usual home
  command -v go >/dev/null || {
    echo "ziti-up: no Go toolchain on PATH (the project's machines have one: see README's test section)" >&2
    exit 1
  }
  cat >"$dir/src/go.mod" <<EOF
module monky.local/zitibuild

go 1.24
EOF
  cat >"$dir/src/tools.go" <<'EOF'
//go:build tools

// Package tools pins the ziti program for scripts/ziti-up.sh.
package tools

import _ "github.com/openziti/ziti/ziti"
EOF
  local start end
  start=$(date +%s)
  echo "ziti-up: building github.com/openziti/ziti/ziti@$version into $bin (a cold build takes minutes)" >&2
  (
    cd "$dir/src"
    export GOFLAGS=-mod=mod
    go get "github.com/openziti/ziti@$version"
    go build -trimpath \
      -ldflags="-s -w -X github.com/openziti/ziti/common/version.Version=$version -X github.com/openziti/ziti/common/version.Revision=monky-build" \
      -o "$bin.tmp" github.com/openziti/ziti/ziti
  ) >"$dir/build.log" 2>&1 || {
    tail -n 30 "$dir/build.log" >&2
    echo "ziti-up: the build failed (whole log: $dir/build.log)" >&2
    exit 1
  }
  end=$(date +%s)
  mv -f "$bin.tmp" "$bin"
  printf '{"version": "%s", "build_seconds": %d, "size_bytes": %d, "go": "%s"}\n' \
    "$version" $((end - start)) "$(stat -c %s "$bin")" "$(go env GOVERSION)" >"$dir/build.json"
  echo "ziti-up: built in $((end - start)) s: $(cat "$dir/build.json")" >&2
}

build
exec 9>&- # the lock is the build's: a network started below must not hold it
case "${1:-}" in
  "")
    echo "$bin"
    ;;
  start)
    [[ $# -eq 2 || $# -eq 4 ]] || {
      echo "usage: scripts/ziti-up.sh start DIR [TENANCY_PORT OPENBAO_PORT]" >&2
      exit 2
    }
    shift
    python="${MONKY_PYTHON:-.venv/bin/python}"
    MONKY_ZITI_BIN="$bin" exec "$python" -m monky_deployd_testkit.zitiup "$@"
    ;;
  *)
    echo "usage: scripts/ziti-up.sh [start DIR [TENANCY_PORT OPENBAO_PORT]]" >&2
    exit 2
    ;;
esac
