"""The bake: a committed revision becomes the last-known-good only once it stayed up. Pure.

``Commit`` writes applied.json (the revision is applied) and, with ``verify.bake_s`` > 0, a
``Bake`` record (``bake.json``): the container runs verify saw (each run's ``StartedAt``, its
``RestartCount``, the labels of the apply that made it), when the bake ends, and the
last-known-good before it (its applied.json record), kept on disk with its release and images
until the bake is over. No daemon watches it: every tick while the record exists inspects the
project's containers, reads the engine's events since the bake began, and ``judge`` decides.

The bake judges the revision, not the box. Fact by fact (OPERATIONS.md, "The bake"):

    the engine's fact about a recorded run                 whose doing  what the bake does
    -----------------------------------------------------  -----------  ---------------------------
    ``State.OOMKilled``                                    revision     ``Fault`` (oom-killed)
    ``StartedAt`` moved and ``RestartCount`` grew          revision     ``Fault`` (its restart
                                                                        policy restarted it)
    ``State.Status`` ``restarting``                        revision     ``Fault``
    ``retries`` failed probes in a row in the health log,  revision     ``Fault`` (unhealthy), the
    a ``health_status: unhealthy`` event, or unhealthy                  spell between ticks too
    exited non-zero, and the engine's events show its      revision     ``Fault`` (exited (N))
    ``die`` with no ``kill`` before it (nobody stopped it)
    exited, and a ``kill`` event precedes its ``die``      outside      drift: restored by the
    (``docker stop``, ``kill``, ``restart``, ``rm -f``)                 tick's plan; the new run
    the container is gone (``docker rm -f``, a rollback    outside      is adopted once it runs
    or restore recreated it)                                            (same labels); the
    ``StartedAt`` moved, ``RestartCount`` did not grow     outside      bake's clock goes on (it
    (``docker restart``/``start``, an engine restart or                 does not restart): the
    a reboot: the engine resets the count)                              new run is watched until
    exited, and the events do not reach back to the run's  cannot tell  ``until``
    ``start`` (an engine restart empties them, a busy                   drift (the side that
    engine rolls them over): OOM aside, the engine cannot               never holds a good
    tell a crash from a stop                                            revision)
    a job (``core.lifecycle.jobs``) that exited 0               done         nothing

A revision's own fault before ``until`` fails it (roll back to the previous LKG and hold it;
none: reported, never promoted); at or after ``until`` it is drift (``Promote``, then the tick's
plan restores it). The bake promotes once ``now`` >= ``until`` and every recorded service has a
run it watched (or a finished job); a service removed from outside and not yet back keeps it
baking (``Baking``, with what it waits for). A fault whose time the engine does not say counts
at ``now``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from monky_deployd.core.lifecycle import jobs as lifecycle
from monky_deployd.core.lifecycle.services import EngineEvent
from monky_deployd.core.lifecycle.verify import ContainerObs

# exit codes a signal gives (128 + n): what a stop, a kill or an engine shutdown leaves
SIGNAL_EXITS = range(129, 160)


def _no_runs() -> dict[str, str]:
    return {}


def _no_counts() -> dict[str, int]:
    return {}


def _no_times() -> dict[str, float]:
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
    # per run: its RestartCount when recorded, and since when the bake watches it
    restarts: dict[str, int] = field(default_factory=_no_counts)
    watched: dict[str, float] = field(default_factory=_no_times)
    # service -> which apply made its run (``ContainerObs.made_by``: its labels)
    made_by: dict[str, str] = field(default_factory=_no_runs)
    want: dict[str, int] = field(default_factory=_no_counts)  # service -> its runs at the commit

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
        and isinstance(b.restarts, dict)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in b.restarts.values())
        and isinstance(b.watched, dict)
        and all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in b.watched.values()
        )
        and isinstance(b.made_by, dict)
        and all(isinstance(v, str) for v in b.made_by.values())
        and isinstance(b.want, dict)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in b.want.values())
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
    live = [c for c in observed if c.state == "running"]
    runs = {_key(c): c.started_at for c in live}
    jobs = sorted({c.service for c in observed if lifecycle.may_finish(c.restart_policy)})
    return Bake(
        revision,
        project,
        now,
        now + bake_s,
        runs,
        jobs,
        previous,
        restarts={_key(c): c.restart_count for c in live},
        watched={_key(c): now for c in live},
        made_by={c.service: c.made_by for c in live if c.made_by},
        want=_count(runs),
    )


def _count(runs: Mapping[str, str]) -> dict[str, int]:
    """service -> how many of ``runs`` (``<service>#<container id>``) are of it."""
    out: dict[str, int] = {}
    for key in runs:
        service = key.partition("#")[0]
        out[service] = out.get(service, 0) + 1
    return out


def _key(c: ContainerObs) -> str:
    return f"{c.service}#{c.container_id}"


@dataclass(frozen=True)
class Baking:
    left_s: float
    waiting_for: str = ""  # services removed or stopped from outside, not back yet


@dataclass(frozen=True)
class Promote:
    drift: str = ""  # a fault after the bake ended (the plan restores it): its description


@dataclass(frozen=True)
class Fault:
    service: str
    state: str  # exited (N) | restarted | restarting | dead | unhealthy | oom-killed
    at: float  # when it happened (the engine's word, else the tick's now)
    unhealthy: bool
    detail: str
    fact: str = ""  # the engine's fact it rests on, in words


Verdict = Baking | Promote | Fault


@dataclass(frozen=True)
class Judged:
    """The verdict, the record with the runs it adopted (the same record when none), and the
    outside events it saw, each in a sentence naming the fact it rests on."""

    verdict: Verdict
    record: Bake
    drift: tuple[str, ...] = ()


def judge(
    bake: Bake,
    observed: tuple[ContainerObs, ...],
    now: float,
    events: Sequence[EngineEvent] = (),
) -> Judged:
    """The bake's verdict on this tick's observation of the project's containers and the
    engine's events since the bake began."""
    by_id: Mapping[str, ContainerObs] = {c.container_id: c for c in observed}
    runs, restarts, watched = dict(bake.runs), dict(bake.restarts), dict(bake.watched)
    faults: list[Fault] = []
    drift: list[str] = []
    for key, started in sorted(bake.runs.items()):
        service, _, cid = key.partition("#")
        c = by_id.get(cid)
        if c is None:
            drift.append(f"{service}'s container {cid[:12]} is gone (removed from outside)")
            _drop(key, runs, restarts, watched)
            continue
        since = watched.get(key, bake.since)
        if c.oom_killed:
            faults.append(_fault(c, "oom-killed", c.finished_at or now, "State.OOMKilled is true"))
            continue
        if c.started_at != started:
            was, count = restarts.get(key, 0), c.restart_count
            if count > was:
                fact = f"StartedAt moved and RestartCount {was} -> {count}: its restart policy"
                faults.append(_fault(c, "restarted", c.finished_at or now, fact))
                continue
            drift.append(
                f"{service} was started again from outside (StartedAt moved, RestartCount "
                f"{was} -> {count}: `docker restart`/`start`, an engine restart or a reboot)"
            )
            runs[key], restarts[key], watched[key], since = c.started_at, count, now, now
        fault, outside = _own(bake, c, since, now, events)
        if fault is not None:
            faults.append(fault)
        elif outside:
            drift.append(outside)
            _drop(key, runs, restarts, watched)
    have = _count(runs)
    lost = {s: n - have.get(s, 0) for s, n in (bake.want or _count(bake.runs)).items()}
    for service, count in sorted(lost.items()):
        for c in _adoptable(bake, observed, runs, service)[: max(0, count)]:
            key = _key(c)
            runs[key], restarts[key], watched[key] = c.started_at, c.restart_count, now
            drift.append(f"{service}'s new container {c.container_id[:12]} runs: watched")
            lost[service] -= 1
    record = replace(bake, runs=runs, restarts=restarts, watched=watched)
    if not bake.want:  # a record an older agent wrote: what it watched at first is the want
        record = replace(record, want=_count(bake.runs))
    return Judged(_verdict(bake, faults, lost, now), record, tuple(drift))


def _verdict(bake: Bake, faults: list[Fault], lost: Mapping[str, int], now: float) -> Verdict:
    inside = [f for f in faults if f.at < bake.until]
    if inside:
        return min(inside, key=lambda f: f.at)
    if faults:
        first = min(faults, key=lambda f: f.at)
        return Promote(f"{first.service} {first.state}")
    away = sorted(s for s, n in lost.items() if n > 0)
    if now >= bake.until and not away:
        return Promote()
    return Baking(max(0.0, bake.until - now), ", ".join(away))


def _drop(key: str, *maps: dict[str, Any]) -> None:
    for m in maps:
        m.pop(key, None)


def _adoptable(
    bake: Bake, observed: tuple[ContainerObs, ...], runs: Mapping[str, str], service: str
) -> list[ContainerObs]:
    """The service's running containers the bake does not watch yet, made by the recorded
    apply (their labels: a restore's or a rollback's recreation keeps them, another revision's
    container has others; a record without them: any of the service)."""
    want = bake.made_by.get(service, "")
    return [
        c
        for c in observed
        if c.service == service
        and c.state == "running"
        and _key(c) not in runs
        and (not want or c.made_by == want)
    ]


def _own(
    bake: Bake, c: ContainerObs, since: float, now: float, events: Sequence[EngineEvent]
) -> tuple[Fault | None, str]:
    """A run's own fault, or (None, the outside event that stopped it), or (None, "")."""
    mine = [e for e in events if e.container_id == c.container_id]
    if c.state in ("exited", "dead"):
        if c.service in bake.jobs and lifecycle.finished(c.state, c.exit_code, c.restart_policy):
            return None, ""
        word = f"exited ({c.exit_code})" if c.state == "exited" else c.state
        at = c.finished_at or now
        started = [e.at for e in mine if e.action == "start"]
        died = [e for e in mine if e.action == "die"]
        if started and died:  # the engine's log reaches back to the run: it tells who stopped it
            last = died[-1]
            killed = any(e.action == "kill" and started[-1] <= e.at <= last.at for e in mine)
            if killed:
                return None, f"{c.service} was stopped from outside (kill event before its die)"
            if c.exit_code != 0 or c.state == "dead":
                fact = f"its die event (exit code {c.exit_code}) has no kill before it"
                return _fault(c, word, at, fact), ""
            return None, f"{c.service} exited 0 on its own (not a job): restored"
        return None, (
            f"{c.service} is {word}, and the engine's events do not reach back to its start "
            "(an engine restart or a busy engine): cannot tell a crash from a stop, drift"
        )
    if c.state == "restarting":
        return _fault(c, "restarting", c.finished_at or now, "its restart policy restarts it"), ""
    if c.health == "unhealthy":
        at = c.unhealthy_since or now
        return _fault(c, "unhealthy", at, "its healthcheck reports unhealthy"), ""
    spell = [
        e.at for e in mine if e.action.startswith("health_status: unhealthy") and e.at >= since
    ]
    if spell:
        fact = "a health_status: unhealthy event since the bake began"
        return _fault(c, "unhealthy", spell[0], fact), ""
    streak = _failing_streak(c.health_log, since, c.health_retries)
    if streak is not None:
        fact = f"{c.health_retries} failed probes in a row in the health log"
        return _fault(c, "unhealthy", streak, fact), ""
    return None, ""


def _failing_streak(log: Sequence[tuple[float, int]], since: float, retries: int) -> float | None:
    """When a run of ``retries`` failed probes that began at or after ``since`` reached
    ``retries`` (the engine then called it unhealthy); None when the log shows none."""
    run = 0
    for start, code in log:
        if start < since:
            continue
        run = run + 1 if code != 0 else 0
        if run >= max(1, retries):
            return start
    return None


def _fault(c: ContainerObs, state: str, at: float, fact: str) -> Fault:
    detail = (
        f"service={c.service} state={c.state} exit_code={c.exit_code} restart={c.restart_policy}"
    )
    detail += f" restart_count={c.restart_count}"
    if c.health:
        detail += f" health={c.health}"
    if c.health_output:
        detail += f" health_output={c.health_output.strip()[-400:]}"
    return Fault(c.service, state, at, state == "unhealthy", detail, fact)
