"""OpenBao down: is tenancy down too? Then the first error line says both.

The token phase asks OpenBao first (lookup-self, a login), so with both services down the tick
used to end naming OpenBao alone, and an operator fixed OpenBao only to meet tenancy's fault a
minute later. When the token phase fails because OpenBao cannot be reached or answers 5xx/sealed,
the tick asks tenancy's ``GET /`` (``Tenancy.probe``: no token, nothing recorded there, the
request's own deadline); when that fails too, the fault keeps OpenBao's code (the first fault,
its exit status) and its sentence and hint name tenancy's fault as well.
"""

from __future__ import annotations

from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent.token import HeldToken, TokenKeeper
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline

OPENBAO_DOWN = frozenset({Code.OPENBAO_UNREACHABLE, Code.OPENBAO_UNAVAILABLE, Code.OPENBAO_SEALED})


def acquire(keeper: TokenKeeper, tenancy: Tenancy) -> HeldToken:
    """``keeper.acquire()``; an OpenBao outage names tenancy's too when tenancy is down."""
    try:
        return keeper.acquire()
    except DeployError as err:
        if err.code not in OPENBAO_DOWN:
            raise
        fault = err
    # Asked outside the handler: a transport error raised inside it would carry OpenBao's fault
    # as its context, and ``httperrors.translate`` would name that one (``named_cause``).
    raise both_down(fault, tenancy) from fault


def both_down(err: DeployError, tenancy: Tenancy) -> DeployError:
    """``err`` (OpenBao's), or one naming tenancy's fault too when its probe fails."""
    try:
        tenancy.probe()
    except DeployError as down:
        return err.restated(
            f"{err.message.rstrip('.')}; tenancy is down too: {down.code}: {down.message}",
            f"{err.hint.rstrip('.')}; and {down.hint}" if err.hint else down.hint,
        )
    except TickDeadline:  # no time left to ask: OpenBao's fault stands
        return err
    return err
