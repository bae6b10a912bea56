"""The registry's challenge flow (``adapters.net.registry``): the Basic flow runs against the real
docker-registry in tests/integration/agent/test_doctor.py (login) and
tests/integration/net/test_registry_digest.py (manifest digest); the Bearer flow (Harbor,
GitLab, Docker Hub: a token service named in ``WWW-Authenticate``) here, against a loopback
registry that speaks it, with real HTTP: doctor's login check and plan's manifest digest."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator

import pytest

from monky_deployd.adapters.net.registry import Registry, insecure
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.registry_cred import Credential
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response

USER, PASSWORD, TOKEN = "robot$env", "pw:with:colons", "bearer-tok-123456"
DIGEST = "sha256:" + "ab" * 32


class BearerRegistry(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []
        self.scopes: list[list[str]] = []

    def route(self, req: Request) -> Response:
        auth = req.header("Authorization") or ""
        self.seen.append((req.path, auth.split(" ")[0]))
        if req.path == "/service/token":
            self.scopes.append(req.query.get("scope", []))
        if req.path == "/service/token":
            want = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
            if auth != f"Basic {want}" or req.query.get("service") != ["harbor-registry"]:
                return json_response(
                    401,
                    {
                        "errors": [
                            {"code": "UNAUTHORIZED", "message": "unauthorized to access repository"}
                        ]
                    },
                )
            return json_response(200, {"token": TOKEN})
        if req.path == "/v2/team/app/manifests/1.0" and auth == f"Bearer {TOKEN}":
            return Response(200, b"", {"Docker-Content-Digest": DIGEST})
        if req.path.startswith("/v2/team/app/manifests/") and auth == f"Bearer {TOKEN}":
            return json_response(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})
        if req.path.startswith("/v2/"):
            if auth == f"Bearer {TOKEN}":
                return json_response(200, {})
            realm = f"http://127.0.0.1:{self.port}/service/token"
            return json_response(
                401,
                {"errors": [{"code": "UNAUTHORIZED", "message": "unauthorized"}]},
                {"WWW-Authenticate": f'Bearer realm="{realm}",service="harbor-registry"'},
            )
        return json_response(404, {})


@pytest.fixture
def harbor() -> Iterator[BearerRegistry]:
    with BearerRegistry() as srv:
        yield srv


def check(host: str, password: str) -> str:
    with Registry(timeout_s=5) as reg:  # a loopback host: plain HTTP, as docker speaks to it
        return reg.check_login(host, Credential(USER, password))


def test_bearer_flow_accepts_the_credential(harbor: BearerRegistry) -> None:
    fact = check(f"127.0.0.1:{harbor.port}", PASSWORD)
    assert fact.startswith(f"the registry 127.0.0.1:{harbor.port} accepts user {USER} (Bearer")
    assert harbor.seen == [("/v2/", ""), ("/service/token", "Basic"), ("/v2/", "Bearer")]


def test_bearer_flow_names_the_refusal_without_the_password(harbor: BearerRegistry) -> None:
    with pytest.raises(DeployError) as err:
        check(f"127.0.0.1:{harbor.port}", "wrong-password-xyz")
    assert err.value.code == "REGISTRY_AUTH"
    assert f"refused the credential of user {USER}" in err.value.message
    assert "unauthorized to access repository" in err.value.message  # the registry's words
    assert "wrong-password-xyz" not in str(err.value) + err.value.detail


def digest(image: str, password: str, cred_host: str | None) -> str:
    with Registry(timeout_s=5) as reg:
        return reg.digest(image, Credential(USER, password), cred_host)


def test_the_manifest_digest_through_the_bearer_flow(harbor: BearerRegistry) -> None:
    host = f"127.0.0.1:{harbor.port}"
    assert digest(f"{host}/team/app:1.0", PASSWORD, host) == DIGEST
    manifest = "/v2/team/app/manifests/1.0"
    assert harbor.seen == [(manifest, ""), ("/service/token", "Basic"), (manifest, "Bearer")]
    assert harbor.scopes == [["repository:team/app:pull"]]  # a pull token for that repository


@pytest.mark.parametrize(
    ("image", "password", "code", "words"),
    [
        ("team/app:1.0", "wrong-password-xyz", "REGISTRY_AUTH", "unauthorized to access"),
        ("team/app:nope", PASSWORD, "IMAGE_NOT_FOUND", "manifest unknown"),
    ],
)
def test_the_bearer_flow_names_a_digest_refusal(
    harbor: BearerRegistry, image: str, password: str, code: str, words: str
) -> None:
    host = f"127.0.0.1:{harbor.port}"
    with pytest.raises(DeployError) as err:
        digest(f"{host}/{image}", password, host)
    assert err.value.code == code and words in err.value.message
    assert "wrong-password-xyz" not in str(err.value) + err.value.detail + err.value.hint
    assert TOKEN not in str(err.value)


def test_an_unreachable_registry_is_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DeployError) as err:
        check(f"127.0.0.1:{port}", PASSWORD)
    assert err.value.code == "REGISTRY_UNREACHABLE"
    assert f"cannot reach the registry 127.0.0.1:{port}" in err.value.message


def test_which_registries_are_spoken_to_in_plain_http() -> None:
    assert insecure("127.0.0.1:5000") and insecure("localhost:5000") and insecure("[::1]:5000")
    assert not insecure("harbor.example.net") and not insecure("10.0.0.5:5000")
    info = {"RegistryConfig": {"IndexConfigs": {"10.0.0.5:5000": {"Secure": False}}}}
    assert insecure("10.0.0.5:5000", info)
