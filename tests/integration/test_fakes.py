"""The loopback fakes themselves, driven by the real hvac and httpx clients."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import hvac
import hvac.exceptions
import pytest

from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.fakes.grant import GrantIssuer

ENV = "env-test-01"
REPO = Path(__file__).resolve().parents[2]
CHECKIN = {"agent": {"version": "0.1.0"}, "host": {"hostname": ENV}, "applied": None}


@pytest.fixture
def estate() -> Iterator[Estate]:
    with Estate(ENV) as est:
        yield est


def bao_client(est: Estate, token: str = "no-token") -> hvac.Client:
    return hvac.Client(url=est.bao.url, token=token, timeout=5)


def login(est: Estate, grant: str | None = None) -> str:
    resp = bao_client(est).auth.jwt.jwt_login(
        role="see_env", jwt=grant or est.grant, path="jwt-tenancy"
    )
    return str(resp["auth"]["client_token"])


def tenancy(est: Estate, token: str | None) -> httpx.Client:
    headers = {"User-Agent": "monky-deployd/test"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.Client(base_url=est.tenancy.url, headers=headers, timeout=5)


def read_kv(client: hvac.Client, path: str) -> dict[str, Any]:
    return client.secrets.kv.v2.read_secret_version(  # type: ignore[no-any-return]
        path=path, mount_point="kv", raise_on_deleted_version=True
    )


# -- OpenBao: JWT login ----------------------------------------------------------------------


def test_same_grant_logs_in_again_and_again(estate: Estate) -> None:
    resp = bao_client(estate).auth.jwt.jwt_login(
        role="see_env", jwt=estate.grant, path="jwt-tenancy"
    )
    auth = resp["auth"]
    assert set(resp) >= {"request_id", "lease_id", "renewable", "lease_duration", "data"}
    assert set(resp) >= {"wrap_info", "warnings", "auth"}
    assert auth["client_token"].startswith("s.") and len(auth["client_token"]) == 26
    assert "mount_type" not in resp and "identity_policies" not in auth
    assert auth["metadata"]["env"] == ENV
    assert auth["metadata"]["jti"] == estate.issuer.minted_jtis[0]
    assert auth["lease_duration"] == 900
    tokens = {login(estate) for _ in range(3)} | {auth["client_token"]}
    assert len(tokens) == 4
    assert estate.bao.logins == 4


def test_expired_grant_is_refused_like_openbao_after_the_leeway(estate: Estate) -> None:
    grant = estate.issuer.mint(ENV, exp_in_s=600)
    estate.clock.advance(600 + 50)  # inside OpenBao's 60 s leeway: still fine
    login(estate, grant)
    estate.clock.advance(50)  # 100 s past exp: the real server refuses it
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        login(estate, grant)
    assert "error validating token" in str(err.value)
    assert "token is expired" in str(err.value)


@pytest.mark.parametrize(
    ("make_grant", "words"),
    [
        (lambda est: GrantIssuer(est.clock).mint(ENV), "signature"),
        (lambda est: est.issuer.mint(ENV, aud="someone-else"), "audience"),
        (lambda est: est.issuer.mint(ENV, iss="evil"), "issuer"),
        (lambda est: est.issuer.mint("env-other"), 'claim "env"'),
        (lambda est: "not.a.jwt", "error validating token"),
    ],
)
def test_bad_grants_are_400_with_the_reason(
    estate: Estate, make_grant: Callable[[Estate], str], words: str
) -> None:
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        login(estate, make_grant(estate))
    assert words in str(err.value)


def test_allow_env_binds_the_env_claim_never_to_sub(estate: Estate) -> None:
    with pytest.raises(hvac.exceptions.InvalidRequest):
        login(estate, estate.issuer.mint("env-other"))  # not a bound value
    estate.bao.allow_env("env-other")
    login(estate, estate.issuer.mint("env-other"))
    # OpenBao cannot require env == sub: a grant whose sub differs still logs in
    login(estate, estate.issuer.mint(ENV, sub="env-other"))


def test_unknown_role_is_400(estate: Estate) -> None:
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        bao_client(estate).auth.jwt.jwt_login(role="nope", jwt=estate.grant, path="jwt-tenancy")
    assert "could not be found" in str(err.value)


# -- OpenBao: tokens -------------------------------------------------------------------------


def test_lookup_self_live_then_403_after_expiry(estate: Estate) -> None:
    client = bao_client(estate, login(estate))
    data = client.auth.token.lookup_self()["data"]
    assert data["ttl"] == 900
    assert data["renewable"] is True
    assert data["type"] == "service"
    assert data["meta"]["env"] == ENV
    assert data["expire_time"].endswith("Z")
    estate.clock.advance(899)
    assert client.auth.token.lookup_self()["data"]["ttl"] == 1
    estate.clock.advance(1)
    with pytest.raises(hvac.exceptions.Forbidden):
        client.auth.token.lookup_self()
    with pytest.raises(hvac.exceptions.Forbidden):
        bao_client(estate, "s.unknown").auth.token.lookup_self()
    assert estate.bao.lookups == 4


def test_revoked_token_is_403(estate: Estate) -> None:
    token = login(estate)
    estate.bao.revoke(token)
    with pytest.raises(hvac.exceptions.Forbidden):
        bao_client(estate, token).auth.token.lookup_self()


def test_renew_resets_ttl_and_caps_at_max_ttl_with_a_warning(estate: Estate) -> None:
    token = estate.bao.create_token(
        ttl_s=86400, renewable=True, meta={"env": ENV}, explicit_max_ttl_s=100_000
    )
    client = bao_client(estate, token)
    estate.clock.advance(3600)
    resp = client.auth.token.renew_self()
    assert resp["auth"]["lease_duration"] == 86400
    assert not resp["warnings"]
    assert client.auth.token.lookup_self()["data"]["ttl"] == 86400
    estate.clock.advance(50_000)
    resp = client.auth.token.renew_self(increment="24h")
    assert resp["auth"]["lease_duration"] == 100_000 - 53_600
    assert "capped" in resp["warnings"][0]
    assert estate.bao.renewals == 2


def test_renew_of_a_non_renewable_token_is_400(estate: Estate) -> None:
    token = estate.bao.create_token(ttl_s=600, renewable=False, meta={"env": ENV})
    with pytest.raises(hvac.exceptions.InvalidRequest) as err:
        bao_client(estate, token).auth.token.renew_self()
    assert "lease is not renewable" in str(err.value)


# -- OpenBao: KV v2 and faults ---------------------------------------------------------------


def test_kv_reads(estate: Estate) -> None:
    client = bao_client(estate, login(estate))
    with pytest.raises(hvac.exceptions.InvalidPath):
        read_kv(client, f"envs/{ENV}/app")
    estate.bao.set_secret(f"envs/{ENV}/app", {"db_password": "first"})
    estate.bao.set_secret(f"envs/{ENV}/app", {"db_password": "pa:ss$word"})
    resp = read_kv(client, f"envs/{ENV}/app")
    assert resp["data"]["data"] == {"db_password": "pa:ss$word"}
    assert resp["data"]["metadata"]["version"] == 2
    estate.bao.set_secret("envs/env-other/app", {"db_password": "theirs"})
    with pytest.raises(hvac.exceptions.Forbidden):
        read_kv(client, "envs/env-other/app")
    with pytest.raises(hvac.exceptions.Forbidden):
        read_kv(bao_client(estate, "s.unknown"), f"envs/{ENV}/app")
    estate.bao.delete_secret(f"envs/{ENV}/app")
    with pytest.raises(hvac.exceptions.InvalidPath):
        read_kv(client, f"envs/{ENV}/app")
    assert estate.bao.kv_reads == 5


def test_missing_path_is_404_with_empty_errors(estate: Estate) -> None:
    token = login(estate)
    resp = httpx.get(
        f"{estate.bao.url}/v1/kv/data/envs/{ENV}/none", headers={"X-Vault-Token": token}
    )
    assert resp.status_code == 404
    assert resp.json() == {"errors": []}


def test_sealed_is_vault_down_everywhere(estate: Estate) -> None:
    token = login(estate)
    estate.bao.sealed = True
    with pytest.raises(hvac.exceptions.VaultDown):
        login(estate)
    with pytest.raises(hvac.exceptions.VaultDown):
        bao_client(estate, token).auth.token.lookup_self()
    with pytest.raises(hvac.exceptions.VaultDown) as err:
        read_kv(bao_client(estate, token), f"envs/{ENV}/app")
    assert "Vault is sealed" in str(err.value)


def test_bao_fault_switches(estate: Estate) -> None:
    token = login(estate)
    client = bao_client(estate, token)
    estate.bao.fail_next(500, b'{"errors":["internal error"]}')
    with pytest.raises(hvac.exceptions.InternalServerError):
        client.auth.token.lookup_self()
    assert client.auth.token.lookup_self()["data"]["ttl"] == 900
    estate.bao.garbage = True
    resp = httpx.get(
        f"{estate.bao.url}/v1/auth/token/lookup-self", headers={"X-Vault-Token": token}
    )
    assert resp.status_code == 200
    with pytest.raises(ValueError):
        resp.json()


def test_no_token_in_request_records(estate: Estate) -> None:
    token = login(estate)
    bao_client(estate, token).auth.token.lookup_self()
    tenancy(estate, token).post(f"/v1/envs/{ENV}/checkin", json=CHECKIN)
    assert token not in repr(estate.bao.requests)
    assert token not in repr(estate.tenancy.requests)
    assert estate.tenancy.requests == [("POST", f"/v1/envs/{ENV}/checkin", True)]


# -- tenancy ---------------------------------------------------------------------------------


def test_lease_budget_then_429_then_recovery(estate: Estate) -> None:
    client = tenancy(estate, login(estate))
    leases = []
    for _ in range(5):
        resp = client.post(f"/v1/envs/{ENV}/lease")
        assert resp.status_code == 201
        leases.append(resp.json()["lease"])
        estate.clock.advance(60)
    assert all(ls["id"].startswith("lse_") and ls["ttl_s"] == 86400 for ls in leases)
    refused = client.post(f"/v1/envs/{ENV}/lease")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "LEASE_RATE_LIMITED"
    assert error["retry_after_s"] == 3600 - 300
    assert refused.headers["Retry-After"] == str(error["retry_after_s"])
    estate.clock.advance(error["retry_after_s"] - 1)
    assert client.post(f"/v1/envs/{ENV}/lease").status_code == 401  # bootstrap token expired
    client = tenancy(estate, login(estate))
    assert client.post(f"/v1/envs/{ENV}/lease").status_code == 429
    estate.clock.advance(1)
    assert client.post(f"/v1/envs/{ENV}/lease").status_code == 201
    assert estate.tenancy.lease_requests == 9
    assert len(estate.tenancy.leases) == 6


def test_lease_token_is_a_renewable_bao_token_of_the_grant(estate: Estate) -> None:
    estate.bao.set_secret(f"envs/{ENV}/app", {"k": "v"})
    lease = tenancy(estate, login(estate)).post(f"/v1/envs/{ENV}/lease").json()["lease"]
    bao = bao_client(estate, lease["token"])
    data = bao.auth.token.lookup_self()["data"]
    assert data["ttl"] == 86400
    assert data["renewable"] is True
    assert data["meta"]["jti"] == estate.issuer.minted_jtis[0]
    assert read_kv(bao, f"envs/{ENV}/app")["data"]["data"] == {"k": "v"}
    # rotation: a lease token may mint the next lease
    assert tenancy(estate, lease["token"]).post(f"/v1/envs/{ENV}/lease").status_code == 201
    estate.tenancy.revoke_lease(lease["id"])
    with pytest.raises(hvac.exceptions.Forbidden):
        bao.auth.token.lookup_self()


def test_tenancy_auth_refusals(estate: Estate) -> None:
    token = login(estate)
    lease = tenancy(estate, token).post(f"/v1/envs/{ENV}/lease").json()["lease"]

    def code(tok: str | None) -> tuple[int, str]:
        resp = tenancy(estate, tok).post(f"/v1/envs/{ENV}/checkin", json=CHECKIN)
        return resp.status_code, resp.json()["error"]["code"]

    assert code(None) == (401, "TOKEN_INVALID")
    assert code("s.unknown") == (401, "TOKEN_INVALID")
    estate.bao.allow_env("env-other")
    other = login(estate, estate.issuer.mint("env-other"))
    assert code(other) == (403, "ENV_MISMATCH")
    estate.tenancy.supersede(estate.issuer.minted_jtis[0])
    assert code(token) == (401, "GRANT_SUPERSEDED")
    assert code(lease["token"]) == (401, "GRANT_SUPERSEDED")
    # the superseded grant still logs in at OpenBao (no replay state) ...
    fresh = login(estate)
    # ... but tenancy refuses what descends from it; a new kit's grant works
    assert code(fresh) == (401, "GRANT_SUPERSEDED")
    assert (
        tenancy(estate, login(estate, estate.issuer.mint(ENV)))
        .post(f"/v1/envs/{ENV}/checkin", json=CHECKIN)
        .status_code
        == 204
    )
    estate.clock.advance(901)
    assert code(fresh) == (401, "TOKEN_INVALID")


def test_checkin_204_200_304(estate: Estate) -> None:
    client = tenancy(estate, login(estate))
    url = f"/v1/envs/{ENV}/checkin"
    assert client.post(url, json=CHECKIN).status_code == 204
    bundle = {"project": "shop", "compose": "services: {}\n", "env_template": "", "manifest": []}
    estate.tenancy.set_desired("r42", bundle)
    resp = client.post(url, json=CHECKIN)
    assert resp.status_code == 200
    assert resp.headers["ETag"] == '"r42"'
    assert resp.json() == {"revision": "r42", "bundle": bundle}
    resp = client.post(url, json=CHECKIN, headers={"If-None-Match": '"r42"'})
    assert resp.status_code == 304
    assert resp.content == b""
    assert client.post(url, json=CHECKIN, headers={"If-None-Match": '"r41"'}).status_code == 200
    assert client.post(url, json={"agent": {}}).status_code == 400
    estate.tenancy.set_raw_checkin(200, b"x" * 1000, content_type="application/json")
    assert client.post(url, json=CHECKIN).content == b"x" * 1000
    estate.tenancy.clear_raw_checkin()
    estate.tenancy.clear_desired()
    assert client.post(url, json=CHECKIN).status_code == 204
    assert estate.tenancy.checkin_count == 7
    assert estate.tenancy.checkin_if_none_match[2] == '"r42"'
    assert estate.tenancy.user_agents[0] == "monky-deployd/test"


def test_reports_are_recorded(estate: Estate) -> None:
    report = {"tick_id": "t1", "revision": "r1", "outcome": "applied", "code": "OK"}
    resp = tenancy(estate, login(estate)).post(f"/v1/envs/{ENV}/reports", json=report)
    assert resp.status_code == 202
    assert estate.tenancy.reports == [report]
    assert estate.tenancy.report_count == 1


def test_tenancy_fault_switches(estate: Estate) -> None:
    client = tenancy(estate, login(estate))
    estate.tenancy.fail_next(503, b"", path_contains="/lease", times=2)
    assert client.post(f"/v1/envs/{ENV}/checkin", json=CHECKIN).status_code == 204
    assert client.post(f"/v1/envs/{ENV}/lease").status_code == 503
    assert client.post(f"/v1/envs/{ENV}/lease").status_code == 503
    assert client.post(f"/v1/envs/{ENV}/lease").status_code == 201
    estate.tenancy.garbage = True
    resp = client.post(f"/v1/envs/{ENV}/checkin", json=CHECKIN)
    assert resp.status_code == 200
    with pytest.raises(ValueError):
        resp.json()
    estate.tenancy.garbage = False
    estate.tenancy.slow_s = 30
    with pytest.raises(httpx.ReadTimeout):
        client.post(f"/v1/envs/{ENV}/checkin", json=CHECKIN, timeout=0.3)


def test_stop_cuts_keepalive_connections() -> None:
    est = Estate(ENV).start()
    client = tenancy(est, login(est))
    assert client.post(f"/v1/envs/{ENV}/checkin", json=CHECKIN).status_code == 204
    est.stop()
    with pytest.raises(httpx.TransportError):
        client.post(f"/v1/envs/{ENV}/checkin", json=CHECKIN)


# -- in-process (httpx.MockTransport) --------------------------------------------------------


def test_the_in_process_wire_answers_as_the_socket_does(estate: Estate) -> None:
    """Estate.wire() runs the same handling without a socket: the same statuses, headers and
    bytes, the same records, and a stopped fake refuses the connection."""
    token = login(estate)
    wired = httpx.Client(transport=estate.wire(), timeout=5)
    sock = httpx.Client(timeout=5)
    bundle = {"project": "shop", "compose": "services: {}\n", "env_template": "", "manifest": []}
    checkin = f"{estate.tenancy.url}/v1/envs/{ENV}/checkin"
    auth = {"Authorization": f"Bearer {token}"}
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"{estate.bao.url}/v1/sys/health", {}),
        ("POST", f"{estate.bao.url}/v1/auth/jwt-tenancy/login", {"json": {"role": "nope"}}),
        ("GET", f"{estate.bao.url}/v1/auth/token/lookup-self", {}),
        (
            "GET",
            f"{estate.bao.url}/v1/kv/data/envs/{ENV}/none",
            {"headers": {"X-Vault-Token": token}},
        ),
        ("POST", checkin, {"json": CHECKIN}),
        ("POST", checkin, {"json": CHECKIN, "headers": auth}),
        ("desired", "", {}),
        ("POST", checkin, {"json": CHECKIN, "headers": auth}),
        ("POST", checkin, {"json": CHECKIN, "headers": {**auth, "If-None-Match": '"r42"'}}),
        ("fault", "", {}),
        ("POST", checkin, {"json": CHECKIN, "headers": auth}),
        ("GET", f"{estate.tenancy.url}/v1/envs/{ENV}/lease", {"headers": auth}),
    ]
    for method, url, kw in steps:
        if method == "desired":
            estate.tenancy.set_desired("r42", bundle)
            continue
        if method == "fault":
            estate.tenancy.fail_next(503, b"upstream down", "/checkin", 2, {"Retry-After": "7"})
            continue
        before = (len(estate.tenancy.requests), len(estate.bao.requests))
        a, b = (c.request(method, url, **kw) for c in (wired, sock))
        assert (a.status_code, a.content) == (b.status_code, b.content), url
        drop = {"date", "server"}
        assert {k: v for k, v in a.headers.items() if k not in drop} == {
            k: v for k, v in b.headers.items() if k not in drop
        }
        records = estate.tenancy.requests[before[0] :] + estate.bao.requests[before[1] :]
        assert len(records) == 2 and records[0] == records[1]
    estate.tenancy.stop()
    with pytest.raises(httpx.ConnectError):
        wired.post(checkin, json=CHECKIN, headers=auth)
    with pytest.raises(httpx.ConnectError):
        sock.post(checkin, json=CHECKIN, headers=auth)


# -- serve.py --------------------------------------------------------------------------------


def test_serve_runs_the_demo_estate_until_sigterm(tmp_path: Path) -> None:
    desired = {"revision": "r7", "bundle": {"project": "demo"}}
    (tmp_path / "desired.json").write_text(json.dumps(desired))
    (tmp_path / "secrets.json").write_text(json.dumps({"envs/env-demo-01/app": {"k": "v"}}))
    state_file = tmp_path / "state.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            *("-m", "monky_deployd_testkit.fakes.serve", "--env", "env-demo-01"),
            *("--state-file", str(state_file), "--desired", str(tmp_path / "desired.json")),
            *("--secrets", str(tmp_path / "secrets.json")),
        ],
        cwd=REPO,
        stderr=subprocess.PIPE,
    )
    try:
        end = time.monotonic() + 60  # the process's start (imports, two servers): slow when loaded
        while not state_file.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)
        assert state_file.exists(), proc.stderr.read() if proc.stderr else ""
        assert stat.S_IMODE(os.stat(state_file).st_mode) == 0o600
        state = json.loads(state_file.read_text())
        bao = hvac.Client(url=f"http://127.0.0.1:{state['openbao_port']}", token="x", timeout=5)
        token = bao.auth.jwt.jwt_login(role="see_env", jwt=state["grant"], path="jwt-tenancy")[
            "auth"
        ]["client_token"]
        bao.token = token
        assert read_kv(bao, "envs/env-demo-01/app")["data"]["data"] == {"k": "v"}
        resp = httpx.post(
            f"http://127.0.0.1:{state['tenancy_port']}/v1/envs/env-demo-01/checkin",
            json=CHECKIN,
            headers={"Authorization": f"Bearer {token}"},
        )
        assert resp.json() == desired
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_chunked_request_bodies_and_fault_headers(estate: Estate) -> None:
    client = tenancy(estate, login(estate))

    def chunks() -> Iterator[bytes]:
        yield b'{"tick_id": "t2", '
        yield b'"outcome": "refused"}'

    assert client.post(f"/v1/envs/{ENV}/reports", content=chunks()).status_code == 202
    assert estate.tenancy.reports == [{"tick_id": "t2", "outcome": "refused"}]
    estate.tenancy.fail_next(503, b"upstream down", headers={"Retry-After": "7"})
    resp = client.post(f"/v1/envs/{ENV}/reports", json={})
    assert (resp.status_code, resp.headers["Retry-After"], resp.text) == (503, "7", "upstream down")


def test_a_restarted_fake_comes_back_on_the_same_port_with_its_state(estate: Estate) -> None:
    token = login(estate)
    port = estate.tenancy.port
    estate.tenancy.stop()
    with pytest.raises(httpx.ConnectError):
        tenancy(estate, token).post(f"/v1/envs/{ENV}/checkin", json=CHECKIN)
    estate.tenancy.start()
    assert estate.tenancy.port == port
    assert tenancy(estate, token).post(f"/v1/envs/{ENV}/checkin", json=CHECKIN).status_code == 204


def test_clock_is_frozen_unless_ticking() -> None:
    frozen = Clock(1000.0)
    assert frozen.now() == 1000.0
    assert frozen.advance(5) == 1005.0
    ticking = Clock(1000.0, ticking=True)
    first = ticking.now()
    time.sleep(0.01)
    assert ticking.now() > first
    assert ticking.advance(100) > first + 100
    with pytest.raises(ValueError):
        frozen.advance(-1)
