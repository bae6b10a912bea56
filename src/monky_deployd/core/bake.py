"""The bake: a committed revision becomes the last-known-good only once it stayed up. Pure.

``Commit`` writes applied.json (the revision is applied) and, with ``verify.bake_s`` > 0, a
``Bake`` record (``bake.json``): the containers verify saw (each run's ``StartedAt``), when the
bake ends, and the last-known-good before it (its applied.json record), kept on disk with its
release and images until the bake is over. No daemon watches it: every tick while the record
exists inspects the project's containers and ``judge`` decides.

    what the tick sees                                     verdict
    -----------------------------------------------------  ------------------------------------
    a long-running container exited, died, restarted       ``Fault``: when it happened before
    (``StartedAt`` moved), is restarting or unhealthy,     ``until``, the revision fails: roll
    or is gone; a job (``core.lifecycle``) that exited     back to the previous LKG and hold it
    non-zero                                               (none: reported, never promoted)
    the same, but it happened at or after ``until``        ``Promote``, then drift: the tick's
    (the engine's FinishedAt / health log say when)        plan restores it with backoff
    nothing wrong, ``now`` >= ``until``                    ``Promote``: the record goes
    nothing wrong yet                                      ``Baking``: seconds left

A fault whose time the engine does not say counts at ``now``. A job that exited 0 is done.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from monky_deployd.core import lifecycle
from monky_deployd.core.verify import ContainerObs


def _no_runs() -> dict[str, str]:
    return {}


def _no_names() -> list[str]:
    return []


@dataclass(frozen=True)
class Bake:
    """``bake.json``: a committed revision still proving itself."""

    revision: str
    project: str
    since: float  # the commit (the tick's clock)
    until: float  # since + verify.bake_s
    # "<service>#<container id>" -> the StartedAt of the run verify passed
    runs: dict[str, str] = field(default_factory=_no_runs)
    jobs: list[str] = field(default_factory=_no_names)  # services that may finish (exit 0)
    # the last-known-good's applied.json record before this revision (None: there was none)
    previous: dict[str, Any] | None = None
    failed: str = ""  # the bake failed with no LKG to go back to: never promoted (the fault)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Bake:
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, dict):
            try:
                bake = Bake(**data)
            except TypeError:
                bake = None
            if bake is not None and _well_typed(bake):
                return bake
        raise ValueError("not a bake record")

    @property
    def previous_revision(self) -> str | None:
        rev = (self.previous or {}).get("revision")
        return rev if isinstance(rev, str) and rev else None


def _well_typed(b: Bake) -> bool:
    return (
        isinstance(b.revision, str)
        and isinstance(b.project, str)
        and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in (b.since, b.until)
        )
        and isinstance(b.runs, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in b.runs.items())
        and isinstance(b.jobs, list)
        and all(isinstance(j, str) for j in b.jobs)
        and (b.previous is None or isinstance(b.previous, dict))
        and isinstance(b.failed, str)
    )


def start(
    revision: str,
    project: str,
    observed: tuple[ContainerObs, ...],
    *,
    now: float,
    bake_s: float,
    previous: dict[str, Any] | None,
) -> Bake:
    """The record a commit writes: every container verify passed that still runs."""
    runs = {f"{c.service}#{c.container_id}": c.started_at for c in observed if c.state == "running"}
    jobs = sorted({c.service for c in observed if lifecycle.may_finish(c.restart_policy)})
    return Bake(revision, project, now, now + bake_s, runs, jobs, previous)


@dataclass(frozen=True)
class Baking:
    left_s: float


@dataclass(frozen=True)
class Promote:
    drift: str = ""  # a fault after the bake ended (the plan restores it): its description


@dataclass(frozen=True)
class Fault:
    service: str
    state: str  # exited (N) | restarted | restarting | dead | unhealthy | missing
    at: float  # when it happened (the engine's word, else the tick's now)
    unhealthy: bool
    detail: str


Verdict = Baking | Promote | Fault


def judge(bake: Bake, observed: tuple[ContainerObs, ...], now: float) -> Verdict:
    """The bake's verdict on this tick's observation of the project's containers."""
    by_id: Mapping[str, ContainerObs] = {c.container_id: c for c in observed}
    faults: list[Fault] = []
    for key, started in sorted(bake.runs.items()):
        service, _, cid = key.partition("#")
        c = by_id.get(cid)
        fault = _fault(service, c, started, service in bake.jobs, now)
        if fault is not None:
            faults.append(fault)
    inside = [f for f in faults if f.at < bake.until]
    if inside:
        return min(inside, key=lambda f: f.at)
    if faults:
        first = min(faults, key=lambda f: f.at)
        return Promote(f"{first.service} {first.state}")
    if now >= bake.until:
        return Promote()
    return Baking(bake.until - now)


def _fault(
    service: str, c: ContainerObs | None, started: str, job: bool, now: float
) -> Fault | None:
    if c is None:
        return Fault(service, "missing", now, False, f"service={service} state=missing")
    detail = f"service={service} state={c.state} exit_code={c.exit_code} restart={c.restart_policy}"
    if c.health:
        detail += f" health={c.health}"
    if c.health_output:
        detail += f" health_output={c.health_output.strip()[-400:]}"
    at = c.finished_at or now
    if c.state in ("exited", "dead"):
        if job and lifecycle.finished(c.state, c.exit_code, c.restart_policy):
            return None
        word = f"exited ({c.exit_code})" if c.state == "exited" else c.state
        return Fault(service, word, at, False, detail)
    if c.state == "restarting" or c.started_at != started:
        return Fault(service, "restarted", at, False, detail)
    if c.health == "unhealthy":
        return Fault(service, "unhealthy", c.unhealthy_since or now, True, detail)
    return None
