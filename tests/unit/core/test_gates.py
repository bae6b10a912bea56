"""core.gates: update-lock files, their TTL, durations; and how decide() honours them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.boxsteps import Pull, Ready, Stage, apply_steps
from monky_deployd.core.decide import (
    AppliedFacts,
    Apply,
    Facts,
    Noop,
    Paused,
    Restore,
    decide,
)
from monky_deployd.core.gates import Lock, parse_duration, parse_lock, split_locks
from monky_deployd.core.records import Suspended
from monky_deployd.core.services import ServiceState

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
    assert parse_duration(f"{n}{unit}") == n * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]


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
