"""core.clock and its users: every stored wait bounded against now, whatever the clock did
since it was written (a bad RTC before NTP, a VM restored from a snapshot); the ledger ordered
by its sequence, never by the ticks' clocks; a last tick in the future is suspect."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.clock import FUTURE_TOLERANCE_S, bounded_end, suspect_future
from monky_deployd.core.commands import status
from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle.decide import decide
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.plans import Backoff
from monky_deployd.core.lifecycle.recovery import after_failure, bounded
from monky_deployd.core.records import ledger
from monky_deployd.core.records.held import Held, held_record
from monky_deployd.core.records.suspend import Suspended

T0 = 1_800_000_000.0
YEAR = 365 * 86400.0
# clock offsets: the step between the tick that wrote a record and the tick reading it
offsets = st.one_of(
    st.floats(min_value=-2 * YEAR, max_value=2 * YEAR, allow_nan=False),
    st.sampled_from([-86400.0, -3600.0, -1.0, 0.0, 1.0, 3600.0, 86400.0, YEAR]),
)
caps = st.floats(min_value=1.0, max_value=86400.0)


def flat(held: Held) -> dict[str, Any]:
    """held.json's flat fields, as the record writes them."""
    body: dict[str, Any] = json.loads(held.to_json())
    return body


@given(offsets, st.floats(min_value=0.0, max_value=86400.0), caps)
def test_a_wait_never_exceeds_its_cap_nor_its_own_length(
    step: float, wait: float, cap: float
) -> None:
    start = T0
    now = T0 + step
    end = bounded_end(start, start + wait, now, cap)
    assert end <= start + wait  # never later than written
    assert end - now <= cap + 1e-6  # never further than the cap
    assert end - now <= wait + 1e-6  # never longer than the wait it was written with
    if start + wait > now:
        assert end >= now  # a wait still running is not ended before now


@given(offsets, st.integers(min_value=1, max_value=12), caps, st.floats(0.0, 0.999))
def test_a_backoff_written_before_a_clock_step_waits_at_most_cap_s(
    step: float, attempts: int, cap: float, u: float
) -> None:
    """The issue's case: clock back a day gave 'next attempt in 86452 s' with cap_s 3600."""
    rec = after_failure(
        revision="r2",
        code=Code.PULL_FAILED,
        message="pull failed",
        failed_phase="pull",
        lkg="r1",
        on_failure="rollback",
        previous=dataclasses.replace(_held(), attempts=attempts - 1) if attempts > 1 else None,
        now=T0,
        base_s=60.0,
        cap_s=cap,
        jitter=0.2,
        u=u,
    ).held
    now = T0 + step
    seen = bounded(rec, now, cap)
    assert seen is not None and flat(seen)["next_attempt_at"] is not None
    assert flat(seen)["next_attempt_at"] - now <= cap + 1e-6
    assert seen.failed_at <= now
    assert flat(seen)["next_attempt_at"] <= flat(rec)["next_attempt_at"]
    again = bounded(seen, now, cap)
    assert again == seen  # stored once, stable
    plan = decide(Facts(200, "r2", AppliedFacts("r1", "p", ("web",)), None, {"x": 1}, seen, now))
    if isinstance(plan, Backoff):
        assert plan.next_at - now <= cap + 1e-6


def _held() -> Held:
    return held_record("r2", "PULL_FAILED", "pull failed", 1, T0, T0 + 60.0)


def test_clock_back_a_day_gives_at_most_cap_s_not_86452_s() -> None:
    held = held_record(
        "r2", "VERIFY_EXITED", "x", 1, T0, None, restore_attempts=1, restore_next_at=T0 + 52.0
    )
    now = T0 - 86400.0
    seen = bounded(held, now, 3600.0)
    assert seen is not None and flat(seen)["restore_next_at"] == now + 52.0
    assert seen.failed_at == now


@given(offsets, st.floats(min_value=1.0, max_value=30 * 86400.0))
def test_a_suspend_written_before_a_clock_step_back_lasts_at_most_its_duration(
    step: float, duration: float
) -> None:
    sus = Suspended(T0, T0 + duration, "migration")
    now = T0 + step
    seen = sus.bounded(now)
    assert seen.since <= now
    assert seen.until is not None and seen.until - now <= duration + 1e-6
    assert seen.until <= sus.until  # type: ignore[operator]
    assert seen.active(now) == sus.active(now)
    assert Suspended(T0, None).bounded(now).until is None  # until resume stays so


def _entry(started: float, outcome: str = "noop", code: str = "OK") -> ledger.Entry:
    return ledger.Entry("t", started, started + 1, outcome, code, outcome, "r1")


@given(st.lists(offsets, min_size=1, max_size=8))
def test_the_ledger_takes_the_newest_tick_written_whatever_its_clock(steps: list[float]) -> None:
    led = ledger.Ledger()
    for n, step in enumerate(steps, start=1):
        e = _entry(T0 + step)
        led = ledger.record(led, e, token=None)
        assert led.last is not None and led.last.started_at == e.started_at
        assert led.last.seq == led.seq == n
    assert ledger.Ledger.from_json(led.to_json()) == led


def test_one_tick_from_a_year_ahead_does_not_freeze_the_ledger() -> None:
    """The issue's case: status said ok with three failed ticks since, never stale."""
    led = ledger.record(ledger.Ledger(), _entry(T0 + YEAR), token=None)
    for n in range(3):
        led = ledger.record(led, _entry(T0 + 60 * n, "failed", "PULL_FAILED"), token=None)
    assert led.last is not None and led.last.outcome == "failed"
    seen = status.verdict(status.StatusFacts(T0 + 200, led.last, "r1", "r1"))
    assert seen.state == "failed"
    later = status.verdict(status.StatusFacts(T0 + 3600, led.last, "r1", "r1"))
    assert later.state == "stale"


@given(offsets)
def test_a_last_tick_in_the_future_is_suspect(step: float) -> None:
    last = _entry(T0 + step)
    seen = status.verdict(status.StatusFacts(T0, last, "r1", "r1"))
    ahead = last.finished_at - T0
    assert (seen.state == "clock_suspect") == suspect_future(last.finished_at, T0)
    assert suspect_future(last.finished_at, T0) == (ahead > FUTURE_TOLERANCE_S)
    if seen.state == "clock_suspect":
        assert seen.exit_status == status.EXIT_STATUS["clock_suspect"] != 0
