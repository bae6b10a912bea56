#!/usr/bin/env bash
# Build dist/monky-deployd_<version>_<arch>.deb (and dist/install.sh, the kit's one-liner with the
# release version filled in).
#
# The package carries a self-contained virtualenv under /opt/monky-deployd built against Debian 12's
# /usr/bin/python3.11: it is built inside the local/debian:bookworm container (scripts/debian-image.sh)
# with python3-venv from apt, and `pip install --prefer-binary` (openziti installs only as its 0.6.0
# wheel here). The version comes from src/monky_deployd/__init__.py (__version__) alone.
#
# Usage: packaging/build-deb.sh [--out DIR]
# Environment: CI_COMMIT_TAG (a v* tag must equal v<__version__>), MONKY_BUILD_PIP_CACHE (pip cache
# dir shared between builds, default ~/.cache/monky-deployd-build/pip).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/dist"
if [[ "${1:-}" == "--out" && -n "${2:-}" ]]; then out="$2"; fi
builder_image=local/monky-debbuild:bookworm
pip_cache="${MONKY_BUILD_PIP_CACHE:-${HOME:-/root}/.cache/monky-deployd-build/pip}"

die() { echo "build-deb: FAILED: $*" >&2; exit 1; }
# shellcheck source=scripts/heartbeat.sh
source "$repo/scripts/heartbeat.sh"  # waiting WHAT CMD...: says every 20 s what it waits for

# The version: __version__ as Python parses it, nothing else.
version="$(python3 - "$repo/src/monky_deployd/__init__.py" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1], encoding="utf-8").read())
for node in tree.body:
    if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
        print(node.value.value)
        break
else:
    sys.exit("no __version__ assignment")
