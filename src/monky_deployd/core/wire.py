"""The shapes on the wire with tenancy (contract.md, "Tenancy deploy API"; PROTOCOL.md).

Requests the agent sends (``CheckinRequest``, ``ReportBody``) dump to the same dict, key for key
and in the same order, as the hand-built bodies before them, so tenancy sees byte-identical JSON
(``json.dumps`` in ``tenancy._post``; tests/unit/core/test_wire.py proves it for generated
inputs). Answers the agent reads (``LeaseAnswer``, ``CheckinAnswer``, ``ErrorBody``) ignore keys
they do not know (tenancy may add fields). The bundle inside a check-in answer stays a plain dict
here: its content is validated by ``core.bundle``.

A ``pydantic.ValidationError`` carries the input values (a token among them): callers turn it
into their own sentence and never let it into a message, a log line or an exception chain.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from monky_deployd import __version__

NonEmpty = Annotated[str, Field(min_length=1)]

# Built on first use: a steady tick (check-in 304) never reads a lease, an error or a report, so
# it does not pay for their validators at import.
_LAZY = ConfigDict(defer_build=True)


# -- shared -----------------------------------------------------------------------------------


class AgentInfo(BaseModel):
    version: str


class HostFacts(BaseModel):
    """The check-in's ``host``; also ``<state_dir>/host.json`` (``core.records``)."""

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


class CheckinAnswer(BaseModel):
    """``200 {"revision", "bundle"}``."""

    model_config = _LAZY

    revision: NonEmpty
    bundle: dict[str, Any]


# -- POST /v1/envs/{env}/lease --------------------------------------------------------------------


class Lease(BaseModel):
    """``lease`` in ``201 {"lease": {...}}``: the token is a secret (not in ``repr``)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    token: NonEmpty
    accessor: str = ""
    ttl_s: int
    renewable: bool = False

    def __repr__(self) -> str:  # never print the token
        return f"Lease(id={self.id!r}, ttl_s={self.ttl_s}, renewable={self.renewable})"

    __str__ = __repr__


class LeaseAnswer(BaseModel):
    model_config = _LAZY

    lease: Lease


# -- errors, on every endpoint ----------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = _LAZY

    code: str = ""
    message: str = ""
    # contract: an int; a fraction is cut (as int() did), an infinity makes the body unreadable
    retry_after_s: Annotated[float, Field(allow_inf_nan=False)] | None = None


class ErrorBody(BaseModel):
    """``{"error": {"code", "message", "retry_after_s"?}}``."""

    model_config = _LAZY

    error: ErrorDetail


# -- POST /v1/envs/{env}/reports ------------------------------------------------------------------


class PhaseRow(BaseModel):
    model_config = _LAZY

    name: str
    ok: bool
    ms: int


class ServiceRow(BaseModel):
    model_config = _LAZY

    name: str
    state: str
    health: str
    image: str


class RollbackRow(BaseModel):
    """``rollback`` (contract v1.1): the last-known-good revision restored after a failed apply."""

    model_config = _LAZY

    to_revision: str
    ok: bool


class ReasonRow(BaseModel):
    """One of ``reasons`` (contract v1.1): why the apply happened, names only (``core.reasons``)."""

    model_config = _LAZY

    kind: str
    detail: str


class ReportBody(BaseModel):
    model_config = _LAZY

    tick_id: str
    revision: str | None
    outcome: str
    code: str
    message: str
    detail: str
    phases: list[PhaseRow]
    services: list[ServiceRow]
    agent: AgentInfo
    started_at: str
    finished_at: str
    rollback: RollbackRow | None = None  # only in the body after a rollback
    reasons: list[ReasonRow] = Field(default_factory=list)  # only when the tick knows why

    def body(self) -> dict[str, Any]:
        body = self.model_dump()
        if body["rollback"] is None:
            del body["rollback"]
        if not body["reasons"]:
            del body["reasons"]
        return body
