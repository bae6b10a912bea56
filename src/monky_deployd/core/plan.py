"""Decide what a tick does, from facts. Pure: no I/O, no clock.

Two decisions, both frozen dataclasses that carry their data (balena-supervisor's manner):

1. ``decide(Facts) -> Idle | Noop | Restore | Apply``: what the tick is for, from the check-in
   answer, the applied record and (when the desired revision is the applied one) the project's
   containers.
2. ``box_steps(...)``: once every check of an apply or a restore has passed (``core.prepare``),
   the steps that change the box, in order, each naming its phase:

       Apply:   Stage -> Pull -> [Down the previous project] -> Up -> Commit
       Restore: Up (no pull: the images are on the box; the applied record stands)

``agent.steps`` holds one executor per step type; ``agent.tick`` runs them, each inside its
phase. Nothing here knows how a step is carried out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from monky_deployd.core.registry_cred import Credential
from monky_deployd.core.services import Service

# -- facts -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppliedFacts:
    """What the applied record says is on the box."""

    revision: str
    project: str
    services: tuple[str, ...]  # the services the applied compose file declares


@dataclass(frozen=True)
class Facts:
    checkin_status: int  # 200, 204 or 304
    desired_revision: str | None
    applied: AppliedFacts | None
    running: tuple[Service, ...] | None = (
        None  # the applied project's containers; None = not looked
    )
    bundle: Mapping[str, Any] | None = field(default=None, repr=False)  # the 200 answer's bundle


# -- what the tick is for ----------------------------------------------------------------------


@dataclass(frozen=True)
class Idle:
    """Tenancy has no desired state for this environment: nothing to do."""

    reason: str
    kind: ClassVar[str] = "idle"


@dataclass(frozen=True)
class Noop:
    """The desired revision is applied and every service runs: check in, exit."""

    applied: AppliedFacts
    reason: str
    kind: ClassVar[str] = "noop"


@dataclass(frozen=True)
class Restore:
    """The desired revision is applied but containers died or vanished: ``up`` again, no pull."""

    applied: AppliedFacts
    missing: tuple[str, ...]
    reason: str
    kind: ClassVar[str] = "restore"


@dataclass(frozen=True)
class Apply:
    """A new (or not yet successfully applied) revision: the full apply."""

    revision: str
    bundle: Mapping[str, Any] = field(repr=False)
    previous: AppliedFacts | None
    reason: str
    kind: ClassVar[str] = "apply"


Plan = Idle | Noop | Restore | Apply


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
        return Idle("tenancy has no desired state for this environment yet")
    applied = f.applied
    if f.checkin_status == 304:  # not modified: the desired revision is the applied one
        desired = applied.revision if applied else None
    else:
        desired = f.desired_revision
    if desired is None:
        return Idle("tenancy named no desired revision")
    if applied is None or desired != applied.revision:
        was = applied.revision if applied else "(none)"
        return _apply(f, desired, f"desired revision {desired} differs from applied {was}")
    if f.running is None:
        return _apply(f, desired, f"revision {desired}: container state unknown")
    missing = down_services(applied.services, f.running)
    if missing:
        return Restore(
            applied, missing, f"revision {desired} is applied but {', '.join(missing)} not running"
        )
    return Noop(applied, f"revision {desired} is applied and all services are running")


def _apply(f: Facts, revision: str, reason: str) -> Plan:
    if f.bundle is None:  # a 304 names the applied revision but carries no bundle to apply
        return Idle(f"{reason}, but tenancy sent no bundle to apply")
    return Apply(revision, f.bundle, f.applied, reason)


# -- the steps that change the box -------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """Write the registry credential (``<state_dir>/docker/config.json``) and the revision's
    project directory (compose file + ``.env``)."""

    revision: str
    compose: str = field(repr=False)
    env_text: str = field(repr=False)
    registry_host: str | None
    credential: Credential | None
    phase: ClassVar[str] = "stage"


@dataclass(frozen=True)
class Pull:
    project: str
    revision: str
    registry_host: str | None
    phase: ClassVar[str] = "pull"


@dataclass(frozen=True)
class Down:
    """Stop the previous project (its containers and networks; volumes stay)."""

    project: str
    revision: str
    phase: ClassVar[str] = "down"


@dataclass(frozen=True)
class Up:
    project: str
    revision: str
    phase: ClassVar[str] = "up"


@dataclass(frozen=True)
class Commit:
    """Record what is applied, prune old revision directories, refresh the cached host facts."""

    revision: str
    project: str
    services: tuple[str, ...]
    phase: ClassVar[str] = "commit"


BoxStep = Stage | Pull | Down | Up | Commit


@dataclass(frozen=True)
class Ready:
    """An apply whose every check passed (``core.prepare``): what the box steps need."""

    revision: str
    project: str
    compose: str = field(repr=False)
    env_text: str = field(repr=False)
    services: tuple[str, ...]
    registry_host: str | None
    credential: Credential | None


def apply_steps(plan: Apply, ready: Ready) -> tuple[BoxStep, ...]:
    """The box steps of an apply, in order."""
    steps: list[BoxStep] = [
        Stage(ready.revision, ready.compose, ready.env_text, ready.registry_host, ready.credential),
        Pull(ready.project, ready.revision, ready.registry_host),
    ]
    prev = plan.previous
    if prev is not None and prev.project != ready.project:
        steps.append(Down(prev.project, prev.revision))
    steps += [
        Up(ready.project, ready.revision),
        Commit(ready.revision, ready.project, ready.services),
    ]
    return tuple(steps)


def restore_steps(plan: Restore) -> tuple[BoxStep, ...]:
    """The box steps of a restore: ``up`` the applied revision again, no pull."""
    return (Up(plan.applied.project, plan.applied.revision),)


# -- the cached host facts ---------------------------------------------------------------------


def host_facts_usable(cached: Mapping[str, object] | None, hostname: str) -> bool:
    """Whether cached host facts (hostname, docker and compose versions) can be sent as they are:
    they are of this host. An apply refreshes them anyway (``Commit``)."""
    return cached is not None and cached.get("hostname") == hostname
