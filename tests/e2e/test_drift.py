"""End to end: decisions compare what runs, not names (issue 26). The real CLI, the loopback
estate, a real registry and the real Docker engine. A lock (which the failing app itself can
take) stops a rollback; tenancy then goes back to the last-known-good: r2's container runs
under r1's service name and r2's crashed worker is left over. Before (4189b48): every later
tick `noop`, `status` ok. Now the labels on the containers are compared with applied.json's:
drift, `status` degraded, restored once the lock goes (r1's container, no orphan)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab
from tests.e2e.test_recheck import SECRET, hooked_tick, template

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        lab.write_config(locks={"dir": str(tmp_path / "locks"), "default_ttl_s": 3600})
        yield lab


def with_crashing_worker(lab: Lab) -> dict[str, Any]:
    """r2: web runs (another LOG_LEVEL), a new worker crashes: verify fails."""
    r2 = lab.bundle(env_template=template("debug"))
    doc = yaml.safe_load(r2["compose"])
    worker = dict(doc["services"]["web"])
    worker["command"] = ["sh", "-c", "sleep 1; exit 1"]
    doc["services"]["worker"] = worker
    r2["compose"] = yaml.safe_dump(doc)
    return r2


def status(lab: Lab) -> tuple[int, dict[str, Any]]:
    proc = lab.cli("status", "--json")
    return proc.returncode, json.loads(proc.stdout)


def test_another_revisions_container_under_the_services_name_is_drift(lab: Lab) -> None:
    tenancy = lab.estate.tenancy
    r1 = lab.bundle(env_template=template("info"))
    tenancy.set_desired("r1", r1)
    assert lab.tick().rc == 0
    tenancy.set_desired("r2", with_crashing_worker(lab))
    run = hooked_tick(lab, "verify", "lock")  # the app takes a lock: the rollback is stopped
    assert run.rc == 1 and "rollback to r1 is pending" in run.summary["message"], run.stdout
    assert set(lab.labelled("r2")) == {"web"}  # r2's web runs
    tenancy.set_desired("r1", r1)  # tenancy goes back to r1
    locked = lab.tick()  # replacing a running container is a rollback: the lock stops it
    assert (locked.rc, locked.summary["code"]) == (6, "UPDATE_LOCKED"), locked.stdout
    [plan] = locked.events("plan.restore")
    assert "web's container was made by r2/" in plan["message"], plan["message"]
    assert "worker not in revision r1 (orphans)" in plan["message"]
    rc, view = status(lab)
    assert (rc, view["state"]) != (0, "ok"), view
    states = {s["service"]: s["state"] for s in view["health"]["services"]}
    assert states["web"].startswith("drift"), states
    (lab.tmp / "locks" / "batch.lock").unlink()
    restored = lab.tick()
    assert restored.rc == 0 and restored.summary["outcome"] == "applied", restored.stdout
    assert set(lab.labelled("r1")) == {"web"} and not lab.labelled("r2")
    assert set(lab.containers()) == {"web"}  # the orphan worker is gone
    assert lab.container_env()["LOG_LEVEL"] == "info"
    assert lab.tick().summary["outcome"] == "noop"
    rc, view = status(lab)
    assert (rc, view["state"]) == (0, "ok"), view


def pending_across_a_rename(lab: Lab) -> str:
    """r1 applied; r2 renames the compose project and fails verify; a lock taken during verify
    leaves its rollback pending. The renamed project."""
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    assert lab.tick().rc == 0
    renamed = lab.project + "b"
    lab.extra_projects = (renamed,)
    r2 = with_crashing_worker(lab)
    r2["project"] = renamed
    tenancy.set_desired("r2", r2)
    run = hooked_tick(lab, "verify", "lock")
    assert run.rc == 1 and "rollback to r1 is pending" in run.summary["message"], run.stdout
    return renamed


def test_a_pending_rollback_across_a_project_rename_takes_the_failed_project_down(
    lab: Lab,
) -> None:
    """r2 renames the compose project and fails; a lock stops its rollback (pending). Before:
    the next tick let through restored r1's project and left r2's running: both projects ran."""
    renamed = pending_across_a_rename(lab)
    assert set(lab.containers(renamed)) == {"web"}  # r2's web runs in the renamed project
    (lab.tmp / "locks" / "batch.lock").unlink()
    done = lab.tick()  # tenancy still wants r2: the pending rollback is finished
    assert done.rc == 0, done.stdout
    assert any(e["project"] == renamed for e in done.events("rollback.down")), done.stdout
    assert lab.containers(renamed) == {}  # the failed project is down
    assert set(lab.labelled("r1")) == {"web"}
    assert lab.container_env()["LOG_LEVEL"] == "info"


def test_a_down_across_a_project_rename_killed_is_finished_by_the_next_tick(lab: Lab) -> None:
    """The same pending rollback, its tick SIGKILLed inside the failed project's ``down``: the
    next tick takes what is left of that project down and restores r1 (one project left)."""
    renamed = pending_across_a_rename(lab)
    (lab.tmp / "locks" / "batch.lock").unlink()
    lab.kill_during("down", "r2")
    done = lab.tick()
    assert done.rc == 0, done.stdout
    [plan] = done.events("plan.restore")  # the rollback is still pending: this tick finishes it
    assert "rolling back to r1" in plan["message"], plan["message"]
    assert lab.containers(renamed) == {}  # the failed project is down
    assert set(lab.labelled("r1")) == {"web"}
    assert lab.container_env()["LOG_LEVEL"] == "info"
    assert lab.tick().summary["outcome"] == "held"  # tenancy still wants r2: it stays held
    assert lab.containers(renamed) == {}
