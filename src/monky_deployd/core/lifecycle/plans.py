"""The plan kinds a steady tick never meets (``core.lifecycle.decide`` answers ``Noop`` there):
what a tick is for when it is not a no-op. Pure. ``core.lifecycle.decide`` builds them, importing
this module inside the rules that do (issue 29: a no-op tick does not pay for the classes it never
instantiates; tests/repo/test_noop_imports.py holds it off the steady path).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.lifecycle.facts import AppliedFacts
    from monky_deployd.core.lifecycle.gates import Lock
    from monky_deployd.core.records.held import Held
    from monky_deployd.core.records.suspend import Suspended


@dataclass(frozen=True)
class Idle:
    """Tenancy has no desired state for this environment: nothing to do."""

    reason: str
    kind: ClassVar[str] = "idle"


@dataclass(frozen=True)
class Restore:
    """The desired revision is applied but containers died or vanished: ``up`` again, no pull."""

    applied: AppliedFacts
    missing: tuple[str, ...]
    reason: str
    gate: schedule.Gate | None = None  # a new revision waits meanwhile (core.lifecycle.schedule)
    # the failed revision whose rollback to ``applied`` did not finish (killed, or stopped by a
    # lock or a suspend): this restore is that rollback
    # (``core.lifecycle.recovery.rollback_pending``)
    rollback_of: str | None = None
    orphans: tuple[str, ...] = ()  # services the revision does not have: the whole project up
    # services whose running container another apply made: replacing it is a rollback (an
    # update lock stops it, ``core.lifecycle.recheck``), unlike bringing a dead service back
    foreign: tuple[str, ...] = ()
    kind: ClassVar[str] = "restore"


@dataclass(frozen=True)
class Stop:
    """A held host path of the applied revision no longer leads where it did at its up
    (``core.admission.paths.moved``): its services are stopped (those still running: ``stop``)
    and the tick fails with POLICY_PATH_MOVED, reported; nothing restores them while it lasts."""

    applied: AppliedFacts
    services: tuple[str, ...]
    stop: tuple[str, ...]  # of ``services``, those whose container still runs
    moved: tuple[tuple[str, str], ...]  # ``(service, why)``
    reason: str
    kind: ClassVar[str] = "stop"


@dataclass(frozen=True)
class Apply:
    """A new (or not yet successfully applied) revision: the full apply."""

    revision: str
    bundle: Mapping[str, Any] = field(repr=False)
    previous: AppliedFacts | None
    reason: str
    locks: tuple[Lock, ...] = ()  # update locks: stage and pull only, recreate nothing
    gate: schedule.Gate | None = None  # a new revision's gate, passed (core.lifecycle.schedule)
    kind: ClassVar[str] = "apply"


@dataclass(frozen=True)
class Hold:
    """The desired revision failed here before and is held (rolled back, or the rollback
    stalled): check in, apply nothing, until the desired revision changes or ``--retry``."""

    revision: str
    held: Held
    reason: str
    kind: ClassVar[str] = "hold"


@dataclass(frozen=True)
class Backoff:
    """The desired revision failed here before; its next attempt is not due yet."""

    revision: str
    held: Held
    next_at: float
    reason: str
    kind: ClassVar[str] = "backoff"


@dataclass(frozen=True)
class Paused:
    """Applies are suspended (``monky-deployd suspend``): check in, change nothing."""

    revision: str
    suspended: Suspended
    reason: str
    kind: ClassVar[str] = "suspended"


@dataclass(frozen=True)
class Waiting:
    """A new revision is not applied yet: outside every update window, or before this box's
    place in the rollout spread (``core.lifecycle.schedule``). Check in (``waiting``), change
    nothing."""

    revision: str
    gate: schedule.Gate
    reason: str
    kind: ClassVar[str] = "waiting"
