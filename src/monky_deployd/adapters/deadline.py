"""Overall deadlines: one for the tick, one for each HTTP request.

A per-read timeout bounds a silent peer, not a slow one: a service that drips one byte every half
second never trips it. So the tick has one overall deadline (``tick_deadline_s``) and every HTTP
request one of its own (``tenancy.deadline_s``, ``openbao.deadline_s``, the Engine API's
``docker.command_timeout_s``), held in context variables:

- ``tick(seconds)`` / ``request(seconds)`` set them (``agent.tick.tick`` / ``httpio.read_capped``);
- ``clamp(timeout)`` turns a per-operation timeout into ``min(timeout, time left)`` (every socket
  read and write of ``httpio``'s transports, every child of ``runner.run``); when nothing is
  left it raises ``Expired`` naming the deadline that ran out;
- ``check_tick(where)`` ends the tick at a phase boundary with ``TICK_DEADLINE``; every cut by
  the tick's deadline raises ``core.faults.TickDeadline`` (a ``BaseException``: an ordinary
  ``except`` cannot swallow it, so the tick ends where its time ran out, not at the next phase).

Context variables are per thread: a helper thread (the Ziti dialer's) is bounded by the timeout
its caller computed with ``clamp``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TickDeadline


@dataclass(frozen=True)
class Bound:
    at: float  # time.monotonic() when it runs out
    seconds: float  # as configured
    kind: Literal["tick", "request"]
    what: str = "tick_deadline_s"  # the setting it comes from (a tick deadline's)

    def left(self) -> float:
        return self.at - time.monotonic()


class Expired(Exception):
    """A deadline ran out; raised (as the cause of a timeout) where an operation would start."""

    def __init__(self, bound: Bound) -> None:
        super().__init__(f"the {bound.kind} deadline of {bound.seconds:g} s ran out")
        self.bound = bound


_tick: ContextVar[Bound | None] = ContextVar("monky_tick_deadline", default=None)
_request: ContextVar[Bound | None] = ContextVar("monky_request_deadline", default=None)


@contextmanager
def tick(seconds: float, what: str = "tick_deadline_s") -> Iterator[None]:
    """The tick's deadline, ``seconds`` from now (``what``: the setting it comes from); nested,
    it replaces the outer one until it ends (a rollback's own budget after a spent tick)."""
    token = _tick.set(Bound(time.monotonic() + seconds, seconds, "tick", what))
    try:
        yield
    finally:
        _tick.reset(token)


@contextmanager
def without_tick() -> Iterator[None]:
    """Lift the tick's deadline (the report after a failed tick: each request keeps its own)."""
    token = _tick.set(None)
    try:
        yield
    finally:
        _tick.reset(token)


@contextmanager
def request(seconds: float) -> Iterator[None]:
    token = _request.set(Bound(time.monotonic() + seconds, seconds, "request"))
    try:
        yield
    finally:
        _request.reset(token)


def nearest() -> Bound | None:
    """The deadline that runs out first (tick or request), or None."""
    bounds = [b for b in (_tick.get(), _request.get()) if b is not None]
    return min(bounds, key=lambda b: b.at) if bounds else None


def clamp(timeout: float | None) -> float | None:
    """``timeout`` cut to the time left; raises ``Expired`` when none is left."""
    bound = nearest()
    if bound is None:
        return timeout
    left = bound.left()
    if left <= 0:
        raise Expired(bound)
    return left if timeout is None else min(timeout, left)


def binding(timeout: float | None, left: float | None) -> Bound | None:
    """The deadline that ``clamp`` cut ``timeout`` to ``left`` for, if it did: a timeout after
    such a cut is that deadline running out (socket timeouts may wake a hair early)."""
    if left is None or (timeout is not None and left >= timeout):
        return None
    return nearest()


def expired() -> Bound | None:
    """The deadline that has run out, if one has."""
    bound = nearest()
    return bound if bound is not None and bound.left() <= 0 else None


def mark(exc: BaseException, bound: Bound) -> None:
    """Note on a timeout exception that ``bound`` ran out (``expired_in`` finds it)."""
    exc.monky_deadline = bound  # type: ignore[attr-defined]


def expired_in(exc: BaseException | None) -> Bound | None:
    """The deadline that ran out behind ``exc`` (marked or ``Expired`` in its chain), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, Expired):
            return exc.bound
        bound = getattr(exc, "monky_deadline", None)
        if isinstance(bound, Bound):
            return bound
        exc = exc.__cause__ or exc.__context__
    return None


def tick_error(where: str) -> TickDeadline:
    bound = _tick.get()
    seconds = bound.seconds if bound is not None else 0.0
    what = bound.what if bound is not None else "tick_deadline_s"
    fault = DeployError(
        f"the tick ran past its deadline of {seconds:g} s ({what}) {where}; it stops there",
        code=Code.TICK_DEADLINE,
        hint="which phase took the time (the phase.end lines of this tick): a service that "
        "answers slowly, a slow registry; raise tick_deadline_s only if the work is legitimate",
    )
    return TickDeadline(fault)


def tick_expired() -> bool:
    bound = _tick.get()
    return bound is not None and bound.left() <= 0


def check_tick(where: str) -> None:
    """Raise ``TICK_DEADLINE`` when the tick's deadline has run out (a phase boundary)."""
    if tick_expired():
        raise tick_error(where)
