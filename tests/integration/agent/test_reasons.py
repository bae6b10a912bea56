"""Each apply says why, in whole in-process ticks (the fakes' wire and movable clock): the
first attempt names the revision, a refused one backs off, and its next attempt is a RETRY;
``--retry`` during the backoff is FORCED. The report carries them; no value appears."""

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
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.fakes.estate import Estate

pytestmark = pytest.mark.docker

ENV = "env-reasons-01"


@pytest.fixture
def estate(registry: Registry) -> Iterator[Estate]:
    with Estate(env=ENV) as est:
        est.bao.set_secret(
            f"envs/{ENV}/registry", {"robot": f"{registry.username}:{registry.password}"}
        )
        yield est


def incomplete_bundle(registry: Registry) -> dict[str, Any]:
    compose = {"services": {"web": {"image": f"{registry.host}/{ENV}/web:1"}}}
    return {
        "project": "rs" + uuid.uuid4().hex[:8],
        "compose": yaml.safe_dump(compose),
        "env_template": "A=${A}\n",
        "manifest": [
            {"name": "A", "path": f"envs/{ENV}/absent", "key": "a"},
            {
                "name": "registry",
                "path": f"envs/{ENV}/registry",
                "key": "robot",
                "use": "registry-auth",
            },
        ],
        "registry_host": registry.host,
    }


def test_a_refused_revision_retries_after_its_backoff_and_says_so(
    estate: Estate, registry: Registry, tmp_path: Path
) -> None:
    raw = estate.config(
        state_dir=tmp_path / "state", grant_file=estate.write_grant(tmp_path / "grant.jwt")
    )
    cfg = config_mod.parse(raw, "test")
    wire = estate.wire()

    def tick(retry: bool = False) -> TickRecord:
        options = Options(retry=retry, rand=lambda: 0.0)
        return run_tick(cfg, clock=estate.clock.now, wire=wire, options=options)

    estate.tenancy.set_desired("r1", incomplete_bundle(registry))
    first = tick()
    assert (first.outcome, first.code) == ("refused", "ENV_INCOMPLETE")
    assert estate.tenancy.reports[-1]["reasons"] == [{"kind": "REVISION", "detail": "(none) -> r1"}]
    waiting = tick()  # within the backoff: nothing applied, nothing reported
    assert waiting.code == "APPLY_BACKOFF" and len(estate.tenancy.reports) == 1

    estate.clock.advance(3600)
    second = tick()
    assert second.code == "ENV_INCOMPLETE"
    assert estate.tenancy.reports[-1]["reasons"] == [
        {"kind": "REVISION", "detail": "(none) -> r1"},
        {"kind": "RETRY", "detail": "attempt 2 after ENV_INCOMPLETE"},
    ]

    forced = tick(retry=True)  # the operator does not wait for the backoff
    assert forced.code == "ENV_INCOMPLETE"
    assert [r["kind"] for r in estate.tenancy.reports[-1]["reasons"]] == ["REVISION", "FORCED"]
