"""The one registry client: doctor's login check and plan's manifest digest, over HTTP.

Both speak the registry v2 API as docker does, with one flow:

- **scheme**: plain HTTP when the host is loopback or the engine lists it as insecure (docker's
  own rule: ``docker info``'s ``RegistryConfig``), HTTPS with the system's CA store otherwise
  (as dockerd, not certifi's bundle). The registry is reached directly, as docker reaches it
  (not through Ziti).
- **challenge**: the first request goes without a credential; a 401 names the scheme in
  ``WWW-Authenticate``: ``Basic`` (the request again with ``Authorization: Basic``,
  distribution's htpasswd), or ``Bearer realm=<url>,service=<s>`` (a token from the realm,
  asked with the Basic credential when there is one, with ``scope=repository:<name>:pull`` for
  a manifest; then the request again with ``Authorization: Bearer``: Harbor, GitLab, Docker Hub).
- **errors**: REGISTRY_UNREACHABLE (no answer, or not a registry's), REGISTRY_AUTH (a refused or
  missing credential, with the registry's own words), IMAGE_NOT_FOUND (no such manifest).

``check_login`` (doctor): ``GET /v2/``; a 200 to the first question means no credential is
needed. ``digest`` (plan): ``HEAD /v2/<name>/manifests/<tag>`` with the manifest media types
docker accepts; ``Docker-Content-Digest`` is the digest a pull records (a manifest list's own
digest for a multi-platform image, as docker's RepoDigest). Nothing is downloaded but headers (a
GET only when a registry omits the digest header). Every answer is read by
``httpio.read_capped``. No message ever carries the password, the token or the
``Authorization`` header: only the host, the user name, statuses and the registry's words.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

import httpx

from monky_deployd import USER_AGENT
from monky_deployd.adapters.httpio import PoolTransport, read_capped
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, root_words
from monky_deployd.core.render.registry_cred import Credential

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
MAX_BODY = 4 * 1024 * 1024  # a manifest (the largest answer asked for), an error, a token
_PARAM_RE = re.compile(r'(\w+)="([^"]*)"')
_HUB = {"docker.io", "index.docker.io", "registry-1.docker.io"}


@dataclass(frozen=True)
class ImageRef:
    registry: str  # host[:port] as the URL needs it (Docker Hub: registry-1.docker.io)
    name: str  # repository path (Docker Hub: library/<x> for a bare name)
    reference: str  # a tag or a digest

    @staticmethod
    def parse(image: str) -> ImageRef:
        rest, _, digest = image.partition("@")
        first, slash, tail = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            host, path = first, tail
        else:
            host, path = "registry-1.docker.io", rest
            if "/" not in path:
                path = f"library/{path}"
        if host in ("docker.io", "index.docker.io"):
            host = "registry-1.docker.io"
        tag = "latest"
        last = path.rsplit("/", 1)[-1]
        if ":" in last:
            path, tag = path.rsplit(":", 1)
        return ImageRef(host, path, digest or tag)


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


def same_host(a: str, b: str) -> bool:
    """Whether a credential for registry ``a`` is sent to registry ``b`` (Docker Hub's names)."""
    a, b = a.lower(), b.lower()
    return a == b or (a in _HUB and b in _HUB)


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, rest = header.strip().partition(" ")
    return scheme.lower(), {k.lower(): v for k, v in _PARAM_RE.findall(rest)}


def _words(resp: httpx.Response) -> str:
    """The registry's own error words (distribution's ``errors[].message``), or nothing."""
    try:
        body = json.loads(resp.content) if resp.content else None
    except ValueError:
        return ""
    errors = body.get("errors") if isinstance(body, dict) else None
    if not isinstance(errors, list):
        return ""
    return "; ".join(str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict))[
        :300
    ]


def _status(resp: httpx.Response) -> str:
    words = _words(resp)
    return f"HTTP {resp.status_code}" + (f": {words}" if words else "")


