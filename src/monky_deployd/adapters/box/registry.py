"""Does the registry accept the agent's credential? ``GET /v2/`` as docker asks it (doctor).

The docker CLI first asks ``/v2/`` without a credential; the registry's 401 names the scheme in
``WWW-Authenticate``:

- ``Basic realm=...``: ``/v2/`` again with ``Authorization: Basic`` (distribution's htpasswd);
- ``Bearer realm=<url>,service=<s>``: the token service at ``realm`` with the Basic credential,
  then ``/v2/`` with ``Authorization: Bearer <token>`` (Harbor, Docker Hub, GitLab).

A 200 to the first question means the registry wants no credential at all. ``https`` unless the
host is loopback or the engine lists it as insecure (docker's own rule, ``docker info``'s
``RegistryConfig``). Every answer is read by ``httpio.read_capped``. No message ever carries the
password, the token or the ``Authorization`` header: only the host, the user name, statuses and
the registry's own error words.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping

import httpx

from monky_deployd import USER_AGENT
from monky_deployd.adapters.httpio import read_capped
from monky_deployd.core.errors import Code, DeployError, root_words
from monky_deployd.core.registry_cred import Credential

MAX_BODY = 256 * 1024
_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')


def insecure(host: str, info: Mapping[str, object] | None = None) -> bool:
    """True when docker would speak plain HTTP to ``host``: loopback, or marked insecure."""
    name = host.rsplit(":", 1)[0].strip("[]") if host.count(":") <= 1 or "]" in host else host
    if name == "localhost":
        return True
    try:
        if ipaddress.ip_address(name).is_loopback:
            return True
    except ValueError:
        pass
    reg = (info or {}).get("RegistryConfig")
    configs = reg.get("IndexConfigs") if isinstance(reg, dict) else None
    entry = configs.get(host) if isinstance(configs, dict) else None
    return isinstance(entry, dict) and entry.get("Secure") is False


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in _PARAM_RE.findall(rest)}


def _words(resp: httpx.Response) -> str:
    """The registry's own error words (distribution's ``errors[].message``), or the status."""
    try:
        body = resp.json()
        errors = body.get("errors") if isinstance(body, dict) else None
        if isinstance(errors, list) and errors:
            return "; ".join(
                str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict)
            )[:300]
    except ValueError:
        pass
    return f"HTTP {resp.status_code}"


class Registry:
    def __init__(self, client: httpx.Client, host: str, *, scheme: str, timeout_s: float) -> None:
        self._client = client
        self.host = host
        self.base = f"{scheme}://{host}"
        self._timeout_s = timeout_s

    def _get(self, url: str, headers: dict[str, str], what: str) -> httpx.Response:
        try:
            return read_capped(
                self._client,
                "GET",
                url,
                max_bytes=MAX_BODY,
                deadline_s=self._timeout_s * 2,
                too_large=lambda: DeployError(
                    f"the registry {self.host} answered {what} with more than {MAX_BODY} bytes",
                    code=Code.REGISTRY_UNREACHABLE,
                    hint=f"that {self.host} is a registry (the bundle's registry_host)",
                ),
                headers={"User-Agent": USER_AGENT, **headers},
                timeout=self._timeout_s,
                follow_redirects=False,
            )
        except DeployError:
            raise
        except httpx.HTTPError as exc:
            raise DeployError(
                f"cannot reach the registry {self.host} ({what} at {self.base}): {root_words(exc)}",
                code=Code.REGISTRY_UNREACHABLE,
                hint=f"DNS, the route and the firewall from this box to {self.host}, and that "
                "the bundle's registry_host names the registry",
            ) from exc

    def check_login(self, cred: Credential) -> str:
        """A sentence saying how the registry accepted ``cred``; REGISTRY_AUTH naming the user
        and the registry's words when it refuses, REGISTRY_UNREACHABLE when it cannot be asked."""
        first = self._get(f"{self.base}/v2/", {}, "GET /v2/")
        if first.status_code == 200:
            return f"the registry {self.host} answers GET /v2/ without a credential (none needed)"
        if first.status_code != 401:
            raise self._odd(first, "GET /v2/")
        scheme, params = _challenge(first.headers.get("WWW-Authenticate", ""))
        basic = {"Authorization": f"Basic {cred.basic_auth()}"}
        if scheme == "basic":
            again = self._get(f"{self.base}/v2/", basic, "GET /v2/ with the credential")
            if again.status_code == 200:
                return f"the registry {self.host} accepts user {cred.username} (Basic)"
            raise self._refused(cred, again, "GET /v2/ (Basic)")
        if scheme == "bearer" and params.get("realm"):
            realm = params["realm"]
            query = {"service": params["service"]} if params.get("service") else None
            tok = self._token(realm, query, basic, cred)
            bearer = {"Authorization": f"Bearer {tok}"}
            again = self._get(f"{self.base}/v2/", bearer, "GET /v2/ with the token")
            if again.status_code == 200:
                return f"the registry {self.host} accepts user {cred.username} (Bearer, {realm})"
            raise self._refused(cred, again, "GET /v2/ (Bearer)")
        raise self._odd(first, "GET /v2/ (no usable WWW-Authenticate challenge)")

    def _token(
        self, realm: str, query: dict[str, str] | None, basic: dict[str, str], cred: Credential
    ) -> str:
        url = httpx.URL(realm, params=query) if query else httpx.URL(realm)
        resp = self._get(str(url), basic, f"its token service {realm}")
        if resp.status_code != 200:
            raise self._refused(cred, resp, f"the token service {realm}")
        try:
            body = json.loads(resp.content)
            tok = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            tok = None
        if not isinstance(tok, str) or not tok:
            raise self._odd(resp, f"the token service {realm} (no token in the answer)")
        return tok

    def _refused(self, cred: Credential, resp: httpx.Response, what: str) -> DeployError:
        return DeployError(
            f"the registry {self.host} refused the credential of user {cred.username} "
            f"({what} answered HTTP {resp.status_code}: {_words(resp)})",
            code=Code.REGISTRY_AUTH,
            hint="the registry-auth entry of the bundle's manifest in OpenBao (user and "
            f"password of the robot account for {self.host}) and that the account is enabled",
        )

    def _odd(self, resp: httpx.Response, what: str) -> DeployError:
        return DeployError(
            f"the registry {self.host} answered {what} with HTTP {resp.status_code} "
            f"({_words(resp)})",
            code=Code.REGISTRY_UNREACHABLE,
            hint=f"that {self.base} is a docker registry (v2 API) and is healthy",
        )
