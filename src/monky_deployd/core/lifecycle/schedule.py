"""When a new revision may be applied: update windows and the rollout spread. PURE: no I/O, no
clock (``now`` is passed in), no logging.

**Update windows** (config.yaml ``update_windows``, a list; empty = always): each is a weekly
schedule with a duration and an IANA time zone, written ``DAYS HH:MM for DURATION ZONE``::

    Mon..Fri 02:00 for 3h Europe/Berlin
    Sat,Sun 22:30 for 1h30m UTC
    * 04:00 for 45m America/New_York        (* = every day; Fri..Mon wraps over the week end)

``parse_window`` reads the text (no zone lookup: the zone's name only); the config layer gives
each a ``tzinfo`` (``zoneinfo``), and ``window_state`` says, for an instant, whether a window
is open (and until when) or when the next one opens. A window opens on each of its days at the
local wall time ``HH:MM`` and stays open for ``DURATION`` of elapsed time (at most 7 days), so a
daylight-saving change never makes it longer or shorter:

- a start inside the spring-forward gap (02:30 on the day Europe/Berlin jumps from 02:00 to
  03:00) opens at the instant the clock would have shown 02:30 without the jump, which the clock
  shows as 03:30 (PEP 495, ``fold=0``); it still lasts its full duration;
- a start inside the autumn repeat (02:30 happens twice) opens at the first 02:30 (summer time)
  and lasts its duration from there: it does not open a second time.

**Rollout spread** (the bundle's ``"rollout": {"spread_s": N}``, contract v1.2): a box that
first sees a revision applies it ``offset`` seconds later, ``offset = u * N`` with ``u`` in
[0, 1) from SHA-256 of the box's identity (its env name) and the revision: the same box gets the
same place for the same revision, another revision reshuffles the estate, and boxes spread
evenly. A box with ``u < CANARY_FRACTION`` is a canary (its report reaches tenancy first). The
moment a box first saw the revision (``Seen``, ``<state_dir>/waiting.json``) is bounded against
clock steps by ``seen``: a record of another revision, or one in the future, restarts at ``now``;
one older than ``N`` makes the box due at once (never later than N after the first sight).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import Any

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MAX_WINDOW_S = 7 * 86400
MAX_SPREAD_S = 86400
CANARY_FRACTION = 0.02  # the first 2 % of the spread: about 1 box in 50

_WINDOW_RE = re.compile(
    r"^\s*(?P<days>\S+)\s+(?P<hh>\d{1,2}):(?P<mm>\d{2})\s+for\s+(?P<dur>\S+)\s+(?P<tz>\S+)\s*$"
)
_DUR_RE = re.compile(r"^(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?$")
WINDOW_SYNTAX = "DAYS HH:MM for DURATION ZONE, e.g. 'Mon..Fri 02:00 for 3h Europe/Berlin'"


# -- update windows --------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowSpec:
    """A window as written: days (0 = Monday), the local start, the duration, the zone's name."""

    days: frozenset[int]
    hour: int
    minute: int
    duration_s: int
    zone: str
    text: str


@dataclass(frozen=True)
class Window:
    spec: WindowSpec
    tz: tzinfo


def _day(name: str) -> int:
    for i, day in enumerate(DAYS):
        if name.lower() == day.lower():
            return i
    raise ValueError(f"{name!r} is not a day (one of {', '.join(DAYS)})")


def _days(text: str) -> frozenset[int]:
    if text == "*":
        return frozenset(range(7))
    found: set[int] = set()
    for part in text.split(","):
        if ".." in part:
            first, _, last = part.partition("..")
            a, b = _day(first), _day(last)
            found.update((a + i) % 7 for i in range((b - a) % 7 + 1))
        else:
            found.add(_day(part))
    return frozenset(found)


def parse_duration(text: str) -> int:
    """``3h``, ``90m``, ``1h30m``, ``2d`` -> seconds (more than 0, at most 7 days)."""
    m = _DUR_RE.fullmatch(text)
    if not m or not any(m.groups()):
        raise ValueError(f"the duration {text!r} is not like 3h, 90m or 1h30m")
    seconds = sum(int(m[k] or 0) * s for k, s in (("d", 86400), ("h", 3600), ("m", 60)))
    if not 0 < seconds <= MAX_WINDOW_S:
        raise ValueError(f"the duration {text!r} must be more than 0 and at most 7 days")
    return seconds


