"""core.lifecycle.schedule: update windows (window x clock x time zone x DST change) and the rollout
spread (identity x revision x spread x first sight x clock steps)."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.core.lifecycle import schedule
from monky_deployd.core.lifecycle.schedule import Seen, Window

# zones with and without daylight saving: Lord Howe moves by 30 minutes, Chatham keeps :45
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "America/Sao_Paulo",
]
T0 = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
T1 = datetime(2031, 1, 1, tzinfo=UTC).timestamp()
WEEK = 7 * 86400


def ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def window(text: str) -> Window:
    spec = schedule.parse_window(text)
    return Window(spec, zoneinfo.ZoneInfo(spec.zone))


day_sets = st.frozensets(st.integers(0, 6), min_size=1)
durations = st.integers(1, 7 * 24 * 60).map(lambda m: m * 60)


def spec_text(days: frozenset[int], hh: int, mm: int, dur_s: int, zone: str) -> str:
    names = ",".join(schedule.DAYS[d] for d in sorted(days))
    return f"{names} {hh:02d}:{mm:02d} for {dur_s // 60}m {zone}"


windows_st = st.builds(
    spec_text,
    day_sets,
    st.integers(0, 23),
    st.integers(0, 59),
    durations,
    st.sampled_from(ZONES),
).map(window)
instants = st.floats(T0, T1, allow_nan=False)


# -- parsing ---------------------------------------------------------------------------------


@given(day_sets, st.integers(0, 23), st.integers(0, 59), durations, st.sampled_from(ZONES))
def test_a_written_window_reads_back(
    days: frozenset[int], hh: int, mm: int, dur_s: int, zone: str
) -> None:
    spec = schedule.parse_window(spec_text(days, hh, mm, dur_s, zone))
    assert (spec.days, spec.hour, spec.minute, spec.duration_s, spec.zone) == (
        days,
        hh,
        mm,
        dur_s,
        zone,
    )


def test_the_issue_example_and_ranges() -> None:
    spec = schedule.parse_window("Mon..Fri 02:00 for 3h Europe/Berlin")
    assert (spec.days, spec.hour, spec.duration_s) == (frozenset(range(5)), 2, 3 * 3600)
    assert schedule.parse_window("Fri..Mon 22:30 for 1h30m UTC").days == frozenset({4, 5, 6, 0})
    assert schedule.parse_window("* 00:00 for 7d UTC").days == frozenset(range(7))
    assert schedule.parse_window("sat,SUN 01:00 for 45m UTC").days == frozenset({5, 6})


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Mon 02:00 3h Europe/Berlin", "is not a window"),
        ("Mon 24:00 for 3h UTC", "not a time of day"),
        ("Mon 02:60 for 3h UTC", "not a time of day"),
        ("Mo 02:00 for 3h UTC", "'Mo' is not a day"),
        ("Mon 02:00 for 0m UTC", "more than 0"),
        ("Mon 02:00 for 8d UTC", "at most 7 days"),
        ("Mon 02:00 for 3 hours UTC", "is not a window"),
        ("Mon 02:00 for 3x UTC", "not like 3h"),
    ],
)
def test_each_malformed_window_is_named(text: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        schedule.parse_window(text)


# -- windows over clocks, zones and DST ---------------------------------------------------------


def _local_start_ok(w: Window, start: float) -> bool:
    """The opening shows HH:MM on one of the window's days, or HH:MM did not exist that day
    (the spring-forward gap) and the opening is the instant it would have been."""
    local = datetime.fromtimestamp(start, w.tz)
    if local.weekday() not in w.spec.days and not _in_gap(w, start):
        return False
    if (local.hour, local.minute) == (w.spec.hour, w.spec.minute):
        return True
    return _in_gap(w, start)


def _in_gap(w: Window, start: float) -> bool:
    for back in (0, 1):
        day = (datetime.fromtimestamp(start, w.tz) - timedelta(days=back)).date()
        naive = datetime(day.year, day.month, day.day, w.spec.hour, w.spec.minute)
        there = naive.replace(tzinfo=w.tz)
        round_trip = datetime.fromtimestamp(there.timestamp(), w.tz).replace(tzinfo=None)
        if round_trip != naive and there.timestamp() == start:
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(windows_st, min_size=1, max_size=3), instants)
def test_open_or_closed_and_the_edges_are_right(ws: list[Window], now: float) -> None:
    state = schedule.window_state(tuple(ws), now)
    if state.open:
        assert state.closes_at is not None and state.closes_at > now
        assert state.closes_at - now <= WEEK
        # some window holds now and closes exactly then (its full elapsed duration)
        assert any(
            start <= now < end == state.closes_at
            for w in ws
            for start, end in schedule.occurrences(w, now)
        )
    else:
        assert state.opens_at is not None and now < state.opens_at <= now + WEEK + 3600
        # closed all the way to the opening, open at it
        for k in range(1, 8):
            between = now + (state.opens_at - now) * k / 8
            if between < state.opens_at:
                assert not schedule.window_state(tuple(ws), between).open
        assert schedule.window_state(tuple(ws), state.opens_at).open
        w = next(w for w in ws if w.spec.text == state.window)
        assert _local_start_ok(w, state.opens_at)


def _oracle_open(ws: list[Window], now: float) -> bool:
    """Brute force: every opening from 10 UTC days before to 1 after (a window lasts at most 7
    days, a zone is at most 14 h off UTC)."""
    base = datetime.fromtimestamp(now, UTC).date()
    for w in ws:
        for i in range(-10, 2):
            day = base + timedelta(days=i)
            if day.weekday() in w.spec.days:
                start = datetime(
                    day.year, day.month, day.day, w.spec.hour, w.spec.minute, tzinfo=w.tz
                ).timestamp()
                if start <= now < start + w.spec.duration_s:
                    return True
    return False


@settings(max_examples=500, deadline=None)
@given(st.lists(windows_st, min_size=1, max_size=3), instants)
def test_open_agrees_with_brute_force(ws: list[Window], now: float) -> None:
    assert schedule.window_state(tuple(ws), now).open == _oracle_open(ws, now)


@settings(max_examples=200, deadline=None)
@given(day_sets, st.integers(0, 23), st.integers(0, 59), st.sampled_from(ZONES), instants)
def test_a_week_long_window_started_days_ago_is_still_open(
    days: frozenset[int], hh: int, mm: int, zone: str, now: float
) -> None:
    w = window(spec_text(days, hh, mm, WEEK, zone))
    assert schedule.window_state((w,), now).open == _oracle_open([w], now)


@settings(max_examples=300, deadline=None)
@given(windows_st, instants)
def test_each_opening_lasts_its_duration_whatever_the_dst(w: Window, now: float) -> None:
    for start, end in schedule.occurrences(w, now):
        assert end - start == w.spec.duration_s
        assert _local_start_ok(w, start)


@given(instants)
def test_no_windows_is_always_open(now: float) -> None:
    assert schedule.window_state((), now).open
    assert schedule.next_open((), now) is None


def test_a_window_in_the_spring_forward_gap_opens_when_the_clock_would_have_shown_it() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET -> 03:00 CEST; 02:30 never shows
    w = window("Sun 02:30 for 1h Europe/Berlin")
    state = schedule.window_state((w,), ts("2026-03-28T12:00:00+00:00"))
    assert state.opens_at == ts("2026-03-29T01:30:00+00:00")  # 03:30 CEST
    assert schedule.window_state((w,), ts("2026-03-29T02:29:59+00:00")).open
    assert not schedule.window_state((w,), ts("2026-03-29T02:30:00+00:00")).open


def test_a_window_in_the_autumn_repeat_opens_once_at_the_first() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 shows twice
    w = window("Sun 02:30 for 30m Europe/Berlin")
    state = schedule.window_state((w,), ts("2026-10-24T12:00:00+00:00"))
    assert state.opens_at == ts("2026-10-25T00:30:00+00:00")  # the first 02:30 (CEST)
    assert not schedule.window_state((w,), ts("2026-10-25T01:30:00+00:00")).open  # 02:30 CET
    w3 = window("Sun 02:30 for 3h Europe/Berlin")  # elapsed: closes at 04:30 CET
    assert schedule.window_state((w3,), ts("2026-10-25T03:29:00+00:00")).open
    assert not schedule.window_state((w3,), ts("2026-10-25T03:30:00+00:00")).open


def test_a_window_over_the_week_end_wraps() -> None:
    w = window("Sun 23:00 for 2h UTC")
    assert schedule.window_state((w,), ts("2026-12-07T00:30:00+00:00")).open  # Monday 00:30


# -- the rollout spread --------------------------------------------------------------------------

idents = st.from_regex(r"^[a-z0-9][a-z0-9-]{0,20}$", fullmatch=True)
revisions = st.from_regex(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,20}$", fullmatch=True)
spreads = st.integers(0, schedule.MAX_SPREAD_S)


@given(idents, revisions, spreads)
def test_the_offset_is_in_the_spread_and_the_same_every_time(
    ident: str, rev: str, spread: int
) -> None:
    off = schedule.offset(ident, rev, spread)
    assert off == schedule.offset(ident, rev, spread)
    assert (0 <= off < spread) if spread else off == 0


def test_boxes_spread_evenly_and_a_revision_reshuffles_them() -> None:
    boxes = [f"env-{i:05d}" for i in range(10_000)]
    counts = [0] * 20
    for box in boxes:
        counts[int(schedule.place(box, "r42") * 20)] += 1
    assert min(counts) > 400 and max(counts) < 600  # 500 each, evenly
    canaries = [b for b in boxes if schedule.is_canary(b, "r42")]
    assert 150 < len(canaries) < 250  # 2 %
    again = [b for b in boxes if schedule.is_canary(b, "r43")]
    assert len(set(canaries) & set(again)) < 20  # another revision: other canaries


def test_the_place_is_a_hash_not_pythons() -> None:
    # sha256(b"env-dev-08\0r42"): stable across processes and Python versions
    assert round(schedule.offset("env-dev-08", "r42", 3600)) == 3143


@settings(max_examples=500)
@given(
    idents,
    revisions,
    spreads,
    st.floats(T0, T1),
    st.floats(-2 * 86400, 2 * 86400),
    st.none() | st.sampled_from(["r-old", "other"]),
)
def test_gate_without_windows(
    ident: str, rev: str, spread: int, first: float, later: float, old: str | None
) -> None:
    now = first + later
    seen = schedule.seen(Seen(old or rev, first), rev, now)
    g = schedule.gate(seen, identity=ident, spread_s=spread, windows=(), now=now)
    # a record of another revision, or one from the future: the wait starts now
    if old is not None or first > now:
        assert seen.first_seen_at == now
    assert g.due_at <= seen.first_seen_at + spread
    if g.wait:
        assert g.why == "rollout" and g.until == g.due_at > now
        assert g.until - now <= spread  # never more than the spread, whatever the clock did
    else:
        assert now >= g.due_at


@settings(max_examples=300, deadline=None)
@given(
    idents,
    revisions,
    spreads,
    st.lists(windows_st, min_size=1, max_size=2),
    instants,
    st.floats(0, 2 * 86400),
)
def test_gate_with_windows(
    ident: str, rev: str, spread: int, ws: list[Window], first: float, later: float
) -> None:
    now = first + later
    g = schedule.gate(Seen(rev, first), identity=ident, spread_s=spread, windows=tuple(ws), now=now)
    open_now = schedule.window_state(tuple(ws), now).open
    if not g.wait:
        assert open_now and now >= g.due_at
        return
    assert g.until is not None and g.until > now
    assert g.until >= g.due_at  # never before the box's place
    assert schedule.window_state(tuple(ws), g.until).open  # applies inside a window
    if g.why == "window":
        assert not open_now and now >= g.due_at


def test_canary_only_with_a_spread() -> None:
    box = next(f"env-{i}" for i in range(10_000) if schedule.is_canary(f"env-{i}", "r1"))
    g = schedule.gate(Seen("r1", T0), identity=box, spread_s=600, windows=(), now=T0)
    assert g.canary and "canary" in schedule.describe(g)
    g0 = schedule.gate(Seen("r1", T0), identity=box, spread_s=0, windows=(), now=T0)
    assert not g0.canary and not g0.wait


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"spread_s": 600}, None),
        ({}, None),
        ({"spread_s": 0}, None),
        ({"spread_s": 86400}, None),
        ({"spread_s": 86401}, "0 to 86400"),
        ({"spread_s": -1}, "0 to 86400"),
        ({"spread_s": 1.5}, "integer"),
        ({"spread_s": True}, "integer"),
        ({"spread_s": "600"}, "integer"),
        ({"spread": 600}, "unknown key"),
        ([600], "mapping"),
    ],
)
def test_spread_validation(raw: object, problem: str | None) -> None:
    got = schedule.spread_problem(raw)
    assert (got is None) if problem is None else (got is not None and problem in got)
    if problem is not None:
        assert schedule.spread_of({"rollout": raw}) == 0  # the bundle check refuses it


@given(
    revisions,
    st.floats(0, T1),
    st.none() | st.floats(0, T1),
    st.sampled_from([None, "window", "rollout"]),
    spreads,
)
def test_the_waiting_record_round_trips(
    rev: str, first: float, until: float | None, why: str | None, spread: int
) -> None:
    rec = Seen(rev, first, until, why, spread)
    assert schedule.seen_from_json(schedule.seen_to_json(rec)) == rec


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b"{}", b'{"revision": "r1"}', b'{"revision": "r1", "first_seen_at": "x"}',
     b'{"revision": "r1", "first_seen_at": 1, "why": "bored"}', b"\xff",
     b'{"revision": "r1", "first_seen_at": 1e999}'],
)  # fmt: skip
def test_a_bad_waiting_record_is_refused_without_its_content(raw: bytes) -> None:
    with pytest.raises(ValueError, match="not a waiting record"):
        schedule.seen_from_json(raw)


def test_describe_says_what_the_box_waits_for() -> None:
    w = window("Sun 02:30 for 1h Europe/Berlin")
    now = ts("2026-03-28T12:00:00+00:00")
    g = schedule.gate(Seen("r9", now), identity="env-a", spread_s=0, windows=(w,), now=now)
    assert g.wait and g.why == "window" and g.until == ts("2026-03-29T01:30:00+00:00")
    assert "2026-03-29T01:30:00Z" in schedule.describe(g)
