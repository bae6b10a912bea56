"""The bake's start at the commit: ``bake.json`` written (``core.lifecycle.bake``);
``agent.apply.baking`` observes it on the ticks after. Its own module so that the commit's step
(``agent.apply.steps``) and the bake's rollback (``agent.apply.baking``, which runs the box steps)
do not import each other.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from monky_deployd.agent import context
from monky_deployd.core.records.applied import Applied

if TYPE_CHECKING:
    from monky_deployd.core.lifecycle.verify import ContainerObs

log = logging.getLogger("monky_deployd")


def start(
    ctx: context.Context,
    revision: str,
    project: str,
    observed: tuple[ContainerObs, ...],
    before: Applied | None,
) -> set[str]:
    """Write the bake record of a commit (``before``: applied.json before it); returns the
    revisions whose release must stay on disk while it bakes (the last-known-good)."""
    bake_s = ctx.cfg.verify.bake_s
    old = ctx.state.read_bake()
    previous = json.loads(before.to_json()) if before is not None else None
    if before is not None and old is not None and old.revision == before.revision:
        # the revision before this one never finished its bake: the LKG is still the one before
        # it; with none, the one before (verified, not promoted) beats nothing
        if old.previous is not None:
            previous = old.previous
        elif old.failed:
            previous = None
    if bake_s <= 0:
        ctx.state.clear_bake()
        return set()
    from monky_deployd.core.lifecycle import (
        bake as baked,  # (the apply path and a bake: not a no-op)
    )

    record = baked.start(
        revision, project, observed, now=ctx.clock(), bake_s=bake_s, previous=previous
    )
    ctx.state.write_bake(record)
    log.info(
        f"revision {revision} bakes for {bake_s:.0f} s before it becomes the last-known-good"
        + (f" (until then {record.previous_revision} is kept)" if record.previous_revision else ""),
        extra={"event": "bake.start", "revision": revision},
    )
    return {record.previous_revision} if record.previous_revision else set()
