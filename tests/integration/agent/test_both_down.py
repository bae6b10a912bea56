"""OpenBao and tenancy both down: the first error line names both (issue 27). The token phase
asks OpenBao first; on an OpenBao outage the tick asks tenancy's ``GET /`` (no token) and names
its fault too. With tenancy up, OpenBao alone is named. Whole ticks against the loopback fakes
(a stopped server: refused connections)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd import config as config_mod
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.cli import exit_code
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.estate import Estate

ENV = "env-down-01"


@pytest.fixture
def estate() -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        yield est


def tick(estate: Estate, tmp: Path, caplog: pytest.LogCaptureFixture) -> tuple[TickRecord, str]:
    raw = estate.config(state_dir=tmp / "state", grant_file=estate.write_grant(tmp / "grant.jwt"))
    caplog.clear()
    with caplog.at_level(logging.INFO):
        rec = run_tick(config_mod.parse(raw, "test"), clock=estate.clock.now)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    return rec, errors[0] if errors else ""


@pytest.mark.parametrize("stored_token", [False, True])
def test_both_down_names_both(
    estate: Estate, tmp_path: Path, caplog: pytest.LogCaptureFixture, stored_token: bool
) -> None:
    if stored_token:  # the steady box: a lookup-self of the held lease is the first request
        rec, _ = tick(estate, tmp_path, caplog)
        assert rec.outcome == "idle"
    bao, tenancy = f"{estate.bao.host}:{estate.bao.port}", estate.tenancy.url.split("//")[1]
    estate.bao.stop()
    estate.tenancy.stop()
    rec, first = tick(estate, tmp_path, caplog)
    assert (rec.code, exit_code(rec)) == ("OPENBAO_UNREACHABLE", 1)
    assert first.startswith("OPENBAO_UNREACHABLE: ") and bao in first
    assert "tenancy is down too: TENANCY_UNREACHABLE" in first and tenancy in first, first
    assert rec.message is not None and "tenancy is down too" in rec.message


def test_openbao_alone_down_names_openbao_alone(
    estate: Estate, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.bao.stop()
    rec, first = tick(estate, tmp_path, caplog)
    assert rec.code == "OPENBAO_UNREACHABLE" and "tenancy" not in first, first
    # tenancy was asked once, without a token, and nothing else
    assert estate.tenancy.requests == [("GET", "/", False)]
