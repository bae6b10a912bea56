"""The lease economy: which OpenBao token the tick holds, and when to renew, rotate or lease.

Tenancy mints at most 5 leases per environment per rolling hour; a tick runs every 60 s. So the
agent keeps the token it has (``<state_dir>/token.json``, 0600, written atomically) and spends
a lease only when it must. ``token_plan.decide(facts)`` is PURE: given what is known so far in
this round it names the next step; ``TokenKeeper`` carries the steps out (lookup-self,
renew-self, login, lease) and feeds the answers back into the facts until the step is USE (or
a refusal).

    stored token, not yet asked about in this round                 -> LOOKUP
    lease, ttl >= renew_threshold (renew_below_s, at most half the
      TTL the lease was minted with)                                -> USE
    lease below that, renewable, not yet renewed this round         -> RENEW
    lease still below (refused/capped), budget open, not leased     -> ROTATE
    lease, budget closed (lease_not_before ahead), ttl >= floor     -> USE
    no token (none stored, 403 on lookup-self, lease below floor)   -> LOGIN
    bootstrap, budget open, not yet leased                          -> LEASE_WITH_BOOTSTRAP
    stored bootstrap below min_ttl_s, budget closed                 -> LOGIN
    bootstrap, budget closed                                        -> USE
    nothing that lasts WORKING_FLOOR_S, budget closed               -> REFUSE_RATE_LIMITED

Before a lease is asked for, the state dir must prove it can store the record
(``StateDir.reserve_token_room``; TOKEN_UNSTORABLE otherwise): a full disk spends no lease.
A 429 from tenancy sets ``lease_not_before = now + retry_after_s`` (persisted): no lease request
is made before then. After a rotation, once the new lease is in token.json, the old lease token
is revoked (``revoke-self``; a failure is only a warning). Tokens never reach a log line or an
exception text.

Over ~400 lines on purpose: the token phase's whole state machine (acquire, rounds, rotation,
rate limits) is one keeper; its decisions are ``core.records.token_plan``'s.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.bao import Bao, RenewRefused
from monky_deployd.adapters.net.tenancy import RateLimited, Tenancy
from monky_deployd.config import Config, TokenCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TokenError
from monky_deployd.core.records.applied import Stored as Stored
from monky_deployd.core.records.applied import TokenState as TokenState
from monky_deployd.core.records.tickrecord import rfc3339, whole_seconds
from monky_deployd.core.records.token_plan import (
    WORKING_FLOOR_S,
    Kind,
    Known,
    Step,
    TokenFacts,
    decide,
)

if TYPE_CHECKING:
    from monky_deployd.core.wire.answers import Lease

log = logging.getLogger(__name__)

MAX_STEPS = 12
# Tenancy's budget is per rolling hour: no wait is longer. Caps a retry_after_s and a stored
# lease_not_before that a clock stepping backwards left far in the future.
MAX_WAIT_S = 3600
# Room proved for the token record beyond its current size: a lease's token and id.
TOKEN_ROOM_SLACK = 4096


# -- bookkeeping (the record, Stored / TokenState, is core.records.applied'; StateDir reads and
# writes it)


@dataclass(frozen=True)
class HeldToken:
    token: str
    kind: Kind

    def __repr__(self) -> str:  # never print the token
        return f"HeldToken(kind={self.kind!r})"


def grant_jti(jwt: str) -> str:
    """The grant's ``jti`` claim (unverified: OpenBao verifies); "" when it cannot be read."""
    try:
        payload = jwt.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return str(claims.get("jti") or "") if isinstance(claims, dict) else ""
    except (IndexError, ValueError, UnicodeDecodeError):
        return ""


def _replaced(before: TokenState, after: TokenState) -> bool:
    """A rotation answered: a new lease token took the place of the old one."""
    return (
        before.token is not None
        and after.token is not None
        and after.token.kind == "lease"
        and after.token.token != before.token.token
    )


# -- the keeper ------------------------------------------------------------------------------


