"""held.json: what a failure left on this box, as a sum type with the flat bytes every version
wrote (``core.records.applied`` keeps the other records; ``adapters.box.state.state.StateDir``
reads and writes the file). Pure.

The variants are plain frozen dataclasses (each pydantic dataclass costs a millisecond to build
at import, on every tick); what is read is validated once, as the flat record (``_FlatHeld``),
before it becomes its variant."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from pydantic import ValidationError
from pydantic.dataclasses import dataclass as validated

from monky_deployd.core.records.applied import parse_record

# -- held.json ---------------------------------------------------------------------------------
#
# ``Held`` is a sum type: what a failure left on this box, each variant with only its own fields
# (``core.lifecycle.recovery`` makes them, ``core.lifecycle.decide`` matches on them):
#
#   HeldRevision     rolled back to the last-known-good (verified) and held until the desired
#                    revision changes or ``apply --once --retry``
#   RollbackPending  failed, recorded before its rollback started; the rollback did not end
#                    (a killed tick, a lock or a suspend): the next tick let through finishes it
#   Stalled          the rollback failed too (ROLLBACK_FAILED): no tick acts on its own
#   BackingOff       failed without a rollback: the next attempt waits (``box_changed``: its
#                    containers replaced the last-known-good's and stay)
#   RestoreBackoff   no failed revision: the applied revision's restore failed and waits
#   Refused          refused by the box's policy (POLICY_*): held until the desired revision
#                    or config.yaml's policy (``policy``: its digest then) changes, or --retry
#
# A held revision (HeldRevision, BackingOff) may also carry a ``RestoreWait``: the last-known-
# good's restore failed meanwhile. held.json keeps the flat shape every version wrote (all twelve
# keys, json.dumps indent=2, sorted): a record written before the sum type loads as its variant,
# and each variant writes the bytes the flat record of the same meaning had.


@dataclass(frozen=True)
class RestoreWait:
    """The last-known-good's restore (up + verify) failed ``attempts`` times in a row; the next
    one waits until ``next_at`` (backoff)."""

    attempts: int
    next_at: float


@dataclass(frozen=True)
class HeldRevision:
    revision: str
    code: str
    message: str
    attempts: int = 1
    failed_at: float = 0.0
    rolled_back_to: str | None = None
    restore: RestoreWait | None = None

    def to_json(self) -> bytes:
        ok = True if self.rolled_back_to is not None else None
        return _held_bytes(self, rolled_back_to=self.rolled_back_to, rollback_ok=ok)


@dataclass(frozen=True)
class RollbackPending:
    revision: str
    code: str
    message: str
    rolled_back_to: str
    attempts: int = 1
    failed_at: float = 0.0

    def to_json(self) -> bytes:
        return _held_bytes(self, rolled_back_to=self.rolled_back_to)


@dataclass(frozen=True)
class Stalled:
    revision: str
    code: str
    message: str
    attempts: int = 1
    failed_at: float = 0.0
    rolled_back_to: str | None = None

    def to_json(self) -> bytes:
        return _held_bytes(
            self, rolled_back_to=self.rolled_back_to, rollback_ok=False, stalled=True
        )


@dataclass(frozen=True)
class BackingOff:
    revision: str
    code: str
    message: str
    next_attempt_at: float
    attempts: int = 1
    failed_at: float = 0.0
    box_changed: bool = False
    restore: RestoreWait | None = None

    def to_json(self) -> bytes:
        return _held_bytes(self, next_attempt_at=self.next_attempt_at, box_changed=self.box_changed)


@dataclass(frozen=True)
class Refused:
    """``revision`` was refused by the box's policy under the policy whose digest is ``policy``
    (``PolicyCfg.digest``): the same revision under the same policy is refused again, so it is
    held (no backoff, no secret read again) until either changes or ``apply --once --retry``."""

    revision: str
    code: str
    message: str
    policy: str
    attempts: int = 1
    failed_at: float = 0.0
    restore: RestoreWait | None = None

    def to_json(self) -> bytes:
        return _held_bytes(self, policy=self.policy)


@dataclass(frozen=True)
class RestoreBackoff:
    """``revision`` is the applied one: its restore is backing off, nothing else is held."""

    revision: str
    code: str
    message: str
    restore: RestoreWait
    failed_at: float = 0.0
    attempts: int = 0

    def to_json(self) -> bytes:
        return _held_bytes(self)


Held = HeldRevision | RollbackPending | Stalled | BackingOff | RestoreBackoff | Refused


def restore_wait(held: Held | None) -> RestoreWait | None:
    """The last-known-good's restore backoff the record carries, if any."""
    if isinstance(held, HeldRevision | BackingOff | RestoreBackoff | Refused):
        return held.restore
    return None


