"""End to end: a compose app's life after `up` (issue 21). The real CLI, the loopback estate, a
real registry and the real Docker engine: jobs that finish (never re-run, never restored), jobs
that fail (the revision fails), a revision that crashes or turns unhealthy inside its bake (rolled
back to the previous last-known-good and held) and after it (drift: restored, reported, `status`
names the service). What a test needs to happen at a moment (a job's end, a crash, an unhealthy
spell, the bake's end) comes by its hand, never by a timer racing a tick on a loaded box; the
tests count runs, reports and exit codes, never durations."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-lifecycle"
STABLE_S = 2.0
# The bake of the tests whose ticks and faults must land inside it: far longer than a tick takes
# on a loaded box (6 + 3 workers on 2 cores); where a test needs its end, it comes by hand
# (Lab.end_bake). The tests check what the bake does, not its length.
BAKE_S = 3600
MARK = "run-mark"  # each run of a test container prints it once


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        yield lab


def configure(lab: Lab, bake_s: float) -> None:
    lab.write_config(
        verify={"stable_s": STABLE_S, "deadline_s": 30, "poll_s": 0.25, "bake_s": bake_s}
    )


def bundle(lab: Lab, services: dict[str, dict[str, Any]]) -> dict[str, Any]:
    b = lab.bundle()
    doc = yaml.safe_load(b["compose"])
    base = dict(doc["services"]["web"])
    doc["services"] = {name: {**base, **over} for name, over in services.items()}
    b["compose"] = yaml.safe_dump(doc)
    return b


def sh(script: str) -> list[str]:
    return ["sh", "-c", f"echo {MARK}; {script}"]


def runs(lab: Lab, service: str) -> int:
    """How many times the service's containers (any state) ran: the marks in their logs."""
    ids = subprocess.run(
        (
            "docker",
            "ps",
            "-aq",
            "--filter",
            f"label=com.docker.compose.project={lab.project}",
            "--filter",
            f"label=com.docker.compose.service={service}",
        ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sum(
        subprocess.run(("docker", "logs", cid), capture_output=True, text=True).stdout.count(MARK)
        for cid in ids
    )


def wait_exited(lab: Lab, service: str, limit_s: float = 30) -> None:
    """Until the service's container has exited (the job ran to its end)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        out = lab.states(service)
        if out and all(s in ("exited", "dead") for s in out):
            return
        time.sleep(0.25)
    raise AssertionError(f"{service} did not exit within {limit_s} s")


def applied_json(lab: Lab) -> dict[str, Any]:
    return dict(json.loads((lab.state_dir / "applied.json").read_text()))


def held(lab: Lab) -> dict[str, Any] | None:
    path = lab.state_dir / "held.json"
    return json.loads(path.read_text()) if path.exists() else None


def ok(run: Run, outcome: str) -> None:
    assert run.rc == 0, run.stdout + run.stderr
    assert run.summary["outcome"] == outcome, run.stdout


# -- services and jobs ---------------------------------------------------------------------------


def touch(lab: Lab, service: str, path: str) -> None:
    """Create ``path`` inside the service's container: what a HELD or CRASHES command waits
    for, so the change comes by the test's hand, never by a timer racing `up` and verify."""
    subprocess.run(("docker", "exec", lab.containers()[service], "touch", path), check=True)


HELD = "until [ -e /go ]; do sleep 0.1; done"  # runs until the test touches /go
CRASHES = "until [ -e /crash ]; do sleep 0.1; done; exit 1"  # exits 1 once /crash is there


@pytest.mark.parametrize("outlasts", [False, True], ids=["ends-inside-verify", "outlasts-verify"])
def test_a_job_runs_once_per_revision_however_long_it_runs(lab: Lab, outlasts: bool) -> None:
    """Before: a `restart: "no"` migration that outlasted verify.stable_s was recorded as a
    long-running service and re-run by a restore on every tick (3 re-runs in 3 ticks). The one
    that outlasts verify runs until the test lets it end (a `sleep 4` ended inside a slow
    verify on a loaded box)."""
    configure(lab, 0)
    job = HELD if outlasts else f"sleep {STABLE_S - 1.5}"
    migrate = {"command": sh(f"{job}; echo migrated"), "restart": "no"}
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": {}, "migrate": migrate}))
    ok(lab.tick(), "applied")
    assert applied_json(lab)["jobs"] == ["migrate", "web"]  # both may finish (restart "no")
    if outlasts:
        assert lab.states("migrate") == ["running"]  # it outlasted verify
        touch(lab, "migrate", "/go")
    wait_exited(lab, "migrate")
    for _ in range(3):
        ok(lab.tick(), "noop")
    assert runs(lab, "migrate") == 1
    assert len(lab.estate.tenancy.reports) == 1


def test_a_restore_never_re_runs_a_finished_job(lab: Lab) -> None:
    """Only the service that is down comes back (`up --no-deps`); the migration stays done."""
    configure(lab, 0)
    migrate = {"command": sh("echo migrated"), "restart": "no"}
    web = {
        "command": sh("sleep 3600"),
        "restart": "unless-stopped",
        "depends_on": {"migrate": {"condition": "service_completed_successfully"}},
    }
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": web, "migrate": migrate}))
    run = lab.tick()
    ok(run, "applied")
    assert "finished jobs: migrate" in run.events("verify.passed")[0]["message"]
    subprocess.run(("docker", "stop", "-t", "1", lab.containers()["web"]), check=True)
    ok(lab.tick(), "applied")  # web restored
    assert set(lab.containers()) == {"web"}
    assert runs(lab, "migrate") == 1  # (web's restore recreates it from the pinned image)


def test_an_on_failure_job_that_exits_0_passes(lab: Lab) -> None:
    """Before: VERIFY_EXITED, rolled back and held."""
    configure(lab, 0)
    seed = {"command": sh("echo seeded"), "restart": "on-failure"}
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": {}, "seed": seed}))
    ok(lab.tick(), "applied")
    assert held(lab) is None
    ok(lab.tick(), "noop")
    assert runs(lab, "seed") == 1


@pytest.mark.parametrize("job_s", [0.5, STABLE_S + 1.0])
def test_a_job_that_fails_fails_its_revision(lab: Lab, job_s: float) -> None:
    """A job another service waits for that exits non-zero (inside or after the stable window):
    the revision fails and the last-known-good comes back."""
    configure(lab, 0)
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": {}}))
    ok(lab.tick(), "applied")
    migrate = {"command": sh(f"sleep {job_s}; exit 3"), "restart": "no"}
    web = {"depends_on": {"migrate": {"condition": "service_completed_successfully"}}}
    lab.estate.tenancy.set_desired("r2", bundle(lab, {"web": web, "migrate": migrate}))
    run = lab.tick()
    assert run.rc == 1, run.stdout
    # compose itself refuses to start web after the job failed (UP_FAILED), or verify sees it
    assert run.errors[0]["code"] in ("UP_FAILED", "VERIFY_EXITED"), run.stdout
    rep = lab.estate.tenancy.reports[-1]
    assert (rep["revision"], rep["outcome"], rep["rollback"]["to_revision"]) == (
        "r2",
        "failed",
        "r1",
    )
    assert applied_json(lab)["revision"] == "r1"
    assert (held(lab) or {}).get("revision") == "r2"


# -- the bake --------------------------------------------------------------------------------------


@pytest.mark.parametrize("baked_first", [False, True], ids=["after-the-commit", "after-a-tick"])
def test_a_crash_inside_the_bake_rolls_back_and_holds(lab: Lab, baked_first: bool) -> None:
    """Before: committed as the last-known-good, restored and reported `applied` every tick.
    The crash comes by the test's hand after the commit (right after it, or after a tick that
    found r2 baking); a `sleep 4; exit 1` crashed inside a slow `up` and verify on a loaded
    box, failing the apply itself."""
    configure(lab, BAKE_S)
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": {}}))
    ok(lab.tick(), "applied")
    web = {"command": sh(CRASHES)}
    lab.estate.tenancy.set_desired("r2", bundle(lab, {"web": web}))
    ok(lab.tick(), "applied")
    assert json.loads((lab.state_dir / "bake.json").read_text())["previous"]["revision"] == "r1"
    assert (lab.state_dir / "revisions" / "r1" / "release.json").exists()  # kept while it bakes
    if baked_first:
        baking = lab.tick()
        ok(baking, "noop")
        assert "baking:" in baking.summary["message"], baking.stdout
    touch(lab, "web", "/crash")
    wait_exited(lab, "web")
    run = lab.tick()
    assert run.rc == 1, run.stdout
    assert (
        run.errors[0]["code"] == "BAKE_FAILED"
        and "service web is exited (1)" in (run.errors[0]["message"])
    )
    rep = lab.estate.tenancy.reports[-1]
    assert (rep["revision"], rep["outcome"], rep["code"]) == ("r2", "failed", "BAKE_FAILED")
    assert rep["rollback"] == {"to_revision": "r1", "ok": True}
    assert applied_json(lab)["revision"] == "r1"
    assert (held(lab) or {})["rollback_ok"] is True
    assert lab.container_env()["DB_PASSWORD"] == SECRET  # r1's container runs
    pulls, reports = lab.pulls(), len(lab.estate.tenancy.reports)
    for _ in range(2):
        again = lab.tick()
        assert (again.rc, again.summary["code"]) == (6, "REVISION_HELD"), again.stdout
    assert (lab.pulls(), len(lab.estate.tenancy.reports)) == (pulls, reports)
    assert lab.cli("status").returncode == 6


def test_a_revision_that_stays_up_is_promoted_then_a_crash_is_drift(lab: Lab) -> None:
    configure(lab, BAKE_S)
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": {}}))
    ok(lab.tick(), "applied")
    baking = lab.tick()
    ok(baking, "noop")
    assert "baking:" in baking.summary["message"]
    lab.end_bake()  # the bake is over (by hand: a 10 s bake ended before this tick when loaded)
    promoted = lab.tick()
    ok(promoted, "noop")
    assert "promoted to last-known-good" in promoted.summary["message"], promoted.stdout
    assert not (lab.state_dir / "bake.json").exists()  # promoted
    subprocess.run(("docker", "stop", "-t", "1", lab.containers()["web"]), check=True)
    run = lab.tick()
    ok(run, "applied")  # drift after the bake: restored (no rollback, nothing held)
    assert held(lab) is None and applied_json(lab)["revision"] == "r1"


def test_unhealthy_inside_the_bake_rolls_back(lab: Lab) -> None:
    """Before: every tick `noop OK`, `status` exit 0, the revision kept as last-known-good."""
    configure(lab, BAKE_S)
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": {}}))
    ok(lab.tick(), "applied")
    hc = {"test": ["CMD-SHELL", "test -f /healthy"], "interval": "1s", "retries": 1}
    web = {"command": sh("touch /healthy; exec sleep 3600"), "healthcheck": hc}
    lab.estate.tenancy.set_desired("r2", bundle(lab, {"web": web}))
    ok(lab.tick(), "applied")
    lab.set_health(False)
    run = lab.tick()
    assert run.rc == 1 and run.errors[0]["code"] == "BAKE_FAILED", run.stdout
    assert "service web is unhealthy" in run.errors[0]["message"]
    assert applied_json(lab)["revision"] == "r1"


def test_unhealthy_after_the_bake_is_named_by_status_and_the_tick(lab: Lab) -> None:
    """Before: `noop OK` every tick and `status` exit 0 ("all services are running")."""
    configure(lab, 0)
    hc = {"test": ["CMD-SHELL", "test -f /healthy"], "interval": "1s", "retries": 1}
    web = {
        "command": sh("touch /healthy; exec sleep 3600"),
        "healthcheck": hc,
        "restart": "unless-stopped",
    }
    lab.estate.tenancy.set_desired("r1", bundle(lab, {"web": web}))
    ok(lab.tick(), "applied")
    lab.set_health(False)
    st = lab.cli("status", "--json")
    view = json.loads(st.stdout)
    assert (st.returncode, view["state"]) == (13, "degraded"), st.stdout
    assert "web unhealthy" in view["reason"]
    assert {"service": "web", "state": "unhealthy"} in view["health"]["services"]
    reports = len(lab.estate.tenancy.reports)
    run = lab.tick()  # drift: restored (recreated from the pinned image), verified, reported
    ok(run, "applied")
    assert (
        "web not running (stopped, exited or unhealthy)" in run.events("plan.restore")[0]["message"]
    )
    assert len(lab.estate.tenancy.reports) == reports + 1
    assert lab.estate.tenancy.reports[-1]["outcome"] == "applied"
