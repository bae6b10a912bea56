"""The tenancy client's parsing (core.wire.checkin models) over real HTTP to a scripted loopback
server: what tenancy answers becomes a Lease, a Checkin or a named refusal with today's code and
sentence, and no token or answered value reaches an error's text or its exception chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from monky_deployd import __version__
from monky_deployd.adapters.net.tenancy import RateLimited, Tenancy
from monky_deployd.config import TenancyCfg
from monky_deployd.core.faults import DeployError, TokenError
from monky_deployd.core.wire import checkin as wire
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response

SECRET = "hvs.SECRET-lease-token"
LEASE = {"id": "lse_1", "token": SECRET, "accessor": "acc", "ttl_s": 86400, "renewable": True}


class Scripted(LoopbackServer):
    """Answers every request with ``answer``; keeps the request bodies."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = Response(500)
        self.bodies: list[bytes] = []

    def route(self, req: Request) -> Response:
        with self.lock:
            self.bodies.append(req.body)
            return self.answer


@pytest.fixture
def server() -> Iterator[Scripted]:
    with Scripted() as srv:
        yield srv


@pytest.fixture
def tenancy(server: Scripted) -> Iterator[Tenancy]:
    cfg = TenancyCfg(host=server.host, port=server.port, timeout_s=5)
    with httpx.Client(trust_env=False) as client:
        yield Tenancy(client, cfg, "env-a", max_body_bytes=1 << 20)


def chain_text(exc: BaseException) -> str:
    words = []
    seen: BaseException | None = exc
    while seen is not None:
        words.append(f"{seen!s} {seen!r}")
        seen = seen.__cause__ or seen.__context__
    return " ".join(words)


# -- lease ------------------------------------------------------------------------------------


def test_a_lease_answer_becomes_a_lease_that_hides_its_token(
    server: Scripted, tenancy: Tenancy
) -> None:
    server.answer = json_response(201, {"lease": LEASE})
    lease = tenancy.lease("bootstrap-token")
    assert (lease.id, lease.token, lease.ttl_s, lease.renewable) == ("lse_1", SECRET, 86400, True)
    assert SECRET not in repr(lease)
    assert server.bodies == [b"{}"]


@pytest.mark.parametrize(
    "body",
    [
        {"lease": dict(LEASE, ttl_s=SECRET)},
        {"lease": dict(LEASE, id=None)},
        {"lease": {k: v for k, v in LEASE.items() if k != "ttl_s"}},
        {"lease": dict(LEASE, token="")},
        {"lease": [SECRET]},
        {"lease": SECRET},
        {"token": SECRET},
    ],
)
def test_a_lease_answer_of_the_wrong_shape_is_bad_response_and_echoes_nothing(
    server: Scripted, tenancy: Tenancy, body: dict[str, Any]
) -> None:
    server.answer = json_response(201, body)
    with pytest.raises(DeployError) as info:
        tenancy.lease("bootstrap-token")
    err = info.value
    assert err.code == "TENANCY_BAD_RESPONSE"
    assert err.message == (
        f"tenancy at {tenancy.address} answered POST /lease with the lease answer lacks "
        "lease.id/token/ttl_s"
    )
    assert SECRET not in chain_text(err) and SECRET not in err.detail


# -- check-in ---------------------------------------------------------------------------------


def test_a_checkin_request_model_posts_the_bytes_of_the_hand_built_dict(
    server: Scripted, tenancy: Tenancy
) -> None:
    server.answer = Response(204)
    host = wire.HostFacts(hostname="box-1", docker="29.0.1", compose="2.40.0")
    tenancy.checkin("t", wire.CheckinRequest.of(host, "r41"), "r41")
    tenancy.checkin("t", wire.CheckinRequest.of(host, "r41").body(), "r41")
    hand_built = {
        "agent": {"version": __version__},
        "host": {"hostname": "box-1", "docker": "29.0.1", "compose": "2.40.0"},
        "applied": {"revision": "r41", "outcome": "applied"},
    }
    assert server.bodies == [json.dumps(hand_built).encode()] * 2