def parse_window(text: str) -> WindowSpec:
    """One window's text -> its spec; ValueError with one sentence naming what is wrong."""
    m = _WINDOW_RE.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is not a window: write {WINDOW_SYNTAX}")
    hour, minute = int(m["hh"]), int(m["mm"])
    if hour > 23 or minute > 59:
        raise ValueError(f"{m['hh']}:{m['mm']} is not a time of day (00:00 to 23:59)")
    return WindowSpec(
        _days(m["days"]), hour, minute, parse_duration(m["dur"]), m["tz"], text.strip()
    )


@dataclass(frozen=True)
class WindowState:
    """Whether a new revision may be applied at an instant, from the update windows."""

    open: bool
    closes_at: float | None = None  # open: when the window open now closes (None: no windows)
    opens_at: float | None = None  # closed: when the next window opens
    window: str = ""  # the window meant (its text)

    def describe(self) -> str:
        if self.open:
            return "no update windows are set" if not self.window else f"inside {self.window}"
        return f"outside every update window; the next opens at {_utc(self.opens_at)}"


def _start(day: date, spec: WindowSpec, tz: tzinfo) -> float:
    # fold=0: a time in the spring-forward gap uses the offset before the jump (see above)
    return datetime(day.year, day.month, day.day, spec.hour, spec.minute, tzinfo=tz).timestamp()


def occurrences(w: Window, now: float) -> list[tuple[float, float]]:
    """The window's (open, close) instants that may hold ``now`` or come next: starts from 8
    local days before ``now``'s local date to 8 after (a window lasts at most 7 days)."""
    today = datetime.fromtimestamp(now, w.tz).date()
    out = []
    for i in range(-8, 9):
        day = today + timedelta(days=i)
        if day.weekday() in w.spec.days:
            start = _start(day, w.spec, w.tz)
            out.append((start, start + w.spec.duration_s))
    return out


def next_open(windows: tuple[Window, ...], now: float) -> float | None:
    """The next instant after ``now`` a window opens (None: no windows)."""
    starts = [start for w in windows for start, _ in occurrences(w, now) if start > now]
    return min(starts) if starts else None


def window_state(windows: tuple[Window, ...], now: float) -> WindowState:
    """Open (and the latest close among the windows open now) or closed (and the next open).
    No windows: always open."""
    if not windows:
        return WindowState(True)
    best_close: tuple[float, str] | None = None
    best_open: tuple[float, str] | None = None
    for w in windows:
        for start, end in occurrences(w, now):
            if start <= now < end and (best_close is None or end > best_close[0]):
                best_close = (end, w.spec.text)
            if start > now and (best_open is None or start < best_open[0]):
                best_open = (start, w.spec.text)
    if best_close is not None:
        return WindowState(True, closes_at=best_close[0], window=best_close[1])
    assert best_open is not None  # every window has a day in the next 8
    return WindowState(False, opens_at=best_open[0], window=best_open[1])


# -- the rollout spread ----------------------------------------------------------------------


def spread_problem(raw: Any) -> str | None:
    """Why a bundle's ``rollout`` value is not ``{"spread_s": <int 0..86400>}`` (None: fine)."""
    if not isinstance(raw, dict):
        return "must be a mapping {spread_s: <seconds>}"
    unknown = sorted(str(k) for k in raw if k != "spread_s")
    if unknown:
        return f"unknown key(s) {', '.join(repr(k) for k in unknown)} (only 'spread_s')"
    spread = raw.get("spread_s", 0)
    if isinstance(spread, bool) or not isinstance(spread, int):
        return "spread_s must be an integer number of seconds"
    if not 0 <= spread <= MAX_SPREAD_S:
        return f"spread_s must be 0 to {MAX_SPREAD_S} seconds"
    return None


def rollout_malformed(bundle: Any) -> bool:
    """Whether the bundle's ``rollout`` is there and malformed (the bundle check refuses it)."""
    return (
        isinstance(bundle, dict)
        and "rollout" in bundle
        and (spread_problem(bundle["rollout"]) is not None)
    )


def spread_of(bundle: Any) -> int:
    """The bundle's ``rollout.spread_s``; 0 when absent or malformed (a malformed one is then
    refused by the bundle check, BUNDLE_INVALID, before anything changes)."""
    if not isinstance(bundle, dict) or "rollout" not in bundle:
        return 0
    raw = bundle["rollout"]
    if spread_problem(raw) is not None:
        return 0
    return int(raw.get("spread_s", 0))


