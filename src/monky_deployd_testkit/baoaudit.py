"""The counters of the real OpenBao server (``RealBao``), read from its file audit device: what
ordinary tokens (or none) asked since ``mark()``, root-token calls (the test kit's own and
tenancy's) left out. The same names as the fake's counters, so a test reads either."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class AuditCounters:
    """A mixin: the class provides ``audit_path``, ``jwt_mount`` and ``kv_mount``."""

    jwt_mount: str
    kv_mount: str
    _mark: int = 0

    @property
    def audit_path(self) -> Path:
        raise NotImplementedError

    def mark(self) -> None:
        """Counters start from here (the server is shared by a session's tests)."""
        self._mark = self.audit_path.stat().st_size if self.audit_path.exists() else 0

    def audit_requests(self) -> list[dict[str, Any]]:
        """The audit log's request entries since ``mark()``, root-token calls left out."""
        if not self.audit_path.exists():
            return []
        with self.audit_path.open("rb") as fh:
            fh.seek(self._mark)
            lines = fh.read().splitlines()
        out = []
        for line in lines:
            entry = json.loads(line)
            if entry.get("type") != "request":
                continue
            if "root" in ((entry.get("auth") or {}).get("policies") or []):
                continue
            out.append(entry)
        return out

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(operation, /v1/path) of every request an ordinary token (or none) made."""
        return [
            (e["request"]["operation"], "/v1/" + e["request"]["path"])
            for e in self.audit_requests()
        ]

    def _count(self, pred: Any) -> int:
        return sum(1 for _, path in self.requests if pred(path))

    @property
    def logins(self) -> int:
        return self._count(lambda p: p == f"/v1/auth/{self.jwt_mount}/login")

    @property
    def lookups(self) -> int:
        return self._count(lambda p: p == "/v1/auth/token/lookup-self")

    @property
    def renewals(self) -> int:
        return self._count(lambda p: p == "/v1/auth/token/renew-self")

    @property
    def revocations(self) -> int:
        return self._count(lambda p: p == "/v1/auth/token/revoke-self")

    @property
    def kv_reads(self) -> int:
        return self._count(lambda p: p.startswith(f"/v1/{self.kv_mount}/data/"))
