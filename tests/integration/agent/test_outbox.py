"""A report tenancy did not take is kept (0600, bounded) and delivered by a later tick with its
original tick_id, once: whole in-process ticks against the loopback fakes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd import config as config_mod
from monky_deployd.adapters.box.state.state import OUTBOX_MAX, StateDir
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-outbox-01"
BAD = {"project": "shop", "compose": ""}  # refused at the bundle check: no Docker needed


@pytest.fixture
def estate() -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        yield est


def test_an_undelivered_report_is_delivered_once_by_the_next_tick(
    estate: Estate, tmp_path: Path
) -> None:
    raw = estate.config(
        state_dir=tmp_path / "state", grant_file=estate.write_grant(tmp_path / "grant.jwt")
    )
    cfg = config_mod.parse(raw, "test")

    def tick() -> TickRecord:
        return run_tick(cfg, clock=estate.clock.now, wire=estate.wire())

    estate.tenancy.set_desired("r1", BAD)
    estate.tenancy.fail_next(503, b"", path_contains="reports")
    first = tick()
    assert first.code == "BUNDLE_INVALID" and estate.tenancy.reports == []
    kept = StateDir(tmp_path / "state").outbox()
    assert len(kept) == 1 and (kept[0].stat().st_mode & 0o777) == 0o600
    assert (kept[0].parent.stat().st_mode & 0o777) == 0o700

    second = tick()  # the revision backs off: no new report, but the kept one goes out
    assert second.code == "APPLY_BACKOFF"
    assert [r["tick_id"] for r in estate.tenancy.reports] == [first.tick_id]
    assert estate.tenancy.reports[0]["code"] == "BUNDLE_INVALID"
    assert StateDir(tmp_path / "state").outbox() == []

    tick()
    assert len(estate.tenancy.reports) == 1, "a kept report is delivered once"


def test_the_outbox_keeps_the_newest_reports_only(tmp_path: Path) -> None:
    state = StateDir(tmp_path / "state").ensure()
    for i in range(OUTBOX_MAX + 5):
        state.outbox_put(f"t{i}", b"{}")
    names = [p.name for p in state.outbox()]
    assert len(names) == OUTBOX_MAX and names[0] == f"{6:015d}-t5.json"
