"""core.records.ledger: counters, leases, history and bounds of the tick ledger, over classes of
ticks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.records import ledger
from monky_deployd.core.records.ledger import Entry, Ledger, Phase, TokenSeen

REASONS = {
    f"larger than {ledger.MAX_BYTES} bytes",
    "not a version-1 tick ledger",
    "a field is missing or mistyped",
}
CHECKIN = (Phase("token", 1, True), Phase("checkin", 1, True))


def tick(
    at: float,
    outcome: str = "noop",
    code: str = "OK",
    revision: str | None = "r1",
    *,
    message: str = "fine",
    rollback_to: str | None = None,
    rollback_ok: bool | None = None,
    heard: bool = True,
    desired: str | None = "",  # "": the revision the tick worked on (none when idle)
) -> Entry:
    return Entry(
        tick_id=f"t{at:.0f}",
        started_at=at,
        finished_at=at + 1,
        outcome=outcome,
        code=code,
        message=message,
        revision=revision,
        duration_ms=1000,
        phases=CHECKIN if heard else (Phase("token", 1, False),),
        rollback_to=rollback_to,
        rollback_ok=rollback_ok,
        desired=(None if outcome == "idle" else revision) if desired == "" else desired,
    )


outcomes = st.sampled_from(ledger.OUTCOMES)
texts = st.text(max_size=2000)
entries = st.builds(
    tick,
    st.floats(0, 2e9),
    outcomes,
    st.sampled_from(["OK", "IMAGE_NOT_FOUND", "SUSPENDED", "ROLLBACK_FAILED"]),
    st.none() | st.text(max_size=400),
    message=texts,
    rollback_to=st.none() | st.text(max_size=400),
    rollback_ok=st.none() | st.booleans(),
    heard=st.booleans(),
)


@given(st.lists(entries, max_size=60))
def test_any_sequence_of_ticks_stays_bounded_and_round_trips(ticks: list[Entry]) -> None:
    led = Ledger()
    for e in ticks:
        led = ledger.record(led, e, token=None)
        raw = led.to_json()
        assert len(raw) < ledger.MAX_BYTES
        assert Ledger.from_json(raw) == led
    assert len(led.history) <= ledger.HISTORY_MAX
    assert sum(led.ticks.values()) == len(ticks)
    kept: list[Entry | None] = [led.last, *led.history]
    for one in kept:
        if one is not None:
            assert len(one.message) <= ledger.TEXT_MAX and "\n" not in one.message


@given(st.lists(outcomes, min_size=1, max_size=40))
def test_consecutive_failures_count_failures_since_the_last_success(seq: list[str]) -> None:
    led = Ledger()
    for i, outcome in enumerate(seq):
        led = ledger.record(led, tick(i * 60.0, outcome), token=None)
    expected = 0
    for outcome in seq:
        if outcome in ledger.FAILURE:
            expected += 1
        elif outcome in ledger.SUCCESS:
            expected = 0
    assert led.consecutive_failures == expected


def test_history_keeps_changing_ticks_only_and_folds_repeats() -> None:
    led = Ledger()
    led = ledger.record(led, tick(0, "applied", revision="r1"), token=None)
    for i in range(1, 50):
        led = ledger.record(led, tick(i * 60.0, "noop"), token=None)
    assert [h.outcome for h in led.history] == ["applied"]
    for i in range(50, 55):
        led = ledger.record(led, tick(i * 60.0, "failed", "TENANCY_UNREACHABLE", None), token=None)
    assert [(h.outcome, h.repeats) for h in led.history] == [("applied", 1), ("failed", 5)]
    for i in range(100):
        led = ledger.record(led, tick(6000 + i * 60.0, "applied", revision=f"r{i}"), token=None)
    assert len(led.history) == ledger.HISTORY_MAX and led.history[-1].revision == "r99"


def test_a_lease_is_counted_once_and_leases_in_the_last_hour_slide() -> None:
    led = Ledger()
    lease = TokenSeen("lease", 99999.0, True, "lse_1", 10.0)
    led = ledger.record(led, tick(5), token=lease)
    led = ledger.record(led, tick(65), token=lease)  # the same lease: not spent again
    assert led.leases_total == 1 and led.leases == (10.0,)
    rotated = TokenSeen("lease", 99999.0, True, "lse_2", 130.0)
    led = ledger.record(led, tick(125), token=rotated)
    assert led.leases_total == 2 and led.leases_since(0) == 2
    assert led.leases_since(130.0 + ledger.LEASE_WINDOW_S - 3600 + 1) == 0
    bootstrap = TokenSeen("bootstrap", 500.0, False, "", 200.0)
    assert ledger.record(led, tick(185), token=bootstrap).leases_total == 2


def test_desired_follows_what_the_check_in_heard() -> None:
    led = ledger.record(Ledger(), tick(0, "applied", revision="r2"), token=None)
    assert led.desired == "r2"
    led = ledger.record(
        led, tick(60, "failed", "TENANCY_UNREACHABLE", None, heard=False), token=None
    )
    assert led.desired == "r2", "a tick that did not hear tenancy keeps what was seen"
    led = ledger.record(led, tick(120, "idle", revision=None), token=None)
    assert led.desired is None


def test_a_restore_under_a_held_revision_keeps_the_desired_one() -> None:
    """The tick restored the LKG r1 (its revision) while tenancy wants the held r2."""
    led = ledger.record(Ledger(), tick(0, "applied", revision="r1", desired="r2"), token=None)
    assert led.desired == "r2"


def test_a_steady_noop_is_quiet_and_anything_else_is_not() -> None:
    led = ledger.record(Ledger(), tick(0, "applied"), token=None)
    first_noop = ledger.record(led, tick(60), token=None)
    assert not ledger.quiet(led, first_noop)
    second = ledger.record(first_noop, tick(120), token=None)
    assert ledger.quiet(first_noop, second)
    lease = TokenSeen("lease", 9e9, True, "lse_9", 179.0)
    assert not ledger.quiet(second, ledger.record(second, tick(180), token=lease))
    assert not ledger.quiet(
        second, ledger.record(second, tick(180, "held", "SUSPENDED"), token=None)
    )


@given(st.binary(max_size=600) | st.text(max_size=600).map(str.encode))
def test_garbage_is_refused_with_a_reason_that_holds_no_content(raw: bytes) -> None:
    try:
        Ledger.from_json(raw)
    except ValueError as exc:
        assert str(exc) in REASONS  # fixed sentences: never the content


def test_a_hostile_ledger_is_cut_to_its_bounds() -> None:
    big = Ledger(
        last=tick(0, message="x" * 100_000),
        history=tuple(tick(i, "failed", message="y" * 500) for i in range(20)),
    )
    raw = big.to_json().replace(b'"version":1', b'"version":1')
    back = Ledger.from_json(raw[: ledger.MAX_BYTES])
    assert back.last is not None and len(back.last.message) == ledger.TEXT_MAX
    assert all(len(h.message) == ledger.TEXT_MAX for h in back.history)
    try:
        Ledger.from_json(b" " * (ledger.MAX_BYTES + 1))
    except ValueError as exc:
        assert "larger" in str(exc)
    else:
        raise AssertionError("an oversized ledger was read")
