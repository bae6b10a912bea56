"""What one tick's executors share (``Context``: the config, the state dir, the record, the
clock, the masker that grows with every secret the tick learns), and the host facts every
check-in carries. On every tick's path, the no-op's too; the box steps (``agent.apply.steps``) are
not.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.box.state.state import ENV_FILE, StateDir
from monky_deployd.adapters.fsutil import read_if_exists
from monky_deployd.agent import logs
from monky_deployd.config import Config
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle.decide import host_facts_usable
from monky_deployd.core.records.applied import ServiceLabel
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd.core.render import mask
from monky_deployd.core.wire import checkin as wire

if TYPE_CHECKING:
    from monky_deployd.adapters.box.docker.compose import Compose
    from monky_deployd.core.lifecycle import verify as verdict

Clock = Callable[[], float]
Sleep = Callable[[float], None]


@dataclass(frozen=True)
class Options:
    """How this tick runs beyond the config: the operator's ``--retry``; for tests, the verify
    phase's clock and sleep and the backoff's random source."""

    retry: bool = False
    watch_clock: Clock = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = random.random


@dataclass
class Context:
    """What the executors share within one tick."""

    cfg: Config
    state: StateDir
    rec: TickRecord
    clock: Clock
    masker: mask.Masker = mask.NO_SECRETS  # every secret of the tick so far
    staged: str | None = None  # the revision this tick wrote (its secrets came from OpenBao)
    # the verify phase's own clock and sleep (real time by default: it watches real containers)
    watch_clock: Clock = time.monotonic
    sleep: Sleep = time.sleep
    # what the last passed verify saw, per project (Commit records its images and services)
    verified: dict[str, tuple[verdict.Passed, tuple[verdict.ContainerObs, ...]]] = field(
        default_factory=dict
    )
    # each staged service's config hash and labels (Commit keeps them in applied.json)
    labelled: dict[str, ServiceLabel] = field(default_factory=dict)
    kept_jobs: dict[str, str] = field(default_factory=dict)  # jobs an up left alone (done)
    # per revision prepared: compose's effective configuration the policy judged and the .env
    # (holds secret values: never logged); the pull step's config digests
    judged: dict[str, tuple[dict[str, object], str]] = field(default_factory=dict)
    # per revision pulled: the image IDs the engine gave its names before this tick's pull and
    # build, not recorded as this project's own (Commit: what the image GC may remove)
    found_before: dict[str, frozenset[str]] = field(default_factory=dict)

    def learn(self, secrets: Iterable[str]) -> None:
        """Add secrets to the tick's masker (children's output, errors, report, log lines)."""
        self.masker = self.masker.extend(secrets)
        logs.set_masker(self.masker)

    def compose(
        self, project: str, revision: str, *, pinned: bool = False, judged: bool = True
    ) -> Compose:
        """``docker compose`` for a revision, run from its judged model; one this tick did not
        write (a restore, the previous project's ``down``) first teaches the masker the secrets
        it holds at rest, and one staged before the model existed is judged now and gets one
        (``agent.policy.ensure_model``; ``judged=False``: a down, which may run without)."""
        from monky_deployd.adapters.box.docker.compose import Compose

        workdir = self.state.revision_dir(revision)
        if revision != self.staged:
            self.learn(self.secrets_at_rest(revision))
            if judged:
                from monky_deployd.agent import policy

                policy.ensure_model(
                    self.cfg, self.state.docker_dir, revision, project, workdir, self.masker
                )
        return Compose(
            self.cfg.docker,
            self.state.docker_dir,
            project,
            workdir,
            self.masker,
            pinned=pinned,
            judged=judged,
        )

    def secrets_at_rest(self, revision: str) -> tuple[str, ...]:
        """The values of the revision's ``.env`` and the registry credential of the docker
        config: what compose may echo when it runs that revision."""
        from monky_deployd.adapters.box.state.aside import CONFIG_NAME
        from monky_deployd.core.render import atrest

        env = _read(self.state.revision_dir(revision) / ENV_FILE)
        cfg = _read(self.state.docker_dir / CONFIG_NAME)
        return atrest.secrets_in_env_file(env.decode("utf-8", errors="replace")) + (
            mask.secrets_in_docker_config(cfg)
        )


def _read(path: Path) -> bytes:
    try:
        return read_if_exists(path) or b""
    except DeployError:  # unreadable to the agent, so to compose too: nothing to echo
        return b""


def host_facts(ctx: Context) -> wire.HostFacts:
    """hostname plus docker/compose versions, cached in the state dir between applies."""
    cached = ctx.state.read_host_facts()
    if cached is not None and host_facts_usable(cached.model_dump(), socket.gethostname()):
        return cached
    return refresh_host_facts(ctx)


def refresh_host_facts(ctx: Context, *, store: bool = True, compose: str = "") -> wire.HostFacts:
    """The host facts asked now (``compose``: compose's version when already known)."""
    from monky_deployd.adapters.box import runner
    from monky_deployd.adapters.box.docker.compose import docker_env

    env = docker_env(ctx.cfg.docker, ctx.state.docker_dir)
    binary, timeout = ctx.cfg.docker.binary, ctx.cfg.docker.command_timeout_s
    versions = {"docker": "", "compose": compose}
    # (a fault leaves a version empty; the tick's deadline, a TickDeadline, is not caught)
    with suppress(DeployError):  # the engine's own answer (GET /version), no Go process
        versions["docker"] = docker_api.engine_version(ctx.cfg.docker)[0].strip("?")
    argv = (binary, "compose", "version", "--short")
    with suppress(DeployError):
        if not compose:
            result = runner.run(argv, env=env, timeout=timeout, masker=ctx.masker)
            versions["compose"] = result.stdout.strip()
    facts = wire.HostFacts(hostname=socket.gethostname(), **versions)
    if store and facts.docker and facts.compose:  # (``plan`` writes nothing)
        ctx.state.write_host_facts(facts)
    return facts
