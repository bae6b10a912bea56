"""The tick ledger as whole in-process ticks leave it (the loopback fakes, no Docker): one line
per tick, 0600, counters across ticks, a hostile answer capped, a corrupt ledger started anew, a
tick that found the lock held not recorded, and `status`'s view of it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd import config as config_mod
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.commands import status
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.config import Config
from monky_deployd.core.records import ledger
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-ledger-01"


@pytest.fixture
def estate() -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        yield est


@pytest.fixture
def cfg(estate: Estate, tmp_path: Path) -> Config:
    raw = estate.config(
        state_dir=tmp_path / "state",
        grant_file=estate.write_grant(tmp_path / "grant.jwt"),
        lock_wait_s=0,
    )
    return config_mod.parse(raw, "test")


def tick(cfg: Config, estate: Estate) -> TickRecord:
    rec = run_tick(cfg, clock=estate.clock.now, wire=estate.wire())
    estate.clock.advance(60)
    return rec


def read(cfg: Config) -> ledger.Ledger:
    led, problem = StateDir(cfg.state_dir).read_ledger()
    assert problem is None
    return led


def test_ticks_are_counted_across_processes_and_status_reads_them(
    cfg: Config, estate: Estate
) -> None:
    for _ in range(3):
        assert tick(cfg, estate).outcome == "idle"
    path = StateDir(cfg.state_dir).ledger_file
    assert (path.stat().st_mode & 0o777) == 0o600
    led = read(cfg)
    assert led.ticks == {"idle": 3} and led.leases_total == 1 and led.history == ()
    assert led.token is not None and led.token.kind == "lease"
    before = path.read_bytes()
    view = status.view(cfg, estate.clock.now(), engine=False)
    assert path.read_bytes() == before
    assert (view["state"], view["exit_status"], view["leases_last_hour"]) == ("ok", 0, 1)
    assert view["counters"]["ticks"]["idle"] == 3


def test_a_hostile_answer_is_capped_in_the_ledger(cfg: Config, estate: Estate) -> None:
    words = "A" * 200_000
    body = json.dumps({"error": {"code": "INTERNAL", "message": words}}).encode()
    estate.tenancy.fail_next(500, body, path_contains="checkin")
    rec = tick(cfg, estate)
    assert rec.outcome == "failed"
    led = read(cfg)
    assert led.last is not None and len(led.last.message) <= ledger.TEXT_MAX
    assert StateDir(cfg.state_dir).ledger_file.stat().st_size < 8 * 1024
    assert [h.outcome for h in led.history] == ["failed"] and led.consecutive_failures == 1


def test_a_corrupt_ledger_is_started_anew(cfg: Config, estate: Estate) -> None:
    tick(cfg, estate)
    state = StateDir(cfg.state_dir)
    state.ledger_file.write_bytes(b'{"version": 1, "ticks": "many"}')
    assert status.view(cfg, estate.clock.now(), engine=False)["ledger"] == (
        "a field is missing or mistyped"
    )
    tick(cfg, estate)
    assert read(cfg).ticks == {"idle": 1}


def test_a_tick_that_found_the_lock_held_is_not_recorded(cfg: Config, estate: Estate) -> None:
    tick(cfg, estate)
    state = StateDir(cfg.state_dir)
    before = state.ledger_file.read_bytes()
    with state.lock(0):
        rec = tick(cfg, estate)
    assert rec.code == "LOCK_BUSY"
    assert state.ledger_file.read_bytes() == before


def test_one_tick_from_a_clock_a_year_ahead_does_not_freeze_the_ledger(
    cfg: Config, estate: Estate
) -> None:
    """A tick from a clock a year ahead (a bad RTC before NTP), then three failed ticks: the
    ledger's last tick is the newest written (its sequence), so status says failed, then stale
    when ticks stop; before, it said ok for a year and the metrics froze."""
    year = 365 * 86400.0
    run_tick(cfg, clock=lambda: estate.clock.now() + year, wire=estate.wire())
    ahead = status.view(cfg, estate.clock.now(), engine=False)
    assert (ahead["state"], ahead["exit_status"]) == ("clock_suspect", 12)
    estate.clock.advance(60)
    body = json.dumps({"error": {"code": "INTERNAL", "message": "down"}}).encode()
    for _ in range(3):
        estate.tenancy.fail_next(500, body, path_contains="checkin")
        assert tick(cfg, estate).outcome == "failed"
    led = read(cfg)
    assert led.last is not None and led.last.outcome == "failed" and led.last.seq == 4
    view = status.view(cfg, estate.clock.now(), engine=False)
    assert (view["state"], view["exit_status"]) == ("failed", 1)
    assert view["last_tick"]["seq"] == 4
    later = status.view(cfg, estate.clock.now() + 3600, engine=False)
    assert later["state"] == "stale"