def test_a_checkin_answer_becomes_a_checkin(server: Scripted, tenancy: Tenancy) -> None:
    bundle = {"project": "shop", "compose": "services: {}\n"}
    server.answer = json_response(200, {"revision": "r2", "bundle": bundle}, {"ETag": '"r2"'})
    answer = tenancy.checkin("t", {"applied": None}, None)
    assert (answer.status, answer.revision, answer.bundle) == (200, "r2", bundle)
    server.answer = Response(304)
    assert tenancy.checkin("t", {}, "r1").revision == "r1"


@pytest.mark.parametrize(
    "body",
    [
        {"revision": "", "bundle": {}},
        {"revision": 42, "bundle": {}},
        {"revision": "r1", "bundle": [SECRET]},
        {"revision": "r1", "bundle": SECRET},
        {"bundle": {"x": SECRET}},
    ],
)
def test_a_checkin_answer_of_the_wrong_shape_is_bad_response_and_echoes_nothing(
    server: Scripted, tenancy: Tenancy, body: dict[str, Any]
) -> None:
    server.answer = json_response(200, body)
    with pytest.raises(DeployError) as info:
        tenancy.checkin("t", {}, None)
    assert info.value.code == "TENANCY_BAD_RESPONSE"
    assert info.value.message == (
        f"tenancy at {tenancy.address} answered POST /checkin with the check-in answer lacks a "
        "revision string and bundle"
    )
    assert SECRET not in chain_text(info.value)


# -- error bodies -----------------------------------------------------------------------------


def test_a_rate_limit_carries_retry_after_s_from_the_body_or_the_header(
    server: Scripted, tenancy: Tenancy
) -> None:
    err = {"code": "LEASE_RATE_LIMITED", "message": "budget spent", "retry_after_s": 120}
    server.answer = json_response(429, {"error": err}, {"Retry-After": "999"})
    with pytest.raises(RateLimited) as info:
        tenancy.lease("t")
    assert info.value.retry_after_s == 120
    err = {"code": "LEASE_RATE_LIMITED", "retry_after_s": 30.7}
    server.answer = json_response(429, {"error": err})
    with pytest.raises(RateLimited) as info:
        tenancy.lease("t")
    assert info.value.retry_after_s == 30
    server.answer = json_response(
        429, {"error": {"code": "LEASE_RATE_LIMITED"}}, {"Retry-After": "45"}
    )
    with pytest.raises(RateLimited) as info:
        tenancy.lease("t")
    assert info.value.retry_after_s == 45


def test_error_codes_map_as_documented(server: Scripted, tenancy: Tenancy) -> None:
    cases: list[tuple[Response, str]] = [
        (json_response(401, {"error": {"code": "GRANT_SUPERSEDED"}}), "GRANT_SUPERSEDED"),
        (json_response(401, {"error": {"code": "TOKEN_INVALID"}}), "TOKEN_INVALID"),
        (json_response(401, {"error": "not an object"}), "TOKEN_INVALID"),
        (json_response(403, {"error": {"code": "ENV_MISMATCH"}}), "ENV_MISMATCH"),
        (
            json_response(503, {"error": {"code": "DOWN", "message": "m" * 900}}),
            "TENANCY_UNAVAILABLE",
        ),
        (Response(502, b"<html>bad gateway</html>"), "TENANCY_UNAVAILABLE"),
        (json_response(409, {"error": {"code": "CONFLICT", "message": "no"}}), "TENANCY_REJECTED"),
    ]
    for answer, code in cases:
        server.answer = answer
        with pytest.raises(DeployError) as info:
            tenancy.checkin("t", {}, None)
        assert info.value.code == code, (answer.status, answer.body)
        if code in ("GRANT_SUPERSEDED", "TOKEN_INVALID", "ENV_MISMATCH"):
            assert isinstance(info.value, TokenError)
    server.answer = json_response(503, {"error": {"code": "DOWN", "message": "m" * 900}})
    with pytest.raises(DeployError) as unavailable:
        tenancy.checkin("t", {}, None)
    assert unavailable.value.detail == "m" * 500
    assert unavailable.value.message.endswith("failed with HTTP 503 DOWN")
    server.answer = json_response(409, {"error": {"code": "CONFLICT", "message": "no"}})
    with pytest.raises(DeployError) as rejected:
        tenancy.checkin("t", {}, None)
    assert rejected.value.message.endswith("answered HTTP 409 CONFLICT: no")
