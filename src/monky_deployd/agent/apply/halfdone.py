"""Compose's half-done replacement repaired around every ``up`` (``core.lifecycle.halfdone``
decides).

    repair        before an ``up`` (an apply's, a restore's, a rollback's): the project's
                  containers read from the engine; a replacement never started removed, a
                  duplicate for one service and number removed (what runs is kept), a temporary
                  name renamed; each journaled (``up.repaired``)
    up_repaired   an ``up`` that fails is followed by a repair; when the repair changed
                  anything, the ``up`` runs once more: a kill's leftovers are nobody's fault

Only the project's own containers (its compose label) are read, never another project's; the
removals are ``docker rm`` (never ``-v``: a volume is kept) through ``runner``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.box.docker.compose import docker_env
from monky_deployd.agent.context import Context
from monky_deployd.core.faults import DeployError

log = logging.getLogger("monky_deployd")


def repair(ctx: Context, project: str) -> bool:
    """Make ``project`` one container per service and number under its own name; True when
    something was removed or renamed."""
    from monky_deployd.core.lifecycle import halfdone

    fix = halfdone.plan(docker_api.project_seen(ctx.cfg.docker, project))
    if not fix:
        return False
    docker = ctx.cfg.docker
    env = docker_env(docker, ctx.state.docker_dir)
    for gone in fix.remove:
        runner.run(
            (docker.binary, "rm", "--force", gone.container_id),
            env=env,
            timeout=docker.command_timeout_s,
        )
    for kept in fix.rename:
        runner.run(
            (docker.binary, "rename", kept.container_id, kept.own_name),
            env=env,
            timeout=docker.command_timeout_s,
        )
    log.warning(
        f"project {project}: compose's replacement was left half done (a killed tick): "
        + "; ".join(fix.lines()),
        extra={"event": "up.repaired", "project": project, "actions": fix.lines()},
    )
    return True


def up_repaired(ctx: Context, project: str, up: Callable[[], None]) -> None:
    """``up`` after a repair; when it fails and a repair then changes something (compose's own
    replacement raced what a killed tick left), once more. Any other failure is the up's."""
    repair(ctx, project)
    try:
        up()
    except DeployError:
        if not repair(ctx, project):
            raise
        up()
