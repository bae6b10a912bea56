"""Whether a revision proved itself: one pure decision per observation of its containers.

After ``up`` the agent watches the project's containers (``agent.apply.steps.verify`` polls the
Engine API; the clock and the sleep are injected). Every poll is one ``Observation``; ``judge``
turns the watch so far plus that observation into ``Passed | Failed | Waiting``:

- a long-running service passes once each of its containers (all replicas) has been ``running``
  (and ``healthy`` when it has a healthcheck) without a restart for ``window_s``;
- a service whose container exited 0 and whose restart policy is ``no`` or ``on-failure`` (an
  init or migration job, ``core.lifecycle.jobs``) is done: that is success, not failure (``up
  --wait`` gets this wrong, docker/compose#10596);
- a job another service waits for (``service_completed_successfully``: ``awaited``) passes only
  once it exited 0: running through the stable window is not enough;
- any other exit, a restart (the same container started again, or ``restarting``), ``dead`` or
  ``unhealthy`` fails at once, naming the service, its state and its exit code or health output;
- nothing settled by ``deadline_s`` fails: ``VERIFY_UNHEALTHY`` when the healthcheck never passed,
  ``VERIFY_TIMEOUT`` otherwise (a missing container, ``created``, ``paused``).

Nothing here knows about time except through the ``now`` it is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle import jobs as lifecycle


@dataclass(frozen=True)
class ContainerObs:
    """One container of the project, as the engine describes it (``GET /containers/{id}/json``)."""

    service: str
    container_id: str
    state: str  # created | running | restarting | exited | dead | paused | removing
    health: str = ""  # "" (no healthcheck) | starting | healthy | unhealthy
    exit_code: int = 0
    restart_policy: str = "no"  # no | always | on-failure | unless-stopped
    started_at: str = ""
    health_output: str = ""  # the last healthcheck's output (masked by the caller)
    image_id: str = ""  # sha256:... of the image the container runs
    image_ref: str = ""  # the compose file's image: reference
    finished_at: float = 0.0  # when its last run ended (epoch s; 0: never, or unknown)
    unhealthy_since: float = 0.0  # the first failed check of its current failing streak (or 0)
    # what the bake tells apart (core.lifecycle.bake): the engine's own facts about this container
    restart_count: int = 0  # RestartCount: runs its restart policy started (reset by a start)
    oom_killed: bool = False  # State.OOMKilled: the kernel killed its last run
    config_hash: str = ""  # compose's com.docker.compose.config-hash label: its config
    revision: str = ""  # the monky-deployd.revision label: the revision that made it
    deploy_id: str = ""  # the monky-deployd.deploy-id label: the apply that made it

    @property
    def made_by(self) -> str:
        """Which apply made this container (its labels ``revision/deploy-id``), else its config
        hash: what a restore (pinned images, the same labels) keeps and another revision not."""
        return f"{self.revision}/{self.deploy_id}" if self.revision else self.config_hash

    # the health log (the engine keeps the last five probes): (start, exit code) oldest first
    health_log: tuple[tuple[float, int], ...] = ()
    health_retries: int = 3  # Config.Healthcheck.Retries: failed probes that make it unhealthy


@dataclass(frozen=True)
class Watch:
    """What the verify remembers between observations."""

    started: float  # when the watch began (the clock the caller injects)
    # "<service>#<container id>" -> (container id, started_at, since): the run of that
    # container that has been good since ``since``
    good: Mapping[str, tuple[str, str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Passed:
    services: tuple[str, ...]
    done: tuple[str, ...]  # jobs that exited 0 (restart "no" or "on-failure")


@dataclass(frozen=True)
class Failed:
    code: Code
    service: str
    state: str
    message: str
    detail: str = ""


@dataclass(frozen=True)
class Waiting:
    watch: Watch
    why: str


Verdict = Passed | Failed | Waiting


def started_services(compose: str, services: tuple[str, ...]) -> tuple[str, ...]:
    """The services ``docker compose up`` starts, so the ones to verify and to keep running:
    not those behind a ``profiles`` list, nor those scaled to zero (``scale: 0``,
    ``deploy.replicas: 0``). A compose file that does not parse keeps every service."""
    try:
        doc = yaml.safe_load(compose)
        defs = doc["services"]
    except (yaml.YAMLError, TypeError, KeyError):
        return services
    if not isinstance(defs, dict):
        return services

    def starts(name: str) -> bool:
        d = defs.get(name)
        if not isinstance(d, dict):
            return True
        deploy = d.get("deploy")
        replicas = deploy.get("replicas") if isinstance(deploy, dict) else None
        return not d.get("profiles") and d.get("scale") != 0 and replicas != 0

    return tuple(name for name in services if starts(name))


def start(now: float) -> Watch:
    return Watch(started=now)


def _describe(c: ContainerObs) -> str:
    if c.state in ("exited", "dead", "restarting"):
        return f"{c.state} (exit code {c.exit_code})"
    if c.health:
        return f"{c.state} ({c.health})"
    return c.state


def _service(key: str) -> str:
    """The service of a ``Watch.good`` key (``<service>#<container id>``)."""
    return key.partition("#")[0]


def judge(
    watch: Watch,
    expected: tuple[str, ...],
    observed: tuple[ContainerObs, ...],
    now: float,
    *,
    window_s: float,
    deadline_s: float,
    awaited: tuple[str, ...] = (),
) -> Verdict:
    """The verdict after one more observation (``observed``: the project's containers now).
    ``awaited``: jobs that must exit 0 (``core.lifecycle.jobs.awaited_jobs``) before it passes.

    Every container of a service is judged (``scale: 3``, ``deploy.replicas``): one replica that
    crash-loops fails the revision however many others run, and a service is good only once all
    of its containers have been."""
    by_service: dict[str, list[ContainerObs]] = {}
    for c in observed:
        by_service.setdefault(c.service, []).append(c)
    good: dict[str, tuple[str, str, float]] = {}
    done: list[str] = []
    pending: list[tuple[str, ContainerObs | None]] = []
    for name in expected:
        found = by_service.get(name, [])
        if not found:
            pending.append((name, None))
            continue
        finished = True  # every container a one-shot job that exited 0
        for c in found:
            key = f"{name}#{c.container_id}"
            prev = watch.good.get(key)
            failed = _fault(c, prev)
            if failed is not None:
                return failed
            if c.state == "exited":  # exit 0, restart no/on-failure: a finished job (_fault)
                continue
            finished = False
            if name in awaited:  # a declared job still running: not done, not a service
                pending.append((name, c))
                continue
            if c.state == "running" and c.health in ("", "healthy"):
                same_run = prev is not None and prev[:2] == (c.container_id, c.started_at)
                good[key] = (
                    prev if same_run and prev is not None else (c.container_id, c.started_at, now)
                )
                continue
            pending.append((name, c))
        if finished:
            done.append(name)
    settled = not pending and all(now - since >= window_s for _, _, since in good.values())
    if settled:
        return Passed(tuple(sorted({_service(k) for k in good})), tuple(sorted(done)))
    if now - watch.started >= deadline_s:
        return _timed_out(pending, good, now, window_s, deadline_s)
    if pending:
        name, seen = pending[0]
        why = f"{name}: {'no container' if seen is None else _describe(seen)}"
    else:
        key = min(good, key=lambda k: good[k][2])
        why = f"{_service(key)}: running for {now - good[key][2]:.0f} of {window_s:.0f} s"
    return Waiting(Watch(watch.started, good), why)


def _fault(c: ContainerObs, prev: tuple[str, str, float] | None) -> Failed | None:
    """A state that fails the revision at once, or None."""
    if lifecycle.finished(c.state, c.exit_code, c.restart_policy):
        return None
    if c.state in ("exited", "dead", "restarting"):
        return Failed(
            Code.VERIFY_EXITED,
            c.service,
            c.state,
            f"service {c.service} is {_describe(c)} instead of running",
            _detail(c),
        )
    if prev is not None and prev[0] == c.container_id and prev[1] != c.started_at:
        return Failed(
            Code.VERIFY_EXITED,
            c.service,
            "restarted",
            f"service {c.service} restarted during verify (last exit code {c.exit_code})",
            _detail(c),
        )
    if c.health == "unhealthy":
        return Failed(
            Code.VERIFY_UNHEALTHY,
            c.service,
            c.state,
            f"service {c.service} is {c.state} but its healthcheck reports unhealthy",
            _detail(c),
        )
    return None


def _detail(c: ContainerObs) -> str:
    parts = [
        f"service={c.service}",
        f"state={c.state}",
        f"exit_code={c.exit_code}",
        f"restart={c.restart_policy}",
    ]
    if c.health:
        parts.append(f"health={c.health}")
    if c.health_output:
        parts.append(f"health_output={c.health_output.strip()[-400:]}")
    return " ".join(parts)


def _timed_out(
    pending: list[tuple[str, ContainerObs | None]],
    good: Mapping[str, tuple[str, str, float]],
    now: float,
    window_s: float,
    deadline_s: float,
) -> Failed:
    if pending:
        name, c = pending[0]
        if c is not None and c.state == "running" and c.health in ("", "healthy"):
            return Failed(
                Code.VERIFY_TIMEOUT,
                name,
                "running",
                f"job {name} did not finish within {deadline_s:.0f} s (another service waits "
                "for it: service_completed_successfully)",
                _detail(c),
            )
        if c is not None and c.health == "starting":
            return Failed(
                Code.VERIFY_UNHEALTHY,
                name,
                c.state,
                f"service {name}'s healthcheck did not pass within {deadline_s:.0f} s",
                _detail(c),
            )
        state = "missing" if c is None else c.state
        what = "has no container" if c is None else f"is {_describe(c)}"
        return Failed(
            Code.VERIFY_TIMEOUT,
            name,
            state,
            f"service {name} {what} after {deadline_s:.0f} s",
            "" if c is None else _detail(c),
        )
    key = min(good, key=lambda k: good[k][2])
    name = _service(key)
    return Failed(
        Code.VERIFY_TIMEOUT,
        name,
        "running",
        f"service {name} ran only {now - good[key][2]:.0f} s of the {window_s:.0f} s stable "
        f"window within the {deadline_s:.0f} s deadline",
    )
