"""One boundary translator for the agent's HTTP services (tenancy, OpenBao).

An ``httpx.TransportError`` from a request becomes the fault an operator can act on, the same way
for both services:

    a DeployError in the cause chain (the Ziti dialer named it)  -> that fault, first
    the tick's deadline ran out (deadline.Expired in the chain)  -> TICK_DEADLINE
    the request's overall deadline ran out                      -> <service>.timeout_code
    timeout                                                     -> <service>.timeout_code
    not HTTP (httpx.ProtocolError: garbage, a TLS or SSH port)   -> <service>.bad(...)
    a name that does not resolve (socket.gaierror in the chain)  -> <service>.unreachable_code,
                                                                    the hint
                                                                    core.commands.fixes.unresolved
    anything else (refused, reset, no route)                     -> <service>.unreachable_code

Messages name the service, its address and what was asked; never a token.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline, in_chain, named_cause, root_words


@dataclass(frozen=True)
class HttpService:
    name: str  # as the operator knows it: "tenancy", "OpenBao"
    address: str  # host:port
    timeout_s: float
    deadline_s: float  # the overall deadline of one request
    timeout_code: Code
    timeout_hint: str
    unreachable_code: Code
    unreachable_hint: str
    bad: Callable[[str, str], DeployError]  # (what was asked, the answer's shape) -> the fault


def translate(
    exc: httpx.TransportError, service: HttpService, what: str
) -> DeployError | TickDeadline:
    """The fault behind ``exc``, raised while asking ``service`` for ``what`` (e.g. "POST
    /checkin"); raise it ``from exc``."""
    named = named_cause(exc)
    if named is not None:
        return named
    bound = deadline.expired_in(exc)
    if bound is not None and bound.kind == "tick":
        return deadline.tick_error(f"while asking {service.name} at {service.address} {what}")
    if bound is not None:
        return DeployError(
            f"{service.name} at {service.address} did not finish answering {what} "
            f"within its deadline of {service.deadline_s:g} s (it answers too slowly)",
            code=service.timeout_code,
            hint=service.timeout_hint,
        )
    if isinstance(exc, httpx.TimeoutException):
        return DeployError(
            f"{service.name} at {service.address} did not answer {what} "
            f"within {service.timeout_s:g} s",
            code=service.timeout_code,
            hint=service.timeout_hint,
        )
    if isinstance(exc, httpx.ProtocolError):
        return service.bad(what, f"something that is not HTTP ({root_words(exc)})")
    if (
        in_chain(exc, socket.gaierror) is not None
    ):  # the name, not the route: what doctor's intercept check says
        host = service.address.rsplit(":", 1)[0]
        return DeployError(
            f"cannot reach {service.name} at {service.address}: its name {host} does not "
            f"resolve on this box ({root_words(exc)})",
            code=service.unreachable_code,
            hint=unresolved_fix(),
        )
    return DeployError(
        f"cannot reach {service.name} at {service.address}: {root_words(exc)}",
        code=service.unreachable_code,
        hint=service.unreachable_hint,
    )


def unresolved_fix() -> str:
    """``core.commands.fixes.unresolved`` for this box: is install.sh's run-host drop-in there, is
    the tunneler's unit installed (the tick's hint and doctor's intercept checks)."""
    from monky_deployd.core.commands import fixes, unit

    return fixes.unresolved(
        Path(fixes.RUN_HOST_DROPIN).is_file(),
        any(Path(d, fixes.TUNNELER).is_file() for d in unit.UNIT_DIRS),
    )
