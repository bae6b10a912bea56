"""The fake OpenBao's token store: service tokens with TTL, max TTL and revocation on a Clock."""

from __future__ import annotations

import secrets
import string
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from monky_deployd_testkit.fakes.clock import Clock

SYSTEM_MAX_TTL_S = 768 * 3600  # OpenBao's default max_lease_ttl (32 days)
_ALNUM = string.ascii_letters + string.digits


def _random(n: int) -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(n))


def rfc3339(ts: float) -> str:
    """OpenBao's timestamp shape: nanoseconds and a Z, e.g. 2026-12-03T10:20:38.466476000Z."""
    dt = datetime.fromtimestamp(ts, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond:06d}000Z"


def go_duration(seconds: float) -> str:
    """Go's time.Duration.String() for whole seconds: 30s, 15m0s, 24h0m0s."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m}m{sec}s" if h else f"{m}m{sec}s"


def parse_duration(value: Any) -> int:
    """An OpenBao duration: int seconds, "3600", "3600s", "15m", "24h", "1h30m"."""
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, int | float):
        return int(value)
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    total, num = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1}
    for ch in text:
        if ch.isdigit() or ch == ".":
            num += ch
        elif ch in units and num:
            total += float(num) * units[ch]
            num = ""
        else:
            raise ValueError(f"time: invalid duration {text!r}")
    if num:
        raise ValueError(f"time: missing unit in duration {text!r}")
    return int(total)


@dataclass
class TokenRecord:
    token: str
    accessor: str
    created: float
    creation_ttl_s: int
    ttl_s: int
    expires: float
    max_expires: float
    renewable: bool
    meta: dict[str, str]
    policies: list[str]
    explicit_max_ttl_s: int
    path: str
    display_name: str
    entity_id: str = ""  # a login's token has an entity; a token-role token has none
    role: str = ""  # the token role it was created through
    revoked: bool = False
    renewals: int = 0
    last_renewed: float = 0.0

    def live(self, now: float) -> bool:
        return not self.revoked and now < self.expires

    def remaining(self, now: float) -> int:
        return max(0, int(self.expires - now))


class TokenStore:
    """Thread-safe; every time comes from the Clock."""

    def __init__(self, clock: Clock, *, system_max_ttl_s: int = SYSTEM_MAX_TTL_S) -> None:
        self.clock = clock
        self.system_max_ttl_s = system_max_ttl_s
        self._lock = threading.RLock()
        self._by_token: dict[str, TokenRecord] = {}

    def create(
        self,
        *,
        ttl_s: int,
        renewable: bool,
        meta: dict[str, str],
        explicit_max_ttl_s: int | None = None,
        policies: list[str] | None = None,
        path: str = "",
        display_name: str = "token",
        role: str = "tenancy-lease",
    ) -> TokenRecord:
        now = self.clock.now()
        max_ttl = min(explicit_max_ttl_s or self.system_max_ttl_s, self.system_max_ttl_s)
        ttl = min(int(ttl_s), max_ttl)
        rec = TokenRecord(
            token="s." + _random(24),  # OpenBao 2.x service tokens
            accessor=_random(24),
            created=now,
            creation_ttl_s=ttl,
            ttl_s=ttl,
            expires=now + ttl,
            max_expires=now + max_ttl,
            renewable=renewable,
            meta=dict(meta),
            policies=list(policies or ["default"]),
            explicit_max_ttl_s=int(explicit_max_ttl_s or 0),
            path=path or f"auth/token/create/{role}",
            display_name=display_name,
            entity_id="" if role else str(uuid.uuid4()),
            role=role,
        )
        with self._lock:
            self._by_token[rec.token] = rec
        return rec

    def get(self, token: str | None) -> TokenRecord | None:
        """The record of a token, live or not (None when unknown)."""
        if not token:
            return None
        with self._lock:
            return self._by_token.get(token)

    def live(self, token: str | None) -> TokenRecord | None:
        """The record of a live token; None when unknown, expired or revoked."""
        rec = self.get(token)
        if rec is None or not rec.live(self.clock.now()):
            return None
        return rec

    def revoke(self, token: str) -> bool:
        with self._lock:
            rec = self._by_token.get(token)
            if rec is None:
                return False
            rec.revoked = True
            return True

    def revoke_accessor(self, accessor: str) -> bool:
        with self._lock:
            for rec in self._by_token.values():
                if rec.accessor == accessor:
                    rec.revoked = True
                    return True
        return False

    def records(self) -> list[TokenRecord]:
        with self._lock:
            return list(self._by_token.values())

    def renew(self, rec: TokenRecord, increment_s: int | None) -> list[str] | None:
        """Reset the TTL like OpenBao; returns the capping warning list, or None."""
        with self._lock:
            now = self.clock.now()
            # without an increment OpenBao renews by the token's current TTL (the last
            # increment), not the one it was created with
            wanted = increment_s if increment_s else rec.ttl_s
            left_to_max = max(0, int(rec.max_expires - now))
            warnings = None
            ttl = wanted
            if wanted > left_to_max:
                ttl = left_to_max
                warnings = [
                    f'TTL of "{go_duration(wanted)}" exceeded the effective max_ttl of '
                    f'"{go_duration(left_to_max)}"; TTL value is capped accordingly'
                ]
            rec.ttl_s = ttl
            rec.expires = now + ttl
            rec.renewals += 1
            rec.last_renewed = now
            return warnings
