"""End to end: update locks and suspend, with the real CLI, a real registry and real Docker."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-locks"


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        lab.write_config(locks={"dir": str(tmp_path / "locks"), "default_ttl_s": 3600})
        yield lab


def status(lab: Lab) -> dict[str, object]:
    out = lab.cli("status", "--json")
    body: dict[str, object] = json.loads(out.stdout)
    assert out.returncode == body["exit_status"] == 9, out.stderr  # paused: locked or suspended
    return body


def test_an_update_lock_pulls_but_recreates_nothing_until_released(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    ids = lab.containers()
    # an app writes a lock into the directory it bind-mounts
    lock_dir = lab.tmp / "locks"
    lock_dir.mkdir()
    (lock_dir / "billing.lock").write_text(json.dumps({"holder": "billing", "reason": "month end"}))
    lab.estate.tenancy.set_desired("r2", lab.bundle(env_template="DB_PASSWORD=${DB_PASSWORD}\n"))
    pulls, reports = lab.pulls(), len(lab.estate.tenancy.reports)
    run = lab.tick()
    assert run.rc == 6, run.stdout
    assert run.summary["outcome"] == "held" and run.summary["code"] == "UPDATE_LOCKED"
    assert "billing" in run.summary["message"] and "month end" in run.summary["message"]
    assert lab.pulls() > pulls, "a locked apply still pulls"
    assert lab.containers() == ids, "a locked apply recreates nothing"
    assert len(lab.estate.tenancy.reports) == reports
    assert status(lab)["locked"] is True
    # the operator's own lock, then release both: the next tick applies
    assert lab.cli("lock", "take", "ops", "--reason", "window").returncode == 0
    assert lab.tick().summary["code"] == "UPDATE_LOCKED"
    assert lab.cli("lock", "release", "ops").returncode == 0
    (lock_dir / "billing.lock").unlink()
    done = lab.tick()
    assert done.rc == 0 and done.summary["revision"] == "r2", done.stdout
    assert lab.containers() != ids


def test_a_stale_lock_is_ignored_with_a_warning(lab: Lab) -> None:
    lock_dir = lab.tmp / "locks"
    lock_dir.mkdir()
    stale = lock_dir / "crashed-app.lock"
    stale.write_text("crashed-app")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    run = lab.tick()
    assert run.rc == 0, run.stdout
    warnings = run.events("lock.stale")
    assert warnings and "crashed-app" in warnings[0]["message"]


def test_suspend_stops_applies_and_resume_lets_them_through(lab: Lab) -> None:
    assert lab.cli("suspend", "--reason", "db migration", "--for", "2h").returncode == 0
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    pulls = lab.pulls()
    run = lab.tick()
    assert run.rc == 6 and run.summary["code"] == "SUSPENDED", run.stdout
    assert "db migration" in run.summary["message"]
    assert run.events("plan.suspended")[0]["until"] is not None
    assert lab.pulls() == pulls and lab.containers() == {}
    assert lab.estate.tenancy.checkin_count == 1, "check-ins continue while suspended"
    assert status(lab)["suspended"] is not None
    assert lab.cli("resume").returncode == 0
    assert lab.tick().rc == 0
    assert set(lab.containers()) == {"web"}