class TokenKeeper:
    """Carries out ``decide``'s steps against OpenBao and tenancy; one instance per tick."""

    def __init__(
        self,
        cfg: Config,
        bao: Bao,
        tenancy: Tenancy,
        clock: Callable[[], float] = time.time,
        *,
        state: StateDir | None = None,
    ) -> None:
        self._cfg = cfg
        self._bao = bao
        self._tenancy = tenancy
        self._clock = clock
        self._tcfg: TokenCfg = cfg.token
        self._store = state if state is not None else StateDir(cfg.state_dir)
        self.path = self._store.token_file
        self._state: TokenState | None = None

    # -- public ------------------------------------------------------------------------------

    def acquire(self) -> HeldToken:
        """The token this tick uses (the token phase)."""
        return self._round(self._load())

    def invalidate(self, held: HeldToken) -> HeldToken:
        """Tenancy answered 401 TOKEN_INVALID to ``held``: forget it and acquire once more."""
        state = self._state if self._state is not None else self._load()
        if state.token is not None and state.token.token == held.token:
            state = replace(state, token=None)
            self._save(state)
        log.warning(
            f"tenancy rejected the {held.kind} token; forgetting it",
            extra={"event": "token.invalidated", "kind": held.kind},
        )
        fresh = self._round(state)
        if fresh.token == held.token:  # cannot happen: the rejected token was forgotten
            raise TokenError(
                "tenancy rejected the token and no other token could be obtained",
                code=Code.TOKEN_INVALID,
                hint="tenancy's and OpenBao's logs for this environment",
            )
        return fresh

    # -- the round ---------------------------------------------------------------------------

    def _round(self, state: TokenState) -> HeldToken:
        st = self._forget_if_grant_replaced(state)
        latest = self._clock() + MAX_WAIT_S
        if st.lease_not_before is not None and st.lease_not_before > latest:
            st = replace(st, lease_not_before=latest)
        tok = st.token
        known = (
            Known(tok.kind, tok.expires_at, tok.renewable, False, tok.issued_ttl_s)
            if tok is not None
            else None
        )
        f = TokenFacts(
            now=self._clock(),
            held=known,
            lease_not_before=st.lease_not_before,
            min_ttl_s=self._tcfg.min_ttl_s,
            renew_below_s=self._tcfg.renew_below_s,
        )
        changed = False
        for _ in range(MAX_STEPS):
            f = replace(f, now=self._clock())
            step = decide(f)
            if step is Step.USE:
                assert st.token is not None
                if not changed:
                    log.info(
                        f"reusing the stored {st.token.kind} token "
                        f"({whole_seconds(st.token.expires_at - f.now)} s left)",
                        extra={
                            "event": "token.reuse",
                            "kind": st.token.kind,
                            "ttl_s": whole_seconds(st.token.expires_at - f.now),
                        },
                    )
                self._state = st
                return HeldToken(st.token.token, st.token.kind)
            if step in (Step.REFUSE_RATE_LIMITED, Step.REFUSE_NO_TOKEN):
                self._state = st
                raise self._refusal(step, st)
            assert st.token is not None or step is Step.LOGIN
            before = st
            if step is Step.LOOKUP:
                st, f = self._lookup(st, f)
            elif step is Step.RENEW:
                st, f = self._renew(st, f)
            elif step is Step.LOGIN:
                st, f = self._login(st, f)
            else:  # ROTATE / LEASE_WITH_BOOTSTRAP
                st, f = self._lease(st, f, rotate=step is Step.ROTATE)
            if st != before and (step is not Step.LOOKUP or st.token is None):
                # every change is on disk before the next call: a lease is never lost
                # (a lookup that only refreshes the expiry is not worth a write)
                self._save(st)
                changed = True
            if step is Step.ROTATE and _replaced(before, st):
                assert before.token is not None
                self._revoke_old_lease(before.token)
        raise TokenError(  # pragma: no cover - decide() always converges within a few steps
            "the token phase did not settle on a token",
            code=Code.TOKEN_UNAVAILABLE,
            hint="the agent's log lines with event token.* for this tick",
        )

    def _revoke_old_lease(self, old: Stored) -> None:
        """After a rotation, once the new lease is in token.json: revoke the old lease token,
        so the box never holds two live leases. A failure is a warning (the old token expires
        on its own), never the tick's fault."""
        try:
            self._bao.revoke_self(old.token)
        except DeployError as err:
            log.warning(
                f"could not revoke the old lease token {old.lease_id or ''} after the rotation "
                f"({err.code}: {err.message}); it expires on its own",
                extra={"event": "token.revoke", "ok": False, "code": err.code},
            )
            return
        log.info(
            f"revoked the old lease token {old.lease_id or ''} after the rotation",
            extra={"event": "token.revoke", "ok": True, "lease_id": old.lease_id},
        )

    def _forget_if_grant_replaced(self, st: TokenState) -> TokenState:
        """A new kit's grant.jwt replaces the old one: tokens from the old grant are dead at
        tenancy (GRANT_SUPERSEDED), so the stored one is dropped and the new grant logs in."""
        if st.token is None or not st.token.grant_jti:
            return st
        try:
            current = grant_jti(read_grant(self._cfg.grant_file))
        except TokenError:
            return st  # no readable grant: keep using the token it gave us
        if not current or current == st.token.grant_jti:
            return st
        log.warning(
            f"{self._cfg.grant_file} holds a different grant than the one the stored "
            f"{st.token.kind} token descends from (a new kit); logging in with the new grant",
            extra={"event": "token.grant_replaced", "kind": st.token.kind},
        )
        st = replace(st, token=None)
        self._save(st)
        return st

    def _lookup(self, st: TokenState, f: TokenFacts) -> tuple[TokenState, TokenFacts]:
        assert st.token is not None and f.held is not None
        info = self._bao.lookup_self(st.token.token)
        if info is None:
            log.info(
                f"the stored {st.token.kind} token is expired or revoked "
                "(lookup-self answered 403)",
                extra={"event": "token.expired", "kind": st.token.kind},
            )
            return replace(st, token=None), replace(f, held=None)
        expires = f.now + info.ttl_s
        tok = replace(st.token, expires_at=expires, renewable=info.renewable)
        held = Known(tok.kind, expires, info.renewable, True, tok.issued_ttl_s)
        return replace(st, token=tok), replace(f, held=held)

    def _renew(self, st: TokenState, f: TokenFacts) -> tuple[TokenState, TokenFacts]:
        assert st.token is not None and f.held is not None
        known = f.held
        f = replace(f, renew_tried=True)
        try:
            info = self._bao.renew_self(st.token.token)
        except RenewRefused as err:
            log.info(
                f"renewal refused ({err.message}); the lease will be rotated",
                extra={"event": "token.renew", "ok": False, "status": err.status},
            )
            if err.status == 403:  # died in between: as if lookup-self had said 403
                return replace(st, token=None), replace(f, held=None)
            tok = replace(st.token, renewable=False)
            return replace(st, token=tok), replace(f, held=replace(known, renewable=False))
        expires = f.now + info.ttl_s
        log.info(
            f"renewed the lease token: {info.ttl_s} s left",
            extra={"event": "token.renew", "ok": True, "ttl_s": info.ttl_s},
        )
        tok = replace(st.token, expires_at=expires, renewable=info.renewable)
        held = replace(known, expires_at=expires, renewable=info.renewable)
        return replace(st, token=tok), replace(f, held=held)

    def _login(self, st: TokenState, f: TokenFacts) -> tuple[TokenState, TokenFacts]:
        grant = read_grant(self._cfg.grant_file)
        jti = grant_jti(grant)
        login = self._bao.login_jwt(grant)
        now = self._clock()
        log.info(
            f"logged in to OpenBao with the grant: bootstrap token for {login.ttl_s} s",
            extra={"event": "token.login", "ttl_s": login.ttl_s},
        )
        tok = Stored(
            "bootstrap", login.token, now, now + login.ttl_s, login.renewable, grant_jti=jti
        )
        held = Known("bootstrap", tok.expires_at, login.renewable, verified=True)
        return replace(st, token=tok), replace(f, held=held, login_done=True, now=now)

    def _lease(
        self, st: TokenState, f: TokenFacts, *, rotate: bool
    ) -> tuple[TokenState, TokenFacts]:
        assert st.token is not None
        f = replace(f, lease_tried=True)
        # A lease that cannot be stored is lost: prove the record fits before asking for one
        # (TOKEN_UNSTORABLE; the room is freed by the next write of the record).
        self._store.reserve_token_room(len(st.to_json()) + TOKEN_ROOM_SLACK)
        try:
            lease: Lease = self._tenancy.lease(st.token.token)
        except TokenError as err:
            if not (rotate and err.code is Code.TOKEN_INVALID):
                raise
            log.warning(
                "tenancy rejected the lease token offered for rotation; logging in",
                extra={"event": "token.invalidated", "kind": "lease"},
            )
            return replace(st, token=None), replace(f, held=None)
        except RateLimited as err:
            now = self._clock()
            not_before = now + min(max(1, err.retry_after_s), MAX_WAIT_S)
            log.warning(
                f"tenancy rate-limited the lease ({'rotation' if rotate else 'swap'}); "
                f"carrying on with the {st.token.kind} token, no lease request before "
                f"{rfc3339(not_before, 'seconds')}",
                extra={
                    "event": "token.rate_limited",
                    "kind": st.token.kind,
                    "retry_after_s": err.retry_after_s,
                    "lease_not_before": rfc3339(not_before, "seconds"),
                },
            )
            return replace(st, lease_not_before=not_before), replace(f, lease_not_before=not_before)
        except DeployError as err:  # tenancy 5xx, unreachable, bad answer: nothing was minted
            if st.token.expires_at - self._clock() < WORKING_FLOOR_S:
                raise
            log.warning(
                f"the lease request failed ({err.code}); carrying on with the {st.token.kind} "
                "token, the next tick asks again",
                extra={"event": "token.lease_failed", "code": err.code, "kind": st.token.kind},
            )
            return st, f
        now = self._clock()
        log.info(
            f"leased a new token ({'rotated the lease' if rotate else 'swapped the bootstrap'}): "
            f"lease {lease.id}, {lease.ttl_s} s",
            extra={
                "event": "token.lease",
                "lease_id": lease.id,
                "ttl_s": lease.ttl_s,
                "rotate": rotate,
            },
        )
        tok = Stored(
            "lease",
            lease.token,
            now,
            now + lease.ttl_s,
            lease.renewable,
            lease.id,
            issued_ttl_s=lease.ttl_s,
            grant_jti=st.token.grant_jti,  # a lease descends from the grant of its bearer
        )
        held = Known("lease", tok.expires_at, lease.renewable, True, lease.ttl_s)
        st = replace(st, token=tok, lease_not_before=None)
        return st, replace(f, held=held, lease_not_before=None, renew_tried=False, now=now)

    def _refusal(self, step: Step, st: TokenState) -> TokenError:
        if step is Step.REFUSE_RATE_LIMITED:
            assert st.lease_not_before is not None
            when = rfc3339(st.lease_not_before, "seconds")
            log.warning(
                f"no working token and the lease budget is spent until {when}",
                extra={"event": "token.rate_limited", "lease_not_before": when},
            )
            return TokenError(
                f"tenancy's lease budget for {self._cfg.env} is spent and no working token is "
                f"held; the budget frees up at {when}",
                code=Code.LEASE_RATE_LIMITED,
                hint="which boxes or kits share this environment's 5 leases per hour; the "
                f"agent asks again after {when}",
            )
        return TokenError(
            "no OpenBao token could be obtained for this tick",
            code=Code.TOKEN_UNAVAILABLE,
            hint="OpenBao's token TTLs for the jwt role and tenancy's leases",
        )

    # -- the file ----------------------------------------------------------------------------

    def _load(self) -> TokenState:
        empty = TokenState(env=self._cfg.env)
        try:
            state = self._store.read_token()
        except ValueError as err:
            log.warning(
                f"the token record {self.path} is unusable ({err}); treating it as absent, "
                "which costs a login and a lease",
                extra={"event": "token.state_corrupt", "path": str(self.path)},
            )
            return empty
        if state is None:
            return empty
        if state.env != self._cfg.env:
            log.warning(
                f"the token record {self.path} belongs to environment {state.env}, not "
                f"{self._cfg.env}; ignoring it",
                extra={"event": "token.state_env_mismatch", "path": str(self.path)},
            )
            return empty
        return state

    def _save(self, state: TokenState) -> None:
        self._store.write_token(state)
        self._state = state
