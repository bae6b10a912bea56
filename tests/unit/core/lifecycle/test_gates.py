"""core.lifecycle.gates: update-lock files, their TTL, durations; and how decide() honours them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.lifecycle.boxsteps import Pull, Ready, Stage, apply_steps
from monky_deployd.core.lifecycle.decide import Noop, decide
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.gates import (
    MAX_DURATION_S,
    MAX_TTL_S,
    Lock,
    parse_duration,
    parse_lock,
    printable,
    split_locks,
    summary,
)
from monky_deployd.core.lifecycle.plans import Apply, Paused, Restore
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records.suspend import Suspended

BUNDLE: dict[str, Any] = {"project": "shop", "compose": "services: {}\n"}


def test_a_lock_file_names_its_holder_reason_and_ttl() -> None:
    body = json.dumps({"holder": "billing-job", "reason": "month end", "ttl_s": 600}).encode()
    lk = parse_lock("billing", 100.0, body)
    assert lk == Lock("billing", 100.0, "billing-job", "month end", 600.0)
    assert lk.expires_at(3600) == 700.0
    assert "billing-job" in lk.describe(160.0) and "60 s" in lk.describe(160.0)


@pytest.mark.parametrize("content", [b"", b"batch-42\nmore", b"{not json", b'{"ttl_s": true}'])
def test_any_lock_file_locks_with_the_default_ttl(content: bytes) -> None:
    lk = parse_lock("x", 0.0, content)
    assert lk.ttl_s is None and lk.expires_at(3600) == 3600.0


def test_a_stale_lock_is_split_off() -> None:
    fresh, old = Lock("a", 1000.0), Lock("b", 0.0, ttl_s=10.0)
    assert split_locks((fresh, old), 1100.0, 3600.0) == ((fresh,), (old,))


@given(st.integers(1, 10_000), st.sampled_from(["", "s", "m", "h", "d"]))
def test_durations(n: int, unit: str) -> None:
    seconds = n * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    if seconds <= MAX_DURATION_S:
        assert parse_duration(f"{n}{unit}") == seconds
    else:
        with pytest.raises(ValueError, match="longer than a year"):
            parse_duration(f"{n}{unit}")


@given(st.integers(13, 2000), st.sampled_from(["", "s", "m", "h", "d"]))
def test_a_huge_duration_is_refused_by_name_never_infinity(digits: int, unit: str) -> None:
    """``lock take --ttl`` with 400 nines wrote ``Infinity``; ``suspend --for`` a year past
    ``datetime``'s range: both are refused before anything is written."""
    with pytest.raises(ValueError, match="longer than a year") as info:
        parse_duration("9" * digits + unit)
    assert len(str(info.value)) < 200, "the refusal quotes the input cut"


@given(st.text(max_size=300))
def test_printable_text_has_no_control_character_and_is_capped(text: str) -> None:
    shown = printable(text, 64)
    assert shown.isprintable() and len(shown) <= 64 + 3
    if text.isprintable() and len(text) <= 64:
        assert shown == text


@given(
    name=st.text(min_size=1, max_size=300),
    holder=st.text(max_size=500),
    reason=st.text(max_size=500),
)
def test_a_locks_name_holder_and_reason_are_printable_and_capped(
    name: str, holder: str, reason: str
) -> None:
    for body in (json.dumps({"holder": holder, "reason": reason}).encode(), holder.encode()):
        lk = parse_lock(name, 0.0, body)
        for text, cap in ((lk.name, 64), (lk.holder, 200), (lk.reason, 200)):
            assert text.isprintable() and len(text) <= cap + 3
        assert lk.describe(10.0).isprintable()


@pytest.mark.parametrize("ttl", [1e300, 10**400, float("inf"), 2 * MAX_TTL_S])
def test_a_locks_own_ttl_is_capped_at_the_maximum(ttl: float) -> None:
    raw = b'{"ttl_s": ' + (b"1e999" if ttl == float("inf") else str(ttl).encode()) + b"}"
    lk = parse_lock("x", 0.0, raw)
    assert lk.expires_at(3600) <= MAX_TTL_S
    assert lk.expires_at(3600, max_ttl_s=600) == 600
    assert split_locks((lk,), MAX_TTL_S + 1, 3600) == ((), (lk,))


def test_a_lock_from_the_future_is_shown_held_since_now_and_bounded() -> None:
    now = 1_000_000.0
    near, far = Lock("near", now + 600), Lock("far", now + 365 * 86400)
    valid, stale = split_locks((near, far), now, 3600, max_ttl_s=7 * 86400)
    assert valid == (near,) and stale == (far,)
    assert "for 0 s (its modification time is 600 s in the future)" in near.describe(now)
    # it never counts past its own time plus the TTL: at most twice max_ttl_s from now
    assert split_locks((near,), now + 600 + 3600, 3600) == ((), (near,))


def test_many_locks_are_one_summary() -> None:
    many = tuple(Lock(f"l{i}", 0.0) for i in range(50_000))
    line = summary(many, 10.0)
    assert line.count("held by") == 5 and line.endswith("and 49995 more")


@pytest.mark.parametrize("bad", ["", "0", "-5m", "2x", "m", "1.5.2h"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_a_suspend_pauses_applies_and_restores_but_not_noops() -> None:
    sus = Suspended(0.0, None, "maintenance")
    was = AppliedFacts("r1", "shop", ("web",))
    paused = decide(Facts(200, "r2", was, None, BUNDLE, suspended=sus))
    assert isinstance(paused, Paused) and "maintenance" in paused.reason
    running = (ServiceState("web", "running", "", "img"),)
    assert isinstance(decide(Facts(304, None, was, running, None, suspended=sus)), Noop)
    down = decide(Facts(304, None, was, (), None, suspended=sus))
    assert isinstance(down, Paused)
    assert isinstance(decide(Facts(304, None, was, (), None)), Restore)
    assert Suspended(0.0, 10.0).active(9.0) and not Suspended(0.0, 10.0).active(10.0)


def test_an_update_lock_stages_and_pulls_only() -> None:
    lk = Lock("billing", 0.0, "job")
    plan = decide(Facts(200, "r2", None, None, BUNDLE, locks=(lk,)))
    assert isinstance(plan, Apply) and plan.locks == (lk,) and "billing" in plan.reason
    ready = Ready("r2", "shop", "services: {}\n", "", ("web",), None, None)
    assert [type(s) for s in apply_steps(plan, ready)] == [Stage, Pull]
