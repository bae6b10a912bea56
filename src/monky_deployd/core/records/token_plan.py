"""The token phase's pure plan: given what is known so far in this round, the next step.

No I/O and no clock: ``TokenKeeper`` (token.py) performs each step (lookup-self, renew-self,
login, lease), feeds the answer back into ``TokenFacts`` and asks again until the step is USE or a
refusal. The table of steps is in token.py's docstring and PROTOCOL.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

Kind = Literal["lease", "bootstrap"]
# A token with less than this left cannot be trusted to carry a tick's check-in, secret reads and
# report; the agent treats it as expired.
WORKING_FLOOR_S = 60


class Step(Enum):
    LOOKUP = "lookup"  # ask lookup-self about the stored token
    USE = "use"  # hold this token for the tick
    RENEW = "renew"  # renew-self the lease token
    ROTATE = "rotate"  # lease with the still-valid lease token
    LOGIN = "login"  # log in with the grant (a LEASE_WITH_BOOTSTRAP follows if the budget allows)
    LEASE_WITH_BOOTSTRAP = "lease_with_bootstrap"  # swap the bootstrap token for a lease
    REFUSE_RATE_LIMITED = "refuse_rate_limited"  # no working token and the budget is spent
    REFUSE_NO_TOKEN = "refuse_no_token"  # noqa: S105 - nothing left to try (should not happen)


@dataclass(frozen=True)
class Known:
    """What is known about the token in hand (never the token itself)."""

    kind: Kind
    expires_at: float  # last known expiry on the agent's clock
    renewable: bool
    verified: bool  # lookup-self answered, or obtained/renewed in this round
    issued_ttl_s: int = 0  # the TTL the lease was minted with (0 = unknown)


@dataclass(frozen=True)
class TokenFacts:
    now: float
    held: Known | None
    lease_not_before: float | None
    min_ttl_s: int
    renew_below_s: int
    renew_tried: bool = False
    lease_tried: bool = False
    login_done: bool = False

    @property
    def budget_open(self) -> bool:
        return self.lease_not_before is None or self.now >= self.lease_not_before


def renew_threshold(f: TokenFacts, held: Known) -> float:
    """Below this many seconds left a lease token is renewed, then rotated. Never more than half
    the TTL the lease was minted with: a fresh lease must be usable as it is, or a tenancy that
    mints leases shorter than ``renew_below_s`` would be asked for one on every tick."""
    wanted = max(f.renew_below_s, f.min_ttl_s)
    if held.issued_ttl_s > 0:
        wanted = min(wanted, held.issued_ttl_s // 2)
    return max(wanted, WORKING_FLOOR_S)


def decide(f: TokenFacts) -> Step:
    """The next step of the token phase; see the module docstring for the table."""
    held = f.held
    if held is None:
        if not f.login_done:
            return Step.LOGIN
        return Step.REFUSE_NO_TOKEN if f.budget_open else Step.REFUSE_RATE_LIMITED
    if not held.verified:
        return Step.LOOKUP
    left = held.expires_at - f.now
    if held.kind == "lease":
        if left >= renew_threshold(f, held):
            return Step.USE
        if held.renewable and not f.renew_tried:
            return Step.RENEW
        if f.budget_open and not f.lease_tried and left >= WORKING_FLOOR_S:
            return Step.ROTATE
        if left >= WORKING_FLOOR_S:
            return Step.USE  # rate limited (or just rotated): a working lease token carries on
        if not f.login_done:
            return Step.LOGIN  # the lease token is as good as expired
        return Step.REFUSE_NO_TOKEN if f.budget_open else Step.REFUSE_RATE_LIMITED
    # bootstrap
    if f.budget_open and not f.lease_tried and left >= WORKING_FLOOR_S:
        return Step.LEASE_WITH_BOOTSTRAP
    if left < max(f.min_ttl_s, WORKING_FLOOR_S) and not f.login_done:
        return Step.LOGIN  # a stored bootstrap token near its end: a fresh login costs no lease
    if f.budget_open and not f.lease_tried:
        return Step.LEASE_WITH_BOOTSTRAP  # short-lived, but the only token there is
    if left >= WORKING_FLOOR_S:
        return Step.USE
    return Step.REFUSE_RATE_LIMITED if not f.budget_open else Step.REFUSE_NO_TOKEN
