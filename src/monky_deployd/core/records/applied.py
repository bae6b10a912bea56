"""The records the agent keeps in its state dir, as typed models with their exact bytes.

    applied.json  ``Applied``     what is applied (json.dumps indent=2, sorted keys, no newline)
    token.json    ``TokenState``  the token bookkeeping, version 1 (indent=1, fixed key order,
                                  trailing newline); holds a secret, never in a repr or a reason
    host.json     ``HostFacts``   the check-in's host facts (compact json.dumps, no newline)
    held.json     ``Held``        what a failure left (``core.records.held``: its own module, a sum
    type) suspend.json  ``Suspended``   ``monky-deployd suspend``: applies stop until resume/until
    journal.json  ``Journal``     the box step an apply is in, written before the step runs
    projects.json ``Projects``    the compose projects the agent ever started (ownership proof
                                  for a project that has volumes or networks but no container)
    revisions/<rev>/release.json  ``Release``  a verified revision: the images it ran (pinned)

Each ``to_json`` writes the bytes the hand-rolled writers before it wrote (tests/unit/core/
test_records.py holds them to those writers), and each ``from_json`` loads what they wrote
unchanged. ``from_json`` raises ``ValueError`` with a reason that never holds a field's value;
what an unreadable record means is the caller's (``StateDir``, ``TokenKeeper``). Reading and
writing the files is ``adapters.box.state.state.StateDir``'s.

``Applied``, ``Stored`` and ``TokenState`` are pydantic dataclasses: positional construction and
``dataclasses.replace`` work as before, and every construction is validated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, field, fields
from typing import Annotated, Any

from pydantic import Field, ValidationError
from pydantic.dataclasses import dataclass

from monky_deployd.core.records.token_plan import Kind
from monky_deployd.core.wire.checkin import HostFacts

TOKEN_RECORD_VERSION = 1

# A no-op tick reads applied.json and token.json only: the other records are modules of their
# own (core.records.release, .suspend, .journal), their validators built on first use.

__all__ = [
    "TOKEN_RECORD_VERSION",
    "Applied",
    "HostFacts",
    "ServiceLabel",
    "Stored",
    "TokenState",
    "host_facts_from_json",
    "host_facts_to_json",
    "parse_record",
]


def parse_record(raw: bytes) -> Any:
    """A record's JSON; ValueError (a reason, never the content) when it is not JSON."""
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


def _no_hashes() -> dict[str, str]:
    return {}


def _no_reasons() -> list[dict[str, str]]:
    return []


@dataclass(frozen=True)
class ServiceLabel:
    """A service as applied: its config digest (``core.records.reasons.service_digests``, without
    the labels override; an older agent kept compose's own ``config --hash``) and the revision and
    deploy that last changed it (its labels)."""

    config_hash: str
    revision: str
    deploy_id: str = ""


def _no_labels() -> dict[str, ServiceLabel]:
    return {}


# written only when set: a record without them keeps the bytes the older writer wrote
_APPLIED_OPTIONAL = (
    "reasons",
    "deploy_id",
    "compose_sha256",
    "env_hashes",
    "secret_hashes",
    "service_labels",
    "previous",
    "jobs",
)


@dataclass(frozen=True)
class Applied:
    revision: str
    project: str
    services: list[str] = field(default_factory=_no_services)
    applied_at: str = ""
    # why this revision was applied (``core.records.reasons``: [{"kind", "detail"}], names only)
    reasons: list[dict[str, str]] = field(default_factory=_no_reasons)
    deploy_id: str = ""  # the tick that applied it (the containers' deploy-id label)
    # its fingerprint (``core.records.reasons.Fingerprint``): hashes, never a value
    compose_sha256: str = ""
    env_hashes: dict[str, str] = field(default_factory=_no_hashes)
    secret_hashes: dict[str, str] = field(default_factory=_no_hashes)
    # per service: its config hash and the revision/deploy its labels name (a service whose
    # hash did not change keeps its labels, so a new revision does not recreate it)
    service_labels: dict[str, ServiceLabel] = field(default_factory=_no_labels)
    # the last-known-good before it: its release is kept one apply longer (the image GC's keep)
    previous: str = ""
    # the services that may finish (restart no/on-failure: exit 0 = done, core.lifecycle.jobs)
    jobs: list[str] = field(default_factory=_no_services)
    # the jobs that ran to completion on their own, each with the apply that made that run
    # (``revision/deploy-id``, its labels: one per config); None: a record an older agent wrote
    done: dict[str, str] | None = None

    def to_json(self) -> bytes:
        # ``asdict`` deep-copies every entry of the hashes (a 4 MiB template has 380,000 of
        # them: seconds, bench/tick_size.py); json only reads them, so only the labels convert
        body: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        body["service_labels"] = {k: asdict(v) for k, v in self.service_labels.items()}
        for name in _APPLIED_OPTIONAL:
            if not body[name]:
                del body[name]
        if body["done"] is None:
            del body["done"]
        return json.dumps(body, indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Applied:
        data = parse_record(raw)
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
        data = parse_record(raw)
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
        return HostFacts.model_validate(parse_record(raw))
    except ValueError:  # not JSON; or a ValidationError (not an object, a field missing)
        return None


def host_facts_to_json(facts: HostFacts) -> bytes:
    return json.dumps(facts.model_dump()).encode()
