"""``suspend.json`` (``Suspended``): ``monky-deployd suspend``, applies stop until resume or its
end. A steady tick never reads it (off its imports, issue 29); what ``core.records.applied``'s
docstring says of the records holds here. Its validator is built on first use.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass

from monky_deployd.core.clock import bounded_end
from monky_deployd.core.records.applied import parse_record

_LAZY = ConfigDict(defer_build=True)


# -- suspend.json ------------------------------------------------------------------------------


@dataclass(frozen=True, config=_LAZY)
class Suspended:
    """``monky-deployd suspend [--reason] [--for]``: no apply while ``active``."""

    since: float
    until: float | None = None  # None: until ``monky-deployd resume``
    reason: str = ""

    def active(self, now: float) -> bool:
        return self.until is None or now < self.until

    def bounded(self, now: float) -> Suspended:
        """Written in the future (the clock stepped back since): ``since`` is now, and a
        ``--for`` suspend ends at most its own duration from now (``core.clock``)."""
        if self.since <= now:
            return self
        until = self.until
        if until is not None:
            until = bounded_end(self.since, until, now, max(0.0, until - self.since))
        return Suspended(now, until, self.reason)

    def describe(self) -> str:
        why = f" ({self.reason})" if self.reason else ""
        return f"applies are suspended{why}"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Suspended:
        data = parse_record(raw)
        if isinstance(data, dict):
            try:
                return Suspended(**data)
            except (ValidationError, TypeError):
                pass
        raise ValueError("not a suspend record")
