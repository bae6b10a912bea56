"""The bodies on the wire with tenancy that a steady tick (check-in 304) neither reads nor sends:
the check-in's 200 answer, the lease, the error body, the report. ``core.wire.checkin`` re-exports each
by name and loads this module on first use (issue 29); what its docstring says of the shapes
holds here. Each validator is built on first use too (``defer_build``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from monky_deployd.core.wire.checkin import AgentInfo, NonEmpty

_LAZY = ConfigDict(defer_build=True)


# -- POST /v1/envs/{env}/checkin: the 200 answer --------------------------------------------


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
    """One of ``reasons`` (contract v1.1): why the apply happened, names only (``core.records.reasons``)."""

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
