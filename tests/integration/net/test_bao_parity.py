"""The fake OpenBao answers what the real server answers: the same requests go to FakeBao and to
a real ``bao server -dev`` (RealBao), set up alike (one grant issuer, one environment, the same
secrets and tokens), and each answer's status and body are compared. Values that differ by
nature (request ids, tokens, accessors, times, a TTL ticking down) are replaced by their kind
before comparing; everything else must be equal, key for key."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.grant import GrantIssuer
from monky_deployd_testkit.fakes.openbao import FakeBao
from monky_deployd_testkit.realbao import RealBao

VOLATILE = {
    "request_id",
    "client_token",
    "accessor",
    "id",
    "entity_id",
    "creation_time",
    "expire_time",
    "issue_time",
    "created_time",
    "deletion_time",
    "last_renewal",
    "last_renewal_time",
    "ttl",
    "jti",
}


def normal(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normal(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [normal(v) for v in value]
    if key in VOLATILE and value not in ("", None, 0):
        return f"<{key}>"
    return value


@dataclass
class Side:
    name: str
    url: str
    bao: FakeBao | RealBao
    tokens: dict[str, str] = field(default_factory=dict)
    http: httpx.Client = field(default_factory=lambda: httpx.Client(trust_env=False, timeout=10))

    def ask(self, method: str, path: str, token: str | None, body: Any) -> tuple[int, Any]:
        headers = {"X-Vault-Token": self.tokens[token]} if token else {}
        resp = self.http.request(method, f"{self.url}/v1/{path}", headers=headers, json=body)
        return resp.status_code, (normal(resp.json()) if resp.content else None)


@pytest.fixture
def sides(real_bao: RealBao) -> Iterator[tuple[Side, Side]]:
    env = f"env-par-{uuid.uuid4().hex[:8]}"
    with FakeBao(real_bao.issuer, Clock()) as fake:
        pair = (Side("fake", fake.url, fake), Side("real", real_bao.url, real_bao))
        for side in pair:
            bao = side.bao
            bao.allow_env(env)
            policies = ["default", f"{env}-lease"]
            meta = {"env": env, "jti": "kit-1"}
            side.tokens["lease"] = bao.create_token(
                ttl_s=86400, renewable=True, meta=meta, policies=policies
            )
            side.tokens["fixed"] = bao.create_token(
                ttl_s=3600, renewable=False, meta=meta, policies=policies
            )
            side.tokens["dead"] = bao.create_token(
                ttl_s=3600, renewable=True, meta=meta, policies=policies
            )
            bao.revoke(side.tokens["dead"])
            side.tokens["unknown"] = "s.unknownunknownunknown1"
            login = side.http.post(
                f"{side.url}/v1/auth/jwt-tenancy/login",
                json={"role": "see_env", "jwt": side.bao.issuer.mint(env)},
            )
            side.tokens["boot"] = login.json()["auth"]["client_token"]
            bao.set_secret(f"envs/{env}/app", {"db_password": "pw", "n": 5})
            bao.set_secret(f"envs/{env}/gone", {"k": "1"})
            bao.set_secret(f"envs/{env}/gone", {"k": "2"})
            bao.soft_delete(f"envs/{env}/gone")
            bao.set_secret(f"envs/{env}/burnt", {"k": "1"})
            bao.destroy(f"envs/{env}/burnt", [1])
            bao.set_secret(f"envs/{env}/erased", {"k": "1"})
            bao.delete_secret(f"envs/{env}/erased")
            bao.allow_env(f"{env}-b")
            bao.set_secret(f"envs/{env}-b/app", {"k": "theirs"})
        pair[0].tokens["env"] = pair[1].tokens["env"] = env
        yield pair
        for side in pair:
            side.http.close()


def compare(sides: tuple[Side, Side], cases: list[tuple[str, str, str | None, Any]]) -> None:
    mismatches = []
    for method, path, token, body in cases:
        env = sides[0].tokens["env"]
        path = path.replace("ENV", env)
        body = body(sides[0]) if callable(body) else body
        fake = sides[0].ask(method, path, token, body)
        real = sides[1].ask(method, path, token, body)
        if fake != real:
            mismatches.append(f"{method} {path} [{token}]\n  fake {fake}\n  real {real}")
    assert not mismatches, "\n".join(mismatches)


def test_login_answers_are_the_server_s(sides: tuple[Side, Side]) -> None:
    env = sides[0].tokens["env"]
    issuer = sides[1].bao.issuer
    stranger = GrantIssuer()
    login = "auth/jwt-tenancy/login"
    cases: list[tuple[str, str, str | None, Any]] = [
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env)}),
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env, exp_in_s=-30)}),
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env, exp_in_s=-100)}),
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env, aud="other")}),
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env, iss="evil")}),
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint("env-never-bound")}),
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env, sub="env-x")}),
        ("POST", login, None, {"role": "see_env", "jwt": stranger.mint(env)}),
        ("POST", login, None, {"role": "nope", "jwt": issuer.mint(env)}),
        ("POST", login, None, {"jwt": issuer.mint(env)}),
        ("POST", login, None, {"role": "see_env", "jwt": ""}),
        ("POST", "auth/jwt-tenancyy/login", None, {"role": "see_env", "jwt": issuer.mint(env)}),
        # iat 120 s ahead: OpenBao takes it as nbf and refuses past its 60 s leeway
        ("POST", login, None, {"role": "see_env", "jwt": issuer.mint(env, now=time.time() + 120)}),
    ]
    compare(sides, cases)


def test_token_answers_are_the_server_s(sides: tuple[Side, Side]) -> None:
    cases: list[tuple[str, str, str | None, Any]] = [
        ("GET", "auth/token/lookup-self", "lease", None),
        ("GET", "auth/token/lookup-self", "boot", None),
        ("GET", "auth/token/lookup-self", "dead", None),
        ("GET", "auth/token/lookup-self", "unknown", None),
        ("GET", "auth/token/lookup-self", None, None),
        ("POST", "auth/token/renew-self", "fixed", {}),
        ("POST", "auth/token/renew-self", "dead", {}),
        ("POST", "auth/token/renew-self", "lease", {}),
        ("GET", "auth/token/lookup-self", "lease", None),
        ("POST", "auth/token/revoke-self", "dead", None),
        ("POST", "auth/token/revoke-self", "fixed", None),
        ("GET", "auth/token/lookup-self", "fixed", None),
    ]
    compare(sides, cases)


def test_kv_answers_are_the_server_s(sides: tuple[Side, Side]) -> None:
    cases: list[tuple[str, str, str | None, Any]] = [
        ("GET", "kv/data/envs/ENV/app", "lease", None),
        ("GET", "kv/data/envs/ENV/app", "boot", None),
        ("GET", "kv/data/envs/ENV-b/app", "boot", None),
        ("GET", "kv/data/envs/ENV/nothing", "lease", None),
        ("GET", "kv/data/envs/ENV/gone", "lease", None),
        ("GET", "kv/data/envs/ENV/gone?version=1", "lease", None),
        ("GET", "kv/data/envs/ENV/burnt", "lease", None),
        ("GET", "kv/data/envs/ENV/erased", "lease", None),
        ("GET", "kv/data/envs/ENV/app?version=9", "lease", None),
        ("GET", "kv/data/envs/ENV/app?version=x", "lease", None),
        ("GET", "kv/data/envs/ENV-b/app", "lease", None),
        ("GET", "kv/data/envs/ENV/app", "dead", None),
        ("GET", "kv/data/envs/ENV/app", None, None),
        ("GET", "kvv/data/envs/ENV/app", "lease", None),
        ("GET", "kvv/data/envs/ENV/app", None, None),
        ("GET", "no/such/route", "lease", None),
    ]
    compare(sides, cases)


def test_the_mounts_a_token_sees_are_the_server_s(sides: tuple[Side, Side]) -> None:
    for token in ("dead", None):
        assert sides[0].ask("GET", "sys/internal/ui/mounts", token, None) == sides[1].ask(
            "GET", "sys/internal/ui/mounts", token, None
        )
    seen = []
    for side in sides:
        status, body = side.ask("GET", "sys/internal/ui/mounts", "lease", None)
        secret = body["data"]["secret"]
        seen.append((status, sorted(secret), secret["kv/"]["type"], secret["kv/"]["options"]))
    assert seen[0] == seen[1]


def test_sealed_answers_are_the_server_s(sides: tuple[Side, Side]) -> None:
    for side in sides:
        side.bao.sealed = True
    try:
        env = sides[0].tokens["env"]
        grant_ = sides[1].bao.issuer.mint(env)
        compare(
            sides,
            [
                ("POST", "auth/jwt-tenancy/login", None, {"role": "see_env", "jwt": grant_}),
                ("GET", "auth/token/lookup-self", "lease", None),
                ("POST", "auth/token/renew-self", "lease", {}),
                ("GET", "kv/data/envs/ENV/app", "lease", None),
            ],
        )
    finally:
        for side in sides:
            side.bao.sealed = False


def test_a_renewal_past_the_max_ttl_is_capped_with_the_server_s_warning(
    sides: tuple[Side, Side],
) -> None:
    """The fake's per-token max TTL stands for the token role's ``token_explicit_max_ttl``."""
    answers = []
    for side in sides:
        env = side.tokens["env"]
        tok = side.bao.create_token(
            ttl_s=300,
            renewable=True,
            meta={"env": env},
            explicit_max_ttl_s=320,
            policies=["default", f"{env}-lease"],
        )
        side.tokens["capped"] = tok
        status, body = side.ask("POST", "auth/token/renew-self", "capped", {"increment": "1000s"})
        # the real server's clock runs: what is left to the max may be a second or two less
        warning = re.sub(r'max_ttl of "5m[0-9]+s"', 'max_ttl of "5m20s"', body["warnings"][0])
        answers.append((status, warning, 300 <= body["auth"]["lease_duration"] <= 320))
        status, body = side.ask("GET", "auth/token/lookup-self", "capped", None)
        answers.append((status, body["data"]["explicit_max_ttl"], body["data"]["creation_ttl"]))
    assert answers[:2] == answers[2:]
    assert answers[0] == (
        200,
        'TTL of "16m40s" exceeded the effective max_ttl of "5m20s"; TTL value is capped '
        "accordingly",
        True,
    )


KV_STEP = st.one_of(
    st.tuples(st.just("put"), st.integers(0, 3)),
    st.tuples(st.just("soft_delete"), st.just(0)),
    st.tuples(st.just("destroy"), st.integers(1, 4)),
    st.tuples(st.just("delete_all"), st.just(0)),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(KV_STEP, min_size=1, max_size=6), version=st.integers(0, 5))
def test_any_kv_history_reads_the_same_on_both(
    sides: tuple[Side, Side], steps: list[tuple[str, int]], version: int
) -> None:
    """Any history of writes, soft-deletes, destroys and metadata deletes: the current version
    and a chosen one read the same (status and body) from the fake and from the server."""
    path = f"envs/{sides[0].tokens['env']}/h-{uuid.uuid4().hex[:8]}"
    written = 0
    for op, arg in steps:
        for side in sides:
            bao = side.bao
            if op == "put":
                bao.set_secret(path, {"k": f"v{arg}"})
            elif op == "soft_delete" and written:
                bao.soft_delete(path)
            elif op == "destroy" and 1 <= arg <= written:
                bao.destroy(path, [arg])
            elif op == "delete_all":
                bao.delete_secret(path)
        if op == "put":
            written += 1
        elif op == "delete_all":
            written = 0
    compare(
        sides,
        [
            ("GET", f"kv/data/{path}", "lease", None),
            ("GET", f"kv/data/{path}?version={version}", "lease", None),
        ],
    )


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    exp_in_s=st.sampled_from([-300, -100, -70, -50, -10, 30, 86400]),
    iat_ahead_s=st.sampled_from([-3600, 0, 40, 80, 600]),
    aud=st.sampled_from(["openbao", "other", ["other", "openbao"], []]),
    iss=st.sampled_from(["monky-tenancy", "evil"]),
    env=st.sampled_from(["ENV", "env-never-bound"]),
    role=st.sampled_from(["see_env", "", "nope"]),
)
def test_any_grant_logs_in_or_is_refused_the_same_on_both(
    sides: tuple[Side, Side],
    exp_in_s: int,
    iat_ahead_s: int,
    aud: str | list[str],
    iss: str,
    env: str,
    role: str,
) -> None:
    """Grants whose times sit well clear of the 60 s leeway's edges (the server's clock runs,
    the fake's does not), with any audience, issuer, environment and role."""
    name = sides[0].tokens["env"] if env == "ENV" else env
    now = time.time() + iat_ahead_s
    grant_ = sides[1].bao.issuer.mint(
        name, exp_in_s=exp_in_s - iat_ahead_s, now=now, aud=aud, iss=iss
    )
    compare(sides, [("POST", "auth/jwt-tenancy/login", None, {"role": role, "jwt": grant_})])
