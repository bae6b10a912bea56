"""bao.Bao over the real hvac client and a real httpx client, against the loopback FakeBao: what
a real server cannot be made to show (5xx, garbage, stalls, a closed port, a non-HTTP peer), what
needs a clock that moves hours (expiry, the max-TTL cap) and the client's own behaviour. Login,
secret reads, mounts, sealing and revocation run against a real OpenBao in test_bao_real.py."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.adapters.net import baowords
from monky_deployd.adapters.net.bao import Bao, RenewRefused
from monky_deployd.adapters.net.hvac_httpx import HttpxAdapter
from monky_deployd.config import OpenBaoCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import BaoError, DeployError, TokenError
from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.grant import GrantIssuer
from monky_deployd_testkit.fakes.openbao import FakeBao

ENV = "env-test-01"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def issuer(clock: Clock) -> GrantIssuer:
    return GrantIssuer(clock)


@pytest.fixture
def fake(issuer: GrantIssuer, clock: Clock) -> Iterator[FakeBao]:
    with FakeBao(issuer, clock) as bao:
        bao.allow_env(ENV)
        yield bao


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as client:
        yield client


def make(http: httpx.Client, fake: FakeBao, **kw: object) -> Bao:
    return Bao(http, OpenBaoCfg.model_validate({"host": fake.host, "port": fake.port, **kw}))


def blames_tenancy(text: str) -> bool:
    """True when the text names the tenancy service (the jwt-tenancy mount name does not count)."""
    return "tenancy" in text.lower().replace("jwt-tenancy", "")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- login -----------------------------------------------------------------------------------


def test_expired_grant_is_grant_expired_and_asks_for_a_new_kit(
    http: httpx.Client, fake: FakeBao, issuer: GrantIssuer, clock: Clock
) -> None:
    grant = issuer.mint(ENV, exp_in_s=3600)
    clock.advance(3600 + 61)  # past exp and OpenBao's 60 s leeway
    with pytest.raises(TokenError) as exc:
        make(http, fake).login_jwt(grant)
    err = exc.value
    assert err.code == "GRANT_EXPIRED" and err.outcome == "refused"
    assert "new kit is needed for this environment" in err.message
    assert f"127.0.0.1:{fake.port}" in err.message
    assert grant not in str(err) and grant not in err.detail


def test_lookup_self_none_on_revoked_and_on_expired(
    http: httpx.Client, fake: FakeBao, clock: Clock
) -> None:
    bao = make(http, fake)
    revoked = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    fake.revoke(revoked)
    assert bao.lookup_self(revoked) is None
    short = fake.create_token(ttl_s=100, renewable=True, meta={"env": ENV})
    assert bao.lookup_self(short) is not None
    clock.advance(101)
    assert bao.lookup_self(short) is None
    assert bao.lookup_self("s.unknown") is None


def test_renew_self_resets_ttl_and_refuses_non_renewable(
    http: httpx.Client, fake: FakeBao, clock: Clock
) -> None:
    bao = make(http, fake)
    tok = fake.create_token(ttl_s=86400, renewable=True, meta={"env": ENV})
    clock.advance(80000)
    info = bao.renew_self(tok)
    assert info.ttl_s == 86400 and info.renewable
    fixed = fake.create_token(ttl_s=86400, renewable=False, meta={"env": ENV})
    with pytest.raises(RenewRefused) as exc:
        bao.renew_self(fixed)
    assert exc.value.status == 400 and "not renewable" in exc.value.message
    dead = fake.create_token(ttl_s=10, renewable=True, meta={"env": ENV})
    clock.advance(11)
    with pytest.raises(RenewRefused) as exc:
        bao.renew_self(dead)
    assert exc.value.status == 403


def test_renew_self_capped_at_max_ttl_reports_the_capped_ttl(
    http: httpx.Client, fake: FakeBao, clock: Clock
) -> None:
    tok = fake.create_token(
        ttl_s=86400, renewable=True, meta={"env": ENV}, explicit_max_ttl_s=90000
    )
    clock.advance(80000)
    info = make(http, fake).renew_self(tok)
    assert info.ttl_s == 10000  # capped: 90000 - 80000


# -- KV v2 -----------------------------------------------------------------------------------


def test_read_secret_uses_the_configured_kv_mount(
    http: httpx.Client, issuer: GrantIssuer, clock: Clock
) -> None:
    with FakeBao(issuer, clock, kv_mount="secret") as fake:
        fake.allow_env(ENV)
        tok = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
        fake.set_secret(f"envs/{ENV}/app", {"k": "v"})
        assert make(http, fake, kv_mount="secret").read_secret(tok, f"envs/{ENV}/app", "k") == "v"
        assert ("GET", f"/v1/secret/data/envs/{ENV}/app") in fake.requests


# -- OpenBao faults: named as OpenBao with its address, never tenancy ------------------------


def _every_call(bao: Bao, issuer: GrantIssuer) -> list[tuple[str, object]]:
    calls: list[tuple[str, object]] = []
    steps: list[tuple[str, Callable[[], object]]] = [
        ("login", lambda: bao.login_jwt(issuer.mint(ENV))),
        ("lookup", lambda: bao.lookup_self("s.x")),
        ("renew", lambda: bao.renew_self("s.x")),
        ("kv", lambda: bao.read_secret("s.x", f"envs/{ENV}/app", "k")),
    ]
    for name, fn in steps:
        try:
            calls.append((name, fn()))
        except DeployError as err:
            calls.append((name, err))
    return calls


def test_garbage_is_openbao_bad_response(
    http: httpx.Client, fake: FakeBao, issuer: GrantIssuer
) -> None:
    fake.garbage = True
    for name, err in _every_call(make(http, fake), issuer):
        assert isinstance(err, BaoError), name
        assert err.code == "OPENBAO_BAD_RESPONSE", (name, err.code)
        assert f"127.0.0.1:{fake.port}" in err.message and not blames_tenancy(str(err))


def test_5xx_is_openbao_unavailable(http: httpx.Client, fake: FakeBao, issuer: GrantIssuer) -> None:
    fake.fail_next(500, b'{"errors":["internal error"]}', times=3)
    fake.fail_next(502, b"bad gateway")
    for name, err in _every_call(make(http, fake), issuer):
        assert isinstance(err, BaoError), name
        assert err.code == "OPENBAO_UNAVAILABLE", (name, err.code)
        assert f"127.0.0.1:{fake.port}" in err.message


def test_503_without_sealed_is_unavailable_not_sealed(http: httpx.Client, fake: FakeBao) -> None:
    fake.fail_next(503, b'{"errors":["Vault is in standby"]}')
    with pytest.raises(BaoError) as exc:
        make(http, fake).lookup_self("s.x")
    assert exc.value.code == "OPENBAO_UNAVAILABLE"


def test_closed_port_is_openbao_unreachable(http: httpx.Client) -> None:
    port = free_port()
    bao = Bao(http, OpenBaoCfg(host="127.0.0.1", port=port))
    with pytest.raises(DeployError) as exc:
        bao.lookup_self("s.x")
    assert exc.value.code is Code.OPENBAO_UNREACHABLE
    assert f"OpenBao at 127.0.0.1:{port}" in exc.value.message
    assert not blames_tenancy(str(exc.value))


def test_silent_server_is_unreachable_within_the_configured_timeout(
    http: httpx.Client, fake: FakeBao
) -> None:
    fake.slow_s = 5.0
    bao = make(http, fake, timeout_s=0.3)
    with pytest.raises(DeployError) as exc:
        bao.lookup_self("s.x")
    assert exc.value.code is Code.OPENBAO_UNREACHABLE and "did not answer" in exc.value.message
    assert "within 0.3 s" in exc.value.message
    fake.slow_s = 0.0


class _TransportThatNamesTheFault(httpx.BaseTransport):
    """Like the Ziti transport: the dial fails with a DeployError as the cause."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            raise DeployError(
                "ziti: no service for openbao.monky.ziti:8200", code=Code.ZITI_NO_SERVICE
            )
        except DeployError as err:
            raise httpx.ConnectError("dial failed", request=request) from err


