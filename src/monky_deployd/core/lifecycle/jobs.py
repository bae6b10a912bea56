"""What each service of a compose project is: long-running, or a job. Pure: no I/O, no clock.

    the service                                         what it is
    ------------------------------------------------    ----------------------------------------
    another service depends on it with                  a job that must finish: verify waits for
    ``condition: service_completed_successfully``       it to exit 0 (running is not enough)
    restart policy ``no`` (compose's default) or        a job once its containers exited 0: done
    ``on-failure``, and every container exited 0        for this revision, never restored,
                                                        never re-run by a restore; an ``up`` of
                                                        its config keeps it (not started again)
    restart policy ``always`` or ``unless-stopped``     long-running: it must run (and be healthy
                                                        when it has a healthcheck)
    any container that exited non-zero, is ``dead``     a fault (in verify and the bake: of the
    or restarted                                        revision; after the bake: drift)

The restart policy is the engine's (``HostConfig.RestartPolicy``: what the container really
runs with); ``service_completed_successfully`` comes from the compose file. A ``restart: "no"``
service that is still running when verify settles is watched like a long-running one until it
exits: exit 0 makes it a finished job, anything else a fault (OPERATIONS.md, "Services and
jobs").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from monky_deployd.core.lifecycle.services import EngineEvent, ServiceState, same_apply

# restart policies under which an exit 0 is the end of the work, not a crash
FINISHING_POLICIES = frozenset({"no", "", "on-failure"})


def may_finish(restart_policy: str) -> bool:
    """Whether a container with this restart policy may exit 0 as designed (a job)."""
    return restart_policy in FINISHING_POLICIES


def finished(state: str, exit_code: int | None, restart_policy: str) -> bool:
    """A job's container that ran to completion: exited 0 under ``no`` or ``on-failure``."""
    return state == "exited" and exit_code == 0 and may_finish(restart_policy)


def awaited_jobs(compose: str) -> tuple[str, ...]:
    """The services another service waits for with ``condition: service_completed_successfully``
    (sorted): jobs by declaration. A compose file that does not parse names none."""
    try:
        doc = yaml.safe_load(compose)
    except yaml.YAMLError:
        return ()
    defs = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(defs, dict):
        return ()
    found: set[str] = set()
    for d in defs.values():
        deps = d.get("depends_on") if isinstance(d, dict) else None
        if isinstance(deps, dict):
            found |= {
                str(name)
                for name, how in deps.items()
                if isinstance(how, dict)
                and how.get("condition") == "service_completed_successfully"
            }
    return tuple(sorted(found))


def service_states(
    expected: Iterable[str],
    jobs: Iterable[str],
    containers: Iterable[tuple[str, str, str, int | None]],
) -> Mapping[str, str]:
    """Each service of ``expected`` and ``jobs`` -> ``ok`` | ``done`` | a fault word, from its
    containers as ``(service, state, health, exit_code)`` (``exit_code`` None: unknown).

    ``done``: a job (``jobs``: restart ``no``/``on-failure``) whose every container exited 0,
    or was created and never started (a rollback's or restore's, for a config whose run already
    ran to completion: ``kept_jobs``).
    ``ok``: every container running, and healthy or without a healthcheck. Otherwise the first
    fault: ``missing`` (no container), ``unhealthy``, ``starting`` (healthcheck not passed yet),
    ``exited (N)``, or the engine's state word (``restarting``, ``dead``, ``paused``...)."""
    by: dict[str, list[tuple[str, str, int | None]]] = {}
    for service, state, health, code in containers:
        by.setdefault(service, []).append((state, health, code))
    job_set = set(jobs)
    out: dict[str, str] = {}
    for name in dict.fromkeys([*expected, *sorted(job_set)]):
        found = by.get(name, [])
        if not found:
            out[name] = "done" if name in job_set and name not in expected else "missing"
            continue
        if name in job_set and all(_ran_or_kept(s, c) for s, _, c in found):
            out[name] = "done"
            continue
        out[name] = next((w for w in (_fault(s, h, c) for s, h, c in found) if w), "ok")
    return out


def _ran_or_kept(state: str, code: int | None) -> bool:
    """A done job's container: its run exited 0, or it was created and never started."""
    return (state == "exited" and code == 0) or state == "created"


def _fault(state: str, health: str, code: int | None) -> str:
    if state == "running":
        return health if health in ("unhealthy", "starting") else ""
    if state == "exited":
        return "exited" if code is None else f"exited ({code})"
    return state or "unknown"


def not_ok(states: Mapping[str, str]) -> tuple[str, ...]:
    """The services of ``service_states`` that are neither running as they should nor done."""
    return tuple(name for name, word in states.items() if word not in ("ok", "done"))


