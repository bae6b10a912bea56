"""A loopback fake of the OpenBao API subset the agent uses, answering what the real server
(OpenBao 2.7, ``monky_deployd_testkit.realbao``) answers: the same statuses and bodies, checked
case by case against it in tests/integration/net/test_bao_parity.py. Kept for what a real server
cannot be made to show (stalls, garbage, 5xx: the fault switches) and for long simulations on a
movable clock.

- POST /v1/auth/<jwt_mount>/login   real RS256 validation with PyJWT; exp/nbf/iat on the fake
                                    Clock with OpenBao's 60 s leeway; ``env`` must be one of the
                                    role's bound values (``allow_env``; the server cannot bind it
                                    to ``sub``); NO replay state. Tokens are ``s.`` + 24 chars.
- GET  /v1/auth/token/lookup-self   200 live / 403 permission denied
- POST /v1/auth/token/renew-self    400 "lease is not renewable" / TTL capped with a warning
- POST /v1/auth/token/revoke-self   204 / 403 for a dead token
- GET  /v1/<kv_mount>/data/<path>   KV v2; a token may read only envs/<its env>/...; a deleted or
                                    destroyed version is 404 with the data envelope
- GET  /v1/sys/internal/ui/mounts   the mounts a live token sees
- GET  /v1/sys/health
- anything else                     403 permission denied (OpenBao's answer for a path it does
                                    not route, a misnamed mount included)

Counters (`logins`, `lookups`, `renewals`, `kv_reads`) count requests the endpoint itself
answered (any outcome), not ones a fault switch or the `sealed` flag answered. `requests`
records every request as (method, path). Nothing here logs or records a token or secret value.

Over ~400 lines on purpose: one fake server answering every OpenBao route the agent uses as the
real one does (tests/integration/net/test_bao_parity.py), with its fault switches.
"""

from __future__ import annotations

import uuid
from typing import Any

import jwt

from monky_deployd_testkit.fakes.bao_kv import BAD_VERSION, KvStore
from monky_deployd_testkit.fakes.bao_tokens import TokenRecord, TokenStore, parse_duration, rfc3339
from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.grant import GrantIssuer
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response

JWT_LEEWAY_S = 60  # OpenBao's leeway for exp, iat and nbf
# A policy denial for a live token (go-multierror's text), as OpenBao words it
POLICY_DENIED = "1 error occurred:\n\t* permission denied\n\n"
BOOTSTRAP_POLICY = "see-env"  # the templated policy of realbao's role


def errors(status: int, *messages: str) -> Response:
    return json_response(status, {"errors": list(messages)})


def denied() -> Response:
    return errors(403, "permission denied")


def envelope(
    data: Any = None, auth: Any = None, warnings: list[str] | None = None
) -> dict[str, Any]:
    return {
        "request_id": str(uuid.uuid4()),
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": data,
        "wrap_info": None,
        "warnings": warnings,
        "auth": auth,
    }


