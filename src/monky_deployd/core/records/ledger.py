"""The tick ledger (``<state_dir>/ledger.json``): what past ticks did, for ``status`` and metrics.

A tick is one process, so whatever must outlive it (counters, the last success, the leases this
box spent, the history of ticks that changed something) lives here. ``record`` is PURE: the
ledger before, the finished tick's ``Entry`` and what the tick left in token.json give the ledger
after. ``quiet`` says whether that tick repeated the last one exactly (a steady no-op): then the
agent writes the ledger without fsync and only touches the metrics textfile
(``agent.tick.ledger``). ``StateDir`` reads and writes the bytes (``to_json`` / ``from_json``).

Bounded whatever happens: every text is cut (``TEXT_MAX``, tick ids and codes shorter), at most
``HISTORY_MAX`` history entries (a run of identical ticks is one entry with ``repeats``), at
most ``LEASES_MAX`` lease times from the last ``LEASE_KEEP_S``, at most ``PHASES_MAX`` phases;
``from_json`` refuses more than ``MAX_BYTES``. An unreadable ledger is a fresh one (counters
restart; ``from_json`` raises ``ValueError`` with a reason, never the content).

Plain frozen dataclasses, not pydantic: the ledger is read and written on every tick, the
no-op one too, and a schema build costs milliseconds at import.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

LEDGER_VERSION = 1
HISTORY_MAX = 20
LEASES_MAX = 50
LEASE_KEEP_S = 24 * 3600
LEASE_WINDOW_S = 3600  # "leases in the last hour": tenancy's budget is 5 per rolling hour
PHASES_MAX = 32
TEXT_MAX = 300
SHORT_MAX = 64
REVISION_MAX = 128
MAX_BYTES = 256 * 1024
TEXTFILE_NAME = "monky-deployd.prom"  # the metrics textfile, beside the ledger's figures
OUTCOMES = ("applied", "noop", "idle", "held", "waiting", "failed", "refused")
SUCCESS = frozenset({"applied", "noop", "idle"})
FAILURE = frozenset({"failed", "refused"})


def cut(text: object, limit: int = TEXT_MAX) -> str:
    """``text`` as one line of at most ``limit`` characters (a cut ends in ``…``)."""
    line = str(text).replace("\r", " ").replace("\n", " ")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _opt(text: object, limit: int) -> str | None:
    return None if text is None else cut(text, limit)


@dataclass(frozen=True)
class Phase:
    name: str
    ms: int
    ok: bool


@dataclass(frozen=True)
class Entry:
    """One tick as the ledger keeps it; ``message`` is its first line, already masked."""

    tick_id: str
    started_at: float
    finished_at: float
    outcome: str
    code: str
    message: str
    revision: str | None = None
    duration_ms: int = 0
    phases: tuple[Phase, ...] = ()
    rollback_to: str | None = None
    rollback_ok: bool | None = None
    repeats: int = 1  # history: identical ticks in a row (same outcome, code, revision)
    seq: int = 0  # the ledger's sequence number of this tick (0: written before it had one)
    desired: str | None = None  # as the tick's check-in named it (not kept per entry)

    def bounded(self) -> Entry:
        return replace(
            self,
            tick_id=cut(self.tick_id, SHORT_MAX),
            outcome=cut(self.outcome, 16),
            code=cut(self.code, SHORT_MAX),
            message=cut(self.message.splitlines()[0] if self.message else ""),
            revision=_opt(self.revision, REVISION_MAX),
            duration_ms=max(0, int(self.duration_ms)),
            phases=tuple(
                Phase(cut(p.name, SHORT_MAX), max(0, int(p.ms)), bool(p.ok))
                for p in self.phases[:PHASES_MAX]
            ),
            rollback_to=_opt(self.rollback_to, REVISION_MAX),
            desired=_opt(self.desired, REVISION_MAX),
            repeats=max(1, int(self.repeats)),
            seq=max(0, int(self.seq)),
        )

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (self.outcome, self.code, self.revision)

    @property
    def changed(self) -> bool:
        """A tick that changed something or tried to: history keeps it (noop, idle and the
        skipped ticks, held, do not)."""
        return self.outcome in ("applied", "failed", "refused") or self.rollback_to is not None


@dataclass(frozen=True)
class TokenSeen:
    """token.json's bookkeeping at the end of a tick (never the token)."""

    kind: str
    expires_at: float
    renewable: bool
    lease_id: str = ""
    obtained_at: float = 0.0


