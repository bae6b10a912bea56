"""bao.Bao against a real OpenBao server (``RealBao``: ``bao server -dev`` configured as the
estate is): the agent's first sentence names the real fault for every answer the server gives."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from monky_deployd.adapters.net.bao import Bao, RenewRefused
from monky_deployd.config import OpenBaoCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import BaoError, DeployError, TokenError
from monky_deployd_testkit.fakes.grant import GrantIssuer
from monky_deployd_testkit.realbao import RealBao, RealBaoError


@pytest.fixture
def env(real_bao: RealBao) -> str:
    name = f"env-real-{uuid.uuid4().hex[:8]}"
    real_bao.allow_env(name)
    real_bao.mark()
    return name


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as client:
        yield client


def make(http: httpx.Client, bao: RealBao, **kw: object) -> Bao:
    return Bao(http, OpenBaoCfg(host=bao.host, port=bao.port, **kw))  # type: ignore[arg-type]


def lease(bao: RealBao, env: str, **kw: object) -> str:
    """A lease token as tenancy mints it (through the token role)."""
    args: dict[str, object] = {"ttl_s": 86400, "renewable": True, "meta": {"env": env}}
    args.update(kw)
    return bao.create_token(policies=["default", f"{env}-lease"], **args)


# -- login -----------------------------------------------------------------------------------


def test_login_lookup_renew_revoke_against_the_real_server(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    bao = make(http, real_bao)
    login = bao.login_jwt(real_bao.issuer.mint(env))
    assert login.token.startswith("s.") and len(login.token) == 26
    assert login.ttl_s == real_bao.bootstrap_ttl_s and login.renewable
    info = bao.lookup_self(login.token)
    assert info is not None and 0 < info.ttl_s <= real_bao.bootstrap_ttl_s
    assert info.expire_time and info.expire_time.endswith("Z")
    tok = lease(real_bao, env)
    assert bao.renew_self(tok).ttl_s == 86400
    bao.revoke_self(tok)
    assert bao.lookup_self(tok) is None  # 403 after revoke-self
    bao.revoke_self(tok)  # already dead: nothing to do, no fault
    assert (real_bao.logins, real_bao.lookups, real_bao.renewals, real_bao.revocations) == (
        1,
        2,
        1,
        2,
    )


def test_grant_expired_100_s_ago_is_grant_expired_within_60_s_it_logs_in(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    bao = make(http, real_bao)
    assert bao.login_jwt(real_bao.issuer.mint(env, exp_in_s=-30)).ttl_s > 0  # the 60 s leeway
    with pytest.raises(TokenError) as exc:
        bao.login_jwt(real_bao.issuer.mint(env, exp_in_s=-100))
    assert exc.value.code is Code.GRANT_EXPIRED
    assert "a new kit is needed for this environment" in exc.value.message


@pytest.mark.parametrize(
    ("claims", "words"),
    [
        ({"aud": "someone-else"}, "audience"),
        ({"iss": "evil"}, "issuer"),
        ({"env": "env-never-bound"}, 'claim "env" does not match'),
        ({"issuer": "stranger"}, "error verifying token signature"),
    ],
)
def test_a_grant_the_role_refuses_is_grant_rejected_with_openbao_s_words(
    http: httpx.Client, real_bao: RealBao, env: str, claims: dict[str, str], words: str
) -> None:
    issuer = GrantIssuer() if "issuer" in claims else real_bao.issuer
    grant = issuer.mint(
        claims.get("env", env),
        aud=claims.get("aud", "openbao"),
        iss=claims.get("iss", "monky-tenancy"),
    )
    with pytest.raises(TokenError) as exc:
        make(http, real_bao).login_jwt(grant)
    assert exc.value.code is Code.GRANT_REJECTED and words in exc.value.message


def test_the_same_grant_logs_in_again_no_replay_state(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    grant = real_bao.issuer.mint(env)
    bao = make(http, real_bao)
    assert bao.login_jwt(grant).token != bao.login_jwt(grant).token
    assert real_bao.logins == 2


def test_a_misnamed_jwt_mount_names_the_mount_not_the_grant(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    with pytest.raises(DeployError) as exc:
        make(http, real_bao, jwt_mount="jwt-tenancyy").login_jwt(real_bao.issuer.mint(env))
    err = exc.value
    assert err.code is Code.OPENBAO_JWT_MOUNT_MISSING and err.outcome == "refused"
    assert err.message.startswith(
        f"OpenBao at {real_bao.host}:{real_bao.port} has no auth mount 'jwt-tenancyy'"
    )
    assert "grant" not in err.message.split("(")[0] and "rejected" not in err.message
    assert "openbao.jwt_mount" in err.hint and "jwt-tenancy)" in err.hint


def test_a_misnamed_role_names_the_role_not_the_grant(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    with pytest.raises(BaoError) as exc:
        make(http, real_bao, role="see_envv").login_jwt(real_bao.issuer.mint(env))
    err = exc.value
    assert err.code is Code.OPENBAO_JWT_ROLE_MISSING and err.outcome == "refused"
    assert err.message.startswith(
        f"OpenBao at {real_bao.host}:{real_bao.port} has no role 'see_envv' on auth/jwt-tenancy"
    )
    assert "rejected" not in err.message and 'role "see_envv" could not be found' in err.detail
    assert "openbao.role" in err.hint and "see_env)" in err.hint


# -- KV v2 -----------------------------------------------------------------------------------


def test_secret_reads_value_missing_path_and_key(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    bao = make(http, real_bao)
    tok = lease(real_bao, env)
    real_bao.set_secret(f"envs/{env}/app", {"db_password": "s3cr3t", "n": 5})
    assert bao.read_secret(tok, f"envs/{env}/app", "db_password") == "s3cr3t"
    assert bao.read_secret(tok, f"envs/{env}/app", "n") == 5
    with pytest.raises(BaoError) as exc:
        bao.read_secret(tok, f"envs/{env}/nothing", "db_password")
    assert exc.value.code is Code.SECRET_MISSING and "does not exist" in exc.value.message
    with pytest.raises(BaoError) as exc:
        bao.read_secret(tok, f"envs/{env}/app", "api_key")
    assert exc.value.code is Code.SECRET_MISSING and "'api_key'" in exc.value.message
    assert "s3cr3t" not in str(exc.value)
    # the bootstrap token reads through the templated policy
    boot = bao.login_jwt(real_bao.issuer.mint(env)).token
    assert bao.read_secret(boot, f"envs/{env}/app", "db_password") == "s3cr3t"


def test_soft_deleted_and_destroyed_versions_are_named_with_the_time(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    bao = make(http, real_bao)
    tok = lease(real_bao, env)
    path = f"envs/{env}/app"
    real_bao.set_secret(path, {"k": "one"})
    real_bao.set_secret(path, {"k": "two"})
    real_bao.soft_delete(path)
    with pytest.raises(BaoError) as exc:
        bao.read_secret(tok, path, "k")
    err = exc.value
    assert err.code is Code.SECRET_DELETED and err.outcome == "refused"
    assert f"kv/{path}" in err.message and "version 2 was deleted at 20" in err.message
    assert "undelete" in err.hint and "two" not in str(err)
    real_bao.destroy(path, [2])
    with pytest.raises(BaoError) as exc:
        bao.read_secret(tok, path, "k")
    assert exc.value.code is Code.SECRET_DESTROYED
    assert "version 2 was destroyed" in exc.value.message
    real_bao.set_secret(path, {"k": "three"})
    assert bao.read_secret(tok, path, "k") == "three"


def test_another_environment_s_path_is_a_policy_denial(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    other = f"env-other-{uuid.uuid4().hex[:6]}"
    real_bao.allow_env(other)
    real_bao.set_secret(f"envs/{other}/app", {"k": "theirs"})
    for tok in (
        lease(real_bao, env),
        make(http, real_bao).login_jwt(real_bao.issuer.mint(env)).token,
    ):
        with pytest.raises(BaoError) as exc:
            make(http, real_bao).read_secret(tok, f"envs/{other}/app", "k")
        assert exc.value.code is Code.SECRET_FORBIDDEN
        assert "the token's policy denies the path" in exc.value.message


def test_a_misnamed_kv_mount_names_the_mount_the_token_sees(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    real_bao.set_secret(f"envs/{env}/app", {"k": "v"})
    bao = make(http, real_bao, kv_mount="secrets")
    for tok in (lease(real_bao, env), bao.login_jwt(real_bao.issuer.mint(env)).token):
        with pytest.raises(BaoError) as exc:
            bao.read_secret(tok, f"envs/{env}/app", "k")
        err = exc.value
        assert err.code is Code.OPENBAO_KV_MOUNT_MISSING and err.outcome == "refused"
        assert err.message.startswith(
            f"OpenBao at {real_bao.host}:{real_bao.port} has no KV mount 'secrets'"
        )
        assert "sees are: kv" in err.message and "policy" not in err.message
        assert "openbao.kv_mount" in err.hint


def test_a_token_whose_policies_reach_no_kv_mount_is_a_policy_denial(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    """The token sees no KV mount at all: that is its policy, not a misnamed mount (any token
    may list the mounts it sees, the default policy or not)."""
    real_bao.admin(
        "PUT",
        "sys/policies/acl/nothing-lease",
        {"policy": 'path "sys/nothing" { capabilities = ["read"] }'},
    )
    answer = real_bao.admin(
        "POST",
        f"auth/token/create/{real_bao.token_role}",
        {"policies": ["nothing-lease"], "no_default_policy": True, "ttl": "1h"},
    )
    tok = answer["auth"]["client_token"]
    with pytest.raises(BaoError) as exc:
        make(http, real_bao).read_secret(tok, f"envs/{env}/app", "k")
    assert exc.value.code is Code.SECRET_FORBIDDEN
    assert "the token sees no KV mount at all" in exc.value.message


# -- sealed, tokens --------------------------------------------------------------------------


def test_sealed_is_openbao_sealed_on_every_call_and_tokens_survive(
    http: httpx.Client, real_bao: RealBao, env: str
) -> None:
    bao = make(http, real_bao)
    tok = lease(real_bao, env)
    grant = real_bao.issuer.mint(env)
    real_bao.sealed = True
    try:
        calls: list[Callable[[], object]] = [
            lambda: bao.login_jwt(grant),
            lambda: bao.lookup_self(tok),
            lambda: bao.renew_self(tok),
            lambda: bao.read_secret(tok, f"envs/{env}/app", "k"),
        ]
        for call in calls:
            with pytest.raises(BaoError) as exc:
                call()
            assert exc.value.code is Code.OPENBAO_SEALED
            assert f"OpenBao at {real_bao.host}:{real_bao.port} is sealed" in exc.value.message
    finally:
        real_bao.sealed = False
    assert bao.lookup_self(tok) is not None


def test_renew_refusals_and_the_cap(http: httpx.Client, real_bao: RealBao, env: str) -> None:
    bao = make(http, real_bao)
    fixed = lease(real_bao, env, renewable=False)
    with pytest.raises(RenewRefused) as exc:
        bao.renew_self(fixed)
    assert exc.value.status == 400 and "not renewable" in exc.value.message
    real_bao.revoke(fixed)
    with pytest.raises(RenewRefused) as exc:
        bao.renew_self(fixed)
    assert exc.value.status == 403
    short = lease(real_bao, env)
    real_bao.shorten(short, 300)
    assert 290 <= bao.renew_self(short).ttl_s <= 300  # renew-self keeps the shortened TTL
    assert bao.lookup_self("s.unknownunknownunknown1") is None


# -- the test kit's server itself --------------------------------------------------------------


def test_a_bao_that_cannot_start_fails_loudly_with_its_words(tmp_path: Path) -> None:
    broken = tmp_path / "bao"
    broken.write_text("#!/bin/sh\necho 'Error parsing listener configuration: boom' >&2\nexit 1\n")
    broken.chmod(0o755)
    with pytest.raises(RealBaoError) as exc:
        RealBao(binary=broken).start()
    assert "did not come up" in str(exc.value) and "boom" in str(exc.value)


def test_the_audit_log_counts_what_ordinary_tokens_asked(real_bao: RealBao, env: str) -> None:
    tok = lease(real_bao, env)  # minted with the root token: not counted
    httpx.get(f"{real_bao.url}/v1/auth/token/lookup-self", headers={"X-Vault-Token": tok})
    httpx.get(f"{real_bao.url}/v1/kv/data/envs/{env}/x", headers={"X-Vault-Token": tok})
    assert real_bao.requests == [
        ("read", "/v1/auth/token/lookup-self"),
        ("read", f"/v1/kv/data/envs/{env}/x"),
    ]
    assert tok not in real_bao.audit_path.read_text()  # the audit log HMACs tokens
