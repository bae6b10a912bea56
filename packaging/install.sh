#!/usr/bin/env bash
# monky-deployd install.sh: the kit's one-liner. Run it ONCE on a fresh Debian/Ubuntu box, as root:
#
#   read -rs T   # in a root shell: paste the kit's deploy token, then Enter
#   printf 'header = "DEPLOY-TOKEN: %s"\n' "$T" \
#     | curl -fsSL --proto =https --proto-redir =https -K - -o install.sh <registry>/monky-deployd/<ver>/install.sh \
#     && MONKY_DEPLOYD_TOKEN="$T" bash install.sh --env env-dev-08 \
#         --identity-jwt ./env-dev-08.jwt --bootstrap-file ./grant.jwt
#
# Downloaded to a file, then run: a missing curl (`curl: command not found`, 127) or a failed
# download stops the line with curl's status and nothing runs (a `curl ... | bash` pipeline ends
# with bash's 0 when curl is missing, and would run a truncated script).
# The token never appears on a command line (printf is a builtin; curl reads its config on stdin):
# docs/packaging.md says what that form protects against and what it does not.
#
# It installs the monky-deployd package, Docker Engine when absent, ziti-edge-tunnel with the
# run-host drop-in, the agent's config.yaml, the bootstrap grant and the identity ACLs, then enables
# the timer. A step that cannot finish (tunneler, systemd) is a WARNING until everything else is in
# place, then the script exits non-zero listing what is left; re-running the same command is safe
# and needs no new kit. `--help` lists the flags; docs/packaging.md explains each step.
#
# Exit status: 0 done; 2 refused before changing anything (usage, missing input, a plain-http
# source); 3 installed, but items are left (listed at the end, every run: each is checked again);
# 4 the package was not installed because it could not be verified against the release's
# SHA256SUMS (missing file, no entry, a different checksum); 5 no such version (the registry
# answers 404 for the .deb; nothing installed); 1 an unexpected failure (the failing line is named).

# Never trace: the token and the grant pass through this script's variables.
{ set +x; } 2>/dev/null
set -Eeuo pipefail
umask 022

# Replaced by packaging/build-deb.sh with __version__ when the release artefact is built.
DEPLOYD_RELEASE_VERSION="@DEPLOYD_RELEASE_VERSION@"

DEPLOYD_SOURCE="${MONKY_DEPLOYD_SOURCE:-gitlab}"
DEPLOYD_BASE_URL="${MONKY_DEPLOYD_BASE_URL:-}"
DEPLOYD_PROJECT="${MONKY_DEPLOYD_PROJECT:-}"
DEPLOYD_VERSION="${MONKY_DEPLOYD_VERSION:-}"
DEPLOYD_ENV="${MONKY_DEPLOYD_ENV:-}"
DEPLOYD_TOKEN="${MONKY_DEPLOYD_TOKEN:-}"
DEPLOYD_DOCKER_APT_URL="${MONKY_DEPLOYD_DOCKER_APT_URL:-https://download.docker.com/linux}"
DEPLOYD_ZITI_APT_URL="${MONKY_DEPLOYD_ZITI_APT_URL:-https://packages.openziti.org/zitipax-openziti-deb-stable}"
DEPLOYD_ZITI_KEY_URL="${MONKY_DEPLOYD_ZITI_KEY_URL:-https://get.openziti.io/tun/package-repos.gpg}"
# Children (apt, dpkg, curl, the tunneler) never see the token in their environment.
unset MONKY_DEPLOYD_TOKEN
DEPLOYD_IDENTITY_JWT=""
DEPLOYD_IDENTITY_FILE=""
DEPLOYD_BOOTSTRAP_FILE=""
DEPLOYD_DOCKER_DATA_ROOT=""
DEPLOYD_DEB_FILE=""
DEPLOYD_TRANSPORT="ziti"
DEPLOYD_INSECURE_HTTP=0

DEPLOYD_USER=monky-deployd
DEPLOYD_CONF_DIR=/etc/monky-deployd
DEPLOYD_CONFIG="$DEPLOYD_CONF_DIR/config.yaml"
DEPLOYD_GRANT="$DEPLOYD_CONF_DIR/grant.jwt"
DEPLOYD_PENDING_JWT="$DEPLOYD_CONF_DIR/identity-enrolment.jwt"
DEPLOYD_STATE_DIR=/var/lib/monky-deployd
DEPLOYD_IDENTITY_DIR=/opt/openziti/etc/identities
DEPLOYD_ZITI_BIN=/opt/openziti/bin/ziti-edge-tunnel
DEPLOYD_DROPIN_SRC=/usr/share/monky-deployd/ziti-edge-tunnel.service.d/10-monky-run-host.conf
DEPLOYD_DROPIN_DIR=/etc/systemd/system/ziti-edge-tunnel.service.d
DEPLOYD_TENANCY_PORT=443

DEPLOYD_LEFT=()
DEPLOYD_TMP=""
DEPLOYD_GRANT_TEXT=""
DEPLOYD_APT_UPDATED=0
DEPLOYD_STDIN_TTY=0
DEPLOYD_HTTP_CODE=""

