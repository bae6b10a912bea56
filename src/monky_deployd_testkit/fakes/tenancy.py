"""A loopback fake of the tenancy deploy API (contract.md, "Tenancy deploy API").

Bearer tokens are checked against OpenBao (the FakeBao's token store, or a real server through
``RealBao``: a root-token lookup, as tenancy does), and lease tokens are minted there (the real
server: through its token role): unknown/expired/revoked -> 401
TOKEN_INVALID; a token whose meta `jti` was superseded -> 401 GRANT_SUPERSEDED; a token bound to
another env -> 403 ENV_MISMATCH; a path env this tenancy does not serve -> 404 ENV_NOT_FOUND.

Counters (`lease_requests`, `checkin_count`, `report_count`) count requests that reached the
endpoint (after fault switches, before auth; refusals included). `requests` records
(method, path, authorization-present) for every request; no token is ever stored in a record.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from monky_deployd_testkit.fakes.bao_tokens import TokenRecord
from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.http import (
    LoopbackServer,
    Request,
    Response,
    json_response,
    raw_response,
)


class TokenAuthority(Protocol):
    """What tenancy asks OpenBao: FakeBao, or RealBao (a real server)."""

    def live_token(self, token: str | None) -> TokenRecord | None: ...

    def create_token_record(
        self,
        *,
        ttl_s: int,
        renewable: bool,
        meta: dict[str, str],
        explicit_max_ttl_s: int | None = None,
        policies: list[str] | None = None,
    ) -> TokenRecord: ...

    def revoke(self, token: str) -> bool: ...


def api_error(status: int, code: str, message: str, retry_after_s: int | None = None) -> Response:
    err: dict[str, Any] = {"code": code, "message": message}
    headers = {}
    if retry_after_s is not None:
        err["retry_after_s"] = retry_after_s
        headers["Retry-After"] = str(retry_after_s)
    return json_response(status, {"error": err}, headers)


@dataclass
class LeaseRecord:
    id: str
    accessor: str
    env: str
    jti: str
    at: float  # on the fake clock
    ttl_s: int


class FakeTenancy(LoopbackServer):
    def __init__(
        self,
        bao: TokenAuthority,
        clock: Clock,
        *,
        env: str = "env-test-01",
        lease_ttl_s: int = 86400,
        lease_renewable: bool = True,
        lease_budget: int = 5,
        budget_window_s: int = 3600,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.bao = bao
        self.clock = clock
        self.env = env
        self.lease_ttl_s = lease_ttl_s
        self.lease_renewable = lease_renewable
        self.lease_budget = lease_budget
        self.budget_window_s = budget_window_s
        self.superseded_jtis: set[str] = set()
        self.desired: tuple[str, Any] | None = None
        self._raw_checkin: Response | None = None
        self._lease_tokens: dict[str, str] = {}  # lease id -> token (never exposed)
        self.leases: list[LeaseRecord] = []
        self.lease_requests = 0
        self.checkins: list[Any] = []
        self.checkin_if_none_match: list[str | None] = []
        # contract v1.2: each check-in's ``waiting`` (None when absent), as tenancy reads it
        self.waiting: list[dict[str, str] | None] = []
        self.checkin_count = 0
        self.reports: list[Any] = []
        self.report_count = 0
        self.user_agents: list[str | None] = []
        self.requests: list[tuple[str, str, bool]] = []

    # -- test API -------------------------------------------------------------------------
    def supersede(self, jti: str) -> None:
        with self.lock:
            self.superseded_jtis.add(jti)

    def set_desired(self, revision: str, bundle: Any, *, spread_s: int | None = None) -> None:
        """Publish ``revision``; ``spread_s`` adds ``"rollout": {"spread_s": N}`` (v1.2)."""
        if spread_s is not None:
            bundle = {**bundle, "rollout": {"spread_s": spread_s}}
        with self.lock:
            self.desired = (revision, bundle)

    def clear_desired(self) -> None:
        with self.lock:
            self.desired = None

    def set_raw_checkin(
        self, status: int, body_bytes: bytes, content_type: str | None = None
    ) -> None:
        """Answer every checkin (after auth) with exactly this, until clear_raw_checkin()."""
        with self.lock:
            self._raw_checkin = raw_response(status, body_bytes, content_type)

    def clear_raw_checkin(self) -> None:
        with self.lock:
            self._raw_checkin = None

    def revoke_lease(self, lease_id: str) -> None:
        """Revoke a lease's token in OpenBao (its lookup-self then answers 403)."""
        with self.lock:
            token = self._lease_tokens[lease_id]
        self.bao.revoke(token)

    def lease_token(self, lease_id: str) -> str:
        """The token of a lease this tenancy minted (tests only: shorten or inspect it)."""
        with self.lock:
            return self._lease_tokens[lease_id]

    def leases_in_window(self) -> list[LeaseRecord]:
        now = self.clock.now()
        with self.lock:
            return [ls for ls in self.leases if now - ls.at < self.budget_window_s]

    # -- plumbing -------------------------------------------------------------------------
    def record(self, req: Request) -> None:
        with self.lock:
            self.requests.append((req.method, req.path, req.header("Authorization") is not None))
            self.user_agents.append(req.header("User-Agent"))

    def route(self, req: Request) -> Response:
        parts = req.path.strip("/").split("/")
        if len(parts) != 4 or parts[:2] != ["v1", "envs"]:
            return api_error(404, "NOT_FOUND", f"no such endpoint: {req.path}")
        env, action = parts[2], parts[3]
        handlers = {"lease": self._lease, "checkin": self._checkin, "reports": self._report}
        handler = handlers.get(action)
        if handler is None:
            return api_error(404, "NOT_FOUND", f"no such endpoint: {req.path}")
        if req.method != "POST":
            return api_error(405, "METHOD_NOT_ALLOWED", f"{req.method} is not allowed here")
        with self.lock:
            counter = {"lease": "lease_requests", "checkin": "checkin_count"}.get(
                action, "report_count"
            )
            setattr(self, counter, getattr(self, counter) + 1)
        refusal = self._authorize(req, env)
        if isinstance(refusal, Response):
            return refusal
        return handler(req, env, refusal)

    def _authorize(self, req: Request, env: str) -> Response | dict[str, str]:
        """The bearer token's meta, or the refusal."""
        auth = req.header("Authorization") or ""
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            return api_error(401, "TOKEN_INVALID", "missing bearer token")
        rec = self.bao.live_token(auth[7:].strip())
        if rec is None:
            return api_error(401, "TOKEN_INVALID", "the token is unknown, expired or revoked")
        with self.lock:
            superseded = rec.meta.get("jti") in self.superseded_jtis
        if superseded:
            return api_error(
                401,
                "GRANT_SUPERSEDED",
                "the token descends from a grant superseded by a newer kit reveal",
            )
        if rec.meta.get("env") != env:
            return api_error(403, "ENV_MISMATCH", f"the token is not bound to environment {env}")
        if env != self.env:
            return api_error(404, "ENV_NOT_FOUND", f"no environment {env}")
        return dict(rec.meta)

    # -- endpoints ------------------------------------------------------------------------
    def _lease(self, req: Request, env: str, meta: dict[str, str]) -> Response:
        with self.lock:
            window = self.leases_in_window()
            if len(window) >= self.lease_budget:
                oldest = min(ls.at for ls in window)
                wait = oldest + self.budget_window_s - self.clock.now()
                retry = max(1, math.ceil(wait))
                return api_error(
                    429,
                    "LEASE_RATE_LIMITED",
                    f"{self.lease_budget} leases per {self.budget_window_s} s already minted "
                    f"for {env}; retry in {retry} s",
                    retry_after_s=retry,
                )
            lease_meta = {"env": env, "jti": meta.get("jti", "")}
            rec = self.bao.create_token_record(
                ttl_s=self.lease_ttl_s,
                renewable=self.lease_renewable,
                meta=lease_meta,
                policies=["default", f"{env}-lease"],
            )
            lease_id = "lse_" + secrets.token_hex(8)
            self._lease_tokens[lease_id] = rec.token
            self.leases.append(
                LeaseRecord(
                    lease_id, rec.accessor, env, lease_meta["jti"], self.clock.now(), rec.ttl_s
                )
            )
        body = {
            "lease": {
                "id": lease_id,
                "token": rec.token,
                "accessor": rec.accessor,
                "ttl_s": rec.ttl_s,
                "renewable": rec.renewable,
            }
        }
        return json_response(201, body)

    def _checkin(self, req: Request, env: str, meta: dict[str, str]) -> Response:
        try:
            body = req.json()
        except ValueError:
            return api_error(400, "BAD_REQUEST", "the checkin body is not JSON")
        if not isinstance(body, dict) or not {"agent", "host", "applied"} <= body.keys():
            return api_error(400, "BAD_REQUEST", "a checkin needs agent, host and applied")
        problem = _v12_problem(body)
        if problem is not None:
            return api_error(400, "BAD_REQUEST", problem)
        inm = req.header("If-None-Match")
        with self.lock:
            self.checkins.append(body)
            self.waiting.append(body.get("waiting"))
            self.checkin_if_none_match.append(inm)
            raw, desired = self._raw_checkin, self.desired
        if raw is not None:
            return raw
        if desired is None:
            return Response(204)
        revision, bundle = desired
        etag = f'"{revision}"'
        if inm is not None and _etag_value(inm) == revision:
            return Response(304, b"", {"ETag": etag})
        return json_response(200, {"revision": revision, "bundle": bundle}, {"ETag": etag})

    def _report(self, req: Request, env: str, meta: dict[str, str]) -> Response:
        try:
            body = req.json()
        except ValueError:
            return api_error(400, "BAD_REQUEST", "the report body is not JSON")
        if not isinstance(body, dict):
            return api_error(400, "BAD_REQUEST", "a report is a JSON object")
        with self.lock:
            self.reports.append(body)
        return Response(202)


OUTCOMES = ("applied", "rolled_back", "held", "waiting")  # contract v1.1 and v1.2


def _v12_problem(body: dict[str, Any]) -> str | None:
    """What tenancy would refuse in ``applied.outcome`` and ``waiting`` (contract v1.2)."""
    applied = body["applied"]
    if applied is not None and (
        not isinstance(applied, dict) or applied.get("outcome", "applied") not in OUTCOMES
    ):
        return "applied.outcome must be one of " + ", ".join(OUTCOMES)
    waiting = body.get("waiting")
    if waiting is None:
        return None
    if not isinstance(waiting, dict) or set(waiting) != {"revision", "until", "why"}:
        return "waiting must be {revision, until, why}"
    if waiting["why"] not in ("window", "rollout"):
        return "waiting.why must be window or rollout"
    until = waiting["until"]
    try:
        datetime.fromisoformat(str(until).replace("Z", "+00:00"))
    except ValueError:
        return "waiting.until must be an RFC 3339 time"
    if not isinstance(waiting["revision"], str) or not isinstance(until, str):
        return "waiting.revision and waiting.until are strings"
    return None


def _etag_value(header: str) -> str:
    value = header.strip()
    if value.startswith("W/"):
        value = value[2:]
    return value.strip('"')