def describe(states: Mapping[str, str], names: Iterable[str]) -> str:
    """``web unhealthy, worker exited (1)``: the named services with their fault word."""
    return ", ".join(f"{n} {states[n]}" for n in names if n in states)


def as_view(states: Mapping[str, Any]) -> list[dict[str, str]]:
    """``[{"service", "state"}]`` in name order (status --json, the report)."""
    return [{"service": k, "state": str(v)} for k, v in sorted(states.items())]


# -- a job runs once per config ----------------------------------------------------------------
#
# A job is known by what its run did: it ran to completion on its own (exit 0, restart no or
# on-failure, nobody stopped it). applied.json's ``done`` keeps, per job, the apply that made
# that run (its labels ``revision/deploy-id``: an apply that does not change the service keeps
# its labels, so one label pair is one config). A service stopped from outside that exits 0
# (``docker stop`` of a ``restart: "no"`` service) never becomes a job: it is drift, restored;
# so is another apply's container under the service's name (a rollback a lock stopped). An
# ``up`` of a done job's config keeps it (``kept_jobs``): left out, or its container made again
# with that config and never started (``created``).


def done_jobs(done: Mapping[str, str], running: Sequence[ServiceState]) -> tuple[str, ...]:
    """The services of ``done`` whose containers on the box were all made by the apply ``done``
    records for them and ran to completion (exited 0) or never started (``created``: a
    rollback's or a restore's, for that config): done, never restored nor run again."""
    by: dict[str, list[ServiceState]] = {}
    for c in running:
        by.setdefault(c.name, []).append(c)
    return tuple(
        sorted(
            name
            for name, made in done.items()
            if by.get(name)
            and all(_ran_or_kept(c.state, c.exit_code) and c.made_by == made for c in by[name])
        )
    )


def undecided(
    jobs: Iterable[str],
    done: Mapping[str, str],
    running: Sequence[ServiceState],
    made_by: Mapping[str, str] | None = None,
) -> tuple[ServiceState, ...]:
    """Exited-0 containers of services that may finish (``jobs``) which ``done`` does not
    account for: whether each ran to completion or was stopped, the engine's events tell.
    ``made_by`` (service -> ``revision/deploy-id``, applied.json's labels): a container another
    apply made is not a run of the applied config (``core.lifecycle.services.foreign``: drift),
    never undecided; a service with no label there is not judged by it."""
    may, made = set(jobs), made_by or {}
    return tuple(
        c
        for c in running
        if c.name in may
        and c.state == "exited"
        and c.exit_code == 0
        and done.get(c.name) != c.made_by
        and (not made.get(c.name) or same_apply(made[c.name], c.made_by))
    )


def ran_to_completion(container_id: str, events: Sequence[EngineEvent]) -> bool:
    """Whether the engine's events show the container's last run end on its own: its ``start``
    and its ``die`` (exit 0) with no ``kill`` between them (a stop, a kill, a restart, a removal
    from outside send one). False when the events do not reach back to its start (an engine
    restart empties them): the engine cannot tell, and a service that may be down is restored
    rather than taken for a finished job."""
    mine = [e for e in events if e.container_id == container_id]
    starts = [e.at for e in mine if e.action == "start"]
    dies = [e for e in mine if e.action == "die" and (not starts or e.at >= starts[-1])]
    if not starts or not dies:
        return False
    last = dies[-1]
    killed = any(e.action == "kill" and starts[-1] <= e.at <= last.at for e in mine)
    return last.exit_code == 0 and not killed


@dataclass(frozen=True)
class Kept:
    """A job an ``up`` leaves alone: done for the very config the ``up`` would give it."""

    service: str
    made_by: str  # the apply whose run ran to completion (applied.json's ``done``)
    # its container is gone or another apply's (a failed revision's new config): created again
    # with the done config (``up --no-start``), never started
    recreate: bool


def kept_jobs(
    done: Mapping[str, str], wanted: Mapping[str, str], running: Sequence[ServiceState]
) -> tuple[Kept, ...]:
    """The jobs an ``up`` leaves out: those ``done`` records for the apply ``wanted`` says would
    make them now (``revision/deploy-id`` per service: the labels this apply gives them, or the
    last-known-good's own on a restore or rollback). A job whose config changed is not kept: it
    runs once. A kept job whose containers are not all the done apply's is ``recreate``d."""
    by: dict[str, list[ServiceState]] = {}
    for c in running:
        by.setdefault(c.name, []).append(c)
    return tuple(
        Kept(name, made, not by.get(name) or any(c.made_by != made for c in by[name]))
        for name, made in sorted(done.items())
        if made and wanted.get(name) == made
    )
