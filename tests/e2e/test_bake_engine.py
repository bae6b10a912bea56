"""End to end: the bake judges the revision, not the box (issue 26). The real CLI, the loopback
estate, a real registry and the real Docker engine: a container removed or restarted by hand
inside the bake, or recreated by the agent's own rollback, is drift (restored, the revision
promoted after its bake, nothing held); an unhealthy spell between two ticks, which the engine's
events and health log still show, fails the revision; a bake failure never prints the baking
revision's own secret. Each test failed on main before the change (4189b48)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit import engines
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-bake-engine"
ROTATED = "r0tated-bake-engine"
APP = "envs/env-e2e-01/app"  # the lab's manifest: DB_PASSWORD's path
STABLE_S = 2.0
# The bake: far longer than the ticks that must land inside it take on a loaded box (6 + 3
# workers on 2 cores: a tick can take many seconds); its end comes by the test's hand
# (promoted_after). The tests check that the bake goes on, fails or promotes, not its length.
BAKE_S = 3600


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        yield lab


def configure(lab: Lab, bake_s: float) -> None:
    lab.write_config(
        verify={"stable_s": STABLE_S, "deadline_s": 30, "poll_s": 0.25, "bake_s": bake_s}
    )


def ok(run: Run, outcome: str) -> None:
    assert run.rc == 0, run.stdout + run.stderr
    assert run.summary["outcome"] == outcome, run.stdout


def bake_record(lab: Lab) -> dict[str, Any] | None:
    path = lab.state_dir / "bake.json"
    return dict(json.loads(path.read_text())) if path.exists() else None


def held(lab: Lab) -> dict[str, Any] | None:
    path = lab.state_dir / "held.json"
    return dict(json.loads(path.read_text())) if path.exists() else None


def docker(*args: str) -> None:
    subprocess.run(("docker", *args), check=True, capture_output=True)


def promoted_after(lab: Lab) -> Run:
    """The tick after the bake's end: it promotes (bake.json goes, nothing held). The end comes
    by the test's hand (``Lab.end_bake``): the ticks before it ran inside a bake far longer than
    a loaded box needs, and nothing waits out a timer."""
    lab.end_bake()
    run = lab.tick()
    ok(run, "noop")
    assert "promoted to last-known-good" in run.summary["message"], run.stdout
    assert bake_record(lab) is None
    return run


def r1_baking(lab: Lab) -> None:
    """r0 applied and promoted (the previous last-known-good), then r1 committed: r1 bakes
    (BAKE_S)."""
    configure(lab, BAKE_S)
    lab.estate.tenancy.set_desired("r0", lab.bundle(web=dict(command=["sleep", "3601"])))
    ok(lab.tick(), "applied")
    promoted_after(lab)
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    ok(lab.tick(), "applied")


@pytest.mark.parametrize("first", [True, False], ids=["first-revision", "second-revision"])
def test_a_container_removed_by_hand_inside_the_bake_is_restored_and_promoted(
    lab: Lab, first: bool
) -> None:
    """Before: BAKE_FAILED ("web is missing"), a rollback and a hold of the good revision; on a
    first revision "never promoted"."""
    if first:
        configure(lab, BAKE_S)
        lab.estate.tenancy.set_desired("r1", lab.bundle())
        ok(lab.tick(), "applied")
    else:
        r1_baking(lab)
    docker("rm", "-f", lab.containers()["web"])
    run = lab.tick()
    ok(run, "applied")  # drift: restored, the revision is not at fault
    assert any("gone" in e["message"] for e in run.events("bake.drift")), run.stdout
    assert held(lab) is None
    record = bake_record(lab)
    assert record is not None and not record["failed"]
    again = lab.tick()  # the new run of the same config is adopted: baking goes on
    ok(again, "noop")
    assert "baking:" in again.summary["message"], again.stdout
    promoted_after(lab)
    assert held(lab) is None


def test_docker_restart_inside_the_bake_is_not_the_revisions_fault(lab: Lab) -> None:
    """Before: BAKE_FAILED ("web is restarted"), rolled back to r0, r1 held."""
    r1_baking(lab)
    docker("restart", "-t", "1", lab.containers()["web"])
    run = lab.tick()
    ok(run, "noop")
    assert any("started again from outside" in e["message"] for e in run.events("bake.drift"))
    promoted_after(lab)
    assert held(lab) is None
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == "r1"


def test_an_unhealthy_spell_between_two_ticks_fails_the_bake(lab: Lab) -> None:
    """Before: healthy again at the tick, so the bake went on and promoted the revision."""
    configure(lab, BAKE_S)
    lab.estate.tenancy.set_desired("r0", lab.bundle(web=dict(command=["sleep", "3601"])))
    ok(lab.tick(), "applied")
    hc = {"test": ["CMD-SHELL", "test -f /healthy"], "interval": "1s", "retries": 1}
    # healthy through the apply's verify and commit; the spell falls inside the bake, by hand
    script = "touch /healthy; exec sleep 3600"
    lab.estate.tenancy.set_desired(
        "r1", lab.bundle(web=dict(command=["sh", "-c", script], healthcheck=hc))
    )
    ok(lab.tick(), "applied")
    lab.set_health(False)
    lab.set_health(True)  # the spell is over: healthy again at the tick
    run = lab.tick()
    assert run.rc == 1 and run.errors[0]["code"] == "BAKE_FAILED", run.stdout
    assert "service web is unhealthy" in run.errors[0]["message"]
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == "r0"


def test_a_bake_failure_never_prints_the_baking_revisions_secret(lab: Lab) -> None:
    """r1 only rotates DB_PASSWORD, and its healthcheck prints it. Before: the rotated value in
    the journal and the report: the bake was judged before the tick learned r1's values (the
    rollback taught it r0's only)."""
    configure(lab, BAKE_S)
    lab.estate.tenancy.set_desired("r0", lab.bundle(web=dict(command=["sleep", "3601"])))
    ok(lab.tick(), "applied")
    lab.estate.bao.set_secret(APP, {"db_password": ROTATED})
    hc = {
        "test": ["CMD-SHELL", "echo leak=$$DB_PASSWORD; test -f /healthy"],
        "interval": "1s",
        "retries": 1,
    }
    script = "touch /healthy; exec sleep 3600"
    lab.estate.tenancy.set_desired(
        "r1", lab.bundle(web=dict(command=["sh", "-c", script], healthcheck=hc))
    )
    ok(lab.tick(), "applied")
    lab.set_health(False)
    run = lab.tick()
    assert run.rc == 1 and run.errors[0]["code"] == "BAKE_FAILED", run.stdout
    assert "leak=***" in run.stdout  # the output is there, masked
    for value in (SECRET, ROTATED):
        assert value not in run.stdout + run.stderr
        assert value not in json.dumps(lab.estate.tenancy.reports)


