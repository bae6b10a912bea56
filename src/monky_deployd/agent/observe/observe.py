"""Observe: what the box and tenancy say before a decision, read once, the same for every command.

    read_local(state)            applied.json, held.json and waiting.json      (the state dir)
    checkin_body(host, local)    the check-in's body: the revision that runs and its outcome
                                 (and ``waiting``, contract v1.2: ``agent.observe.pace``)
    observe(cfg, state, ...)     + the check-in's answer, the project's containers (only when
                                 the decision needs them), the update locks, the suspend
                                 record, a killed tick's journal: an ``Observation``
                                 and the applied revision's held host paths checked again
                                 (``adapters.box.docker.hostpath.held_now``: a few lstat calls)
    Observation.facts(retry)     the pure decision's input (``core.lifecycle.facts.Facts``)
    settle(state, obs)           the observation's side effects, in one place: a pre-empted
                                 hold dropped, an expired suspend removed, each lock and the
                                 killed tick named in the journal
    (``agent.observe.recorded``: what the state and lock dirs say, ``status``'s and the metrics' one
    typed view, off the tick's path)

``observe`` writes nothing: the tick calls ``settle`` after it, ``plan`` and ``status`` never
do (they leave the state dir byte-identical).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from monky_deployd.adapters.box import locks
from monky_deployd.adapters.box.docker import docker_api, hostpath
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.observe.locklog import log_locks
from monky_deployd.config import Config
from monky_deployd.core.lifecycle import gates, recovery
from monky_deployd.core.lifecycle import jobs as lifecycle
from monky_deployd.core.lifecycle.decide import needs_container_check
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records import tickrecord as report
from monky_deployd.core.records.applied import Applied
from monky_deployd.core.wire import checkin as wire

if TYPE_CHECKING:
    from monky_deployd.adapters.net.tenancy import Checkin
    from monky_deployd.core.lifecycle import schedule
    from monky_deployd.core.records.held import Held
    from monky_deployd.core.records.journal import Journal
    from monky_deployd.core.records.suspend import Suspended

log = logging.getLogger("monky_deployd")

# how far back the engine's events are asked for when a job's exit needs telling apart
EVENTS_S = 86400.0


@dataclass(frozen=True)
class Local:
    """What the state dir says runs (applied.json), what failed here (held.json) and a new
    revision's first sight (waiting.json; None once its revision is the applied one)."""

    record: Applied | None
    held: Held | None
    stored_waiting: schedule.Seen | None = None  # waiting.json as it is

    @property
    def waiting(self) -> schedule.Seen | None:
        """waiting.json, unless its revision is the applied one (``agent.observe.pace.keep`` removes
        the file then)."""
        w, r = self.stored_waiting, self.record
        return None if w is not None and r is not None and w.revision == r.revision else w

    @property
    def applied(self) -> AppliedFacts | None:
        r = self.record
        if r is None:
            return None
        made = {s: f"{lb.revision}/{lb.deploy_id}" for s, lb in r.service_labels.items()}
        every = tuple(dict.fromkeys([*r.services, *r.jobs, *r.service_labels]))
        return AppliedFacts(r.revision, r.project, tuple(r.services), tuple(r.jobs), made, every)


def read_local(state: StateDir) -> Local:
    """applied.json, held.json and waiting.json (each None when absent or unreadable)."""
    return Local(state.read_applied(), state.read_held(), state.read_waiting())


def checkin_body(host: wire.HostFacts, local: Local) -> wire.CheckinRequest:
    """The check-in: this agent, ``host``, and the revision that runs with its outcome."""
    from monky_deployd.agent.observe import pace

    record = local.record
    return wire.CheckinRequest.of(
        host,
        record.revision if record else None,
        recovery.checkin_outcome(local.held),
        pace.checkin_ref(local.waiting),
    )


