"""A job runs once per config (``core.lifecycle.jobs``): the box steps' part of it.

    up_leaving_done_jobs   an apply's, a rollback's or a restore's ``up`` that never starts a
                           job again for the config it ran to completion for: left out, or its
                           container made again and not started (``up --no-start``)

Apply path only (``agent.apply.steps`` imports it); each kept job is journaled with its fact.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.agent.context import Context
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records.applied import Applied, ServiceLabel

if TYPE_CHECKING:
    from monky_deployd.adapters.box.docker.compose import Compose

log = logging.getLogger("monky_deployd")


def up_leaving_done_jobs(
    ctx: Context,
    compose: Compose,
    project: str,
    every: tuple[str, ...],
    labels: Mapping[str, ServiceLabel] | None,
    *,
    whole: bool = True,
) -> None:
    """A project's ``up`` that never runs a job again for a config it ran to completion for
    (``core.lifecycle.jobs.kept_jobs``): the config this ``up`` gives it (``labels``: this apply's;
    None: the last-known-good's own, on a restore or a rollback) is the one applied.json's
    ``done`` records. Those jobs are left out of the ``up``; one whose container another apply
    replaced is created again, not started. ``whole`` False: only ``every`` (a restore of what
    is down, ``--no-deps``). Each kept job is named in the journal with the fact it rests on;
    ``ctx.kept_jobs`` carries them to the commit. Around it, what a killed tick left half done
    in the project is repaired first, and again after a failed ``up`` (``agent.apply.halfdone``)."""
    from monky_deployd.agent.apply.halfdone import up_repaired

    up_repaired(
        ctx, project, lambda: _up_leaving_done_jobs(ctx, compose, project, every, labels, whole)
    )


def _up_leaving_done_jobs(
    ctx: Context,
    compose: Compose,
    project: str,
    every: tuple[str, ...],
    labels: Mapping[str, ServiceLabel] | None,
    whole: bool,
) -> None:
    from monky_deployd.core.lifecycle import jobs as lifecycle

    applied = ctx.state.read_applied()
    ctx.kept_jobs = {}
    if applied is None or applied.project != project:
        compose.up(() if whole else every)
        return
    running = docker_api.project_containers(ctx.cfg.docker, project)
    applied = _finished_since(ctx, applied, tuple(running))
    if not applied.done:
        compose.up(() if whole else every)
        return
    labels = labels if labels is not None else applied.service_labels
    wanted = {s: f"{lb.revision}/{lb.deploy_id}" for s, lb in labels.items()}
    kept = lifecycle.kept_jobs(applied.done, wanted, running)
    if not whole:
        kept = tuple(k for k in kept if k.service in every)
    for k in kept:
        config = labels[k.service].config_hash.rpartition(":")[2][:12] or "(hash unknown)"
        log.info(
            f"{k.service}: done for config {config} (ran to completion at "
            f"{k.made_by.partition('/')[0]}'s apply, {k.made_by}): not run again"
            + ("; its container (another apply's) made again, not started" if k.recreate else ""),
            extra={"event": "up.job_done", "service": k.service, "made_by": k.made_by},
        )
    ctx.kept_jobs = {k.service: k.made_by for k in kept}
    compose.create(tuple(k.service for k in kept if k.recreate))
    skip = tuple(k.service for k in kept)
    if whole:
        compose.up(every if kept else (), skip=skip)
    elif rest := tuple(s for s in every if s not in skip):
        compose.up(rest)


def _finished_since(ctx: Context, applied: Applied, running: tuple[ServiceState, ...]) -> Applied:
    """applied.json with the jobs that ran to completion since a tick last asked the engine
    (one that outlasted verify and ended before this apply's tick, which asked no one: a new
    revision needs no container check) recorded done, as a no-op tick records them
    (``agent.observe.observe.jobs_done``, journaled ``job.done``); written before the ``up`` so a
    killed tick keeps the fact."""
    from monky_deployd.agent.observe import observe

    _, finished = observe.jobs_done(ctx.cfg, applied, running, ctx.clock())
    return observe.record_done(ctx.state, applied, finished) if finished else applied
