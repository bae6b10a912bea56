"""The check-in on the wire with tenancy, and what every body shares (contract.md, "Tenancy deploy
API"; PROTOCOL.md).

Requests the agent sends (``CheckinRequest``, ``ReportBody``) dump to the same dict, key for key
and in the same order, as the hand-built bodies before them, so tenancy sees byte-identical JSON
(``json.dumps`` in ``tenancy._post``; tests/unit/core/wire/test_checkin.py proves it for generated
inputs). Answers the agent reads (``LeaseAnswer``, ``CheckinAnswer``, ``ErrorBody``) ignore keys
they do not know (tenancy may add fields). The bundle inside a check-in answer stays a plain dict
here: its content is validated by ``core.admission.bundle``.

This module holds what a steady tick (check-in 304) sends: the check-in request and its parts.
The answers and the error body are ``core.wire.answers``', the report ``core.wire.report``'
(a steady tick neither reads nor sends them: each is imported where it is used).

A ``pydantic.ValidationError`` carries the input values (a token among them): callers turn it
into their own sentence and never let it into a message, a log line or an exception chain.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from monky_deployd import __version__

NonEmpty = Annotated[str, Field(min_length=1)]

# -- shared -----------------------------------------------------------------------------------


class AgentInfo(BaseModel):
    version: str


class HostFacts(BaseModel):
    """The check-in's ``host``; also ``<state_dir>/host.json`` (``core.records.applied``)."""

    hostname: str
    docker: str
    compose: str


# -- POST /v1/envs/{env}/checkin ----------------------------------------------------------------


class AppliedRef(BaseModel):
    revision: str
    outcome: str = "applied"  # v1.1 also allows rolled_back | held; v1.2 waiting


class WaitingRef(BaseModel):
    """``waiting`` (contract v1.2): a new revision known but not applied yet, until when
    (RFC 3339) and why (``window`` | ``rollout``)."""

    revision: str
    until: str
    why: str


class CheckinRequest(BaseModel):
    agent: AgentInfo
    host: HostFacts
    applied: AppliedRef | None  # null before the first apply
    waiting: WaitingRef | None = None  # only in the body while a new revision waits

    @classmethod
    def of(
        cls,
        host: HostFacts,
        applied_revision: str | None,
        outcome: str = "applied",
        waiting: WaitingRef | None = None,
    ) -> CheckinRequest:
        """This agent's check-in: its version, ``host``, and the revision it runs (the
        last-known-good: after a rollback, the restored one) with ``outcome`` ``applied``,
        ``rolled_back`` or ``held`` (contract v1.1); while a new revision waits (contract
        v1.2), ``outcome`` ``waiting`` and ``waiting`` beside ``applied``."""
        return cls(
            agent=AgentInfo(version=__version__),
            host=host,
            applied=AppliedRef(revision=applied_revision, outcome="waiting" if waiting else outcome)
            if applied_revision is not None
            else None,
            waiting=waiting,
        )

    def body(self) -> dict[str, Any]:
        body = self.model_dump()
        if body["waiting"] is None:
            del body["waiting"]
        return body