usage() {
  cat <<'USAGE'
Usage: install.sh --env ENV [options]          (as root; piped: curl ... | bash -s -- [options])

  --env ENV                 environment id of this box, e.g. env-dev-08 (MONKY_DEPLOYD_ENV);
                            on a re-run it defaults to the env in the existing config.yaml
  --token TOKEN             download token: sent as `DEPLOY-TOKEN: TOKEN` (gitlab) or
                            `Authorization: token TOKEN` (gitea) on every package download
                            (MONKY_DEPLOYD_TOKEN; prefer the variable: a flag is visible in ps)
  --source gitlab|gitea     package source (MONKY_DEPLOYD_SOURCE, default gitlab)
  --base-url URL            server of the source (MONKY_DEPLOYD_BASE_URL; default
                            https://scm.tikali.ai for gitlab, https://gitea.cbs.tikali.net for gitea)
  --project ID              gitlab project id (default 69) or gitea owner/repo (default
                            monky/monky-deployd) (MONKY_DEPLOYD_PROJECT)
  --version VER             package version (MONKY_DEPLOYD_VERSION; default: this kit's release)
  --deb FILE                install this .deb instead of downloading one (not checked against
                            SHA256SUMS: verifying a file you bring is yours to do)
  --insecure-http           accept http:// URLs (--base-url, the apt mirrors); without it every
                            download is https only, redirects included (a lab mirror, tests)
  --identity-jwt FILE       Ziti enrolment JWT; enrolled with ziti-edge-tunnel into
                            /opt/openziti/etc/identities/ENV.json
  --identity-file FILE      an already enrolled Ziti identity JSON (instead of --identity-jwt)
  --bootstrap-file FILE     the bootstrap grant (JWT); required when piped and no grant is installed
  --transport ziti|plain    config.yaml transport (default ziti)
  --docker-data-root DIR    Docker's data-root, applied before Docker's first start; only used
                            when this script installs Docker (an existing Docker is untouched)
  --help                    this text

Every downloaded .deb is checked against the release's SHA256SUMS (fetched from beside it, with
the same token) before dpkg sees it.

Exit status: 0 done, 2 refused before any change, 3 installed with items left (listed, every
run), 4 package not verified against SHA256SUMS (nothing installed), 5 no such version (the
registry has no .deb for --version; nothing installed), 1 an unexpected failure.
USAGE
}

log() { printf 'install.sh: %s\n' "$*"; }
warn() { printf 'install.sh: WARNING: %s\n' "$*" >&2; }
refuse() {
  printf 'install.sh: REFUSED: %s\n' "$*" >&2
  exit 2
}
left() {
  DEPLOYD_LEFT+=("$1")
  warn "$1 (continuing; listed again at the end)"
}

on_error() {
  printf 'install.sh: FAILED at line %s (%s); nothing was rolled back, re-run the same command after fixing it\n' \
    "$1" "$2" >&2
}

cleanup() {
  if [[ -n "$DEPLOYD_TMP" && -d "$DEPLOYD_TMP" ]]; then rm -rf "$DEPLOYD_TMP"; fi
}

need_value() { # flag value
  [[ -n "${2:-}" ]] || refuse "$1 needs a value (see --help)"
}

parse_args() {
  local flag value
  while (($#)); do
    flag="$1"
    value=""
    if [[ "$flag" == --*=* ]]; then
      value="${flag#*=}"
      flag="${flag%%=*}"
      shift
      set -- "$flag" "$value" "$@"
    fi
    case "$1" in
      --help | -h)
        usage
        exit 0
        ;;
      --insecure-http)
        DEPLOYD_INSECURE_HTTP=1
        shift
        ;;
      --env | --token | --source | --base-url | --project | --version | --deb | --identity-jwt | \
        --identity-file | --bootstrap-file | --docker-data-root | --transport)
        need_value "$1" "${2:-}"
        case "$1" in
          --env) DEPLOYD_ENV="$2" ;;
          --token) DEPLOYD_TOKEN="$2" ;;
          --source) DEPLOYD_SOURCE="$2" ;;
          --base-url) DEPLOYD_BASE_URL="$2" ;;
          --project) DEPLOYD_PROJECT="$2" ;;
          --version) DEPLOYD_VERSION="$2" ;;
          --deb) DEPLOYD_DEB_FILE="$2" ;;
          --identity-jwt) DEPLOYD_IDENTITY_JWT="$2" ;;
          --identity-file) DEPLOYD_IDENTITY_FILE="$2" ;;
          --bootstrap-file) DEPLOYD_BOOTSTRAP_FILE="$2" ;;
          --docker-data-root) DEPLOYD_DOCKER_DATA_ROOT="$2" ;;
          --transport) DEPLOYD_TRANSPORT="$2" ;;
        esac
        shift 2
        ;;
      *) refuse "unknown argument '$1' (see --help)" ;;
    esac
  done
}

# A value from /etc/os-release, read in a subshell: sourcing it here would overwrite this script's
# own variables (R16: VERSION="26.04 LTS (Resolute Raccoon)" once became the package version).
os_release_value() { # NAME
  (
    # shellcheck disable=SC1091
    [[ -r /etc/os-release ]] && . /etc/os-release
    printf '%s' "${!1:-}"
  )
}

