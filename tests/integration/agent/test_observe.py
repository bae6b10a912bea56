"""agent.observe.observe against a real state dir: the observation writes nothing (plan and status
rely on it), ``settle`` alone applies its side effects, and the desired revision is read one way."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.tenancy import Checkin
from monky_deployd.agent.observe import observe
from monky_deployd.config import Config

NOW = 2_000_000.0
# held.json as the agent writes it today: r2 failed, was rolled back to r1 and is held
HELD = {
    "attempts": 1,
    "box_changed": False,
    "code": "VERIFY_FAILED",
    "failed_at": NOW - 600,
    "message": "web exited",
    "next_attempt_at": None,
    "restore_attempts": 0,
    "restore_next_at": None,
    "revision": "r2",
    "rollback_ok": True,
    "rolled_back_to": "r1",
    "stalled": False,
}


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def box(tmp: Path, *, suspend_until: float | None) -> tuple[Config, StateDir]:
    cfg = Config.model_validate(
        {"env": "env-test", "state_dir": str(tmp / "state"), "locks": {"dir": str(tmp / "locks")}}
    )
    state = StateDir(cfg.state_dir).ensure()
    (tmp / "locks").mkdir()
    (cfg.state_dir / "held.json").write_text(json.dumps(HELD))
    suspend = {"since": NOW - 60, "until": suspend_until, "reason": "maintenance"}
    (cfg.state_dir / "suspend.json").write_text(json.dumps(suspend))
    return cfg, state


answers = st.sampled_from(
    [Checkin(204), Checkin(200, "r2", {}), Checkin(200, "r3", {}), Checkin(304)]
)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answer=answers, expired=st.booleans())
def test_observing_writes_nothing_and_settle_applies_what_it_found(
    tmp_path_factory: pytest.TempPathFactory, answer: Checkin, expired: bool
) -> None:
    tmp = tmp_path_factory.mktemp("obs")
    cfg, state = box(tmp, suspend_until=NOW - 1 if expired else NOW + 3600)
    before = snapshot(cfg.state_dir)
    local = observe.read_local(state)
    obs = observe.observe(cfg, state, answer, local, NOW)
    assert snapshot(cfg.state_dir) == before, "observe wrote to the state dir"
    # nothing is applied: a 304 names no revision, 200 names its own
    assert obs.desired == (answer.revision if answer.status == 200 else None)
    preempted = answer.status == 200 and answer.revision != "r2"
    assert (obs.held is None) is preempted
    assert (obs.suspended is None) is expired
    assert obs.running is None, "nothing applied: the engine is not asked"
    observe.settle(state, obs)
    assert (cfg.state_dir / "held.json").exists() is not preempted
    assert (cfg.state_dir / "suspend.json").exists() is not expired
    facts = obs.facts(retry=True)
    assert facts.held == obs.held and facts.suspended == obs.suspended and facts.retry


def test_another_applys_exited_job_container_is_drift_never_a_job_of_the_applied_record() -> None:
    """r2 changed migrate and ran it; a lock stopped its rollback to r1. r2's exited-0 migrate
    is not a run of r1's config: never recorded done in r1's record (a restore would then run
    r1's migrate again), and the engine's events are not asked for it (the engine here is a
    socket nobody listens on: asking it raises). Failed on main (88375a4): the events were
    asked for r2's container."""
    from monky_deployd import config as config_mod
    from monky_deployd.core.lifecycle.services import ServiceState
    from monky_deployd.core.records.applied import Applied, ServiceLabel

    cfg = config_mod.parse({"env": "env-obs-01", "docker": {"host": "unix:///nonexistent"}}, "t")
    labels = {"web": ServiceLabel("h1", "r1", "d1"), "migrate": ServiceLabel("h2", "r1", "d1")}
    lkg = Applied(
        "r1", "shop", ["web"], jobs=["migrate"], service_labels=labels, done={"migrate": "r1/d1"}
    )
    box = (
        ServiceState("web", "exited", "", "img", 3, "web-c", "r2/d2"),
        ServiceState("migrate", "exited", "", "img", 0, "migrate-c", "r2/d2"),
    )
    assert observe.jobs_done(cfg, lkg, box, NOW) == ((), ())