def _held_bytes(
    held: Held,
    *,
    next_attempt_at: float | None = None,
    rolled_back_to: str | None = None,
    rollback_ok: bool | None = None,
    stalled: bool = False,
    box_changed: bool = False,
    policy: str | None = None,
) -> bytes:
    wait = restore_wait(held)
    body = {
        "revision": held.revision,
        "code": held.code,
        "message": held.message,
        "attempts": held.attempts,
        "failed_at": held.failed_at,
        "next_attempt_at": next_attempt_at,
        "rolled_back_to": rolled_back_to,
        "rollback_ok": rollback_ok,
        "stalled": stalled,
        "box_changed": box_changed,
        "restore_attempts": wait.attempts if wait is not None else 0,
        "restore_next_at": wait.next_at if wait is not None else None,
    }
    if policy is not None:  # only a policy refusal's record has it (older records: as they were)
        body["policy"] = policy
    return json.dumps(body, indent=2, sort_keys=True).encode()


@validated(frozen=True)
class _FlatHeld:
    """held.json as every version wrote it (the reader's input)."""

    revision: str
    code: str
    message: str
    attempts: int = 1
    failed_at: float = 0.0
    next_attempt_at: float | None = None
    rolled_back_to: str | None = None
    rollback_ok: bool | None = None
    stalled: bool = False
    box_changed: bool = False
    restore_attempts: int = 0
    restore_next_at: float | None = None
    policy: str | None = None


def held_record(
    revision: str,
    code: str,
    message: str,
    attempts: int = 1,
    failed_at: float = 0.0,
    next_attempt_at: float | None = None,
    rolled_back_to: str | None = None,
    rollback_ok: bool | None = None,
    stalled: bool = False,
    box_changed: bool = False,
    restore_attempts: int = 0,
    restore_next_at: float | None = None,
    policy: str | None = None,
) -> Held:
    """The variant the flat record's fields mean (held.json's reader; tests)."""
    wait = RestoreWait(restore_attempts, restore_next_at) if restore_next_at is not None else None
    if policy is not None:
        return Refused(revision, code, message, policy, attempts, failed_at, wait)
    if stalled:
        return Stalled(revision, code, message, attempts, failed_at, rolled_back_to)
    if next_attempt_at is not None:
        return BackingOff(
            revision, code, message, next_attempt_at, attempts, failed_at, box_changed, wait
        )
    if attempts == 0 and wait is not None:
        return RestoreBackoff(revision, code, message, wait, failed_at, 0)
    if rolled_back_to is not None and rollback_ok is None:
        return RollbackPending(revision, code, message, rolled_back_to, attempts, failed_at)
    return HeldRevision(revision, code, message, attempts, failed_at, rolled_back_to, wait)


def held_from_json(raw: bytes) -> Held:
    data = parse_record(raw)
    if isinstance(data, dict):
        try:
            flat = _FlatHeld(**data)
        except (ValidationError, TypeError):
            flat = None
        if flat is not None:
            return held_record(**asdict(flat))
    raise ValueError("not a held record")