# Every URL this script downloads from or points apt at is https, unless --insecure-http says
# otherwise: what arrives is installed as root.
require_https() { # name url
  [[ "$2" == https://* ]] && return 0
  ((DEPLOYD_INSECURE_HTTP)) && return 0
  refuse "$1 '$2' is not https: what it serves would be installed as root from a download anyone on the path can change; use an https URL, or pass --insecure-http to accept plain http (a lab mirror, tests)"
}

existing_config_env() {
  [[ -r "$DEPLOYD_CONFIG" ]] || return 0
  sed -n 's/^env:[[:space:]]*\([A-Za-z0-9-]*\).*$/\1/p' "$DEPLOYD_CONFIG" | head -n 1
}

validate() {
  [[ "$(id -u)" == 0 ]] || refuse "run as root (sudo bash -s -- ...)"
  [[ -n "$DEPLOYD_ENV" ]] || DEPLOYD_ENV="$(existing_config_env)"
  [[ -n "$DEPLOYD_ENV" ]] || refuse "--env ENV is required (the environment id of this box, e.g. env-dev-08)"
  [[ "$DEPLOYD_ENV" =~ ^[a-z0-9][a-z0-9-]{0,62}$ ]] || refuse "--env '$DEPLOYD_ENV' is not an environment id (lower-case letters, digits, '-')"
  if [[ -z "$DEPLOYD_VERSION" && "$DEPLOYD_RELEASE_VERSION" != @* ]]; then
    DEPLOYD_VERSION="$DEPLOYD_RELEASE_VERSION"
  fi
  if [[ -z "$DEPLOYD_DEB_FILE" ]]; then
    [[ -n "$DEPLOYD_VERSION" ]] || refuse "--version VER is required (this install.sh is not a release artefact)"
    [[ "$DEPLOYD_VERSION" =~ ^[0-9][0-9A-Za-z.+~-]*$ ]] || refuse "--version '$DEPLOYD_VERSION' is not a package version"
  else
    [[ -r "$DEPLOYD_DEB_FILE" ]] || refuse "--deb $DEPLOYD_DEB_FILE is not a readable file"
  fi
  case "$DEPLOYD_SOURCE" in
    gitlab)
      DEPLOYD_BASE_URL="${DEPLOYD_BASE_URL:-https://scm.tikali.ai}"
      DEPLOYD_PROJECT="${DEPLOYD_PROJECT:-69}"
      ;;
    gitea)
      DEPLOYD_BASE_URL="${DEPLOYD_BASE_URL:-https://gitea.cbs.tikali.net}"
      DEPLOYD_PROJECT="${DEPLOYD_PROJECT:-monky/monky-deployd}"
      ;;
    *) refuse "--source '$DEPLOYD_SOURCE' is neither gitlab nor gitea" ;;
  esac
  DEPLOYD_BASE_URL="${DEPLOYD_BASE_URL%/}"
  [[ "$DEPLOYD_BASE_URL" =~ ^https?://[^[:space:]]+$ ]] || refuse "--base-url '$DEPLOYD_BASE_URL' is not an http(s) URL"
  require_https --base-url "$DEPLOYD_BASE_URL"
  require_https MONKY_DEPLOYD_DOCKER_APT_URL "$DEPLOYD_DOCKER_APT_URL"
  require_https MONKY_DEPLOYD_ZITI_APT_URL "$DEPLOYD_ZITI_APT_URL"
  require_https MONKY_DEPLOYD_ZITI_KEY_URL "$DEPLOYD_ZITI_KEY_URL"
  case "$DEPLOYD_TRANSPORT" in ziti | plain) ;; *) refuse "--transport must be ziti or plain" ;; esac
  case "$DEPLOYD_TOKEN" in *$'\n'* | *$'\r'*) refuse "the deploy token contains a line break" ;; esac
  if [[ -n "$DEPLOYD_IDENTITY_JWT" && -n "$DEPLOYD_IDENTITY_FILE" ]]; then
    refuse "pass either --identity-jwt or --identity-file, not both"
  fi
  local f
  for f in "$DEPLOYD_IDENTITY_JWT" "$DEPLOYD_IDENTITY_FILE" "$DEPLOYD_BOOTSTRAP_FILE"; do
    [[ -z "$f" || -r "$f" ]] || refuse "$f is not a readable file"
  done
  if [[ -n "$DEPLOYD_BOOTSTRAP_FILE" ]]; then
    [[ -s "$DEPLOYD_BOOTSTRAP_FILE" ]] || refuse "--bootstrap-file $DEPLOYD_BOOTSTRAP_FILE is empty"
  elif [[ ! -s "$DEPLOYD_GRANT" ]]; then
    if ((DEPLOYD_STDIN_TTY)); then
      printf 'Paste the bootstrap grant (JWT) from the kit, then Enter: ' >&2
      IFS= read -rs DEPLOYD_GRANT_TEXT || true
      printf '\n' >&2
      [[ -n "$DEPLOYD_GRANT_TEXT" ]] || refuse "no bootstrap grant given"
    else
      refuse "no bootstrap grant: pass --bootstrap-file FILE (stdin is the script when piped, so the grant cannot be typed)"
    fi
  fi
  if [[ -n "$DEPLOYD_DOCKER_DATA_ROOT" && "$DEPLOYD_DOCKER_DATA_ROOT" != /* ]]; then
    refuse "--docker-data-root must be an absolute path"
  fi
}

apt_update_once() {
  if ((DEPLOYD_APT_UPDATED == 0)); then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq || return 1
    DEPLOYD_APT_UPDATED=1
  fi
}

apt_install() { # packages...
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_tools() {
  local missing=()
  command -v curl >/dev/null || missing+=(curl ca-certificates)
  command -v setfacl >/dev/null || missing+=(acl)
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    apt_update_once && apt_install "${missing[@]}" || {
      printf 'install.sh: FAILED: apt-get install %s\n' "${missing[*]}" >&2
      exit 1
    }
  fi
}

# The curl config carrying the token: 0600 in a 0700 directory; the token never reaches argv.
write_token_config() {
  DEPLOYD_TMP="$(mktemp -d /tmp/monky-deployd-install.XXXXXX)"
  chmod 0700 "$DEPLOYD_TMP"
  (umask 077 && : >"$DEPLOYD_TMP/curl-auth.conf")
  chmod 0600 "$DEPLOYD_TMP/curl-auth.conf"
  if [[ -n "$DEPLOYD_TOKEN" ]]; then
    local escaped="${DEPLOYD_TOKEN//\\/\\\\}"
    escaped="${escaped//\"/\\\"}"
    # GitLab's package registry takes a deploy token in DEPLOY-TOKEN; Gitea an access token in
    # Authorization (the scheme is the word "token").
    if [[ "$DEPLOYD_SOURCE" == gitea ]]; then
      printf 'header = "Authorization: token %s"\n' "$escaped" >"$DEPLOYD_TMP/curl-auth.conf"
    else
      printf 'header = "DEPLOY-TOKEN: %s"\n' "$escaped" >"$DEPLOYD_TMP/curl-auth.conf"
    fi
  fi
}

origin_of() { # URL -> scheme://host[:port]
  printf '%s' "$1" | sed -E 's#^([a-zA-Z][a-zA-Z0-9+.-]*://[^/]*).*#\1#'
}

# Download URL to FILE with the token header. Redirects are followed by hand: the token goes only
# to the registry's own origin, never to a storage host it redirects to, and a redirect may not
# leave https (without --insecure-http). Sets DEPLOYD_HTTP_CODE to the last HTTP status.
registry_download() { # URL FILE
  local url="$1" out="$2" origin hops=0 result code next auth proto='=https'
  ((DEPLOYD_INSECURE_HTTP)) && proto='=https,http'
  origin="$(origin_of "$1")"
  DEPLOYD_HTTP_CODE=""
  while :; do
    auth=()
    [[ "$(origin_of "$url")" == "$origin" ]] && auth=(-K "$DEPLOYD_TMP/curl-auth.conf")
    # curl's words go to a file: with --retry it says them once per attempt (four "Could not
    # resolve host" lines); download_failed prints them once, with what to check for them.
    DEPLOYD_CURL_RC=0
    result="$(curl -sS --proto "$proto" --connect-timeout 15 --max-time 900 --retry 3 \
      "${auth[@]}" -o "$out" -w '%{http_code} %{redirect_url}' "$url" 2>"$DEPLOYD_TMP/curl.err")" ||
      { DEPLOYD_CURL_RC=$?; return 1; }
    code="${result%% *}"
    next="${result#* }"
    DEPLOYD_HTTP_CODE="$code"
    case "$code" in
      2??) return 0 ;;
      30[12378])
        hops=$((hops + 1))
        [[ -n "$next" && $hops -le 5 ]] || return 1
        if [[ "$next" != https://* ]] && ((DEPLOYD_INSECURE_HTTP == 0)); then
          printf 'install.sh: %s redirected to %s, which is not https (refused; --insecure-http accepts it)\n' \
            "$(origin_of "$url")" "$(origin_of "$next")" >&2
          return 1
        fi
        url="$next"
        ;;
      *)
        printf 'install.sh: %s answered HTTP %s\n' "$url" "$code" >&2
        return 1
        ;;
    esac
  done
}

# A download that failed, said once: curl's own last words (each line once), and what to check
# for that failure: the box's DNS or network for curl's 6/7/28, else the token, source and version.
download_failed() { # URL
  local host words=""
  host="$(origin_of "$1" | sed -E 's#^[a-zA-Z][a-zA-Z0-9+.-]*://##; s#^.*@##; s#:[0-9]+$##')"
  [[ -s "$DEPLOYD_TMP/curl.err" ]] && words="$(awk '!seen[$0]++' "$DEPLOYD_TMP/curl.err" | tail -n 1)"
  case "${DEPLOYD_CURL_RC:-0}" in
    6)
      printf 'install.sh: FAILED: cannot download %s: the host %s does not resolve on this box (%s); check its DNS: getent hosts %s\n' \
        "$1" "$host" "$words" "$host" >&2
      ;;
    7 | 28)
      printf 'install.sh: FAILED: cannot download %s: no connection to %s (%s); check the route and firewall to it, and --base-url\n' \
        "$1" "$(origin_of "$1")" "$words" >&2
      ;;
    *)
      printf 'install.sh: FAILED: cannot download %s%s; check --token/MONKY_DEPLOYD_TOKEN, --source, --base-url and --version\n' \
        "$1" "${words:+ ($words)}" >&2
      ;;
  esac
}

# URL of FILE in the release: the .deb and SHA256SUMS sit side by side (the CI release jobs
# publish both).
release_url() { # FILE
  if [[ "$DEPLOYD_SOURCE" == gitlab ]]; then
    printf '%s/api/v4/projects/%s/packages/generic/monky-deployd/%s/%s' \
      "$DEPLOYD_BASE_URL" "$DEPLOYD_PROJECT" "$DEPLOYD_VERSION" "$1"
  else
    printf '%s/%s/releases/download/v%s/%s' "$DEPLOYD_BASE_URL" "$DEPLOYD_PROJECT" "$DEPLOYD_VERSION" "$1"
  fi
}

package_url() { # ARCH
  release_url "monky-deployd_${DEPLOYD_VERSION}_$1.deb"
}

unverified() { # sentence
  printf 'install.sh: REFUSED: %s; nothing was installed\n' "$1" >&2
  exit 4
}

# The release's SHA256SUMS (sha256sum's format: "<hex>  <name>", "*<name>" in binary mode) must
# list FILE's name exactly once, with FILE's checksum. Runs before dpkg sees the file.
verify_package() { # FILE SUMS-URL
  local name want got sums="$DEPLOYD_TMP/SHA256SUMS"
  name="$(basename "$1")"
  if ! registry_download "$2" "$sums"; then
    if [[ "$DEPLOYD_HTTP_CODE" == 404 ]]; then
      unverified "$2 does not exist: release $DEPLOYD_VERSION publishes no SHA256SUMS, so $name cannot be verified (check --version and --source; or verify a .deb yourself and pass --deb FILE)"
    fi
    download_failed "$2"
    exit 1
  fi
  want="$(awk -v f="$name" '$2 == f || $2 == "*" f { print tolower($1) }' "$sums" | sort -u)"
  [[ -n "$want" ]] || unverified "the release's SHA256SUMS ($2) has no entry for $name: the file downloaded is not one this release published (check --version and --source)"
  [[ "$want" =~ ^[0-9a-f]{64}$ ]] || unverified "the release's SHA256SUMS ($2) has no single well-formed sha256 for $name"
  got="$(sha256sum "$1" | cut -d ' ' -f 1)"
  [[ "$got" == "$want" ]] || unverified "$name does not match the release's SHA256SUMS (published $want, downloaded $got): the download is corrupt or not the published package; retry, and report it if it persists"
  log "$name matches the release's SHA256SUMS (sha256 $got)"
}

installed_version() {
  dpkg-query -W -f='${Status} ${Version}\n' monky-deployd 2>/dev/null |
    sed -n 's/^install ok installed //p'
}

install_package() {
  local arch deb url want="$DEPLOYD_VERSION"
  arch="$(dpkg --print-architecture)"
  if [[ -n "$DEPLOYD_DEB_FILE" ]]; then
    want="$(dpkg-deb -f "$DEPLOYD_DEB_FILE" Version)" || {
      printf 'install.sh: FAILED: %s is not a Debian package\n' "$DEPLOYD_DEB_FILE" >&2
      exit 1
    }
  fi
  if [[ "$(installed_version)" == "$want" ]]; then
    log "monky-deployd $want already installed"
    return 0
  fi
  if [[ -n "$DEPLOYD_DEB_FILE" ]]; then
    deb="$DEPLOYD_TMP/$(basename "$DEPLOYD_DEB_FILE")"
    cp "$DEPLOYD_DEB_FILE" "$deb"
  else
    url="$(package_url "$arch")"
    deb="$DEPLOYD_TMP/monky-deployd_${DEPLOYD_VERSION}_${arch}.deb"
    log "downloading $url"
    if ! registry_download "$url" "$deb"; then
      if [[ "$DEPLOYD_HTTP_CODE" == 404 ]]; then
        printf 'install.sh: NO SUCH VERSION: %s answered HTTP 404: %s publishes no monky-deployd %s for %s (check --version and --source; a private GitLab project also answers 404 to a missing or wrong deploy token); nothing was installed\n' \
          "$url" "$DEPLOYD_BASE_URL" "$DEPLOYD_VERSION" "$arch" >&2
        exit 5
      fi
      download_failed "$url"
      exit 1
    fi
    verify_package "$deb" "$(release_url SHA256SUMS)"
  fi
  chmod 0644 "$deb"
  log "installing $(basename "$deb")"
  # apt resolves the dependencies (python3.11, acl, adduser); refresh the lists only when needed.
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null; then
    apt_update_once && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$deb" >/dev/null || {
      printf 'install.sh: FAILED: apt-get install %s\n' "$deb" >&2
      exit 1
    }
  fi
}

docker_present() {
  command -v docker >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1 || [[ -S /var/run/docker.sock ]]
}

write_docker_data_root() {
  [[ -n "$DEPLOYD_DOCKER_DATA_ROOT" ]] || return 0
  mkdir -p "$DEPLOYD_DOCKER_DATA_ROOT" /etc/docker
  chmod 0711 "$DEPLOYD_DOCKER_DATA_ROOT"
  if [[ -s /etc/docker/daemon.json ]]; then
    warn "/etc/docker/daemon.json exists; not changing it (set \"data-root\": \"$DEPLOYD_DOCKER_DATA_ROOT\" there yourself)"
    return 0
  fi
  printf '{\n  "data-root": "%s"\n}\n' "$DEPLOYD_DOCKER_DATA_ROOT" >/etc/docker/daemon.json.tmp
  mv -f /etc/docker/daemon.json.tmp /etc/docker/daemon.json
  log "Docker data-root set to $DEPLOYD_DOCKER_DATA_ROOT (before Docker's first start)"
}

install_docker_from_docker_repo() {
  local id codename arch like
  id="$(os_release_value ID)"
  like="$(os_release_value ID_LIKE)"
  codename="$(os_release_value UBUNTU_CODENAME)"
  [[ -n "$codename" ]] || codename="$(os_release_value VERSION_CODENAME)"
  case "$id" in
    debian | ubuntu | raspbian) ;;
    *) case " $like " in *" ubuntu "*) id=ubuntu ;; *" debian "*) id=debian ;; *) return 1 ;; esac ;;
  esac
  [[ -n "$codename" ]] || return 1
  arch="$(dpkg --print-architecture)"
  mkdir -p /etc/apt/keyrings
  curl -fsS --connect-timeout 15 --max-time 60 -o "$DEPLOYD_TMP/docker.asc" "$DEPLOYD_DOCKER_APT_URL/$id/gpg" || return 1
  install -m 0644 "$DEPLOYD_TMP/docker.asc" /etc/apt/keyrings/docker.asc
  printf 'deb [arch=%s signed-by=/etc/apt/keyrings/docker.asc] %s/%s %s stable\n' \
    "$arch" "$DEPLOYD_DOCKER_APT_URL" "$id" "$codename" >/etc/apt/sources.list.d/docker.list
  if DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    apt_install docker-ce docker-ce-cli containerd.io docker-compose-plugin docker-buildx-plugin; then
    return 0
  fi
  # Leave no broken source behind: a later apt-get update must not fail because of it.
  rm -f /etc/apt/sources.list.d/docker.list /etc/apt/keyrings/docker.asc
  DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
  return 1
}

ensure_docker() {
  if docker_present; then
    log "Docker is already installed; left untouched"
    if [[ -n "$DEPLOYD_DOCKER_DATA_ROOT" ]]; then
      warn "--docker-data-root ignored: an existing Docker is never reconfigured"
    fi
    return 0
  fi
  write_docker_data_root
  log "installing Docker Engine (Docker's apt repository for this release)"
  if install_docker_from_docker_repo; then
    log "Docker Engine installed from $DEPLOYD_DOCKER_APT_URL"
  else
    warn "Docker's apt repository is not usable here; installing the distribution's docker.io"
    if apt_update_once && apt_install docker.io; then
      install_compose_package || true # ensure_compose says what is left
    else
      left "Docker Engine could not be installed (neither $DEPLOYD_DOCKER_APT_URL nor docker.io); install it, then re-run"
    fi
  fi
}

# Compose v2 from the distribution: docker-compose-v2 (Ubuntu), docker-compose-plugin (Docker's
# repository), docker-compose when it is v2 (Debian 13; Debian 12's is the old v1).
install_compose_package() {
  apt_install docker-compose-v2 2>/dev/null && return 0
  apt_install docker-compose-plugin 2>/dev/null && return 0
  local candidate
  candidate="$(apt-cache policy docker-compose 2>/dev/null | sed -n 's/^ *Candidate: *//p')"
  [[ "$candidate" =~ ^([0-9]+:)?[2-9][.] ]] && apt_install docker-compose
}

compose_v2_works() {
  local version
  version="$(docker compose version --short 2>/dev/null)" || return 1
  [[ "$version" =~ ^v?([2-9]|[1-9][0-9])[.] ]]
}

# On every run, whoever installed Docker: the agent runs `docker compose` (v2, the plugin).
ensure_compose() {
  command -v docker >/dev/null 2>&1 || return 0 # the Docker Engine item says it
  compose_v2_works && return 0
  left "Docker Compose v2 is not installed (\`docker compose version\` fails): Debian 12: the docker-compose-plugin package from Docker's apt repository (https://docs.docker.com/engine/install/debian/); Debian 13: apt-get install docker-compose (v2 there); Ubuntu 22.04/24.04: apt-get install docker-compose-v2; then re-run"
}

ensure_group_member() { # user group
  getent group "$2" >/dev/null || addgroup --quiet --system "$2"
  id -nG "$1" | tr ' ' '\n' | grep -qx "$2" || adduser --quiet "$1" "$2"
}

# Write CONTENT to PATH atomically with MODE and OWNER only when it differs (re-runs keep mtimes).
put_file() { # path mode owner:group content
  local path="$1" tmp
  if [[ -f "$path" ]] && printf '%s' "$4" | cmp -s - "$path"; then
    chmod "$2" "$path"
    chown "$3" "$path"
    return 0
  fi
  tmp="$(mktemp "$path.XXXXXX")"
  chmod "$2" "$tmp"
  chown "$3" "$tmp"
  printf '%s' "$4" >"$tmp"
  mv -f "$tmp" "$path"
}

put_copy() { # path mode owner:group source
  local path="$1" tmp
  if [[ -f "$path" ]] && cmp -s "$4" "$path"; then
    chmod "$2" "$path"
    chown "$3" "$path"
    return 0
  fi
  tmp="$(mktemp "$path.XXXXXX")"
  chmod "$2" "$tmp"
  chown "$3" "$tmp"
  cat "$4" >"$tmp"
  mv -f "$tmp" "$path"
}

render_config() {
  cat <<YAML
# /etc/monky-deployd/config.yaml, written by install.sh (kit for $DEPLOYD_ENV).
# install.sh never overwrites this file once it exists (docs/packaging.md).
env: $DEPLOYD_ENV
transport: $DEPLOYD_TRANSPORT
identity: $DEPLOYD_IDENTITY_DIR/$DEPLOYD_ENV.json
tenancy: {host: tenancy.monky.ziti, port: $DEPLOYD_TENANCY_PORT}
openbao: {host: openbao.monky.ziti, port: 8200, jwt_mount: jwt-tenancy, role: see_env, kv_mount: kv}
grant_file: $DEPLOYD_GRANT
state_dir: $DEPLOYD_STATE_DIR
YAML
}

# config.yaml: written when absent. An existing file is never overwritten (an operator may have
# tuned it); when it differs from what this kit would write, the kit's version goes to
# config.yaml.kit, and a different env is an item left for the operator.
ensure_config() {
  local rendered existing_env
  rendered="$(render_config)"$'\n'
  install -d -m 0750 -o root -g "$DEPLOYD_USER" "$DEPLOYD_CONF_DIR"
  if [[ ! -f "$DEPLOYD_CONFIG" ]]; then
    put_file "$DEPLOYD_CONFIG" 0640 "root:$DEPLOYD_USER" "$rendered"
    log "wrote $DEPLOYD_CONFIG (env $DEPLOYD_ENV, tenancy port $DEPLOYD_TENANCY_PORT)"
  elif printf '%s' "$rendered" | cmp -s - "$DEPLOYD_CONFIG"; then
    chown "root:$DEPLOYD_USER" "$DEPLOYD_CONFIG"
    chmod 0640 "$DEPLOYD_CONFIG"
    log "$DEPLOYD_CONFIG is up to date"
  else
    chown "root:$DEPLOYD_USER" "$DEPLOYD_CONFIG"
    chmod 0640 "$DEPLOYD_CONFIG"
    put_file "$DEPLOYD_CONFIG.kit" 0640 "root:$DEPLOYD_USER" "$rendered"
    existing_env="$(existing_config_env)"
    if [[ "$existing_env" != "$DEPLOYD_ENV" ]]; then
      left "$DEPLOYD_CONFIG is for env '$existing_env', this kit is for '$DEPLOYD_ENV': compare with $DEPLOYD_CONFIG.kit and move it over if this box changes environment"
    else
      log "kept the existing $DEPLOYD_CONFIG (this kit's version: $DEPLOYD_CONFIG.kit)"
    fi
  fi
  # The agent itself must accept the file, read as the agent user.
  local out
  if ! out="$(runuser -u "$DEPLOYD_USER" -- /opt/monky-deployd/bin/python -c \
    'import sys; from pathlib import Path; from monky_deployd.config import load; load(Path(sys.argv[1]))' \
    "$DEPLOYD_CONFIG" 2>&1)"; then
    left "$DEPLOYD_CONFIG is not accepted by the agent: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
  fi
}

ensure_grant() {
  if [[ -n "$DEPLOYD_BOOTSTRAP_FILE" ]]; then
    put_copy "$DEPLOYD_GRANT" 0600 "$DEPLOYD_USER:$DEPLOYD_USER" "$DEPLOYD_BOOTSTRAP_FILE"
    log "bootstrap grant installed at $DEPLOYD_GRANT (0600, $DEPLOYD_USER)"
  elif [[ -n "$DEPLOYD_GRANT_TEXT" ]]; then
    put_file "$DEPLOYD_GRANT" 0600 "$DEPLOYD_USER:$DEPLOYD_USER" "$DEPLOYD_GRANT_TEXT"$'\n'
    log "bootstrap grant installed at $DEPLOYD_GRANT (0600, $DEPLOYD_USER)"
  else
    chown "$DEPLOYD_USER:$DEPLOYD_USER" "$DEPLOYD_GRANT"
    chmod 0600 "$DEPLOYD_GRANT"
    log "kept the installed bootstrap grant $DEPLOYD_GRANT"
  fi
}

ziti_bin() {
  if [[ -x "$DEPLOYD_ZITI_BIN" ]]; then
    printf '%s' "$DEPLOYD_ZITI_BIN"
  else
    command -v ziti-edge-tunnel 2>/dev/null
  fi
}

install_tunneler() {
  mkdir -p /etc/apt/keyrings
  curl -fsS --connect-timeout 15 --max-time 60 -o "$DEPLOYD_TMP/openziti.gpg" "$DEPLOYD_ZITI_KEY_URL" || return 1
  install -m 0644 "$DEPLOYD_TMP/openziti.gpg" /etc/apt/keyrings/openziti.gpg
  printf 'deb [signed-by=/etc/apt/keyrings/openziti.gpg] %s debian main\n' "$DEPLOYD_ZITI_APT_URL" \
    >/etc/apt/sources.list.d/openziti-release.list
  if DEBIAN_FRONTEND=noninteractive apt-get update -qq && apt_install ziti-edge-tunnel; then
    return 0
  fi
  rm -f /etc/apt/sources.list.d/openziti-release.list /etc/apt/keyrings/openziti.gpg
  DEBIAN_FRONTEND=noninteractive apt-get update -qq || true
  return 1
}

# Tunneler, identity, ACLs: every failure here is an item left, never an abort (R15).
ensure_ziti() {
  local bin owner target="$DEPLOYD_IDENTITY_DIR/$DEPLOYD_ENV.json"
  ensure_group_member "$DEPLOYD_USER" ziti
  bin="$(ziti_bin || true)"
  if [[ -z "$bin" ]]; then
    log "installing ziti-edge-tunnel (OpenZiti apt repository)"
    if install_tunneler; then bin="$(ziti_bin || true)"; fi
    [[ -n "$bin" ]] || left "ziti-edge-tunnel is not installed: the OpenZiti apt repository ($DEPLOYD_ZITI_KEY_URL, $DEPLOYD_ZITI_APT_URL) was not usable (install the ziti-edge-tunnel package, then re-run)"
  fi
  # The run-host drop-in (R15): clears the packaged ExecStartPre= that fails with 203/EXEC. With
  # --transport plain the agent needs the tunneler's intercepts (run mode), so no run-host there.
  local dropin="$DEPLOYD_DROPIN_DIR/10-monky-run-host.conf" changed=0
  if [[ "$DEPLOYD_TRANSPORT" == ziti ]]; then
    install -d -m 0755 "$DEPLOYD_DROPIN_DIR"
    cmp -s "$DEPLOYD_DROPIN_SRC" "$dropin" || changed=1
    put_copy "$dropin" 0644 root:root "$DEPLOYD_DROPIN_SRC"
  elif [[ -e "$dropin" || -L "$dropin" ]]; then
    # A drop-in an earlier --transport ziti run installed: run-host mode turns the intercepts
    # plain dials off (issue 36: it was only warned about and stayed).
    rm -f "$dropin"
    changed=1
    log "--transport plain: removed the run-host drop-in $dropin (the agent needs the tunneler's intercepts: run mode)"
  else
    log "--transport plain: no run-host drop-in (the agent needs the tunneler's intercepts: run mode)"
  fi

  owner=root
  getent passwd ziti >/dev/null && owner=ziti
  if [[ ! -d "$DEPLOYD_IDENTITY_DIR" ]]; then
    install -d -m 0750 -o "$owner" -g ziti "$DEPLOYD_IDENTITY_DIR"
  fi
  if [[ -n "$DEPLOYD_IDENTITY_FILE" ]]; then
    put_copy "$target" 0640 "$owner:ziti" "$DEPLOYD_IDENTITY_FILE"
    log "identity installed at $target"
  elif [[ -n "$DEPLOYD_IDENTITY_JWT" && ! -s "$target" ]]; then
    # Kept until enrolled, so a re-run can enrol without the kit.
    put_copy "$DEPLOYD_PENDING_JWT" 0600 root:root "$DEPLOYD_IDENTITY_JWT"
  fi
  if [[ ! -s "$target" && -s "$DEPLOYD_PENDING_JWT" ]]; then
    if [[ -z "$bin" ]]; then
      left "Ziti identity not enrolled yet (needs ziti-edge-tunnel); the enrolment JWT is kept at $DEPLOYD_PENDING_JWT for the re-run"
    elif "$bin" enroll --jwt "$DEPLOYD_PENDING_JWT" --identity "$target" </dev/null; then
      chown "$owner:ziti" "$target"
      chmod 0640 "$target"
      rm -f "$DEPLOYD_PENDING_JWT"
      log "identity enrolled into $target"
    else
      left "ziti-edge-tunnel enroll failed for $DEPLOYD_PENDING_JWT (a used or expired JWT needs a new one from the controller)"
    fi
  fi
  if [[ ! -s "$target" && ! -s "$DEPLOYD_PENDING_JWT" && "$DEPLOYD_TRANSPORT" == ziti ]]; then
    left "no Ziti identity at $target: pass --identity-jwt FILE or --identity-file FILE"
  fi
  # R1: group read that survives the tunneler rewriting the file (default ACL + explicit ACLs).
  if ! /usr/lib/monky-deployd/identity-access "$DEPLOYD_IDENTITY_DIR"; then
    left "ACLs on $DEPLOYD_IDENTITY_DIR could not be set (is the filesystem mounted with ACL support?)"
  fi
  [[ -n "$bin" ]] || return 0
  start_unit ziti-edge-tunnel.service
  # A tunneler that was already running keeps its old command line until restarted.
  if ((changed)) && systemd_running && systemctl is-active --quiet ziti-edge-tunnel.service; then
    systemctl restart ziti-edge-tunnel.service ||
      left "ziti-edge-tunnel.service failed to restart after its run-host drop-in changed (see journalctl -u ziti-edge-tunnel)"
  fi
}

systemd_running() { [[ -d /run/systemd/system ]]; }

# enable --now UNIT; problems are items left. Without a running systemd the unit is enabled
# offline (the symlink) so it starts on the next boot.
start_unit() { # unit
  local out
  if ! command -v systemctl >/dev/null 2>&1; then
    left "$1 not enabled or started: systemctl is not available on this box"
  elif ! systemd_running; then
    systemctl enable "$1" >/dev/null 2>&1 || true
    left "$1 not started: systemd is not running here (start it with: systemctl enable --now $1)"
  else
    systemctl daemon-reload || true
    if ! out="$(systemctl enable --now "$1" 2>&1)"; then
      left "$1 failed to start: $(printf '%s' "$out" | tail -n 2 | tr '\n' ' ')(see journalctl -u $1)"
    fi
  fi
}

ensure_state_dir() {
  install -d -m 0700 -o "$DEPLOYD_USER" -g "$DEPLOYD_USER" "$DEPLOYD_STATE_DIR"
  chmod 0700 "$DEPLOYD_STATE_DIR"
  ensure_group_member "$DEPLOYD_USER" docker
}

summary() {
  local item
  if ((${#DEPLOYD_LEFT[@]} == 0)); then
    log "done: monky-deployd $(installed_version) installed for $DEPLOYD_ENV; the timer runs a tick every 60 s (journalctl -u monky-deployd)"
    return 0
  fi
  printf '\ninstall.sh: NOT FINISHED: everything else is installed; left to do:\n' >&2
  for item in "${DEPLOYD_LEFT[@]}"; do printf '  - %s\n' "$item" >&2; done
  printf 'install.sh: fix the items above and re-run the same command (no new kit is needed)\n' >&2
  exit 3
}

main() {
  [[ -t 0 ]] && DEPLOYD_STDIN_TTY=1
  parse_args "$@"
  validate
  # Piped: stdin is the rest of this script; no child may read it.
  ((DEPLOYD_STDIN_TTY)) || exec </dev/null
  trap cleanup EXIT
  trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR
  ensure_tools
  write_token_config
  install_package
  ensure_docker
  ensure_compose
  ensure_state_dir
  ensure_config
  ensure_grant
  ensure_ziti
  start_unit monky-deployd.timer
  summary
}

main "$@"