@dataclass(frozen=True)
class Observation:
    """One read-only look at the box and tenancy's answer; ``held`` is what the decision sees
    (a hold tenancy no longer wants is pre-empted: ``settle`` drops it from the state dir)."""

    answer: Checkin
    local: Local
    held: Held | None
    running: tuple[ServiceState, ...] | None  # the applied project's containers; None: not looked
    locks: tuple[gates.Lock, ...]  # in force
    stale_locks: tuple[gates.Lock, ...]  # past their TTL: ignored
    suspend: Suspended | None  # the suspend record, active or not
    interrupted: Journal | None
    now: float
    identity: str = ""  # the box's env: its place in a rollout (core.lifecycle.schedule)
    windows: tuple[schedule.Window, ...] = ()  # config.yaml's update_windows
    ignored_locks: tuple[tuple[str, str], ...] = ()  # *.lock entries that are no lock file
    # the jobs done for the run on the box (``core.lifecycle.jobs``), and those this observation
    # found newly done (``settle`` records them in applied.json); None: containers not looked
    done_jobs: tuple[str, ...] | None = None
    finished: tuple[tuple[str, str], ...] = ()
    # the applied revision's held host paths that no longer lead where they did (checked with
    # its containers: ``adapters.box.docker.hostpath.held_now``)
    moved: tuple[tuple[str, str], ...] = ()

    @property
    def desired(self) -> str | None:
        """The revision tenancy wants (a 304 names the applied one; 204: none)."""
        if self.answer.status == 304:
            return self.local.record.revision if self.local.record else None
        return self.answer.revision if self.answer.status == 200 else None

    @property
    def suspended(self) -> Suspended | None:
        s = self.suspend
        return s if s is not None and s.active(self.now) else None

    def facts(self, retry: bool = False) -> Facts:
        applied = self.local.applied
        if applied is not None and self.done_jobs is not None:
            applied = replace(applied, jobs=self.done_jobs)  # done, by what its run did
        return Facts(
            self.answer.status,
            self.answer.revision if self.answer.status == 200 else None,
            applied,
            self.running,
            self.answer.bundle,
            self.held,
            self.now,
            retry,
            self.locks,
            self.suspended,
            self.interrupted,
            self.local.waiting,
            self.identity,
            self.windows,
            self.moved,
        )


def asks_engine(cfg: Config, answer: Checkin, local: Local, held: Held | None) -> bool:
    """Whether observing asks the engine for the applied project's containers (the tick names
    that the ``inspect`` phase): ``core.lifecycle.decide.needs_container_check`` on the check-in."""
    applied = local.record
    return applied is not None and needs_container_check(
        answer.status,
        answer.revision if answer.status == 200 else None,
        applied.revision,
        held.revision if held else None,
        may_wait(cfg, answer),
    )


def observe(cfg: Config, state: StateDir, answer: Checkin, local: Local, now: float) -> Observation:
    """Everything the decision reads besides the check-in's answer; writes nothing."""
    applied = local.applied
    desired = answer.revision if answer.status == 200 else None
    wanted = applied.revision if answer.status == 304 and applied else desired
    # every stored wait bounded against now (core.clock): a clock step back never stretches a
    # backoff past backoff.cap_s, nor a suspend past its own --for (settle stores the bound)
    held = recovery.bounded(local.held, now, cfg.backoff.cap_s)
    if held is not None and wanted is not None and wanted != held.revision:
        held = None  # pre-empted: a new desired revision ends a hold and a backoff at once
    if held is not None and _policy_changed(cfg, held):
        held = None  # a policy refusal under another policy: the revision is judged again
    running: tuple[ServiceState, ...] | None = None
    done: tuple[str, ...] | None = None
    finished: tuple[tuple[str, str], ...] = ()
    moved: tuple[tuple[str, str], ...] = ()
    if applied and local.record and asks_engine(cfg, answer, local, held):
        running = tuple(docker_api.project_containers(cfg.docker, applied.project))
        done, finished = jobs_done(cfg, local.record, running, now)
        moved = hostpath.held_now(cfg.docker, state.revision_dir(applied.revision))
    scan = locks.scan(cfg.locks.dir)
    lk = cfg.locks
    valid, stale = gates.split_locks(scan.locks, now, lk.default_ttl_s, lk.max_ttl_s)
    return Observation(
        answer,
        local,
        held,
        running,
        valid,
        stale,
        suspend.bounded(now) if (suspend := state.read_suspend()) is not None else None,
        state.read_journal(),
        now,
        cfg.env,
        cfg.windows,
        scan.ignored,
        done,
        finished,
        moved,
    )


def _policy_changed(cfg: Config, held: Held) -> bool:
    """``held`` is a policy refusal under a policy other than config.yaml's today."""
    from monky_deployd.core.records.held import Refused  # (held.json exists)

    return isinstance(held, Refused) and held.policy != cfg.policy.digest()


