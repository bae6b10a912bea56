"""A registry's manifest digest for an image reference, without pulling (``monky-deployd plan``).

``HEAD /v2/<name>/manifests/<tag>`` with the manifest media types docker accepts; the answer's
``Docker-Content-Digest`` is the digest a pull would record (a manifest list's own digest for a
multi-platform image, as docker's RepoDigest). On 401 the registry's ``WWW-Authenticate`` says
how to log in: ``Basic`` (the agent's registry credential for that host), or ``Bearer`` (a token
from the realm, asked with that credential, scope ``repository:<name>:pull``). Nothing is
downloaded but the manifest's headers (a GET only when a registry omits the digest header).

The registry is reached directly, as docker reaches it (not through Ziti): plain HTTP for a
loopback host (docker's default insecure registries 127.0.0.0/8 and localhost), HTTPS with the
system's CAs otherwise. Every answer is read through ``httpio.read_capped``.
"""

from __future__ import annotations

import hashlib
import re
import ssl
from dataclasses import dataclass

import httpx

from monky_deployd import USER_AGENT
from monky_deployd.adapters.httpio import PoolTransport, read_capped
from monky_deployd.core.errors import Code, DeployError
from monky_deployd.core.registry_cred import Credential

ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
_PARAM = re.compile(r'(\w+)="([^"]*)"')


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


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return name in ("localhost", "[::1]") or name.startswith("127.")


class Registry:
    """One client for a plan's manifest lookups (HTTPS trusts the system CAs)."""

    def __init__(self, timeout_s: float = 30.0, deadline_s: float = 60.0) -> None:
        self._deadline_s = deadline_s
        self._client = httpx.Client(
            transport=PoolTransport(ssl_context=ssl.create_default_context()),
            timeout=httpx.Timeout(timeout_s),
            trust_env=False,
        )

    def close(self) -> None:
        self._client.close()

    def digest(self, image: str, credential: Credential | None, cred_host: str | None) -> str:
        """The manifest digest (``sha256:...``) ``image`` names now at its registry."""
        ref = ImageRef.parse(image)
        if ref.reference.startswith("sha256:"):
            return ref.reference
        cred = credential if cred_host and _same_host(cred_host, ref.registry) else None
        scheme = "http" if _loopback(ref.registry) else "https"
        url = f"{scheme}://{ref.registry}/v2/{ref.name}/manifests/{ref.reference}"
        headers = {"Accept": ACCEPT, "User-Agent": USER_AGENT}
        resp = self._get(image, "HEAD", url, headers)
        if resp.status_code == 401:
            headers["Authorization"] = self._authorization(image, ref, resp, cred)
            resp = self._get(image, "HEAD", url, headers)
        if resp.status_code == 200 and not resp.headers.get("Docker-Content-Digest"):
            resp = self._get(image, "GET", url, headers)
            return "sha256:" + hashlib.sha256(resp.content).hexdigest()
        self._check(image, ref, resp)
        return resp.headers["Docker-Content-Digest"]

    def _authorization(
        self, image: str, ref: ImageRef, resp: httpx.Response, cred: Credential | None
    ) -> str:
        challenge = resp.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        if scheme == "basic":
            if cred is None:
                raise _auth(image, ref, "no basic auth credentials")
            return f"Basic {cred.basic_auth()}"
        if scheme != "bearer":
            raise _auth(image, ref, f"an authentication scheme the agent does not speak: {scheme}")
        params = dict(_PARAM.findall(challenge))
        realm = params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise _auth(image, ref, "a Bearer challenge without a realm")
        query = {"scope": f"repository:{ref.name}:pull"}
        if "service" in params:
            query["service"] = params["service"]
        auth = {"Authorization": f"Basic {cred.basic_auth()}"} if cred else {}
        answer = self._get(image, "GET", realm, {"User-Agent": USER_AGENT, **auth}, query)
        if answer.status_code != 200:
            raise _auth(image, ref, f"the token service answered {answer.status_code}")
        try:
            data = answer.json()
            token = data.get("token") or data.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise _auth(image, ref, "the token service's answer holds no token")
        return f"Bearer {token}"

    def _get(
        self,
        image: str,
        method: str,
        url: str,
        headers: dict[str, str],
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        try:
            return read_capped(
                self._client,
                method,
                url,
                max_bytes=MAX_MANIFEST_BYTES,
                deadline_s=self._deadline_s,
                too_large=lambda: DeployError(
                    f"the registry answered more than {MAX_MANIFEST_BYTES} bytes for {image}",
                    code=Code.REGISTRY_UNREACHABLE,
                    hint="the registry in the image reference",
                ),
                headers=headers,
                params=params,
            )
        except httpx.HTTPError as exc:
            raise DeployError(
                f"the registry of {image} cannot be reached: {type(exc).__name__}: {exc}",
                code=Code.REGISTRY_UNREACHABLE,
                hint="DNS and routes to the registry; its address in the compose file",
            ) from exc

    @staticmethod
    def _check(image: str, ref: ImageRef, resp: httpx.Response) -> None:
        if resp.status_code == 200:
            return
        if resp.status_code == 404:
            raise DeployError(
                f"the registry {ref.registry} has no manifest for {image} (manifest unknown)",
                code=Code.IMAGE_NOT_FOUND,
                hint="the image name and tag in the compose file",
            )
        if resp.status_code in (401, 403):
            raise _auth(image, ref, f"HTTP {resp.status_code}")
        raise DeployError(
            f"the registry {ref.registry} answered HTTP {resp.status_code} for {image}",
            code=Code.REGISTRY_UNREACHABLE,
            hint="the registry's health",
        )


def _same_host(a: str, b: str) -> bool:
    hub = {"docker.io", "index.docker.io", "registry-1.docker.io"}
    a, b = a.lower(), b.lower()
    return a == b or (a in hub and b in hub)


def _auth(image: str, ref: ImageRef, why: str) -> DeployError:
    return DeployError(
        f"the registry {ref.registry} refused to show the manifest of {image}: {why}",
        code=Code.REGISTRY_AUTH,
        hint="the registry credential (the manifest entry with use: registry-auth) and the "
        "bundle's registry_host",
    )
