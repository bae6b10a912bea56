"""The records the agent keeps in its state dir, as typed models with their exact bytes.

    applied.json  ``Applied``     what is applied (json.dumps indent=2, sorted keys, no newline)
    token.json    ``TokenState``  the token bookkeeping, version 1 (indent=1, fixed key order,
                                  trailing newline); holds a secret, never in a repr or a reason
    host.json     ``HostFacts``   the check-in's host facts (compact json.dumps, no newline)

Each ``to_json`` writes the bytes the hand-rolled writers before it wrote (tests/unit/core/
test_records.py holds them to those writers), and each ``from_json`` loads what they wrote
unchanged. ``from_json`` raises ``ValueError`` with a reason that never holds a field's value;
what an unreadable record means is the caller's (``StateDir``, ``TokenKeeper``). Reading and
writing the files is ``adapters.box.state.StateDir``'s.

``Applied``, ``Stored`` and ``TokenState`` are pydantic dataclasses: positional construction and
``dataclasses.replace`` work as before, and every construction is validated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, field
from typing import Annotated, Any

from pydantic import Field, ValidationError
from pydantic.dataclasses import dataclass

from monky_deployd.core.token_plan import Kind
from monky_deployd.core.wire import HostFacts

TOKEN_RECORD_VERSION = 1

__all__ = [
    "TOKEN_RECORD_VERSION",
    "Applied",
    "HostFacts",
    "Stored",
    "TokenState",
    "host_facts_from_json",
    "host_facts_to_json",
]


def _parse(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # UnicodeDecodeError too; nested beyond the parser
        pass
    raise ValueError("not JSON (torn or truncated)")


# -- applied.json ------------------------------------------------------------------------------


def _no_services() -> list[str]:
    # not ``list`` itself: pydantic inspects a default factory's signature, and a builtin's
    # costs a tokenizer regex compile (11 ms at import, measured)
    return []


@dataclass(frozen=True)
class Applied:
    revision: str
    project: str
    services: list[str] = field(default_factory=_no_services)
    applied_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Applied:
        data = _parse(raw)
        if isinstance(data, dict):
            try:
                return Applied(**data)
            except ValidationError:
                pass
        raise ValueError("not an applied record")  # outside the except: no input rides along


# -- token.json --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    kind: Kind
    token: Annotated[str, Field(min_length=1)]
    obtained_at: float
    expires_at: float
    renewable: bool
    lease_id: str = ""
    issued_ttl_s: int = 0  # the lease's TTL when minted (0 for bootstrap / unknown)
    grant_jti: str = ""  # the jti of the grant this token descends from (not a secret)

    def __repr__(self) -> str:  # never print the token
        return f"Stored(kind={self.kind!r}, expires_at={self.expires_at}, lease={self.lease_id!r})"


@dataclass(frozen=True)
class TokenState:
    env: str
    token: Stored | None = None
    lease_not_before: float | None = None

    def to_json(self) -> bytes:
        body = {
            "version": TOKEN_RECORD_VERSION,
            "env": self.env,
            "token": asdict(self.token) if self.token is not None else None,
            "lease_not_before": self.lease_not_before,
        }
        return (json.dumps(body, indent=1) + "\n").encode()

    @staticmethod
    def from_json(raw: bytes) -> TokenState:
        """Raises ValueError (with a reason, never the content) when the record is unusable."""
        data = _parse(raw)
        if not isinstance(data, dict) or data.get("version") != TOKEN_RECORD_VERSION:
            raise ValueError(f"not a version-{TOKEN_RECORD_VERSION} token record")
        try:
            return TokenState(
                **{k: v for k, v in data.items() if k in ("env", "token", "lease_not_before")}
            )
        except ValidationError as exc:
            reason = _token_reason(exc)
        raise ValueError(reason)  # outside the except: the input never rides along as a cause


def _token_reason(exc: ValidationError) -> str:
    """The reason in the hand-rolled reader's words: it named the Python exception a field's
    conversion raised (KeyError: missing; ValueError: a kind, an empty token or a number that
    does not parse; TypeError: a wrong type). Never a value."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    kind = errors[0]["type"] if errors else ""
    if kind == "missing":
        name = "KeyError"
    elif kind in ("literal_error", "string_too_short") or kind.endswith("_parsing"):
        name = "ValueError"
    else:
        name = "TypeError"
    return f"a field is missing or mistyped ({name})"


# -- host.json ---------------------------------------------------------------------------------


def host_facts_from_json(raw: bytes) -> HostFacts | None:
    """The cached facts, or None when the file is empty or not a host record (refresh them)."""
    try:
        return HostFacts.model_validate(_parse(raw))
    except ValueError:  # not JSON; or a ValidationError (not an object, a field missing)
        return None


def host_facts_to_json(facts: HostFacts) -> bytes:
    return json.dumps(facts.model_dump()).encode()
