"""What may stop an apply although everything is ready: update locks and a suspend. Pure.

- **Update locks**: a file in the lock directory (``locks.dir``; an app bind-mounts it) says
  "not now". While one is valid the agent pulls the new revision but does not recreate
  containers, and tries again next tick. A lock older than its TTL (its own ``ttl_s``, else
  ``locks.default_ttl_s``) is ignored with a warning: a crashed app must not block deploys
  forever.
- **Suspend**: ``monky-deployd suspend [--reason] [--for]`` stops applies (check-ins continue)
  until ``resume`` or until the ``--for`` duration is over.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

LOCK_SUFFIX = ".lock"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Lock:
    """One lock file: its name (file name without ``.lock``), who holds it, since when."""

    name: str
    since: float  # the file's modification time
    holder: str = ""
    reason: str = ""
    ttl_s: float | None = None  # its own TTL; None: the configured default

    def expires_at(self, default_ttl_s: float) -> float:
        return self.since + (self.ttl_s if self.ttl_s is not None else default_ttl_s)

    def describe(self, now: float) -> str:
        who = self.holder or "(no holder named)"
        why = f" ({self.reason})" if self.reason else ""
        return f"{self.name} held by {who}{why} for {max(0.0, now - self.since):.0f} s"


def parse_lock(name: str, since: float, content: bytes) -> Lock:
    """A lock file's content: JSON ``{"holder", "reason", "ttl_s"}`` (any of them), or plain
    text naming the holder; anything else still locks, with no holder named."""
    text = content.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text) if text.startswith("{") else None
    except ValueError:
        data = None
    if isinstance(data, dict):
        ttl = data.get("ttl_s")
        own_ttl: float | None = None
        if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl > 0:
            own_ttl = float(ttl)
        return Lock(
            name,
            since,
            str(data.get("holder", ""))[:200],
            str(data.get("reason", ""))[:200],
            own_ttl,
        )
    return Lock(name, since, text.splitlines()[0][:200] if text else "")


def split_locks(
    locks: tuple[Lock, ...], now: float, default_ttl_s: float
) -> tuple[tuple[Lock, ...], tuple[Lock, ...]]:
    """(valid, stale): a lock is stale once its TTL is over."""
    valid = tuple(lk for lk in locks if now < lk.expires_at(default_ttl_s))
    stale = tuple(lk for lk in locks if now >= lk.expires_at(default_ttl_s))
    return valid, stale


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``30m``, ``2h``, ``1d`` -> seconds; ValueError otherwise."""
    m = _DURATION_RE.fullmatch(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration like 90s, 30m, 2h or 1d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]
