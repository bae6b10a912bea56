"""core.status: the verdict's exit status over every class of box state, and the table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.core import status
from monky_deployd.core.ledger import OUTCOMES, Entry
from monky_deployd.core.status import EXIT_STATUS, StatusFacts, verdict

NOW = 1_000_000.0
CODES = ["OK", "IMAGE_NOT_FOUND", "SUSPENDED", "UPDATE_LOCKED", "REVISION_HELD", "APPLY_BACKOFF",
         "ROLLBACK_FAILED", "TENANCY_UNREACHABLE"]  # fmt: skip
revs = st.none() | st.sampled_from(["r1", "r2", "r3"])


def entry(outcome: str, code: str, revision: str | None, age: float) -> Entry:
    return Entry("t", NOW - age - 1, NOW - age, outcome, code, "msg", revision, 1000)


lasts = st.none() | st.builds(
    entry, st.sampled_from(OUTCOMES), st.sampled_from(CODES), revs, st.floats(0, 2000)
)
facts = st.builds(
    StatusFacts,
    now=st.just(NOW),
    last=lasts,
    applied=revs,
    desired=revs,
    held=revs,
    held_stalled=st.booleans(),
    suspended=st.booleans(),
    locked=st.booleans(),
)


@settings(max_examples=1000)
@given(facts)
def test_exit_zero_exactly_when_the_box_was_at_its_desired_revision_and_healthy(
    f: StatusFacts,
) -> None:
    v = verdict(f)
    assert v.exit_status == EXIT_STATUS[v.state] and v.reason
    healthy = (
        f.last is not None
        and NOW - f.last.finished_at <= status.STALE_AFTER_S
        and f.last.outcome in ("applied", "noop", "idle")
        and f.last.code not in ("SUSPENDED", "UPDATE_LOCKED", "ROLLBACK_FAILED")
        and (f.held is None or (f.desired is not None and f.held != f.desired))  # moot hold
        and not f.held_stalled
        and not f.suspended
        and (f.desired is None or f.desired == f.applied)
    )
    assert (v.exit_status == 0) == healthy, (f, v)


@settings(max_examples=1000)
@given(facts)
def test_the_first_matching_state_wins(f: StatusFacts) -> None:
    v = verdict(f)
    if f.last is None:
        assert v.state == "no_tick" and v.exit_status == 8
    elif NOW - f.last.finished_at > status.STALE_AFTER_S:
        assert v.state == "stale" and v.exit_status == 10
    elif f.held_stalled or f.last.code == "ROLLBACK_FAILED":
        assert v.state == "stalled" and v.exit_status == 7
    elif f.last.outcome in ("failed", "refused") and not (
        f.held is not None and f.last.revision == f.held
    ):
        assert v.state == "failed" and v.exit_status == 1
    elif f.suspended:
        assert v.state == "paused" and v.exit_status == 9


def test_each_documented_state() -> None:
    ok = entry("noop", "OK", "r1", 30)
    assert verdict(StatusFacts(NOW, ok, "r1", "r1")).state == "ok"
    assert verdict(StatusFacts(NOW, None, None, None)).state == "no_tick"
    assert verdict(StatusFacts(NOW, entry("noop", "OK", "r1", 3600), "r1", "r1")).state == "stale"
    failed = entry("failed", "IMAGE_NOT_FOUND", "r2", 30)
    assert verdict(StatusFacts(NOW, failed, "r1", "r2")).state == "failed"
    assert verdict(StatusFacts(NOW, failed, "r1", "r2", held="r2")).state == "held"
    held = entry("held", "REVISION_HELD", "r2", 30)
    assert verdict(StatusFacts(NOW, held, "r1", "r2", held="r2")).state == "held"
    stalled = entry("failed", "ROLLBACK_FAILED", "r2", 30)
    assert (
        verdict(StatusFacts(NOW, stalled, "r1", "r2", held="r2", held_stalled=True)).exit_status
        == 7
    )
    suspended = entry("held", "SUSPENDED", "r2", 30)
    assert verdict(StatusFacts(NOW, suspended, "r1", "r2", suspended=True)).exit_status == 9
    locked = entry("held", "UPDATE_LOCKED", "r2", 30)
    assert verdict(StatusFacts(NOW, locked, "r1", "r2", locked=True)).exit_status == 9
    assert verdict(StatusFacts(NOW, ok, "r1", "r2")).state == "not_applied"


def test_exit_statuses_are_distinct_per_kind_of_trouble() -> None:
    kinds = {k: v for k, v in EXIT_STATUS.items() if k != "no_tick"}
    assert len(set(kinds.values())) == len(kinds)
    assert 2 not in EXIT_STATUS.values() and 3 not in EXIT_STATUS.values()  # usage, config
