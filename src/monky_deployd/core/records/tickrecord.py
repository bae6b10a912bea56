"""The report body posted to tenancy after every apply attempt (contract.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from monky_deployd import __version__
from monky_deployd.core.errors import Code
from monky_deployd.core.wire.checkin import AgentInfo

if TYPE_CHECKING:  # (core.records.reasons and the report's rows stay off the no-op tick's imports)
    from monky_deployd.core.records.reasons import Reason
    from monky_deployd.core.wire.report import ReportBody, RollbackRow


@dataclass
class PhaseTiming:
    name: str
    ok: bool
    ms: int


@dataclass
class TickRecord:
    """What one tick did; the report, the ledger, the metrics, the summary log line and the
    exit code come from it (``agent.tick.publish``)."""

    tick_id: str
    started_at: float
    outcome: str = "failed"  # applied | noop | idle | held | waiting | failed | refused
    code: Code | Literal["OK"] = "OK"
    message: str = ""
    detail: str = ""
    revision: str | None = None  # the revision this tick worked on (the report's)
    desired: str | None = None  # the revision tenancy wants, as the check-in said
    applied: str | None = None  # the revision that runs when the tick ends (its LKG)
    reportable: bool = False  # an apply or restore was attempted: tenancy gets a report
    pull_filesystems: tuple[str, ...] = ()  # where the pre-flight found pulls write
    phases: list[PhaseTiming] = field(default_factory=list)
    services: list[dict[str, str]] = field(default_factory=list)
    finished_at: float | None = None
    rollback: RollbackRow | None = None  # after a failed apply: the LKG restored, and whether
    reasons: list[Reason] = field(default_factory=list)  # why it applied (core.records.reasons)


_FIRST = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_LAST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def rfc3339(ts: float, timespec: str = "milliseconds") -> str:
    """UTC, ``Z``-suffixed; ``timespec`` as for ``datetime.isoformat``. Never raises: a time
    outside what a date can say (a planted ``1e300``, ``Infinity``) is shown as the first or
    last second of the calendar (NaN as the first)."""
    if not ts <= _LAST:  # NaN too
        ts = _LAST if ts > _LAST else _FIRST
    ts = max(ts, _FIRST)
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def whole_seconds(seconds: float) -> int:
    """``int(seconds)`` that never raises: infinities are clamped to a century (NaN is 0)."""
    if seconds != seconds:
        return 0
    return int(max(-_CENTURY_S, min(_CENTURY_S, seconds)))


_CENTURY_S = 100 * 366 * 86400.0


def report_body(rec: TickRecord) -> ReportBody:
    from monky_deployd.core.wire.report import PhaseRow, ReasonRow, ReportBody, ServiceRow

    return ReportBody(
        tick_id=rec.tick_id,
        revision=rec.revision,
        outcome=rec.outcome,
        code=rec.code,
        message=rec.message,
        detail=rec.detail,
        phases=[PhaseRow(name=p.name, ok=p.ok, ms=p.ms) for p in rec.phases],
        services=[ServiceRow.model_validate(s) for s in rec.services],
        agent=AgentInfo(version=__version__),
        started_at=rfc3339(rec.started_at),
        finished_at=rfc3339(rec.finished_at or rec.started_at),
        rollback=rec.rollback,
        reasons=[ReasonRow(kind=r.kind, detail=r.detail) for r in rec.reasons],
    )


def body(rec: TickRecord) -> dict[str, Any]:
    """The report's JSON object (``wire.ReportBody``), as ``Tenancy.report`` posts it."""
    return report_body(rec).body()


# -- masking: the free text only -------------------------------------------------------------

# What a report says in words: the fault's message and detail, and the services' words (the
# engine's state and health, the image reference, which compose interpolates: a tag may come
# from a secret). Masked with the tick's secrets. Everything else is an identifier tenancy or the
# agent chose (tick_id, revision, outcome, code, phase names, reason kinds and details, which hold
# names and revisions and never a value, rollback.to_revision, a service's name, the agent's
# version, the times) and is sent as it is: tenancy matches on them, and a secret whose value
# happens to hold a revision name must not turn the revision into "***".
FREE_TEXT = ("message", "detail")
SERVICE_WORDS = ("state", "health", "image")


def masked(body: dict[str, Any], mask: Callable[[str], str]) -> dict[str, Any]:
    """A copy of the report ``body`` with its free-text fields passed through ``mask``."""
    out = dict(body)
    for key in FREE_TEXT:
        if isinstance(out.get(key), str):
            out[key] = mask(out[key])
    out["services"] = [
        {k: mask(v) if k in SERVICE_WORDS and isinstance(v, str) else v for k, v in row.items()}
        for row in out.get("services", [])
    ]
    return out
