"""Decide what a tick does, from facts. Pure: no I/O, no clock.

The tick gathers facts (the check-in answer, the applied record, the project's containers) and
asks ``decide``; it then carries out exactly the returned action.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from monky_deployd.core.services import Service


class Action(Enum):
    IDLE = "idle"  # tenancy has no desired state for this environment: nothing to do
    NOOP = "noop"  # desired revision applied and every service running: check in, exit
    RESTORE = "restore"  # desired revision applied but containers died/vanished: up -d, no pull
    APPLY = "apply"  # a new (or not yet successfully applied) revision: full apply


@dataclass(frozen=True)
class Facts:
    checkin_status: int  # 200, 204 or 304
    desired_revision: str | None
    applied_revision: str | None
    applied_services: tuple[str, ...]  # services the applied compose file declares
    running: tuple[Service, ...] | None  # the applied project's containers; None = not looked


@dataclass(frozen=True)
class Plan:
    action: Action
    reason: str
    missing: tuple[str, ...] = ()


def needs_container_check(checkin_status: int, desired: str | None, applied: str | None) -> bool:
    """Whether the tick must look at the containers before deciding (the desired = applied case)."""
    if checkin_status == 304:
        return applied is not None
    return checkin_status == 200 and desired is not None and desired == applied


def down_services(expected: tuple[str, ...], running: tuple[Service, ...]) -> tuple[str, ...]:
    """Services of ``expected`` with no running container."""
    up = {s.name for s in running if s.state == "running"}
    return tuple(name for name in expected if name not in up)


def decide(f: Facts) -> Plan:
    if f.checkin_status == 204:
        return Plan(Action.IDLE, "tenancy has no desired state for this environment yet")
    desired = f.applied_revision if f.checkin_status == 304 else f.desired_revision
    if desired is None:
        return Plan(Action.IDLE, "tenancy named no desired revision")
    if desired != f.applied_revision:
        return Plan(
            Action.APPLY,
            f"desired revision {desired} differs from applied {f.applied_revision or '(none)'}",
        )
    if f.running is None:
        return Plan(Action.APPLY, f"revision {desired}: container state unknown")
    missing = down_services(f.applied_services, f.running)
    if missing:
        return Plan(
            Action.RESTORE,
            f"revision {desired} is applied but {', '.join(missing)} not running",
            missing,
        )
    return Plan(Action.NOOP, f"revision {desired} is applied and all services are running")
