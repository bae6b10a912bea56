#!/usr/bin/env bash
# Create the docker image local/debian:bookworm (a minimal, real Debian 12 root filesystem) when it
# is absent. Used by the packaging and Ansible tests to exercise dpkg, install.sh and the role on a
# fresh box. Idempotent and cached: an existing image is left alone. Concurrent callers serialise on
# a lock file. The Debian mirror is the one this machine's apt is configured with (read from
# /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list), never a hard-coded internet address.
#
# Environment: DEBIAN_IMAGE (default local/debian:bookworm), DEBIAN_MIRROR (override the mirror).
set -euo pipefail
# shellcheck source=scripts/heartbeat.sh
source "$(dirname "${BASH_SOURCE[0]}")/heartbeat.sh"  # waiting WHAT CMD...

image="${DEBIAN_IMAGE:-local/debian:bookworm}"
suite=bookworm
lock="/tmp/.debian-image-${image//[^A-Za-z0-9]/_}.lock"

have_image() { docker image inspect "$image" >/dev/null 2>&1; }

# The first URI of an apt source that carries the plain suite (not -security/-updates).
configured_mirror() {
  local f
  shopt -s nullglob
  for f in /etc/apt/sources.list.d/*.sources; do
    # deb822: stanzas separated by blank lines; take URIs of a stanza whose Suites has "$suite".
    awk -v suite="$suite" '
      BEGIN { RS=""; FS="\n" }
      {
        uris=""; ok=0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/)   { sub(/^URIs:[ \t]*/, "", $i); split($i, u, /[ \t]+/); uris=u[1] }
          if ($i ~ /^Suites:/) { n = split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == suite) ok=1 }
        }
        if (ok && uris != "") { print uris; exit }
      }' "$f"
  done | head -n 1
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r "$f" ]] || continue
    awk -v suite="$suite" '$1 == "deb" && $0 !~ /\[/ && $3 == suite { print $2; exit }
                           $1 == "deb" && $2 ~ /^\[/ && $4 == suite { print $3; exit }' "$f"
  done | head -n 1
}

if have_image; then
  echo "debian-image: $image present"
  exit 0
fi

exec 9>"$lock"
flock 9
if have_image; then # another caller built it while we waited
  echo "debian-image: $image present"
  exit 0
fi

mirror="${DEBIAN_MIRROR:-$(configured_mirror | head -n 1)}"
if [[ -z "$mirror" ]]; then
  echo "debian-image: FAILED: no apt source for suite '$suite' in /etc/apt/sources.list{,.d}; set DEBIAN_MIRROR" >&2
  exit 1
fi
command -v debootstrap >/dev/null || {
  echo "debian-image: FAILED: debootstrap missing (scripts/docker-up.sh installs it)" >&2
  exit 1
}

root="$(mktemp -d /tmp/debian-image.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "debian-image: debootstrap --variant=minbase $suite from $mirror (about 30 s)"
if ! waiting "running debootstrap" debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1; then
  echo "debian-image: FAILED: debootstrap; last lines of $root.log:" >&2
  tail -n 20 "$root.log" >&2
  exit 1
fi
rm -f "$root.log"
# apt inside the container uses the same mirror (debootstrap wrote sources.list with it); keep
# the image small and reproducible.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import - "$image" >/dev/null
echo "debian-image: built $image"
