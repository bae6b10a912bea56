"""The Prometheus textfile: ``<metrics.textfile_dir>/monky-deployd.prom`` for node-exporter's
textfile collector (``--collector.textfile.directory``; Debian's prometheus-node-exporter reads
/var/lib/prometheus/node-exporter, the default of ``metrics.textfile_dir``).

Written by atomic rename (``fsutil.atomic_write``, mode 0644 so node-exporter's user reads it)
after a tick that changed something (``core.records.ledger.quiet`` is false) or when the file is
missing; a quiet tick (a steady no-op) only sets the file's mtime, so node-exporter's
``node_textfile_mtime_seconds{file=".../monky-deployd.prom"}`` is the time of the last tick of
any kind, and ``prometheus_client`` (about 80 ms to import) is not imported. The values come from
the tick ledger (counters survive the process) and the state dir; OPERATIONS.md lists them.
A directory that does not exist means no metrics (no warning); one the agent cannot write is a
warning, never the tick's fault.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from monky_deployd import __version__
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.fsutil import atomic_write
from monky_deployd.agent.observe import recorded
from monky_deployd.config import Config
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle import schedule
from monky_deployd.core.records import ledger
from monky_deployd.core.records.held import BackingOff, Stalled
from monky_deployd.core.records.ledger import TEXTFILE_NAME

log = logging.getLogger("monky_deployd")

TEXTFILE = TEXTFILE_NAME


@dataclass(frozen=True)
class Snapshot:
    """Everything the textfile says, gathered from the ledger and the state dir."""

    led: ledger.Ledger
    now: float
    applied: str | None
    held: str | None
    held_stalled: bool
    next_attempt_at: float | None
    suspended: bool
    locks_valid: int
    disk_free: tuple[tuple[str, int], ...]  # (pull target, free bytes of its filesystem)
    window_open: bool | None = None  # None: no update windows
    next_window_at: float | None = None  # the next opening of an update window
    waiting_until: float | None = None  # a new revision waits until then
    waiting_why: str = ""


def _free(path: str) -> int | None:
    current = Path(path)
    while True:
        try:
            st = os.statvfs(current)
            return st.f_bavail * st.f_frsize
        except OSError:
            if current.parent == current:
                return None
            current = current.parent


def snapshot(cfg: Config, state: StateDir, led: ledger.Ledger, now: float) -> Snapshot:
    seen = recorded.recorded(cfg, state, now, led, entries=False)
    applied, held = seen.local.record, seen.local.held
    disk = tuple((p, free) for p in led.pull_filesystems if (free := _free(p)) is not None)
    windows, waiting = cfg.windows, seen.local.waiting
    return Snapshot(
        led=led,
        now=now,
        applied=applied.revision if applied else None,
        held=held.revision if held else None,
        held_stalled=isinstance(held, Stalled),
        next_attempt_at=held.next_attempt_at if isinstance(held, BackingOff) else None,
        suspended=seen.suspended is not None,
        locks_valid=len(seen.valid_locks),
        disk_free=disk,
        window_open=schedule.window_state(windows, now).open if windows else None,
        next_window_at=schedule.next_open(windows, now),
        waiting_until=waiting.until if waiting is not None else None,
        waiting_why=waiting.why or "" if waiting is not None else "",
    )


def families(s: Snapshot) -> list[Any]:
    """The metric families of ``s`` (prometheus_client's, imported here)."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        InfoMetricFamily,
    )

    led, last = s.led, s.led.last
    out: list[Any] = []

    def gauge(name: str, doc: str, value: float | None, **labels: str) -> None:
        fam = GaugeMetricFamily(f"monky_deployd_{name}", doc, labels=list(labels))
        if value is not None:
            fam.add_metric(list(labels.values()), value)
        out.append(fam)

    info = InfoMetricFamily("monky_deployd_agent", "the agent's version and revisions")
    info.add_metric(
        [],
        {
            "version": __version__,
            "applied_revision": s.applied or "",
            "desired_revision": led.desired or "",
        },
    )
    out.append(info)
    gauge(
        "last_tick_timestamp_seconds",
        "when the last recorded tick ended (the file's mtime: the last tick of any kind)",
        last.finished_at if last else None,
    )
    gauge(
        "last_success_timestamp_seconds",
        "when the last tick that ended at the desired revision (applied, noop, idle) ended",
        led.last_success_at,
    )
    gauge(
        "last_tick_duration_seconds",
        "the last recorded tick's wall time",
        last.duration_ms / 1000 if last else None,
    )
    outcome = GaugeMetricFamily(
        "monky_deployd_last_tick_outcome",
        "1 for the last recorded tick's outcome, 0 for the others",
        labels=["outcome"],
    )
    for name in ledger.OUTCOMES:
        outcome.add_metric([name], 1.0 if last and last.outcome == name else 0.0)
    out.append(outcome)
    ticks = CounterMetricFamily(
        "monky_deployd_ticks",
        "recorded ticks by outcome (since the ledger began)",
        labels=["outcome"],
    )
    for name in ledger.OUTCOMES:
        ticks.add_metric([name], float(led.ticks.get(name, 0)))
    out.append(ticks)
    phases = GaugeMetricFamily(
        "monky_deployd_phase_duration_seconds",
        "each phase of the last recorded tick",
        labels=["phase"],
    )
    seen: set[str] = set()
    for p in last.phases if last else ():
        if p.name not in seen:  # a phase that ran twice (verify after a rollback): the first
            seen.add(p.name)
            phases.add_metric([p.name], p.ms / 1000)
    out.append(phases)
    gauge(
        "consecutive_failures",
        "failed or refused ticks since the last success",
        float(led.consecutive_failures),
    )
    tok = GaugeMetricFamily(
        "monky_deployd_token_expiry_timestamp_seconds",
        "when the held OpenBao token expires (as token.json last said)",
        labels=["kind"],
    )
    if led.token is not None:
        tok.add_metric([led.token.kind], led.token.expires_at)
    out.append(tok)
    out.append(
        CounterMetricFamily(
            "monky_deployd_leases", "tenancy leases this box spent", value=float(led.leases_total)
        )
    )
    gauge(
        "leases_last_hour",
        "leases spent in the hour before the file was written (tenancy allows 5)",
        float(led.leases_since(s.now - ledger.LEASE_WINDOW_S)),
    )
    disk = GaugeMetricFamily(
        "monky_deployd_disk_free_bytes",
        "free bytes on the filesystem of each pull target the last pre-flight found",
        labels=["path"],
    )
    for path, free in s.disk_free:
        disk.add_metric([path], float(free))
    out.append(disk)
    out.append(
        CounterMetricFamily(
            "monky_deployd_rollbacks",
            "rollbacks to the last-known-good revision",
            value=float(led.rollbacks),
        )
    )
    out.append(
        CounterMetricFamily(
            "monky_deployd_rollbacks_failed",
            "rollbacks that failed (the box stalled)",
            value=float(led.rollbacks_failed),
        )
    )
    gauge("held", "1 while the desired revision is held or backing off", 1.0 if s.held else 0.0)
    gauge("stalled", "1 while a failed rollback stalls the box", 1.0 if s.held_stalled else 0.0)
    gauge(
        "backoff_next_attempt_timestamp_seconds",
        "when a backing-off revision is tried next (0: no backoff)",
        s.next_attempt_at or 0.0,
    )
    gauge(
        "suspended",
        "1 while applies are suspended (monky-deployd suspend)",
        1.0 if s.suspended else 0.0,
    )
    gauge("update_locks", "update locks in force (pull, but do not recreate)", float(s.locks_valid))
    gauge(
        "update_window_open",
        "1 inside an update window, 0 outside (when the file was written; absent: no windows)",
        None if s.window_open is None else float(s.window_open),
    )
    gauge(
        "update_window_next_open_timestamp_seconds",
        "when an update window opens next (absent: no windows)",
        s.next_window_at,
    )
    waiting = GaugeMetricFamily(
        "monky_deployd_waiting_until_timestamp_seconds",
        "when a new revision that waits (window or rollout) is applied (absent: none waits)",
        labels=["why"],
    )
    if s.waiting_until is not None:
        waiting.add_metric([s.waiting_why], s.waiting_until)
    out.append(waiting)
    return out


def render(s: Snapshot) -> bytes:
    """The textfile's bytes (the text exposition format, version 0.0.4)."""
    from prometheus_client import CollectorRegistry, generate_latest

    class _Collector:
        def collect(self) -> list[Any]:
            return families(s)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return generate_latest(registry)


def publish(cfg: Config, state: StateDir, led: ledger.Ledger) -> None:
    """Rewrite the textfile (``agent.tick.ledger`` only touches it after a quiet tick)."""
    directory = cfg.metrics.textfile_dir
    if directory is None or not directory.is_dir():
        return  # no textfile collector here: no metrics
    path = directory / TEXTFILE
    try:
        now = led.last.finished_at if led.last is not None else time.time()  # the tick's clock
        atomic_write(path, render(snapshot(cfg, state, led, now)), 0o644, durable=False)
    except DeployError as err:
        warn(path, err.message)


def warn(path: Path, why: str) -> None:
    log.warning(
        f"the metrics textfile {path} could not be written ({why}); the tick's outcome stands",
        extra={"event": "metrics.failed", "phase": "summary", "path": str(path)},
    )