PY
)" || die "cannot read __version__ from src/monky_deployd/__init__.py"
[[ "$version" =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || die "__version__ '$version' is not a Debian version"
if [[ "${CI_COMMIT_TAG:-}" == v* && "$CI_COMMIT_TAG" != "v$version" ]]; then
  die "tag $CI_COMMIT_TAG does not match __version__ $version (tag v$version or bump __version__)"
fi

command -v docker >/dev/null || die "docker missing (scripts/docker-up.sh)"
"$repo/scripts/debian-image.sh" >&2  # its progress on stderr: stdout ends with the .deb's path

# Builder image: the bookworm root plus python3-venv (cached; concurrent builds wait on a lock).
exec 8>"/tmp/.monky-debbuild-image.lock"
flock 8
if ! docker image inspect "$builder_image" >/dev/null 2>&1; then
  echo "build-deb: creating $builder_image (apt-get install python3-venv)"
  cname="monky-debbuild-$$"
  waiting "installing python3-venv in $builder_image" \
    docker run --name "$cname" --network host local/debian:bookworm sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3.11-venv python3-venv >/dev/null && rm -rf /var/lib/apt/lists/*' \
    || { docker rm -f "$cname" >/dev/null 2>&1; die "apt-get in the builder container"; }
  docker commit "$cname" "$builder_image" >/dev/null
  docker rm "$cname" >/dev/null
fi
flock -u 8

work="$(mktemp -d /tmp/monky-build-deb.XXXXXX)"
trap 'rm -rf "$work"' EXIT
stage="$work/root"
mkdir -p "$work/src" "$stage/opt/monky-deployd" "$pip_cache"

# A private copy of the source: pip's in-tree build writes build/ and *.egg-info.
cp "$repo/pyproject.toml" "$work/src/"
cp -r "$repo/src" "$work/src/src"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
# The test kit (loopback fakes, Docker lab) lives beside the agent in src/ but is not shipped.
rm -rf "$work/src/src/monky_deployd_testkit"
if [[ -f "$repo/README.md" ]]; then cp "$repo/README.md" "$work/src/"; else echo "monky-deployd" >"$work/src/README.md"; fi

# The host's trust store and pip settings reach pip in the container (a TLS-intercepting proxy's CA
# lives in the host bundle; local wheel directories may be configured).
docker_args=(-v "$work/src:/build/src:ro" -v "$stage/opt/monky-deployd:/opt/monky-deployd"
  -v "$pip_cache:/root/.cache/pip" -e PIP_DISABLE_PIP_VERSION_CHECK=1)
ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
if [[ -f "$ca" ]]; then docker_args+=(-v "$ca:/build/ca.crt:ro" -e PIP_CERT=/build/ca.crt); fi
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_DEFAULT_TIMEOUT; do
  if [[ -n "${!var:-}" ]]; then docker_args+=(-e "$var=${!var}"); fi
done

echo "build-deb: building the virtualenv for $version in $builder_image"
arch="$(waiting "building the virtualenv (pip install in $builder_image)" \
  docker run --rm --network host "${docker_args[@]}" "$builder_image" sh -ec '
    cp -r /build/src /tmp/src
    /usr/bin/python3.11 -m venv /opt/monky-deployd >&2
    /opt/monky-deployd/bin/pip install -q --disable-pip-version-check --prefer-binary /tmp/src >&2
    /opt/monky-deployd/bin/python -c "import monky_deployd, openziti, httpx, hvac, pydantic, yaml" >&2
    /opt/monky-deployd/bin/pip uninstall -q -y pip setuptools >&2
    rm -f /opt/monky-deployd/bin/activate* /opt/monky-deployd/bin/Activate.ps1 /opt/monky-deployd/bin/pip*
    find /opt/monky-deployd -name __pycache__ -path "*/pip/*" -prune -exec rm -rf {} +
    /opt/monky-deployd/bin/python -m compileall -q /opt/monky-deployd/lib >/dev/null 2>&1 || true
    dpkg --print-architecture
  ')" || die "virtualenv build in the container (see the pip output above)"
[[ -x "$stage/opt/monky-deployd/bin/monky-deployd" ]] || die "console script monky-deployd missing in the venv"

# Files around the venv.
install -d "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/usr/lib/monky-deployd" \
  "$stage/usr/share/monky-deployd/ziti-edge-tunnel.service.d" "$stage/usr/share/doc/monky-deployd" \
  "$stage/etc/monky-deployd" "$stage/DEBIAN"
ln -s /opt/monky-deployd/bin/monky-deployd "$stage/usr/bin/monky-deployd"
install -m 0644 "$repo/packaging/systemd/monky-deployd.service" "$repo/packaging/systemd/monky-deployd.timer" \
  "$stage/lib/systemd/system/"
install -m 0644 "$repo/packaging/systemd/ziti-edge-tunnel.service.d/10-monky-run-host.conf" \
  "$stage/usr/share/monky-deployd/ziti-edge-tunnel.service.d/"
install -m 0755 "$repo/packaging/identity-access.sh" "$stage/usr/lib/monky-deployd/identity-access"
install -m 0644 "$repo/packaging/config.example.yaml" "$stage/etc/monky-deployd/config.example.yaml"
chmod 0750 "$stage/etc/monky-deployd"
[[ -f "$repo/docs/packaging.md" ]] && install -m 0644 "$repo/docs/packaging.md" "$stage/usr/share/doc/monky-deployd/"
for s in postinst prerm postrm; do install -m 0755 "$repo/packaging/debian/$s" "$stage/DEBIAN/$s"; done
echo /etc/monky-deployd/config.example.yaml >"$stage/DEBIAN/conffiles"

size_kb="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
cat >"$stage/DEBIAN/control" <<CTL
Package: monky-deployd
Version: $version
Architecture: $arch
Maintainer: monky estate team <estate@monky.invalid>
Installed-Size: $size_kb
Depends: python3 (>= 3.11), python3.11, acl, adduser, tzdata
Recommends: curl
Section: admin
Priority: optional
Homepage: https://scm.tikali.ai
Description: timer-driven deploy agent of the monky estate
 Every 60 s a systemd timer runs one reconcile tick: check in with tenancy,
 read secrets from OpenBao, render .env, docker compose pull and up -d, and
 report. Ships a self-contained virtualenv (built against python3.11) under
 /opt/monky-deployd.
CTL

mkdir -p "$out"
deb="$out/monky-deployd_${version}_${arch}.deb"
# Written under a private name, then renamed: a concurrent build never sees half a file.
waiting "compressing the package (dpkg-deb, xz)" \
  dpkg-deb --root-owner-group -Zxz -z6 --build "$stage" "$deb.tmp.$$" >/dev/null
mv -f "$deb.tmp.$$" "$deb"
# The kit's one-liner with this release's version as its default.
sed "s/@DEPLOYD_RELEASE_VERSION@/$version/" "$repo/packaging/install.sh" >"$out/install.sh.tmp.$$"
chmod 0755 "$out/install.sh.tmp.$$"
mv -f "$out/install.sh.tmp.$$" "$out/install.sh"
echo "$deb"
