"""The executors of the box steps (``core.plan``): one function per step type, in a plain dict.

Each executor is thin: it hands the step's data to an adapter (``docker_config``, ``StateDir``,
``Compose``, ``docker_api``) and notes what it saw in the tick record. ``run`` performs a tuple
of steps in order, each inside its phase, so a failure is logged and reported with the phase
it happened in.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monky_deployd.adapters.box import docker_api, docker_config, runner
from monky_deployd.adapters.box.compose import Compose, docker_env
from monky_deployd.adapters.box.state import ENV_FILE, Applied, StateDir
from monky_deployd.adapters.fsutil import read_if_exists
from monky_deployd.agent import logs
from monky_deployd.config import Config
from monky_deployd.core import mask, report, wire
from monky_deployd.core.errors import Code, DeployError
from monky_deployd.core.plan import BoxStep, Commit, Down, Pull, Stage, Up, host_facts_usable
from monky_deployd.core.report import TickRecord

Clock = Callable[[], float]
Phase = Callable[[str], AbstractContextManager[None]]


@dataclass
class Context:
    """What the executors share within one tick."""

    cfg: Config
    state: StateDir
    rec: TickRecord
    clock: Clock
    masker: mask.Masker = mask.NO_SECRETS  # every secret of the tick so far
    staged: str | None = None  # the revision this tick wrote (its secrets came from OpenBao)

    def learn(self, secrets: Iterable[str]) -> None:
        """Add secrets to the tick's masker (children's output, errors, report, log lines)."""
        self.masker = self.masker.extend(secrets)
        logs.set_masker(self.masker)

    def compose(self, project: str, revision: str) -> Compose:
        """``docker compose`` for a revision; one this tick did not write (a restore, the
        previous project's ``down``) first teaches the masker the secrets it holds at rest."""
        if revision != self.staged:
            self.learn(self.secrets_at_rest(revision))
        return Compose(
            self.cfg.docker,
            self.state.docker_dir,
            project,
            self.state.revision_dir(revision),
            self.masker,
        )

    def secrets_at_rest(self, revision: str) -> tuple[str, ...]:
        """The values of the revision's ``.env`` and the registry credential of the docker
        config: what compose may echo when it runs that revision."""
        env = _read(self.state.revision_dir(revision) / ENV_FILE)
        cfg = _read(self.state.docker_dir / docker_config.CONFIG_NAME)
        return mask.secrets_in_env_file(env.decode("utf-8", errors="replace")) + (
            mask.secrets_in_docker_config(cfg)
        )


def _read(path: Path) -> bytes:
    try:
        return read_if_exists(path) or b""
    except DeployError:  # unreadable to the agent, so to compose too: nothing to echo
        return b""


def stage(ctx: Context, step: Stage) -> None:
    ctx.staged = step.revision
    docker_config.write_docker_config(
        ctx.state.docker_dir, step.registry_host or "", step.credential
    )
    ctx.state.write_revision(step.revision, step.compose, step.env_text)


def pull(ctx: Context, step: Pull) -> None:
    ctx.compose(step.project, step.revision).pull(step.registry_host)


def down(ctx: Context, step: Down) -> None:
    ctx.compose(step.project, step.revision).down()


def up(ctx: Context, step: Up) -> None:
    ctx.compose(step.project, step.revision).up()
    ctx.rec.services = [
        s.as_report() for s in docker_api.project_containers(ctx.cfg.docker, step.project)
    ]


def commit(ctx: Context, step: Commit) -> None:
    ctx.state.write_applied(
        Applied(step.revision, step.project, list(step.services), report.rfc3339(ctx.clock()))
    )
    ctx.state.prune_revisions(keep={step.revision})
    refresh_host_facts(ctx)


EXECUTORS: dict[type[Any], Callable[[Context, Any], None]] = {
    Stage: stage,
    Pull: pull,
    Down: down,
    Up: up,
    Commit: commit,
}


def run(ctx: Context, steps: tuple[BoxStep, ...], phase: Phase) -> None:
    """Perform ``steps`` in order, each inside its phase; the first failure ends the run."""
    for step in steps:
        with phase(step.phase):
            EXECUTORS[type(step)](ctx, step)


# -- host facts (sent with every check-in) -----------------------------------------------------


def host_facts(ctx: Context) -> wire.HostFacts:
    """hostname plus docker/compose versions, cached in the state dir between applies."""
    cached = ctx.state.read_host_facts()
    if cached is not None and host_facts_usable(cached.model_dump(), socket.gethostname()):
        return cached
    return refresh_host_facts(ctx)


def refresh_host_facts(ctx: Context) -> wire.HostFacts:
    env = docker_env(ctx.cfg.docker, ctx.state.docker_dir)
    binary, timeout = ctx.cfg.docker.binary, ctx.cfg.docker.command_timeout_s
    versions = {"docker": "", "compose": ""}
    for key, argv in (
        ("docker", (binary, "version", "--format", "{{.Server.Version}}")),
        ("compose", (binary, "compose", "version", "--short")),
    ):
        try:
            result = runner.run(argv, env=env, timeout=timeout, masker=ctx.masker)
            versions[key] = result.stdout.strip()
        except DeployError as err:
            if err.code is Code.TICK_DEADLINE:
                raise
            versions[key] = ""
    facts = wire.HostFacts(hostname=socket.gethostname(), **versions)
    if facts.docker and facts.compose:
        ctx.state.write_host_facts(facts)
    return facts