class Registry:
    """One client for a command's registry requests (HTTPS trusts the system's CA store).
    ``info``: ``docker info``'s answer, for the engine's insecure registries."""

    def __init__(
        self,
        timeout_s: float = 30.0,
        deadline_s: float | None = None,
        *,
        info: Mapping[str, object] | None = None,
    ) -> None:
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s if deadline_s is not None else timeout_s * 2
        self._info = info
        self._client = httpx.Client(
            transport=PoolTransport(ssl_context=ssl.create_default_context()),
            timeout=httpx.Timeout(timeout_s),
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def base(self, host: str) -> str:
        return f"{'http' if insecure(host, self._info) else 'https'}://{host}"

    # -- the two questions -----------------------------------------------------------------

    def check_login(self, host: str, cred: Credential) -> str:
        """A sentence saying how the registry accepted ``cred``; REGISTRY_AUTH naming the user
        and the registry's words when it refuses, REGISTRY_UNREACHABLE when it cannot be asked."""
        url = f"{self.base(host)}/v2/"
        resp, how = self._ask(host, "GET", url, {}, cred, None, "GET /v2/")
        if resp.status_code == 200:
            if how is None:
                return f"the registry {host} answers GET /v2/ without a credential (none needed)"
            return f"the registry {host} accepts user {cred.username} ({how})"
        if resp.status_code in (401, 403):
            raise _refused(host, cred, resp, f"GET /v2/ ({how})" if how else "GET /v2/")
        raise _odd(host, url, resp, "GET /v2/")

    def digest(self, image: str, credential: Credential | None, cred_host: str | None) -> str:
        """The manifest digest (``sha256:...``) ``image`` names now at its registry."""
        ref = ImageRef.parse(image)
        if ref.reference.startswith("sha256:"):
            return ref.reference
        host = ref.registry
        cred = credential if cred_host and same_host(cred_host, host) else None
        url = f"{self.base(host)}/v2/{ref.name}/manifests/{ref.reference}"
        what = f"HEAD of the manifest of {image}"
        scope = f"repository:{ref.name}:pull"
        accept = {"Accept": ACCEPT}
        resp, how = self._ask(host, "HEAD", url, accept, cred, scope, what)
        if resp.status_code == 200 and not resp.headers.get("Docker-Content-Digest"):
            resp, how = self._ask(host, "GET", url, accept, cred, scope, what)
            if resp.status_code == 200:
                return "sha256:" + hashlib.sha256(resp.content).hexdigest()
        if resp.status_code == 200:
            return resp.headers["Docker-Content-Digest"]
        if resp.status_code == 404:
            raise DeployError(
                f"the registry {host} has no manifest for {image} (manifest unknown)",
                code=Code.IMAGE_NOT_FOUND,
                hint="the image name and tag in the compose file",
            )
        if resp.status_code in (401, 403):
            raise _refused(host, cred, resp, f"{what} ({how})" if how else what)
        raise _odd(host, url, resp, what)

    # -- the one challenge flow ------------------------------------------------------------

    def _ask(
        self,
        host: str,
        method: str,
        url: str,
        headers: dict[str, str],
        cred: Credential | None,
        scope: str | None,
        what: str,
    ) -> tuple[httpx.Response, str | None]:
        """``method url`` without a credential, then, on a 401, as its challenge says; the
        answer and how it was asked (None: no credential, "Basic", "Bearer, <realm>")."""
        first = self._send(host, method, url, headers, what)
        if first.status_code != 401:
            return first, None
        scheme, params = _challenge(first.headers.get("WWW-Authenticate", ""))
        basic = {"Authorization": f"Basic {cred.basic_auth()}"} if cred is not None else {}
        if scheme == "basic":
            if cred is None:
                raise _no_credential(host, what)
            return self._send(host, method, url, {**headers, **basic}, what), "Basic"
        realm = params.get("realm", "")
        if scheme == "bearer" and realm.startswith(("https://", "http://")):
            query = {k: v for k, v in (("service", params.get("service")), ("scope", scope)) if v}
            token = self._token(host, realm, query, basic, cred)
            bearer = {"Authorization": f"Bearer {token}"}
            return self._send(host, method, url, {**headers, **bearer}, what), f"Bearer, {realm}"
        raise _odd(host, url, first, f"{what} (no usable WWW-Authenticate challenge)")

    def _token(
        self,
        host: str,
        realm: str,
        query: dict[str, str],
        basic: dict[str, str],
        cred: Credential | None,
    ) -> str:
        url = str(httpx.URL(realm, params=query) if query else httpx.URL(realm))
        resp = self._send(host, "GET", url, basic, f"its token service {realm}")
        if resp.status_code != 200:
            raise _refused(host, cred, resp, f"the token service {realm}")
        try:
            body = json.loads(resp.content)
            tok = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            tok = None
        if not isinstance(tok, str) or not tok:
            raise _odd(host, realm, resp, f"the token service {realm} (no token in the answer)")
        return tok

    def _send(
        self, host: str, method: str, url: str, headers: dict[str, str], what: str
    ) -> httpx.Response:
        try:
            return read_capped(
                self._client,
                method,
                url,
                max_bytes=MAX_BODY,
                deadline_s=self._deadline_s,
                too_large=lambda: DeployError(
                    f"the registry {host} answered {what} with more than {MAX_BODY} bytes",
                    code=Code.REGISTRY_UNREACHABLE,
                    hint=f"that {host} is a registry (the bundle's registry_host)",
                ),
                headers={"User-Agent": USER_AGENT, **headers},
                follow_redirects=False,
            )
        except DeployError:
            raise
        except httpx.HTTPError as exc:
            raise DeployError(
                f"cannot reach the registry {host} ({what} at {url.split('?')[0]}): "
                f"{root_words(exc)}",
                code=Code.REGISTRY_UNREACHABLE,
                hint=f"DNS, the route and the firewall from this box to {host}, and that "
                "the image references and the bundle's registry_host name the registry",
            ) from exc


# -- the one error mapping ---------------------------------------------------------------------


def _refused(host: str, cred: Credential | None, resp: httpx.Response, what: str) -> DeployError:
    who = f"the credential of user {cred.username}" if cred is not None else "an anonymous request"
    return DeployError(
        f"the registry {host} refused {who} ({what} answered {_status(resp)})",
        code=Code.REGISTRY_AUTH,
        hint="the registry-auth entry of the bundle's manifest in OpenBao (user and "
        f"password of the robot account for {host}), that the account is enabled, and the "
        "bundle's registry_host",
    )


def _no_credential(host: str, what: str) -> DeployError:
    return DeployError(
        f"the registry {host} asks for a credential for {what} and the agent has none for it "
        "(no basic auth credentials)",
        code=Code.REGISTRY_AUTH,
        hint="the registry credential (the manifest entry with use: registry-auth) and the "
        "bundle's registry_host",
    )


def _odd(host: str, url: str, resp: httpx.Response, what: str) -> DeployError:
    return DeployError(
        f"the registry {host} answered {what} with {_status(resp)}",
        code=Code.REGISTRY_UNREACHABLE,
        hint=f"that {url.split('/v2/')[0]} is a docker registry (v2 API) and is healthy",
    )
