"""Tenancy's answers: the check-in's 200 answer, the lease, the error body (a steady tick, a
check-in 304, reads none of them: off its imports, issue 29). What ``core.wire.checkin``'s
docstring says of the shapes holds here. Each validator is built on first use
(``defer_build``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from monky_deployd.core.wire.checkin import NonEmpty

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
