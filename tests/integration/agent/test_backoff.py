"""A permanently failing revision over a simulated hour: whole in-process ticks (the fakes' wire
and movable clock) against a real registry and the real Docker CLI, counting pulls and reports.
Without backoff the hour would cost 61 pulls and 61 reports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd import config as config_mod
from monky_deployd.agent.context import Options
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.cli import exit_code
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.fakes.estate import Estate

pytestmark = pytest.mark.docker

ENV = "env-backoff-01"
TICK_S = 60


@pytest.fixture
def estate(registry: Registry) -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        est.bao.set_secret(
            f"envs/{ENV}/registry", {"robot": f"{registry.username}:{registry.password}"}
        )
        yield est


def failing_bundle(registry: Registry, tag: str) -> dict[str, Any]:
    image = f"{registry.host}/{ENV}/nothing-{uuid.uuid4().hex[:8]}:{tag}"
    compose = {"services": {"web": {"image": image, "network_mode": "none"}}}
    return {
        "project": "bo" + uuid.uuid4().hex[:8],
        "compose": yaml.safe_dump(compose),
        "env_template": "",
        "manifest": [
            {
                "name": "registry",
                "path": f"envs/{ENV}/registry",
                "key": "robot",
                "use": "registry-auth",
            }
        ],
        "registry_host": registry.host,
    }


def test_a_permanently_failing_revision_costs_a_handful_of_pulls_per_hour(
    estate: Estate, registry: Registry, tmp_path: Path
) -> None:
    raw = estate.config(
        state_dir=tmp_path / "state",
        grant_file=estate.write_grant(tmp_path / "grant.jwt"),
        disk={"headroom_bytes": 1024 * 1024},
    )
    cfg = config_mod.parse(raw, "test")
    wire = estate.wire()
    options = Options(rand=lambda: 0.5)  # the jitter's draw: delays are 0.9 x 60 s x 2^n

    def tick() -> TickRecord:
        return run_tick(cfg, clock=estate.clock.now, wire=wire, options=options)

    estate.tenancy.set_desired("r1", failing_bundle(registry, "1"))
    manifests0 = registry.request_count("/manifests/", ("GET", "HEAD"))
    attempts: list[int] = []
    codes: set[str] = set()
    for minute in range(61):  # ticks at 0, 60, ..., 3600 s
        rec = tick()
        codes.add(str(rec.code))
        if any(p.name == "pull" for p in rec.phases):
            attempts.append(minute)
            assert (rec.outcome, rec.code, exit_code(rec)) == ("failed", "IMAGE_NOT_FOUND", 1)
        else:
            assert (rec.outcome, rec.code, exit_code(rec)) == ("held", "APPLY_BACKOFF", 6)
            assert "next attempt in" in rec.message
        estate.clock.advance(TICK_S)

    # due at 54, 168, 396, 852, 1764, 3528 s after each failure: ticks 0 1 3 7 15 30 59
    assert attempts == [0, 1, 3, 7, 15, 30, 59]
    assert len(estate.tenancy.reports) == len(attempts) == 7
    assert estate.tenancy.checkin_count == 61, "check-in cadence never changes"
    manifests = registry.request_count("/manifests/", ("GET", "HEAD")) - manifests0
    assert manifests > 0 and manifests % len(attempts) == 0  # the same requests per attempt
    assert codes == {"IMAGE_NOT_FOUND", "APPLY_BACKOFF"}

    # a new desired revision pre-empts the backoff on the very next tick
    estate.tenancy.set_desired("r2", failing_bundle(registry, "2"))
    rec = tick()
    assert any(p.name == "pull" for p in rec.phases) and rec.revision == "r2"
    assert len(estate.tenancy.reports) == 8


@pytest.mark.parametrize(
    "step_s", [-86400.0, -3600.0, 7 * 86400.0], ids=["back-1d", "back-1h", "fwd-7d"]
)
def test_a_clock_step_never_stretches_the_backoff_past_cap_s(
    estate: Estate, registry: Registry, tmp_path: Path, step_s: float
) -> None:
    """A failed revision's backoff was written by a clock that then stepped (a bad RTC before
    NTP, a VM restored from a snapshot): the next attempt is never more than backoff.cap_s
    away. Before the bound, clock back a day waited a day and a minute (0 attempts here)."""
    cap_s = 600.0
    raw = estate.config(
        state_dir=tmp_path / "state",
        grant_file=estate.write_grant(tmp_path / "grant.jwt"),
        disk={"headroom_bytes": 1024 * 1024},
        backoff={"base_s": 60, "cap_s": cap_s, "jitter": 0.2},
    )
    cfg = config_mod.parse(raw, "test")
    wire = estate.wire()
    offset = [0.0]

    def tick() -> TickRecord:
        def clock() -> float:  # the agent's clock (the fakes keep theirs)
            return estate.clock.now() + offset[0]

        return run_tick(cfg, clock=clock, wire=wire, options=Options(rand=lambda: 0.5))

    estate.tenancy.set_desired("r1", failing_bundle(registry, "1"))
    first = tick()
    assert first.code == "IMAGE_NOT_FOUND"
    offset[0] = step_s
    attempts: list[int] = []
    for minute in range(1, 21):
        estate.clock.advance(TICK_S)
        rec = tick()
        if any(p.name == "pull" for p in rec.phases):
            attempts.append(minute)
        else:
            assert rec.code == "APPLY_BACKOFF", rec.message
            wait = float(rec.message.split("next attempt in ")[1].split(" s")[0])
            assert wait <= cap_s
    assert attempts, "an attempt within backoff.cap_s of the clock step"
    assert attempts[0] <= cap_s / TICK_S + 1
