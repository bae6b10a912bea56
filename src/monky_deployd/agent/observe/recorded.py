"""The recorded view: what the state dir and the lock dir say now (the tick ledger, the records,
the locks, token.json's bookkeeping, what was set aside and what the next tick sets aside),
without asking the engine or a service: ``status``'s and the metrics' one typed view. Read-only.
Its own module (it was ``agent.observe.observe``'s): a quiet no-op tick neither rewrites the
metrics nor runs ``status``, so it does not build this view's class (issue 29).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from monky_deployd.adapters.box import locks
from monky_deployd.adapters.box.state import aside
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.observe.observe import Local, read_local
from monky_deployd.config import Config
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle import gates, recovery
from monky_deployd.core.records.applied import TokenState
from monky_deployd.core.records.journal import Journal
from monky_deployd.core.records.ledger import Ledger
from monky_deployd.core.records.suspend import Suspended


@dataclass(frozen=True)
class Recorded:
    """What the state dir and the lock dir say now, without asking the engine or a service:
    the one typed view ``status`` and the metrics textfile are drawn from."""

    now: float
    ledger: Ledger
    ledger_problem: str | None  # None, "absent", or why it is unreadable
    local: Local
    suspend: Suspended | None  # the record, active or not
    locks: tuple[gates.Lock, ...]  # every lock file found
    valid_locks: tuple[gates.Lock, ...]
    stale_locks: tuple[gates.Lock, ...]
    token: TokenState | None  # token.json (None: absent or unreadable)
    interrupted: Journal | None
    # what ticks moved into aside/ (newest first), and what the next tick moves there: each
    # path under the state dir and why (a symbolic link, a FIFO ...); empty unless asked
    set_aside: tuple[aside.Aside, ...] = ()
    strays: tuple[tuple[str, str], ...] = ()

    @property
    def last_known_good(self) -> str | None:
        return self.local.record.revision if self.local.record else None

    @property
    def running(self) -> str | None:
        """The revision the containers are of: a failed revision that changed the box and was
        not rolled back, else the last-known-good."""
        held = self.local.held
        if held is None:
            return self.last_known_good
        from monky_deployd.core.records.held import BackingOff  # (held.json exists)

        changed = isinstance(held, BackingOff) and held.box_changed
        return held.revision if held is not None and changed else self.last_known_good

    @property
    def suspended(self) -> Suspended | None:
        s = self.suspend
        return s if s is not None and s.active(self.now) else None


def recorded(
    cfg: Config, state: StateDir, now: float, led: Ledger | None = None, *, entries: bool = True
) -> Recorded:
    """The recorded view; ``led``: the ledger the caller holds (it was just written);
    ``entries``: also what was and what will be set aside (``status``; the metrics skip it)."""
    problem: str | None = None
    if led is None:
        led, problem = state.read_ledger()
    try:
        token = state.read_token()
    except (DeployError, ValueError):
        token = None
    try:
        found = locks.read_locks(cfg.locks.dir)
    except DeployError:
        found = ()
    valid, stale = gates.split_locks(found, now, cfg.locks.default_ttl_s, cfg.locks.max_ttl_s)
    local = read_local(state)
    # the waits as the next tick sees them (bounded against now: core.clock)
    local = replace(local, held=recovery.bounded(local.held, now, cfg.backoff.cap_s))
    return Recorded(
        now,
        led,
        problem,
        local,
        suspend.bounded(now) if (suspend := state.read_suspend()) is not None else None,
        tuple(found),
        valid,
        stale,
        token,
        state.read_journal(),
        tuple(state.set_aside()) if entries else (),
        tuple((str(p.relative_to(state.root)), why) for p, why in state.strays())
        if entries
        else (),
    )
