"""What a decision is made from: the applied record's facts (``AppliedFacts``) and everything
a tick knows before it decides (``Facts``: the check-in answer, the containers, a hold, locks,
a suspend, a killed tick's step, a new revision's gate). Pure. ``agent.observe.observe`` fills
them; ``core.lifecycle.decide`` and the plan kinds (``core.lifecycle.plans``) read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from monky_deployd.core.lifecycle.gates import Lock
from monky_deployd.core.lifecycle.services import ServiceState

if TYPE_CHECKING:  # (read when a revision waits or windows are set: off the no-op's imports)
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.records.held import Held
    from monky_deployd.core.records.journal import Journal
    from monky_deployd.core.records.suspend import Suspended


@dataclass(frozen=True)
class AppliedFacts:
    """What the applied record says is on the box."""

    revision: str
    project: str
    services: tuple[str, ...]  # the services the applied compose file declares
    # the jobs done for the run on the box (observe: core.lifecycle.jobs.done_jobs), never restored
    jobs: tuple[str, ...] = ()
    # service -> the apply that made its container (labels ``revision/deploy-id``): what runs
    # is compared with it (``core.lifecycle.services.foreign``); empty: not known, not compared
    made_by: Mapping[str, str] = field(default_factory=dict)
    declared: tuple[str, ...] = ()  # every service the applied revision has (jobs too)


@dataclass(frozen=True)
class Facts:
    checkin_status: int  # 200, 204 or 304
    desired_revision: str | None
    applied: AppliedFacts | None
    running: tuple[ServiceState, ...] | None = (
        None  # the applied project's containers; None = not looked
    )
    bundle: Mapping[str, Any] | None = field(default=None, repr=False)  # the 200 answer's bundle
    held: Held | None = None  # a failed revision held or backing off (held.json)
    now: float = 0.0  # the tick's clock, for the backoff
    retry: bool = False  # ``apply --once --retry``: the operator overrides a hold or a backoff
    locks: tuple[
        Lock, ...
    ] = ()  # valid update locks (``core.lifecycle.gates``): pull, do not recreate
    suspended: Suspended | None = None  # an active ``monky-deployd suspend``
    interrupted: Journal | None = None  # the step a killed tick left behind (journal.json)
    # a new revision's gate (core.lifecycle.schedule): the first sight kept (waiting.json), this
    # box's
    # identity for its rollout place, the update windows; ``retry`` overrides both
    seen: schedule.Seen | None = None
    identity: str = ""
    windows: tuple[schedule.Window, ...] = ()
    # ``(service, why)`` for each held host path of the applied revision that no longer leads
    # where it did at its up, or that a container can now write on the way to
    # (``adapters.box.docker.hostpath.held_now``; "" for a top-level volume's device: every service)
    moved: tuple[tuple[str, str], ...] = ()
