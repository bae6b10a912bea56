"""The report body posted to tenancy after every apply attempt (contract.md; built from the tick
record by ``core.records.tickrecord.report_body``). A steady tick sends none: off its imports
(issue 29). What ``core.wire.checkin``'s docstring says of the shapes holds here. Each validator
is built on first use (``defer_build``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from monky_deployd.core.wire.checkin import AgentInfo

_LAZY = ConfigDict(defer_build=True)


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
    """One of ``reasons`` (contract v1.1): why the apply happened, names only
    (``core.records.reasons``)."""

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
