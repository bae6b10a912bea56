"""After every tick: its line in the tick ledger, and the metrics textfile (``agent.tick.metrics``).

``run_tick`` calls ``record`` once the tick's record is final, before the summary line. The
ledger (``core.records.ledger``) is read, updated and written under the state dir's lock (taken
anew: the tick has released it), so two ticks never interleave their updates. A tick that found the
lock held (LOCK_BUSY) did nothing and is not recorded: the holder records its own.

Cost on a steady no-op tick (``core.records.ledger.quiet``): one small read, one small write without
fsync, one ``utime`` of the metrics textfile; ``agent.tick.metrics`` and ``prometheus_client`` are
imported only when the textfile is rewritten (a tick that changed something, or no textfile
yet). A fault here never
changes the tick's outcome: it is a warning.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent import logs
from monky_deployd.config import Config
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records import ledger
from monky_deployd.core.records.ledger import TEXTFILE_NAME
from monky_deployd.core.records.tickrecord import TickRecord

log = logging.getLogger("monky_deployd")


def entry_of(rec: TickRecord, duration_ms: int) -> ledger.Entry:
    """The finished tick as the ledger keeps it (its message masked once more, first line)."""
    masked = logs.masker()
    return ledger.Entry(
        tick_id=rec.tick_id,
        started_at=rec.started_at,
        finished_at=rec.finished_at if rec.finished_at is not None else rec.started_at,
        outcome=rec.outcome,
        code=str(rec.code),
        message=masked(rec.message.splitlines()[0]) if rec.message else "",
        revision=rec.revision,
        desired=rec.desired,
        duration_ms=duration_ms,
        phases=tuple(ledger.Phase(p.name, p.ms, p.ok) for p in rec.phases),
        rollback_to=rec.rollback.to_revision if rec.rollback is not None else None,
        rollback_ok=rec.rollback.ok if rec.rollback is not None else None,
    )


def token_seen(state: StateDir) -> ledger.TokenSeen | None:
    """token.json's bookkeeping (kind, expiry, lease id), never the token; None when absent or
    unreadable."""
    try:
        stored = state.read_token()
    except (DeployError, ValueError):
        return None
    tok = stored.token if stored is not None else None
    if tok is None:
        return None
    return ledger.TokenSeen(tok.kind, tok.expires_at, tok.renewable, tok.lease_id, tok.obtained_at)


def record(cfg: Config, rec: TickRecord, duration_ms: int) -> None:
    """The tick's line in the ledger, then the metrics textfile; warnings only."""
    if rec.code is Code.LOCK_BUSY:
        return
    state = StateDir(cfg.state_dir)
    entry = entry_of(rec, duration_ms)
    try:
        with state.lock(cfg.lock_wait_s):
            before, problem = state.read_ledger()
            if problem not in (None, "absent"):
                log.warning(
                    f"the tick ledger {state.ledger_file} is unreadable ({problem}); "
                    "starting a new one (its counters restart)",
                    extra={"event": "ledger.reset", "phase": "summary"},
                )
            after = ledger.record(
                before, entry, token=token_seen(state), pull_filesystems=rec.pull_filesystems
            )
            quiet = problem is None and ledger.quiet(before, after)
            state.write_ledger(after, durable=not quiet)
    except DeployError as err:
        log.warning(
            f"the tick ledger could not be written: {err.message}",
            extra={"event": "ledger.failed", "phase": "summary", "code": err.code},
        )
        return
    directory = cfg.metrics.textfile_dir
    if directory is None or (quiet and _touched(directory / TEXTFILE_NAME)):
        return
    from monky_deployd.agent.tick import metrics  # prometheus_client: only to rewrite the file

    metrics.publish(cfg, state, after)


def _touched(path: Path) -> bool:
    """A quiet tick sets the textfile's mtime (node-exporter's node_textfile_mtime_seconds: the
    last tick of any kind); False when there is no file yet (it is written then)."""
    try:
        os.utime(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    except OSError as exc:
        from monky_deployd.agent.tick import metrics

        metrics.warn(path, exc.strerror or str(exc))
    return True
