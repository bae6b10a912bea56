"""The steps that change the box, each a frozen dataclass carrying its data and naming its phase.

Once ``core.lifecycle.decide.decide`` chose an apply or a restore and every check of it has passed
(``core.admission.prepare``), the functions here list the steps, in order:

    Apply:    Stage -> Pull -> [Down the previous project] -> Up -> Verify -> Commit
    Restore:  Up (pinned images when the release has them; no pull) -> Verify
    Rollback: [Down the failed project] -> Up the LKG pinned (no pull) -> Verify
              (after a failed Down, Up or Verify; ``core.lifecycle.recovery`` decides)

``agent.apply.steps`` holds one executor per step type; ``agent.tick.tick`` runs them, each inside
its phase. Nothing here knows how a step is carried out. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from monky_deployd.core.lifecycle.facts import AppliedFacts
from monky_deployd.core.lifecycle.jobs import awaited_jobs
from monky_deployd.core.lifecycle.plans import Apply, Restore
from monky_deployd.core.render.registry_cred import Credential

if TYPE_CHECKING:  # (core.records.reasons stays off the no-op tick's imports)
    from monky_deployd.core.records.reasons import Fingerprint


# core.admission.builds.Copy's fields (service, key, source, dest, file): that room is above
BuildCopies = tuple[tuple[str, str, str, str, bool], ...]


@dataclass(frozen=True)
class Stage:
    """Write the registry credential (``<state_dir>/docker/config.json``) and the revision's
    project directory (compose file + ``.env``)."""

    revision: str
    compose: str = field(repr=False)
    env_text: str = field(repr=False)
    registry_host: str | None
    credential: Credential | None
    labels: str = ""  # the compose override of the containers' labels (core.records.reasons)
    model: str = field(default="", repr=False)  # the judged model (core.admission.artifact.text)
    builds: BuildCopies = ()  # what its builds read, copied into it (core.admission.builds)
    phase: ClassVar[str] = "stage"


@dataclass(frozen=True)
class Pull:
    """Pull the revision's images; with a ``deploy_id`` (labels on), then give new labels only
    to the services the pull changed (``core.records.reasons.service_labels``: config hash,
    image)."""

    project: str
    revision: str
    registry_host: str | None
    deploy_id: str = ""
    phase: ClassVar[str] = "pull"


@dataclass(frozen=True)
class Down:
    """Stop the previous project (its containers and networks; volumes stay)."""

    project: str
    revision: str
    phase: ClassVar[str] = "down"


@dataclass(frozen=True)
class Up:
    """``docker compose up``; ``pinned``: with the release's image pins and ``--pull never``;
    ``services``: only those, ``--no-deps`` (a restore: a finished job is never run again)."""

    project: str
    revision: str
    pinned: bool = False
    services: tuple[str, ...] = ()
    every: tuple[str, ...] = ()  # a whole project's up: its services (a done job is left out)
    phase: ClassVar[str] = "up"


@dataclass(frozen=True)
class Verify:
    """Watch the project's containers until they prove themselves (``core.lifecycle.verify``)."""

    project: str
    revision: str
    services: tuple[str, ...]
    awaited: tuple[str, ...] = ()  # jobs that must exit 0 (service_completed_successfully)
    phase: ClassVar[str] = "verify"


@dataclass(frozen=True)
class Rollback:
    """Bring the last-known-good release back from its pinned images (no pull): down the failed
    project first when it is another one, then ``up`` the LKG's compose file with its pins."""

    failed_project: str
    failed_revision: str
    project: str
    revision: str
    phase: ClassVar[str] = "rollback"


@dataclass(frozen=True)
class Commit:
    """Record the verified revision: its release (the images it runs, pinned), applied.json
    (it is now the LKG), forget a hold, prune other revision directories, refresh host facts."""

    revision: str
    project: str
    services: tuple[str, ...]
    compose_sha256: str = ""
    env_sha256: str = ""
    previous: str | None = None  # the LKG before it (kept on disk one apply longer)
    deploy_id: str = ""
    fingerprint: Fingerprint | None = None  # what it rendered, by hash (applied.json)
    phase: ClassVar[str] = "commit"


BoxStep = Stage | Pull | Down | Up | Verify | Rollback | Commit


@dataclass(frozen=True)
class Ready:
    """An apply whose every check passed (``core.admission.prepare``): what the box steps need."""

    revision: str
    project: str
    compose: str = field(repr=False)
    env_text: str = field(repr=False)
    services: tuple[str, ...]
    registry_host: str | None
    credential: Credential | None
    on_failure: str = "rollback"
    deploy_id: str = ""  # the tick applying it (the containers' deploy-id label)
    labels: str = field(default="", repr=False)  # core.records.reasons.labels_override
    fingerprint: Fingerprint | None = None  # set by the tick once the checks passed
    model: str = field(default="", repr=False)  # what compose runs (core.admission.artifact.text)
    builds: BuildCopies = ()  # the copies its builds read (core.admission.builds.Copy)


def apply_steps(plan: Apply, ready: Ready) -> tuple[BoxStep, ...]:
    """The box steps of an apply, in order."""
    steps: list[BoxStep] = [
        Stage(
            ready.revision,
            ready.compose,
            ready.env_text,
            ready.registry_host,
            ready.credential,
            ready.labels,
            ready.model,
            ready.builds,
        ),
        Pull(ready.project, ready.revision, ready.registry_host, ready.deploy_id),
    ]
    if plan.locks:  # an update lock: have the images ready, recreate nothing
        return tuple(steps)
    prev = plan.previous
    if prev is not None and prev.project != ready.project:
        steps.append(Down(prev.project, prev.revision))
    steps += [
        Up(ready.project, ready.revision, every=ready.services),
        Verify(ready.project, ready.revision, ready.services, awaited_jobs(ready.compose)),
        Commit(
            ready.revision,
            ready.project,
            ready.services,
            _sha256(ready.compose),
            _sha256(ready.env_text),
            prev.revision if prev is not None else None,
            ready.deploy_id,
            ready.fingerprint,
        ),
    ]
    return tuple(steps)


def restore_steps(
    plan: Restore, pinned: bool = False, *, only_missing: bool = True
) -> tuple[BoxStep, ...]:
    """The box steps of a restore: ``up`` the applied revision again, no pull (pinned to the
    images its release recorded, when it has a release), then verify it like an apply. Only the
    services that are down are brought up, without their dependencies: a job that finished is
    not run again (``core.lifecycle.jobs``). After a killed tick (``only_missing`` False), or with
    orphans (another revision's services), the whole project comes up, orphans removed (and
    the jobs done for their config left out)."""
    applied = plan.applied
    return (
        Up(
            applied.project,
            applied.revision,
            pinned,
            plan.missing if only_missing and not plan.orphans else (),
            every=tuple(dict.fromkeys([*applied.services, *applied.jobs])),
        ),
        Verify(applied.project, applied.revision, applied.services),
    )


def rollback_steps(failed: Ready, lkg: AppliedFacts) -> tuple[BoxStep, ...]:
    """The box steps that bring the LKG back after ``failed`` changed the box, then verify it."""
    return (
        Rollback(failed.project, failed.revision, lkg.project, lkg.revision),
        Verify(lkg.project, lkg.revision, lkg.services),
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
