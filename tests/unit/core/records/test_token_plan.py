"""token.decide(): the pure token plan, case by case and over a grid of facts."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from monky_deployd.core.records.applied import Stored, TokenState
from monky_deployd.core.records.token_plan import (
    WORKING_FLOOR_S,
    Kind,
    Known,
    Step,
    TokenFacts,
    decide,
    renew_threshold,
)

NOW = 1_800_000_000.0
MIN_TTL = 600
RENEW_BELOW = 6 * 3600
H = 3600


def facts(
    kind: Kind | None = "lease",
    left: float = 20 * H,
    *,
    renewable: bool = True,
    verified: bool = True,
    not_before: float | None = None,
    renew_tried: bool = False,
    lease_tried: bool = False,
    login_done: bool = False,
    issued: int = 0,
) -> TokenFacts:
    held = Known(kind, NOW + left, renewable, verified, issued) if kind is not None else None
    return TokenFacts(
        now=NOW,
        held=held,
        lease_not_before=None if not_before is None else NOW + not_before,
        min_ttl_s=MIN_TTL,
        renew_below_s=RENEW_BELOW,
        renew_tried=renew_tried,
        lease_tried=lease_tried,
        login_done=login_done,
    )


CASES: list[tuple[str, TokenFacts, Step]] = [
    # nothing stored
    ("no token: log in", facts(None), Step.LOGIN),
    ("no token after login: nothing left", facts(None, login_done=True), Step.REFUSE_NO_TOKEN),
    (
        "no token after login, rate limited",
        facts(None, login_done=True, not_before=300),
        Step.REFUSE_RATE_LIMITED,
    ),
    # stored, not yet asked
    ("stored lease: ask lookup-self first", facts(verified=False), Step.LOOKUP),
    ("stored bootstrap: ask lookup-self first", facts("bootstrap", verified=False), Step.LOOKUP),
    ("stored lease even if its record says dead", facts(left=-10, verified=False), Step.LOOKUP),
    # lease
    ("healthy lease: use", facts(left=20 * H), Step.USE),
    ("lease exactly at renew threshold: use", facts(left=RENEW_BELOW), Step.USE),
    ("lease below renew threshold: renew", facts(left=5 * H), Step.RENEW),
    ("lease below min ttl, renewable: renew", facts(left=300), Step.RENEW),
    (
        "non-renewable lease below threshold: rotate",
        facts(left=5 * H, renewable=False),
        Step.ROTATE,
    ),
    ("renewal capped short: rotate", facts(left=2 * H, renew_tried=True), Step.ROTATE),
    ("renewed fine meanwhile: use", facts(left=24 * H, renew_tried=True), Step.USE),
    (
        "renewal capped, budget closed: use the working lease",
        facts(left=2 * H, renew_tried=True, not_before=900),
        Step.USE,
    ),
    (
        "lease below min ttl, budget closed, still working: use, no login",
        facts(left=300, renewable=False, not_before=900),
        Step.USE,
    ),
    (
        "rotation got 429: use the working lease",
        facts(left=2 * H, renewable=False, lease_tried=True, not_before=3000),
        Step.USE,
    ),
    (
        "budget reopened exactly now: rotate",
        facts(left=2 * H, renewable=False, not_before=0),
        Step.ROTATE,
    ),
    (
        "lease below the working floor, can't rotate: log in",
        facts(left=WORKING_FLOOR_S - 1, renewable=False, not_before=900),
        Step.LOGIN,
    ),
    (
        "lease below the working floor, budget open: no rotation with a dying token, log in",
        facts(left=WORKING_FLOOR_S - 1, renewable=False),
        Step.LOGIN,
    ),
    (
        "lease below floor after login (cannot happen in practice): refuse",
        facts(left=10, renewable=False, login_done=True, lease_tried=True, not_before=60),
        Step.REFUSE_RATE_LIMITED,
    ),
    # leases minted shorter than renew_below_s: thresholds scale to half the minted TTL
    ("fresh 4 h lease: use, no renewal", facts(left=4 * H, issued=4 * H), Step.USE),
    ("4 h lease at 2 h left: use", facts(left=2 * H, issued=4 * H), Step.USE),
    ("4 h lease below 2 h: renew", facts(left=2 * H - 1, issued=4 * H), Step.RENEW),
    (
        "4 h lease renewed back to 4 h: use (no rotation)",
        facts(left=4 * H, issued=4 * H, renew_tried=True),
        Step.USE,
    ),
    (
        "fresh 5 min lease (shorter than min_ttl_s): use",
        facts(left=300, issued=300),
        Step.USE,
    ),
    ("24 h lease: the configured threshold stands", facts(left=5 * H, issued=24 * H), Step.RENEW),
    # bootstrap
    (
        "fresh bootstrap: swap for a lease",
        facts("bootstrap", left=900, login_done=True),
        Step.LEASE_WITH_BOOTSTRAP,
    ),
    (
        "stored bootstrap, budget open: swap with it, no new login",
        facts("bootstrap", left=700),
        Step.LEASE_WITH_BOOTSTRAP,
    ),
    (
        "stored bootstrap, budget closed: use it",
        facts("bootstrap", left=700, not_before=1200),
        Step.USE,
    ),
    (
        "stored bootstrap below min ttl, budget closed: fresh login (costs no lease)",
        facts("bootstrap", left=400, not_before=1200),
        Step.LOGIN,
    ),
    (
        "fresh bootstrap, swap rate limited: use it",
        facts("bootstrap", left=900, login_done=True, lease_tried=True, not_before=3000),
        Step.USE,
    ),
    (
        "fresh bootstrap with a short role TTL, budget closed: use it while it works",
        facts("bootstrap", left=120, login_done=True, not_before=3000),
        Step.USE,
    ),
    (
        "fresh bootstrap below the floor, budget closed: refuse rate limited",
        facts("bootstrap", left=30, login_done=True, not_before=3000),
        Step.REFUSE_RATE_LIMITED,
    ),
    (
        "fresh bootstrap below the floor, budget open: try the swap anyway",
        facts("bootstrap", left=30, login_done=True),
        Step.LEASE_WITH_BOOTSTRAP,
    ),
    (
        "stored bootstrap below the floor, budget open: log in first",
        facts("bootstrap", left=30),
        Step.LOGIN,
    ),
]


@pytest.mark.parametrize(("name", "f", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(name: str, f: TokenFacts, expected: Step) -> None:
    assert decide(f) is expected, name


# -- invariants over a grid ------------------------------------------------------------------

KINDS: tuple[Kind | None, ...] = (None, "lease", "bootstrap")
LEFTS = (-60, 0, 30, WORKING_FLOOR_S, 300, MIN_TTL, 3 * H, RENEW_BELOW, 20 * H)
NOT_BEFORES = (None, -1, 0, 1, 3000)


def grid() -> list[TokenFacts]:
    out: list[TokenFacts] = []
    for kind, left, ren, ver, nb in itertools.product(
        KINDS, LEFTS, (True, False), (True, False), NOT_BEFORES
    ):
        if kind is None and (left != LEFTS[0] or not ren or not ver):
            continue
        for rt, lt, ld in itertools.product((False, True), (False, True), (False, True)):
            out.append(
                facts(
                    kind,
                    left,
                    renewable=ren,
                    verified=ver,
                    not_before=nb,
                    renew_tried=rt,
                    lease_tried=lt,
                    login_done=ld,
                )
            )
    return out


GRID = grid()


def test_grid_is_big() -> None:
    assert len(GRID) > 2000


def test_never_asks_for_a_lease_before_the_budget_frees_up() -> None:
    for f in GRID:
        if not f.budget_open:
            assert decide(f) not in (Step.ROTATE, Step.LEASE_WITH_BOOTSTRAP), f


def test_at_most_one_lease_request_and_one_renewal_per_round() -> None:
    for f in GRID:
        step = decide(f)
        if f.lease_tried:
            assert step not in (Step.ROTATE, Step.LEASE_WITH_BOOTSTRAP), f
        if f.renew_tried:
            assert step is not Step.RENEW, f
        if f.login_done:
            assert step is not Step.LOGIN, f


def test_never_logs_in_while_a_working_lease_token_is_held() -> None:
    for f in GRID:
        if f.held and f.held.kind == "lease" and f.held.expires_at - f.now >= WORKING_FLOOR_S:
            assert decide(f) is not Step.LOGIN, f


def test_lookup_exactly_when_the_stored_token_is_unverified() -> None:
    for f in GRID:
        assert (decide(f) is Step.LOOKUP) == (f.held is not None and not f.held.verified), f


def test_rate_limited_refusal_only_when_the_budget_is_closed() -> None:
    for f in GRID:
        if decide(f) is Step.REFUSE_RATE_LIMITED:
            assert not f.budget_open, f


def test_use_only_a_token_that_works() -> None:
    for f in GRID:
        if decide(f) is Step.USE:
            assert f.held is not None and f.held.verified
            assert f.held.expires_at - f.now >= WORKING_FLOOR_S, f


def test_a_bootstrap_token_is_swapped_whenever_the_budget_allows() -> None:
    for f in GRID:
        held = f.held
        if held is None or held.kind != "bootstrap" or not held.verified or not f.budget_open:
            continue
        if not f.lease_tried and held.expires_at - f.now >= WORKING_FLOOR_S:
            assert decide(f) is Step.LEASE_WITH_BOOTSTRAP, f


def test_rotation_only_with_a_working_lease_that_cannot_be_renewed() -> None:
    for f in GRID:
        if decide(f) is Step.ROTATE:
            assert f.held is not None and f.held.kind == "lease"
            assert not f.held.renewable or f.renew_tried
            assert f.held.expires_at - f.now >= WORKING_FLOOR_S


def test_a_freshly_minted_lease_is_always_used_as_it_is() -> None:
    for ttl in (61, 120, 300, 600, 3600, 4 * H, 6 * H, 7 * H, 24 * H, 30 * 24 * H):
        for cfg_min, cfg_renew in ((0, 0), (600, 6 * H), (3600, 12 * H), (10 * H, 20 * H)):
            f = replace(facts(left=ttl, issued=ttl), min_ttl_s=cfg_min, renew_below_s=cfg_renew)
            assert decide(f) is Step.USE, (ttl, cfg_min, cfg_renew)


def _simulate(f: TokenFacts) -> list[Step]:
    """A toy world: renewals cap at 2 h, leases are 429 when the budget is closed."""
    steps: list[Step] = []
    for _ in range(12):
        step = decide(f)
        steps.append(step)
        if step in (Step.USE, Step.REFUSE_RATE_LIMITED, Step.REFUSE_NO_TOKEN):
            return steps
        if step is Step.LOOKUP:
            held = f.held
            assert held is not None
            if held.expires_at <= f.now:
                f = replace(f, held=None)
            else:
                f = replace(f, held=replace(held, verified=True))
        elif step is Step.RENEW:
            assert f.held is not None
            f = replace(f, renew_tried=True, held=replace(f.held, expires_at=f.now + 2 * H))
        elif step is Step.LOGIN:
            f = replace(f, login_done=True, held=Known("bootstrap", f.now + 900, True, True))
        else:
            if f.budget_open:
                f = replace(f, lease_tried=True, held=Known("lease", f.now + 24 * H, True, True))
            else:
                f = replace(f, lease_tried=True)
    raise AssertionError(f"no decision after 12 steps: {steps}")


def test_every_round_settles_within_a_few_steps_with_at_most_one_lease() -> None:
    for f in GRID:
        steps = _simulate(f)
        assert len(steps) <= 6, steps
        assert sum(s in (Step.ROTATE, Step.LEASE_WITH_BOOTSTRAP) for s in steps) <= 1


def test_state_record_round_trips_and_rejects_torn_files() -> None:
    st = TokenState("env-a", Stored("lease", "hvs.SECRET", 1.0, 2.0, True, "lse_1"), 5.0)
    assert TokenState.from_json(st.to_json()) == st
    assert "hvs.SECRET" not in repr(st)
    raw = st.to_json()
    for cut in (1, len(raw) // 2, len(raw) - 3):
        with pytest.raises(ValueError) as exc:
            TokenState.from_json(raw[:cut])
        assert "hvs.SECRET" not in str(exc.value)
    with pytest.raises(ValueError):
        TokenState.from_json(b'{"version": 1, "env": "e", "token": {"kind": "weird"}}')
    with pytest.raises(ValueError):
        TokenState.from_json(b"[]")
    bad = b'{"version": 1, "env": "e", "token": {"kind": "lease", "token": "hvs.SECRET",'
    bad += b' "obtained_at": "hvs.SECRET", "expires_at": 1, "renewable": true}}'
    with pytest.raises(ValueError) as exc:
        TokenState.from_json(bad)
    assert "hvs.SECRET" not in str(exc.value)


# -- the boundaries, one step each side ----------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "f", "expected"),
    [
        (
            "stored bootstrap exactly at the floor, budget open: the swap, not a login",
            facts("bootstrap", left=WORKING_FLOOR_S),
            Step.LEASE_WITH_BOOTSTRAP,
        ),
        (
            "stored bootstrap exactly at min ttl, budget closed: use it, no login",
            facts("bootstrap", left=MIN_TTL, not_before=900),
            Step.USE,
        ),
        (
            "stored bootstrap just below min ttl, budget closed: log in",
            facts("bootstrap", left=MIN_TTL - 1, not_before=900),
            Step.LOGIN,
        ),
        (
            "fresh bootstrap exactly at the floor, swap rate limited: use it",
            facts("bootstrap", left=WORKING_FLOOR_S, login_done=True, not_before=900),
            Step.USE,
        ),
        (
            "fresh bootstrap just below the floor, swap rate limited: refuse",
            facts("bootstrap", left=WORKING_FLOOR_S - 1, login_done=True, not_before=900),
            Step.REFUSE_RATE_LIMITED,
        ),
        (
            "lease exactly at the floor, cannot renew: rotate",
            facts(left=WORKING_FLOOR_S, renewable=False),
            Step.ROTATE,
        ),
        (
            "lease exactly at the floor, budget closed: use",
            facts(left=WORKING_FLOOR_S, renewable=False, not_before=900),
            Step.USE,
        ),
        (
            "an odd minted TTL: half of it rounded down is still fresh enough",
            facts(left=3600, issued=7201),
            Step.USE,
        ),
        (
            "an odd minted TTL: one second under half renews",
            facts(left=3599, issued=7201),
            Step.RENEW,
        ),
        (
            "a 1 s minted TTL (clock skew): the working floor decides, not renew_below_s",
            facts(left=120, issued=1),
            Step.USE,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_boundaries(name: str, f: TokenFacts, expected: Step) -> None:
    assert decide(f) is expected, name


@pytest.mark.parametrize(
    ("min_ttl", "renew_below", "issued", "threshold"),
    [
        (600, 6 * H, 0, 6 * H),  # the configured renew_below_s
        (8 * H, 6 * H, 0, 8 * H),  # min_ttl_s above renew_below_s wins
        (8 * H, 6 * H, 24 * H, 8 * H),
        (8 * H, 6 * H, 10 * H, 5 * H),  # never more than half the minted TTL
        (600, 6 * H, 4 * H, 2 * H),
        (600, 6 * H, 7201, 3600),  # half, rounded down
        (0, 0, 0, WORKING_FLOOR_S),  # never below the working floor
        (600, 6 * H, 1, WORKING_FLOOR_S),
        (600, 6 * H, 100, WORKING_FLOOR_S),
    ],
)
def test_renew_threshold(min_ttl: int, renew_below: int, issued: int, threshold: int) -> None:
    f = replace(facts(issued=issued), min_ttl_s=min_ttl, renew_below_s=renew_below)
    assert f.held is not None
    assert renew_threshold(f, f.held) == threshold
    # and decide() acts on it: at the threshold the lease is used, one second under it renewed
    at = replace(f, held=replace(f.held, expires_at=NOW + threshold))
    under = replace(f, held=replace(f.held, expires_at=NOW + threshold - 1))
    assert (decide(at), decide(under)) == (Step.USE, Step.RENEW)


def test_min_ttl_above_renew_below_renews_a_lease_between_them() -> None:
    f = replace(facts(left=7 * H), min_ttl_s=8 * H, renew_below_s=6 * H)
    assert decide(f) is Step.RENEW
