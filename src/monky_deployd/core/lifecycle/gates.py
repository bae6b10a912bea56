"""What may stop an apply although everything is ready: update locks and a suspend. Pure.

- **Update locks**: a file in the lock directory (``locks.dir``; an app bind-mounts it) says
  "not now". While one is valid the agent pulls the new revision but does not recreate
  containers, and tries again next tick. A lock older than its TTL (its own ``ttl_s``, else
  ``locks.default_ttl_s``, never more than ``locks.max_ttl_s``) is ignored with a warning: a
  crashed app must not block deploys forever. A lock whose modification time lies further in
  the future than ``max_ttl_s`` is stale too (no clock puts it there), and one less far ahead
  is shown as held since now: so no lock blocks applies longer than twice ``max_ttl_s``.
- **Untrusted text**: a lock's name (its file name), holder and reason come from whoever
  wrote the file: ``parse_lock`` keeps them printable (``printable``: every other character
  escaped, lines, escape sequences, separators and all) and capped, before any output.
- **Suspend**: ``monky-deployd suspend [--reason] [--for]`` stops applies (check-ins continue)
  until ``resume`` or until the ``--for`` duration is over.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass

LOCK_SUFFIX = ".lock"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION_S = 366 * 86400.0  # a suspend's --for, a lock's --ttl: a year at most
MAX_TTL_S = 7 * 86400.0  # ``locks.max_ttl_s``'s default: no lock counts for longer
NAME_SHOWN = 64  # a lock's name as shown: at most this many characters
TEXT_SHOWN = 200  # a lock's holder and reason as shown


def printable(text: str, cap: int) -> str:
    """``text`` safe for a terminal, a journal line and JSON: every character that is not
    printable (controls, ESC, line and paragraph separators, lone surrogates of undecodable
    bytes) as a ``\\xNN`` / ``\\uNNNN`` escape; at most ``cap`` characters, then ``...``."""
    out: list[str] = []
    size = 0
    for ch in text:
        piece = (
            ch
            if ch.isprintable()
            else (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        )
        if size + len(piece) > cap:
            out.append("...")
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


@dataclass(frozen=True)
class Lock:
    """One lock file: its name (file name without ``.lock``), who holds it, since when."""

    name: str
    since: float  # the file's modification time
    holder: str = ""
    reason: str = ""
    ttl_s: float | None = None  # its own TTL; None: the configured default

    def expires_at(self, default_ttl_s: float, max_ttl_s: float = MAX_TTL_S) -> float:
        """When the lock stops counting: its TTL (its own, else the default; at most
        ``max_ttl_s``) after its modification time."""
        ttl = self.ttl_s if self.ttl_s is not None else default_ttl_s
        return self.since + min(ttl, max_ttl_s)

    def describe(self, now: float) -> str:
        who = self.holder or "(no holder named)"
        why = f" ({self.reason})" if self.reason else ""
        ahead = (
            f" (its modification time is {self.since - now:.0f} s in the future)"
            if self.since > now + 1
            else ""
        )
        return f"{self.name} held by {who}{why} for {max(0.0, now - self.since):.0f} s{ahead}"


def parse_lock(name: str, since: float, content: bytes) -> Lock:
    """A lock file's content: JSON ``{"holder", "reason", "ttl_s"}`` (any of them), or plain
    text naming the holder; anything else still locks, with no holder named. The name, holder
    and reason come back ``printable`` and capped; a ``ttl_s`` that is not a positive finite
    number is no TTL of its own."""
    name = printable(name, NAME_SHOWN)
    text = content.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text) if text.startswith("{") else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        ttl = data.get("ttl_s")
        own_ttl: float | None = None
        if isinstance(ttl, int | float) and not isinstance(ttl, bool):
            with contextlib.suppress(OverflowError):  # an int too large for a float
                if math.isfinite(float(ttl)) and ttl > 0:
                    own_ttl = float(ttl)
        return Lock(
            name,
            since,
            printable(_text(data.get("holder", "")), TEXT_SHOWN),
            printable(_text(data.get("reason", "")), TEXT_SHOWN),
            own_ttl,
        )
    first = text.split("\n", 1)[0] if text else ""
    return Lock(name, since, printable(first, TEXT_SHOWN))


def _text(value: object) -> str:
    """A field's text (a string as it is; anything else as JSON, cut before it is shown)."""
    if isinstance(value, str):
        return value[: TEXT_SHOWN + 1]
    try:
        return json.dumps(value)[: TEXT_SHOWN + 1]
    except (ValueError, RecursionError):
        return ""


def split_locks(
    locks: tuple[Lock, ...], now: float, default_ttl_s: float, max_ttl_s: float = MAX_TTL_S
) -> tuple[tuple[Lock, ...], tuple[Lock, ...]]:
    """(valid, stale): a lock is stale once its TTL (at most ``max_ttl_s``) is over, or when
    its modification time is more than ``max_ttl_s`` in the future."""

    def counts(lk: Lock) -> bool:
        return now < lk.expires_at(default_ttl_s, max_ttl_s) and lk.since <= now + max_ttl_s

    valid = tuple(lk for lk in locks if counts(lk))
    stale = tuple(lk for lk in locks if not counts(lk))
    return valid, stale


def summary(locks: tuple[Lock, ...], now: float, shown: int = 5) -> str:
    """The first ``shown`` locks described, then how many more: one line for any number."""
    text = "; ".join(lk.describe(now) for lk in locks[:shown])
    more = len(locks) - shown
    return text + (f"; and {more} more" if more > 0 else "")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds, at most ``MAX_DURATION_S`` (a
    year); ValueError naming the fault otherwise (never ``inf``: 400 nines are refused)."""
    shown = printable(text, 40)
    m = _DURATION_RE.fullmatch(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{shown!r} is not a duration like 90s, 30m, 2h or 1d")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise ValueError(
            f"{shown!r} is longer than a year ({MAX_DURATION_S:.0f} s), the longest duration "
            "the agent takes"
        )
    return seconds