def test_a_rollbacks_own_recreation_does_not_fail_the_revision_it_restores(lab: Lab) -> None:
    """r1 bakes; r2 fails verify and is rolled back to r1 (a new container of r1's config).
    Before: r1 "is missing", BAKE_FAILED, back to r0 and the good r1 held."""
    r1_baking(lab)
    lab.estate.tenancy.set_desired("r2", lab.bundle(web=dict(command=["sh", "-c", "exit 3"])))
    failed = lab.tick()
    assert failed.rc == 1, failed.stdout
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == "r1"
    lab.estate.tenancy.set_desired("r1", lab.bundle())  # tenancy goes back to r1
    run = lab.tick()
    ok(run, "noop")
    assert "baking:" in run.summary["message"], run.stdout
    assert any("new container" in e["message"] for e in run.events("bake.drift")), run.stdout
    promoted_after(lab)
    assert (held(lab) or {}).get("revision") != "r1"
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == "r1"


@pytest.mark.second_engine_restart
@pytest.mark.parametrize("restart", ["unless-stopped", "no"])
def test_an_engine_restart_inside_the_bake_is_drift_not_the_revisions_fault(
    tmp_path: Path,
    registry: Registry,
    web_image: str,
    monkeypatch: pytest.MonkeyPatch,
    restart: str,
) -> None:
    """The second engine (Docker 26, containerd store: the suite's own) is stopped and started
    inside the bake, as an engine upgrade or a reboot does: it stops every container and
    forgets its events. `unless-stopped`: the engine starts web again (StartedAt moved,
    RestartCount reset); `no`: web stays exited (137), the engine cannot tell why. Before:
    BAKE_FAILED ("web is restarted" / "exited (137)"), never promoted."""
    engines.second_available()
    monkeypatch.setenv("DOCKER_HOST", engines.SECOND_SOCK)  # the lab and the agent follow it
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        configure(lab, BAKE_S)
        lab.estate.tenancy.set_desired("r1", lab.bundle(web=dict(restart=restart)))
        ok(lab.tick(), "applied")
        engines.restart_second()
        run = lab.tick()
        ok(run, "noop" if restart == "unless-stopped" else "applied")  # "no": restored
        assert run.events("bake.drift"), run.stdout
        promoted_after(lab)
        assert held(lab) is None