def place(identity: str, revision: str) -> float:
    """The box's place in [0, 1) for this revision: SHA-256 of identity and revision."""
    digest = hashlib.sha256(f"{identity}\0{revision}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def offset(identity: str, revision: str, spread_s: int) -> float:
    """Seconds after first seeing ``revision`` that this box applies it, in [0, spread_s)."""
    return place(identity, revision) * spread_s if spread_s > 0 else 0.0


def is_canary(identity: str, revision: str) -> bool:
    return place(identity, revision) < CANARY_FRACTION


@dataclass(frozen=True)
class Seen:
    """``waiting.json``: when this box first saw ``revision``; while it waits, until when and
    why (``window`` | ``rollout``), for the next check-in's ``waiting`` (contract v1.2)."""

    revision: str
    first_seen_at: float
    until: float | None = None
    why: str | None = None
    spread_s: int = 0  # the bundle's, when last seen (status shows the box's place)


def seen_to_json(record: Seen) -> bytes:
    return json.dumps(
        {
            "revision": record.revision,
            "first_seen_at": record.first_seen_at,
            "until": record.until,
            "why": record.why,
            "spread_s": record.spread_s,
        },
        indent=2,
        sort_keys=True,
    ).encode()


def seen_from_json(raw: bytes) -> Seen:
    """``waiting.json``'s record; ValueError (never with a value) when it is not one."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        rev, first = data.get("revision"), data.get("first_seen_at")
        until, why = data.get("until"), data.get("why")
        spread = data.get("spread_s", 0)
        if (
            isinstance(rev, str)
            and rev
            and _time(first)
            and (until is None or _time(until))
            and why in (None, "window", "rollout")
            and isinstance(spread, int)
            and not isinstance(spread, bool)
            and 0 <= spread <= MAX_SPREAD_S
        ):
            assert isinstance(first, int | float)
            end = None if until is None else float(until)
            return Seen(rev, float(first), end, why, spread)
    raise ValueError("not a waiting record")


def _time(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def seen(stored: Seen | None, revision: str, now: float) -> Seen:
    """The record for ``revision`` at ``now``: kept, or restarted at ``now`` when it is of
    another revision or its first sight lies in the future (the clock stepped back)."""
    if stored is None or stored.revision != revision or stored.first_seen_at > now:
        return Seen(revision, now)
    return stored


@dataclass(frozen=True)
class Gate:
    """May the box apply ``revision`` now? If not, until when and why."""

    revision: str
    first_seen_at: float
    due_at: float  # first sight + this box's offset
    offset_s: float
    spread_s: int
    canary: bool
    windows: WindowState
    until: float | None  # None: apply now
    why: str | None  # "rollout" | "window" | None

    @property
    def wait(self) -> bool:
        return self.until is not None


def gate(
    first: Seen,
    *,
    identity: str,
    spread_s: int,
    windows: tuple[Window, ...],
    now: float,
) -> Gate:
    """The rollout wait first (it runs from the first sight, whatever the windows), then the
    windows: a box whose place came outside every window applies when the next one opens."""
    off = offset(identity, first.revision, spread_s)
    due = first.first_seen_at + off
    canary = spread_s > 0 and is_canary(identity, first.revision)
    if now < due:
        at_due = window_state(windows, due)
        until = due if at_due.open else at_due.opens_at
        now_state = window_state(windows, now)
        return Gate(
            first.revision,
            first.first_seen_at,
            due,
            off,
            spread_s,
            canary,
            now_state,
            until,
            "rollout",
        )
    state = window_state(windows, now)
    if not state.open:
        return Gate(
            first.revision,
            first.first_seen_at,
            due,
            off,
            spread_s,
            canary,
            state,
            state.opens_at,
            "window",
        )
    return Gate(first.revision, first.first_seen_at, due, off, spread_s, canary, state, None, None)


def _utc(at: float | None) -> str:
    if at is None:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(g: Gate) -> str:
    """The journal's sentence for a box that waits (or applies now)."""
    where = ""
    if g.spread_s:
        where = (
            f"rollout place {g.offset_s:.0f} s of {g.spread_s} s"
            + (" (canary)" if g.canary else "")
            + f", due at {_utc(g.due_at)}"
        )
    if g.why == "rollout":
        tail = (
            "" if g.until == g.due_at else f"; then waits for the window opening at {_utc(g.until)}"
        )
        return f"revision {g.revision} waits for its rollout place: {where}{tail}"
    if g.why == "window":
        return f"revision {g.revision} waits: {g.windows.describe()} ({g.windows.window})" + (
            f"; {where}" if where else ""
        )
    return f"revision {g.revision} may be applied now" + (f" ({where})" if where else "")