@dataclass(frozen=True)
class Ledger:
    last: Entry | None = None
    last_success_at: float | None = None
    ticks: dict[str, int] = field(default_factory=dict)
    consecutive_failures: int = 0
    rollbacks: int = 0
    rollbacks_failed: int = 0
    leases: tuple[float, ...] = ()  # when each lease of the last LEASE_KEEP_S was minted
    leases_total: int = 0
    last_lease_id: str = ""
    desired: str | None = None  # as the last check-in named it
    desired_seen_at: float | None = None
    token: TokenSeen | None = None
    pull_filesystems: tuple[str, ...] = ()  # mount points the last pre-flight measured
    history: tuple[Entry, ...] = ()  # oldest first
    seq: int = 0  # ticks written to this ledger: the last one's sequence number

    def leases_since(self, since: float) -> int:
        return sum(1 for t in self.leases if t >= since)

    def to_json(self) -> bytes:
        body: dict[str, Any] = {
            "version": LEDGER_VERSION,
            "last": entry_dict(self.last),
            "last_success_at": self.last_success_at,
            "ticks": {k: self.ticks[k] for k in OUTCOMES if k in self.ticks},
            "consecutive_failures": self.consecutive_failures,
            "rollbacks": self.rollbacks,
            "rollbacks_failed": self.rollbacks_failed,
            "leases": list(self.leases),
            "leases_total": self.leases_total,
            "last_lease_id": self.last_lease_id,
            "desired": self.desired,
            "desired_seen_at": self.desired_seen_at,
            "token": None if self.token is None else self.token.__dict__,
            "pull_filesystems": list(self.pull_filesystems),
            "history": [entry_dict(e, phases=False) for e in self.history],
            "seq": self.seq,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @staticmethod
    def from_json(raw: bytes) -> Ledger:
        """The ledger ``raw`` holds; ValueError (a reason, never the content) when it is not
        one. Every field is checked and bounded as ``record`` bounds it."""
        if len(raw) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES} bytes")
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict) or data.get("version") != LEDGER_VERSION:
            raise ValueError(f"not a version-{LEDGER_VERSION} tick ledger")
        try:
            return _ledger_in(data)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError):
            pass
        raise ValueError("a field is missing or mistyped")  # outside the except: no input


# -- the update ----------------------------------------------------------------------------------


def record(
    prev: Ledger,
    entry: Entry,
    *,
    token: TokenSeen | None,
    pull_filesystems: tuple[str, ...] = (),
) -> Ledger:
    """The ledger after the finished tick ``entry``; ``token``: token.json as the tick left it
    (a lease id not seen before, minted since the previous tick, is a lease spent)."""
    # order is the ledger's sequence, never the wall clock: the tick recorded now is the newest
    # one written (ticks never interleave: the state dir's lock), whatever its clock said
    seq = max(prev.seq, prev.last.seq if prev.last is not None else 0) + 1
    e = replace(entry, seq=seq).bounded()
    ticks = dict(prev.ticks)
    if e.outcome in OUTCOMES:
        ticks[e.outcome] = ticks.get(e.outcome, 0) + 1
    failures = prev.consecutive_failures
    if e.outcome in FAILURE:
        failures += 1
    elif e.outcome in SUCCESS:
        failures = 0
    leases, total, lease_id = prev.leases, prev.leases_total, prev.last_lease_id
    if token is not None and token.kind == "lease" and token.lease_id:
        # (the earlier of the two ticks' clocks: one from a clock ahead hides no lease)
        since = min(prev.last.started_at, e.started_at) if prev.last is not None else e.started_at
        if token.lease_id != lease_id and token.obtained_at >= since - 1:
            leases, total = (*leases, token.obtained_at), total + 1
        lease_id = cut(token.lease_id, SHORT_MAX)
    keep_from = e.finished_at - LEASE_KEEP_S
    leases = tuple(t for t in leases if t >= keep_from)[-LEASES_MAX:]
    desired, seen_at = prev.desired, prev.desired_seen_at
    if any(p.name == "checkin" and p.ok for p in e.phases):  # the tick heard tenancy
        desired = e.desired
        seen_at = e.finished_at
    e = replace(e, desired=None)  # the ledger keeps one desired revision, not one per entry
    history = prev.history
    if e.changed:
        top = history[-1] if history else None
        if top is not None and top.key == e.key and top.rollback_to == e.rollback_to:
            history = (*history[:-1], replace(e, phases=(), repeats=top.repeats + 1))
        else:
            history = (*history, replace(e, phases=()))[-HISTORY_MAX:]
    return Ledger(
        last=e,
        last_success_at=e.finished_at if e.outcome in SUCCESS else prev.last_success_at,
        ticks=ticks,
        consecutive_failures=failures,
        rollbacks=prev.rollbacks + (e.rollback_to is not None),
        rollbacks_failed=prev.rollbacks_failed + (e.rollback_ok is False),
        leases=leases,
        leases_total=total,
        last_lease_id=lease_id,
        desired=_opt(desired, REVISION_MAX),
        desired_seen_at=seen_at,
        token=_token_bounded(token) if token is not None else prev.token,
        pull_filesystems=tuple(cut(p, 512) for p in pull_filesystems[:8]) or prev.pull_filesystems,
        history=history,
        seq=seq,
    )


