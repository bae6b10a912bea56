"""``journal.json`` (``Journal``): the box step an apply is in, written before the step runs and
left behind only by a killed tick. A steady tick never reads it (off its imports, issue 29);
what ``core.records.applied``'s docstring says of the records holds here. Its validator is
built on first use.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass

from monky_deployd.core.records.applied import parse_record

_LAZY = ConfigDict(defer_build=True)


# -- journal.json ------------------------------------------------------------------------------


@dataclass(frozen=True, config=_LAZY)
class Journal:
    """The box step a tick is about to run: left behind only when that tick was killed."""

    revision: str  # the revision the step belongs to
    phase: str  # stage | pull | down | up | verify | rollback | commit
    tick_id: str = ""
    at: float = 0.0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Journal:
        data = parse_record(raw)
        if isinstance(data, dict):
            try:
                return Journal(**data)
            except (ValidationError, TypeError):
                pass
        raise ValueError("not a journal record")