def jobs_done(
    cfg: Config, record: Applied, running: tuple[ServiceState, ...], now: float
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The jobs done for the run on the box, and the newly done ``(service, made_by)``: an
    exited-0 container of a service that may finish, which applied.json's ``done`` does not
    account for, ran to completion when the engine's events show no stop before its exit
    (``core.lifecycle.jobs.ran_to_completion``; one events request, only then); another apply's
    container (a rollback a lock stopped) is drift, never a job of this record. A record an older
    agent wrote (no ``done``) keeps its rule: every exited-0 container of ``jobs`` is done."""
    known = dict(record.done or {})
    new: list[tuple[str, str]] = []
    ours = {s: f"{lb.revision}/{lb.deploy_id}" for s, lb in record.service_labels.items()}
    fresh = lifecycle.undecided(record.jobs, known, running, ours)
    if fresh and record.done is None:
        new = [(c.name, c.made_by) for c in fresh]
    elif fresh:
        from monky_deployd.adapters.box.docker import watch  # (not a no-op's)

        events = watch.project_events(cfg.docker, record.project, now - EVENTS_S, now)
        new = [
            (c.name, c.made_by)
            for c in fresh
            if lifecycle.ran_to_completion(c.container_id, events)
        ]
    # every container of a service: one that ran to completion is the service's only if all did
    made = {name: by for name, by in new}
    known.update(made)
    return lifecycle.done_jobs(known, running), tuple(sorted(made.items()))


def may_wait(cfg: Config, answer: Checkin) -> bool:
    """Whether a new revision could wait (update windows set, or the bundle has a rollout
    spread): then the last-known-good's containers are looked at, to restore them meanwhile."""
    if cfg.update_windows:
        return True
    if not isinstance(answer.bundle, dict):  # (no bundle: no spread)
        return False
    from monky_deployd.core.lifecycle import schedule

    return schedule.spread_of(answer.bundle) > 0


def record_done(
    state: StateDir, record: Applied, finished: tuple[tuple[str, str], ...], phase: str = ""
) -> Applied:
    """applied.json with ``finished`` (``jobs_done``'s newly done ``(service, made_by)``) in its
    ``done``, written; each journaled (``job.done``; ``phase``: else the current one)."""
    at = {"phase": phase} if phase else {}
    for name, made in finished:
        log.info(
            f"job {name} ran to completion (its exit 0 had no stop before it, in the "
            f"engine's events): done for this config ({made}), never restored nor re-run",
            extra={"event": "job.done", "service": name, **at},
        )
    done = replace(record, done={**(record.done or {}), **dict(finished)})
    state.write_applied(done)
    return done


def settle(state: StateDir, obs: Observation) -> None:
    """The observation's side effects (the tick's only): each logged with its event."""
    dropped = obs.local.held
    if obs.held is not None and dropped is not None and obs.held != dropped:
        log.warning(
            f"held.json's waits for revision {dropped.revision} lay further ahead than "
            "backoff.cap_s allows, or it was written in the future: the clock stepped; "
            "bounded from now",
            extra={"event": "clock.bounded", "phase": "plan", "record": "held.json"},
        )
        state.write_held(obs.held)
    if dropped is not None and obs.held is None:
        log.info(
            f"revision {dropped.revision} is no longer desired ({obs.desired} is): "
            "its hold and backoff are dropped",
            extra={"event": "hold.preempted", "phase": "plan", "revision": dropped.revision},
        )
        state.clear_held()
    log_locks(obs.locks, obs.stale_locks, obs.ignored_locks, obs.now)
    found = obs.suspend
    if found is not None and found.since == obs.now and state.read_suspend() != found:
        log.warning(
            "suspend.json was written in the future (the clock stepped back since): its "
            "--for duration now counts from now",
            extra={"event": "clock.bounded", "phase": "plan", "record": "suspend.json"},
        )
        state.write_suspend(found)
    if found is not None and obs.suspended is None:
        log.info(
            "the suspend's --for duration is over: applies resume",
            extra={"event": "suspend.expired", "phase": "plan"},
        )
        state.clear_suspend()
    elif found is not None:
        until = report.rfc3339(found.until, "seconds") if found.until else "resume"
        log.info(
            f"{found.describe()} until {until}",
            extra={"event": "suspend.active", "phase": "plan"},
        )
    record = obs.local.record
    if obs.finished and record is not None:
        record_done(state, record, obs.finished, "plan")
    cut = obs.interrupted
    if cut is not None:
        log.warning(
            f"the tick {cut.tick_id} was killed during {cut.phase} of revision {cut.revision}; "
            "this tick resumes or restores",
            extra={"event": "journal.interrupted", "phase": "plan"},
        )


def bakes(obs: Observation) -> bool:
    """Whether this tick judges the applied revision's bake (``agent.apply.baking``): tenancy still
    wants it and no killed tick is being accounted for."""
    applied = obs.local.record
    return applied is not None and obs.desired == applied.revision and obs.interrupted is None


@contextmanager
def nothing() -> Iterator[None]:
    yield
