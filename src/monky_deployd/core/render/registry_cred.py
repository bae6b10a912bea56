"""The registry credential: manifest entry ``use: registry-auth`` -> the bytes of ``config.json``.

Pure: ``adapters.box.docker.docker_config`` writes the file.

The credential is the agent's own. It is never a template variable (it would land in ``.env`` and
so in every container); the agent writes it into a docker client config of its own
(``<state_dir>/docker/config.json``, 0600 in a 0700 directory) and runs every docker command with
``DOCKER_CONFIG`` pointing there. That file holds ``auths`` and nothing else: no ``credsStore`` and
no ``credHelpers``, so the CLI never consults a helper, ``$HOME/.docker`` or root's login. A bundle
without a registry-auth entry gets ``{"auths": {}}``: an anonymous pull, never someone's login.

Accepted shapes of the KV value (see contract.md):

- JSON text or an already-parsed object ``{"username": "...", "password": "..."}``;
- ``username:password``, split at the FIRST colon (the password may contain ``:``).

Every refusal has its own code; no message ever holds the password or the raw value.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

REGISTRY_AUTH_USE = "registry-auth"
# The key the docker CLI uses for Docker Hub, whatever name the bundle gives it.
DOCKER_HUB_KEY = "https://index.docker.io/v1/"
_DOCKER_HUB_NAMES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_RE = re.compile(
    rf"^(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{{1,5}}))?$"
)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

HOST_HINT = (
    "the bundle's registry_host in tenancy: a bare `host` or `host:port` such as "
    "harbor.example.net or 10.0.0.5:5000 (no scheme, path or user)"
)


@dataclass(frozen=True)
class Credential:
    """A registry login. ``repr`` never shows the password."""

    username: str
    password: str = field(repr=False)

    def basic_auth(self) -> str:
        """The value docker keeps under ``auths.<host>.auth``: base64 of ``user:password``."""
        raw = f"{self.username}:{self.password}".encode()
        return base64.b64encode(raw).decode("ascii")


def select_entry(manifest: list[dict[str, object]]) -> dict[str, object] | None:
    """The single manifest entry with ``use == "registry-auth"``, or None when there is none."""
    entries = [e for e in manifest if isinstance(e, dict) and e.get("use") == REGISTRY_AUTH_USE]
    if len(entries) > 1:
        names = ", ".join(repr(e.get("name", "?")) for e in entries)
        raise DeployError(
            f"the bundle's manifest has {len(entries)} entries marked use: registry-auth "
            f"({names}); exactly one registry credential is allowed",
            code=Code.REGISTRY_AUTH_DUPLICATE,
            hint="the environment's manifest in tenancy: keep one registry-auth entry",
        )
    return entries[0] if entries else None


def check_registry_host(registry_host: str | None, source: str = "the bundle") -> str:
    """``registry_host`` when it is a bare ``host[:port]``; refusals otherwise."""
    if registry_host is None or (isinstance(registry_host, str) and not registry_host.strip()):
        raise DeployError(
            f"{source} has a registry-auth entry but no registry_host, so the agent cannot tell "
            "which registry the credential is for",
            code=Code.REGISTRY_HOST_MISSING,
            hint=HOST_HINT,
        )
    if not isinstance(registry_host, str):
        raise DeployError(
            f"{source}'s registry_host is a {type(registry_host).__name__}, not a host name",
            code=Code.REGISTRY_HOST_INVALID,
            hint=HOST_HINT,
        )
    match = _HOST_RE.fullmatch(registry_host)
    port = match.group("port") if match else None
    if match is None or (port is not None and not 1 <= int(port) <= 65535):
        shown = registry_host if len(registry_host) <= 80 else registry_host[:77] + "..."
        raise DeployError(
            f"{source}'s registry_host {shown!r} is not host[:port]",
            code=Code.REGISTRY_HOST_INVALID,
            hint=HOST_HINT,
        )
    return registry_host


def parse_credential(
    value: object, registry_host: str | None, *, source: str = "the registry-auth entry"
) -> Credential:
    """Parse the KV value of the registry-auth entry (``source`` names it in messages)."""
    check_registry_host(registry_host)
    username, password = _split(value, source)
    if not username or not password:
        missing = "username" if not username else "password"
        raise DeployError(
            f"{source} has an empty {missing}",
            code=Code.REGISTRY_CREDENTIAL_EMPTY,
            hint="the registry robot's KV value in OpenBao: both username and password are set",
        )
    for what, text in (("username", username), ("password", password)):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise DeployError(
                f"{source} has a {what} that is not valid Unicode text (a lone surrogate, such "
                "as JSON's \\ud800), which basic auth cannot carry",
                code=Code.REGISTRY_CREDENTIAL_MALFORMED,
                hint="the registry robot's KV value in OpenBao",
            ) from None
        if _CONTROL_RE.search(text):
            raise DeployError(
                f"{source} has a control character in its {what} (a trailing newline?)",
                code=Code.REGISTRY_CREDENTIAL_MALFORMED,
                hint="the registry robot's KV value in OpenBao: store it without newlines",
            )
    if ":" in username:
        raise DeployError(
            f"{source} has a ':' in its username, which basic auth cannot carry",
            code=Code.REGISTRY_CREDENTIAL_MALFORMED,
            hint="the registry robot's KV value in OpenBao",
        )
    return Credential(username, password)


def _malformed(source: str, why: str) -> DeployError:
    return DeployError(
        f'{source} is neither JSON {{"username", "password"}} nor username:password ({why})',
        code=Code.REGISTRY_CREDENTIAL_MALFORMED,
        hint='the registry robot\'s KV value in OpenBao: {"username": ..., "password": ...} '
        "or username:password",
    )


def _split(value: object, source: str) -> tuple[str, str]:
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            raise _malformed(source, "it starts with '{' but is not valid JSON") from None
    if isinstance(value, Mapping):
        user, password = value.get("username"), value.get("password")
        if user is None or password is None:
            keys = "username" if user is None else "password"
            raise _malformed(source, f"the JSON object has no {keys!r} key")
        if not isinstance(user, str) or not isinstance(password, str):
            raise _malformed(source, "username and password must be JSON strings")
        return user, password
    if isinstance(value, str):
        if ":" not in value:
            raise _malformed(source, "a string without ':'")
        user, _, password = value.partition(":")
        return user, password
    raise _malformed(source, f"a JSON {type(value).__name__}")


def config_key(registry_host: str) -> str:
    """The ``auths`` key the docker CLI looks up for images on ``registry_host``."""
    return DOCKER_HUB_KEY if registry_host.lower() in _DOCKER_HUB_NAMES else registry_host


def render_docker_config(registry_host: str | None, cred: Credential | None) -> bytes:
    """The bytes of config.json: ``auths`` only (empty without a credential)."""
    auths: dict[str, dict[str, str]] = {}
    if cred is not None:
        host = check_registry_host(registry_host)
        auths[config_key(host)] = {"auth": cred.basic_auth()}
    return (json.dumps({"auths": auths}, indent=2, sort_keys=True) + "\n").encode()
