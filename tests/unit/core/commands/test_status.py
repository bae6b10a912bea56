"""core.commands.status: the verdict's exit status over every class of box state, and the table."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.core.commands import status
from monky_deployd.core.commands.status import EXIT_STATUS, StatusFacts, verdict
from monky_deployd.core.records.ledger import OUTCOMES, Entry

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


def test_exit_statuses_are_distinct_per_state() -> None:
    """One exit status per state (issue 27: 8 meant both no_tick and not_applied)."""
    assert len(set(EXIT_STATUS.values())) == len(EXIT_STATUS)
    assert 2 not in EXIT_STATUS.values()  # usage
    assert [k for k, v in EXIT_STATUS.items() if v == 3] == ["config_error"]  # as for apply
    assert EXIT_STATUS["no_tick"] == 8 and EXIT_STATUS["not_applied"] == 14


WORDS = ["ok", "done", "missing", "exited (1)", "exited (0)", "unhealthy", "starting", "restarting"]


@settings(max_examples=300)
@given(
    facts,
    st.lists(st.tuples(st.sampled_from(["web", "api", "migrate"]), st.sampled_from(WORDS)),
             max_size=3, unique_by=lambda t: t[0]),
    st.lists(st.sampled_from(["web", "api"]), max_size=2, unique=True),
)  # fmt: skip
def test_a_service_not_running_as_it_should_is_never_ok_and_is_named(
    f: StatusFacts, services: list[tuple[str, str]], bare: list[str]
) -> None:
    """Before: a service that turned unhealthy after the commit left status at ok, exit 0."""
    from dataclasses import replace

    v = verdict(replace(f, services=tuple(services), no_healthcheck=tuple(bare)))
    down = [(n, w) for n, w in services if w not in ("ok", "done")]
    if v.state in ("no_tick", "stale", "clock_suspect", "stalled"):
        return
    if down:
        assert (v.state, v.exit_status) == ("degraded", 13)
        assert all(f"{n} {w}" in v.reason for n, w in down)
    else:
        assert v == verdict(f) or (
            v.state == "ok" and v.reason.startswith(verdict(f).reason) and bare
        )
        if v.state == "ok" and bare:
            assert f"no healthcheck: {', '.join(bare)}" in v.reason