class FakeBao(LoopbackServer):
    def __init__(
        self,
        issuer: GrantIssuer,
        clock: Clock,
        *,
        jwt_mount: str = "jwt-tenancy",
        role: str = "see_env",
        kv_mount: str = "kv",
        bootstrap_ttl_s: int = 900,
        bootstrap_renewable: bool = True,
        bootstrap_max_ttl_s: int | None = None,
        bound_audiences: tuple[str, ...] = ("openbao",),
        bound_issuer: str | None = "monky-tenancy",
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.issuer = issuer
        self.clock = clock
        self.jwt_mount = jwt_mount
        self.role = role
        self.kv_mount = kv_mount
        self.bootstrap_ttl_s = bootstrap_ttl_s
        self.bootstrap_renewable = bootstrap_renewable
        self.bootstrap_max_ttl_s = bootstrap_max_ttl_s or bootstrap_ttl_s
        self.bound_audiences = bound_audiences
        self.bound_issuer = bound_issuer
        self.tokens = TokenStore(clock)
        self.allowed_envs: set[str] = set()
        self.sealed = False
        self.kv = KvStore(clock)
        self.logins = 0
        self.lookups = 0
        self.renewals = 0
        self.kv_reads = 0
        self.revocations = 0
        self.kv_paths_read: list[str] = []
        self.requests: list[tuple[str, str]] = []

    # -- test API -------------------------------------------------------------------------
    def allow_env(self, env: str) -> None:
        """Add ``env`` to the role's bound values for the ``env`` claim (none: every login is
        refused, as a role bound to an empty list would)."""
        with self.lock:
            self.allowed_envs.add(env)

    def create_token(
        self,
        *,
        ttl_s: int,
        renewable: bool,
        meta: dict[str, str],
        explicit_max_ttl_s: int | None = None,
        policies: list[str] | None = None,
    ) -> str:
        """A service token in the store (tenancy mints lease tokens with this)."""
        return self.create_token_record(
            ttl_s=ttl_s,
            renewable=renewable,
            meta=meta,
            explicit_max_ttl_s=explicit_max_ttl_s,
            policies=policies,
        ).token

    def create_token_record(self, **kwargs: Any) -> TokenRecord:
        return self.tokens.create(**kwargs)

    def revoke(self, token: str) -> bool:
        return self.tokens.revoke(token)

    def shorten(self, token: str, ttl_s: int) -> None:
        """Set a live token's TTL to ``ttl_s`` from now, as a root ``auth/token/renew`` with that
        increment does on the real server (later renew-self calls keep it)."""
        rec = self.tokens.live(token)
        assert rec is not None, "not a live token"
        self.tokens.renew(rec, ttl_s)

    def live_token(self, token: str | None) -> TokenRecord | None:
        return self.tokens.live(token)

    def set_secret(self, path: str, data: dict[str, Any]) -> int:
        """Write a new version at `path` (relative to the KV mount); returns the version."""
        return self.kv.put(path, data)

    def delete_secret(self, path: str) -> None:
        """Remove the path and all its versions (afterwards it reads as never written: 404)."""
        self.kv.delete_all(path)

    def soft_delete(self, path: str) -> None:
        """Soft-delete the current version (``DELETE /v1/kv/data/<path>``)."""
        self.kv.soft_delete(path)

    def destroy(self, path: str, versions: list[int]) -> None:
        """Destroy these versions (``POST /v1/kv/destroy/<path>``)."""
        self.kv.destroy(path, versions)

    # -- plumbing -------------------------------------------------------------------------
    def record(self, req: Request) -> None:
        with self.lock:
            self.requests.append((req.method, req.path))

    def _bump(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)

    def route(self, req: Request) -> Response:
        if self.sealed:
            return errors(503, "Vault is sealed")
        method = "POST" if req.method == "PUT" else req.method
        path = req.path
        if path == "/v1/sys/health":
            return json_response(200, {"initialized": True, "sealed": False, "standby": False})
        if path == f"/v1/auth/{self.jwt_mount}/login" and method == "POST":
            self._bump("logins")
            return self._login(req)
        if path == "/v1/auth/token/lookup-self" and method == "GET":
            self._bump("lookups")
            return self._lookup_self(req)
        if path == "/v1/auth/token/renew-self" and method == "POST":
            self._bump("renewals")
            return self._renew_self(req)
        if path == "/v1/auth/token/revoke-self" and method == "POST":
            self._bump("revocations")
            rec = self.live_token(_token_of(req))
            if rec is None:
                return denied()
            self.tokens.revoke(rec.token)
            return Response(204)
        kv_prefix = f"/v1/{self.kv_mount}/data/"
        if path.startswith(kv_prefix) and method == "GET":
            self._bump("kv_reads")
            return self._kv_read(req, path[len(kv_prefix) :])
        if path == "/v1/sys/internal/ui/mounts" and method == "GET":
            return self._ui_mounts(req)
        # OpenBao routes nothing else here: a live token is denied by policy, none by auth
        return errors(403, POLICY_DENIED) if self.live_token(_token_of(req)) else denied()

    # -- endpoints ------------------------------------------------------------------------
    def _login(self, req: Request) -> Response:
        try:
            body = req.json() or {}
        except ValueError:
            return errors(400, "failed to parse JSON input")
        if not isinstance(body, dict):
            return errors(400, "failed to parse JSON input")
        role = body.get("role") or ""
        raw = body.get("jwt")
        if not role:
            return errors(400, "missing role")
        if role != self.role:
            return errors(400, f'role "{role}" could not be found')
        if not isinstance(raw, str) or not raw:
            return errors(400, "missing token")
        claims_or_error = self._validate_grant(raw)
        if isinstance(claims_or_error, str):
            return errors(400, claims_or_error)
        claims = claims_or_error
        env = str(claims["env"])
        meta = {"env": env, "jti": str(claims.get("jti", "")), "role": role}
        rec = self.tokens.create(
            ttl_s=self.bootstrap_ttl_s,
            renewable=self.bootstrap_renewable,
            meta=meta,
            explicit_max_ttl_s=self.bootstrap_max_ttl_s,
            policies=["default", BOOTSTRAP_POLICY],
            path=f"auth/{self.jwt_mount}/login",
            display_name=f"{self.jwt_mount}-{claims.get('sub', env)}",
            role="",
        )
        return json_response(200, envelope(auth=_auth_block(rec)))

    def _validate_grant(self, raw: str) -> dict[str, Any] | str:
        """The claims, or the error sentence OpenBao would answer with."""
        try:
            claims = jwt.decode(
                raw,
                self.issuer.public_key,
                algorithms=["RS256"],
                options={
                    "verify_exp": False,  # checked below against the fake clock
                    "verify_nbf": False,
                    "verify_iat": False,
                    "verify_aud": False,
                    "verify_iss": False,
                },
            )
        except (jwt.InvalidSignatureError, jwt.InvalidAlgorithmError):
            return (
                "error validating token: error verifying token signature: "
                "no known key successfully validated the token signature"
            )
        except jwt.PyJWTError:
            return (
                "error validating token: error verifying token signature: "
                "illegal base64 data at input byte 0"
            )
        now = self.clock.now()
        if self.bound_issuer is not None and claims.get("iss") != self.bound_issuer:
            return "error validating token: invalid issuer (iss) claim"
        aud = claims.get("aud")
        auds = [aud] if isinstance(aud, str) else list(aud or [])
        if self.bound_audiences and not set(auds) & set(self.bound_audiences):
            return (
                "error validating token: invalid audience (aud) claim: "
                "audience claim does not match any expected audience"
            )
        # OpenBao checks "not yet valid" (nbf, or iat when there is no nbf) before "expired"
        nbf = claims.get("nbf", claims.get("iat"))
        if isinstance(nbf, int | float) and now + JWT_LEEWAY_S < nbf:
            return "error validating token: invalid not before (nbf) claim: token not yet valid"
        exp = claims.get("exp")
        if not isinstance(exp, int | float):
            return "error validating token: invalid expiration time (exp) claim: missing"
        if now > exp + JWT_LEEWAY_S:
            return "error validating token: invalid expiration time (exp) claim: token is expired"
        env = claims.get("env")
        if env is None:
            return 'error validating claims: claim "env" is missing'
        with self.lock:
            allowed = set(self.allowed_envs)
        if not isinstance(env, str) or env not in allowed:
            return (
                'error validating claims: claim "env" does not match any associated '
                "bound claim values"
            )
        return claims

    def _lookup_self(self, req: Request) -> Response:
        rec = self.live_token(_token_of(req))
        if rec is None:
            return denied()
        now = self.clock.now()
        data = {
            "accessor": rec.accessor,
            "creation_time": int(rec.created),
            "creation_ttl": rec.creation_ttl_s,
            "display_name": rec.display_name,
            "entity_id": rec.entity_id,
            "expire_time": rfc3339(rec.expires),
            # 0 on the server for both kinds the fake mints: a token role's or a JWT role's
            # token is capped by its role (token_explicit_max_ttl / token_max_ttl)
            "explicit_max_ttl": 0,
            "id": rec.token,
            "issue_time": rfc3339(rec.created),
            "meta": dict(rec.meta),
            "num_uses": 0,
            "orphan": True,
            "path": rec.path,
            "policies": list(rec.policies),
            "renewable": rec.renewable,
            "ttl": rec.remaining(now),
            "type": "service",
        }
        if rec.role:
            data["role"] = rec.role
        if rec.renewals:
            data["last_renewal"] = rfc3339(rec.last_renewed)
            data["last_renewal_time"] = int(rec.last_renewed)
        return json_response(200, envelope(data=data))

    def _renew_self(self, req: Request) -> Response:
        rec = self.live_token(_token_of(req))
        if rec is None:
            return denied()
        try:
            body = req.json() or {}
        except ValueError:
            return errors(400, "failed to parse JSON input")
        if not rec.renewable:
            return errors(400, "lease is not renewable")
        increment = None
        if isinstance(body, dict) and body.get("increment") not in (None, "", 0):
            try:
                increment = parse_duration(body["increment"])
            except ValueError as exc:
                return errors(400, str(exc))
        warnings = self.tokens.renew(rec, increment)
        return json_response(200, envelope(auth=_auth_block(rec), warnings=warnings))

    def _kv_read(self, req: Request, path: str) -> Response:
        rec = self.live_token(_token_of(req))
        if rec is None:
            return denied()
        path = path.strip("/")
        env = rec.meta.get("env", "")
        if not env or not path.startswith(f"envs/{env}/") or ".." in path.split("/"):
            return errors(403, POLICY_DENIED)
        with self.lock:
            self.kv_paths_read.append(path)
        status, data = self.kv.read(path, req.query.get("version", ["0"])[0])
        if status == 400:
            return errors(400, BAD_VERSION)
        if data is None:
            return errors(404)
        # a deleted or destroyed version: 404 with the whole envelope and no "errors"
        return json_response(status, envelope(data=data))

    def _ui_mounts(self, req: Request) -> Response:
        """``sys/internal/ui/mounts``: the secret mounts a live token sees (its default policy
        allows the call); without a token, the (empty) unauthenticated listing."""
        token = _token_of(req)
        if not token:
            return json_response(200, envelope(data={"auth": {}, "secret": {}}))
        if self.live_token(token) is None:
            return denied()

        def mount(kind: str, options: dict[str, str] | None = None) -> dict[str, Any]:
            return {"type": kind, "options": options, "description": "", "local": False}

        secret = {
            "cubbyhole/": mount("cubbyhole"),
            "identity/": mount("identity"),
            f"{self.kv_mount}/": mount("kv", {"version": "2"}),
            "sys/": mount("system"),
        }
        auth = {"token/": mount("token")}
        return json_response(200, envelope(data={"auth": auth, "secret": secret}))


def _token_of(req: Request) -> str | None:
    token = req.header("X-Vault-Token")
    if token:
        return token.strip()
    auth = req.header("Authorization") or ""
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return None


def _auth_block(rec: TokenRecord) -> dict[str, Any]:
    return {
        "client_token": rec.token,
        "accessor": rec.accessor,
        "policies": list(rec.policies),
        "token_policies": list(rec.policies),
        "metadata": dict(rec.meta),
        "lease_duration": rec.ttl_s,
        "renewable": rec.renewable,
        "entity_id": rec.entity_id,
        "token_type": "service",
        "orphan": True,
        "mfa_requirement": None,
        "num_uses": 0,
    }
