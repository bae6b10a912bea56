"""The observe phase's exchange with tenancy: the secrets at rest the masker learns before any
request, and the check-in (one retry with a new token when tenancy rejects the held one).
Moved whole from ``agent.tick.tick`` (issue 29: tick.py reads top to bottom within 250 lines)."""

from __future__ import annotations

import logging
from contextlib import suppress

from monky_deployd.adapters.box.grant import read_grant
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.tenancy import Checkin, Tenancy
from monky_deployd.agent import context
from monky_deployd.agent.observe import observe
from monky_deployd.agent.observe.observe import Local
from monky_deployd.agent.token import HeldToken, TokenKeeper
from monky_deployd.config import Config
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TokenError

log = logging.getLogger("monky_deployd")


def tokens_at_rest(cfg: Config, state: StateDir) -> tuple[str, ...]:
    """The grant and the stored token, when readable (the token phase names any fault)."""
    found: list[str] = []
    with suppress(DeployError):
        found.append(read_grant(cfg.grant_file))
    try:
        stored = state.read_token()
    except (DeployError, ValueError):
        stored = None
    if stored is not None and stored.token is not None:
        found.append(stored.token.token)
    return tuple(found)


def checkin(
    ctx: context.Context, tenancy: Tenancy, keeper: TokenKeeper, token: HeldToken, local: Local
) -> tuple[Checkin, HeldToken]:
    body = observe.checkin_body(context.host_facts(ctx), local)
    etag = local.record.revision if local.record else None
    try:
        return tenancy.checkin(token.token, body, etag), token
    except TokenError as err:
        if err.code is not Code.TOKEN_INVALID:
            raise
        log.warning(
            "tenancy rejected the held token; obtaining a new one once",
            extra={"event": "token.rejected", "kind": token.kind},
        )
        token = keeper.invalidate(token)
        ctx.learn((token.token,))
        return tenancy.checkin(token.token, body, etag), token