def test_a_transport_that_names_the_fault_is_not_rewrapped() -> None:
    with httpx.Client(transport=_TransportThatNamesTheFault()) as client:
        bao = Bao(client, OpenBaoCfg())
        with pytest.raises(DeployError) as exc:
            bao.lookup_self("s.x")
    assert exc.value.code is Code.ZITI_NO_SERVICE


# -- hvac never reads VAULT_TOKEN / ~/.vault-token / VAULT_ADDR -------------------------------


def test_hvac_ignores_vault_token_vault_addr_and_the_token_file(
    http: httpx.Client, fake: FakeBao, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_token = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    file_token = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    fake.set_secret(f"envs/{ENV}/app", {"k": "v"})
    (tmp_path / ".vault-token").write_text(file_token)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VAULT_TOKEN", env_token)
    monkeypatch.setenv("VAULT_ADDR", f"http://127.0.0.1:{free_port()}")
    bao = make(http, fake)
    # Both live tokens are right there; a client that fell back to them would succeed.
    assert bao.lookup_self("") is None
    assert bao.lookup_self("s.dead") is None
    with pytest.raises(BaoError) as exc:
        bao.read_secret("", f"envs/{ENV}/app", "k")
    assert exc.value.code == "SECRET_FORBIDDEN"
    assert all(path.startswith("/v1/") for _, path in fake.requests)
    assert os.environ["VAULT_TOKEN"] == env_token  # untouched


def test_adapter_sends_the_token_header_and_user_agent(http: httpx.Client, fake: FakeBao) -> None:
    tok = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    adapter = HttpxAdapter(fake.url, tok, httpx_client=http, timeout_s=5)
    answer = adapter.get("/v1/auth/token/lookup-self")
    assert isinstance(answer, dict) and answer["data"]["ttl"] > 0


# -- the grant file --------------------------------------------------------------------------


def test_read_grant_strips_trailing_newline_and_spaces(
    tmp_path: Path, http: httpx.Client, fake: FakeBao, issuer: GrantIssuer
) -> None:
    grant = issuer.mint(ENV)
    path = tmp_path / "grant.jwt"
    path.write_text(grant + "  \n\n")
    assert read_grant(path) == grant
    assert make(http, fake).login_jwt(read_grant(path)).ttl_s > 0


def test_a_server_that_does_not_speak_http_is_a_bad_response() -> None:
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\x00\x01garbage\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        with httpx.Client(trust_env=False) as client:
            bao = Bao(client, OpenBaoCfg(host="127.0.0.1", port=port))
            with pytest.raises(BaoError) as exc:
                bao.lookup_self("s.x")
        assert exc.value.code == "OPENBAO_BAD_RESPONSE"
        assert f"OpenBao at 127.0.0.1:{port}" in exc.value.message
        assert "not HTTP" in exc.value.message
    finally:
        srv.close()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(body=JSON | st.fixed_dictionaries({"data": st.fixed_dictionaries({"metadata": JSON})}))
def test_any_404_body_is_a_deleted_version_or_plain_never_a_crash(body: object) -> None:
    found = baowords.deleted_version(body)
    if found is not None:
        destroyed, when, _version = found
        assert destroyed or when


@given(
    destroyed=st.booleans(),
    when=st.sampled_from(["", "2026-12-03T03:18:22.408879612Z"]),
    version=st.integers(1, 99),
)
def test_a_404_envelope_is_named_by_its_metadata(destroyed: bool, when: str, version: int) -> None:
    body = {
        "data": {
            "data": None,
            "metadata": {"deletion_time": when, "destroyed": destroyed, "version": version},
        }
    }
    found = baowords.deleted_version(body)
    if not destroyed and not when:
        assert found is None
    else:
        assert found == (destroyed, when, str(version))
