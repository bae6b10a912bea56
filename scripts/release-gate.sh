#!/usr/bin/env bash
# Release tag gate (R19): a release tag `v*` is published only when it names exactly the version
# the code carries, `__version__` in src/monky_deployd/__init__.py (the only place it lives).
#
#   scripts/release-gate.sh TAG        e.g. scripts/release-gate.sh "$CI_COMMIT_TAG"
#
# Exit 0: TAG == "v" + __version__. Exit 1: the tag is malformed, differs from __version__, or the
# version cannot be read; one sentence on stderr names which and what to change. Exit 2: usage.
# Environment: MONKY_VERSION_FILE overrides the file __version__ is read from (tests use it).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version_file="${MONKY_VERSION_FILE:-$root/src/monky_deployd/__init__.py}"

if (($# != 1)); then
  echo "release-gate: usage: scripts/release-gate.sh TAG (the tag being released, e.g. v0.1.0)" >&2
  exit 2
fi
tag="$1"

# A release tag is "v" followed by a PEP 440-style public version: digits and dots, optionally a
# pre/post/dev suffix made of letters, digits and dots (v1.2.3, v1.2.3rc1, v1.2.3.post1).
if [[ ! "$tag" =~ ^v[0-9]+(\.[0-9]+)*([a-z0-9.]*)$ ]]; then
  echo "release-gate: REFUSED: '$tag' is not a release tag; release tags are v<__version__>," \
    "e.g. v1.2.3 (letters, digits and dots only after the leading v)" >&2
  exit 1
fi

if [[ ! -r "$version_file" ]]; then
  echo "release-gate: REFUSED: cannot read $version_file, where __version__ lives;" \
    "run the gate from a full checkout of the repository" >&2
  exit 1
fi

# Exactly one line of the form: __version__ = "X" (single or double quotes).
mapfile -t found < <(sed -n -E "s/^__version__[[:space:]]*=[[:space:]]*[\"']([^\"']+)[\"'][[:space:]]*$/\1/p" "$version_file")
if ((${#found[@]} != 1)); then
  echo "release-gate: REFUSED: $version_file must hold exactly one line" \
    "__version__ = \"X.Y.Z\"; found ${#found[@]}" >&2
  exit 1
fi
version="${found[0]}"

if [[ "$tag" != "v$version" ]]; then
  echo "release-gate: REFUSED: tag $tag names version ${tag#v}, but $version_file says" \
    "__version__ = \"$version\"; tag the commit v$version, or bump __version__ and tag again" >&2
  exit 1
fi

echo "release-gate: tag $tag matches __version__ $version"