def quiet(prev: Ledger, new: Ledger) -> bool:
    """The tick repeated the previous one and changed nothing else: same outcome, code and
    revision, no lease, rollback, failure, history or token change (a steady no-op)."""
    if prev.last is None or new.last is None or prev.last.key != new.last.key:
        return False
    return (
        new.history == prev.history
        and new.leases_total == prev.leases_total
        and new.rollbacks == prev.rollbacks
        and new.consecutive_failures == prev.consecutive_failures
        and new.desired == prev.desired
        and new.token == prev.token
        and new.pull_filesystems == prev.pull_filesystems
    )


# -- bytes ---------------------------------------------------------------------------------------


def entry_dict(e: Entry | None, *, phases: bool = True) -> dict[str, Any] | None:
    """The entry as the ledger file stores it (times as epoch seconds); ``status`` shows it."""
    if e is None:
        return None
    out: dict[str, Any] = {
        "tick_id": e.tick_id,
        "started_at": e.started_at,
        "finished_at": e.finished_at,
        "outcome": e.outcome,
        "code": e.code,
        "message": e.message,
        "revision": e.revision,
        "duration_ms": e.duration_ms,
        "rollback_to": e.rollback_to,
        "rollback_ok": e.rollback_ok,
        "repeats": e.repeats,
    }
    if e.seq:
        out["seq"] = e.seq
    if phases:
        out["phases"] = [[p.name, p.ms, p.ok] for p in e.phases]
    return out


def _num(v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise TypeError("not a number")
    return float(v)


def _opt_num(v: object) -> float | None:
    return None if v is None else _num(v)


def _count(v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TypeError("not a count")
    return min(v, 2**53)


def _text(v: object, limit: int) -> str:
    if not isinstance(v, str):
        raise TypeError("not a string")
    return cut(v, limit)


def _opt_text(v: object, limit: int) -> str | None:
    return None if v is None else _text(v, limit)


def _opt_bool(v: object) -> bool | None:
    if v is not None and not isinstance(v, bool):
        raise TypeError("not a boolean")
    return v


def _entry_in(d: object) -> Entry | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise TypeError("not an object")
    phases = d.get("phases") or []
    if not isinstance(phases, list):
        raise TypeError("phases")
    return Entry(
        tick_id=_text(d["tick_id"], SHORT_MAX),
        started_at=_num(d["started_at"]),
        finished_at=_num(d["finished_at"]),
        outcome=_text(d["outcome"], 16),
        code=_text(d["code"], SHORT_MAX),
        message=_text(d["message"], TEXT_MAX),
        revision=_opt_text(d.get("revision"), REVISION_MAX),
        duration_ms=_count(d.get("duration_ms", 0)),
        phases=tuple(
            Phase(_text(p[0], SHORT_MAX), _count(p[1]), bool(p[2])) for p in phases[:PHASES_MAX]
        ),
        rollback_to=_opt_text(d.get("rollback_to"), REVISION_MAX),
        rollback_ok=_opt_bool(d.get("rollback_ok")),
        repeats=max(1, _count(d.get("repeats", 1))),
        seq=_count(d.get("seq", 0)),
    )


def _token_bounded(t: TokenSeen) -> TokenSeen:
    return replace(t, kind=cut(t.kind, 16), lease_id=cut(t.lease_id, SHORT_MAX))


def _ledger_in(d: dict[str, Any]) -> Ledger:
    ticks = d.get("ticks") or {}
    if not isinstance(ticks, dict):
        raise TypeError("ticks")
    tok = d.get("token")
    token = None
    if tok is not None:
        token = TokenSeen(
            kind=_text(tok["kind"], 16),
            expires_at=_num(tok["expires_at"]),
            renewable=bool(tok["renewable"]),
            lease_id=_text(tok.get("lease_id", ""), SHORT_MAX),
            obtained_at=_num(tok.get("obtained_at", 0.0)),
        )
    history = d.get("history") or []
    leases = d.get("leases") or []
    fss = d.get("pull_filesystems") or []
    if not isinstance(history, list) or not isinstance(leases, list) or not isinstance(fss, list):
        raise TypeError("a list field")
    return Ledger(
        last=_entry_in(d.get("last")),
        last_success_at=_opt_num(d.get("last_success_at")),
        ticks={k: _count(ticks[k]) for k in OUTCOMES if k in ticks},
        consecutive_failures=_count(d.get("consecutive_failures", 0)),
        rollbacks=_count(d.get("rollbacks", 0)),
        rollbacks_failed=_count(d.get("rollbacks_failed", 0)),
        leases=tuple(_num(t) for t in leases[-LEASES_MAX:]),
        leases_total=_count(d.get("leases_total", 0)),
        last_lease_id=_text(d.get("last_lease_id", ""), SHORT_MAX),
        desired=_opt_text(d.get("desired"), REVISION_MAX),
        desired_seen_at=_opt_num(d.get("desired_seen_at")),
        token=token,
        pull_filesystems=tuple(_text(p, 512) for p in fss[:8]),
        history=tuple(e for e in (_entry_in(h) for h in history[-HISTORY_MAX:]) if e),
        seq=_count(d.get("seq", 0)),
    )
