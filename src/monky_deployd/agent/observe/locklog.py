"""The update locks in the journal: one line per kind (held, stale, not a lock file), however
many there are (``core.lifecycle.gates.summary``: the first few described, the rest counted),
masked with the tick's secrets (an app wrote these words; ``gates.parse_lock`` already made them
printable and cut them)."""

from __future__ import annotations

import logging

from monky_deployd.agent import logs
from monky_deployd.core.lifecycle import gates

log = logging.getLogger("monky_deployd")

SHOWN = 5


def log_locks(
    valid: tuple[gates.Lock, ...],
    stale: tuple[gates.Lock, ...],
    ignored: tuple[tuple[str, str], ...],
    now: float,
) -> None:
    masked = logs.masker()
    if ignored:
        names = ", ".join(f"{name}.lock ({what})" for name, what in ignored[:SHOWN])
        more = f" and {len(ignored) - SHOWN} more" if len(ignored) > SHOWN else ""
        log.warning(
            masked(
                f"ignoring {len(ignored)} entr{'y' if len(ignored) == 1 else 'ies'} of the "
                f"update-lock directory that {'is' if len(ignored) == 1 else 'are'} not a lock "
                f"file: {names}{more}"
            ),
            extra={"event": "lock.ignored", "phase": "plan", "count": len(ignored)},
        )
    if stale:
        log.warning(
            masked(
                f"ignoring {len(stale)} stale update lock(s), their TTL over: "
                f"{gates.summary(stale, now, SHOWN)}"
            ),
            extra=dict(event="lock.stale", phase="plan", lock=stale[0].name, count=len(stale)),
        )
    if valid:
        log.info(
            masked(f"{len(valid)} update lock(s) held: {gates.summary(valid, now, SHOWN)}"),
            extra=dict(event="lock.held", phase="plan", lock=valid[0].name, count=len(valid)),
        )
