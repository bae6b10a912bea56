"""End to end: deploys that prove themselves. The real CLI, the loopback estate, a real registry
and the real Docker engine: a revision that crashes, one whose healthcheck never passes, an init
job, a failed pull, a rollback that fails. Each bad revision ends with the last-known-good
containers running with their own env values, the right report, the hold, and a newer good
revision applied on the next tick."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-verify"
TEMPLATE = "DB_PASSWORD=${{DB_PASSWORD}}\nLOG_LEVEL={}\n"


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        yield lab


def bundle(
    lab: Lab,
    *,
    log_level: str = "info",
    web: dict[str, Any] | None = None,
    extra: dict[str, dict[str, Any]] | None = None,
    image: str | None = None,
    on_failure: str | None = None,
) -> dict[str, Any]:
    b = lab.bundle(env_template=TEMPLATE.format(log_level), image=image)
    doc = yaml.safe_load(b["compose"])
    base = dict(doc["services"]["web"])
    doc["services"]["web"].update(web or {})
    for name, over in (extra or {}).items():
        doc["services"][name] = {**base, **over}
    b["compose"] = yaml.safe_dump(doc)
    if on_failure is not None:
        b["on_failure"] = on_failure
    return b


def held(lab: Lab) -> dict[str, Any] | None:
    path = lab.state_dir / "held.json"
    return json.loads(path.read_text()) if path.exists() else None


def apply_good(lab: Lab, revision: str = "r1") -> Run:
    lab.estate.tenancy.set_desired(revision, bundle(lab))
    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    assert run.summary["outcome"] == "applied" and run.summary["revision"] == revision
    return run


def assert_lkg_running(lab: Lab, revision: str = "r1") -> None:
    assert set(lab.containers()) == {"web"}
    env = lab.container_env()
    assert env["DB_PASSWORD"] == SECRET and env["LOG_LEVEL"] == "info"
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert applied["revision"] == revision


def assert_failed_with_rollback(lab: Lab, run: Run, code: str) -> dict[str, Any]:
    assert run.rc == 1, run.stdout + run.stderr
    assert run.errors[0]["code"] == code  # the real fault's line comes first
    assert run.summary["outcome"] == "failed" and run.summary["code"] == code
    rep: dict[str, Any] = lab.estate.tenancy.reports[-1]
    assert (rep["outcome"], rep["code"], rep["revision"]) == ("failed", code, "r2")
    assert rep["rollback"] == {"to_revision": "r1", "ok": True}
    assert "web" in rep["message"] and "rolled back to r1" in rep["message"]
    assert [p["name"] for p in rep["phases"]][-3:] == ["verify", "rollback", "verify"]
    assert SECRET not in json.dumps(rep) and SECRET not in run.stdout
    return rep


def assert_held_then_newer_applies(
    lab: Lab, outcome: str = "rolled_back", lkg_running: bool = True
) -> None:
    pulls, reports = lab.pulls(), len(lab.estate.tenancy.reports)
    again = lab.tick()
    assert again.rc == 6, again.stdout
    assert again.summary["outcome"] == "held"
    assert again.summary["code"] in ("REVISION_HELD", "APPLY_BACKOFF")
    assert lab.pulls() == pulls, "a held revision is not pulled again"
    assert len(lab.estate.tenancy.reports) == reports, "a held tick does not report"
    assert lab.estate.tenancy.checkins[-1]["applied"] == {"revision": "r1", "outcome": outcome}
    if lkg_running:
        assert_lkg_running(lab)
    else:  # fixing forward: the failed revision's containers stay, the LKG is not restored
        assert lab.containers() == {}
    # a newer good revision pre-empts the hold on the very next tick
    lab.estate.tenancy.set_desired("r3", bundle(lab, log_level="warn"))
    third = lab.tick()
    assert third.rc == 0, third.stdout
    assert third.summary["outcome"] == "applied" and third.summary["revision"] == "r3"
    assert lab.container_env()["LOG_LEVEL"] == "warn"
    assert held(lab) is None
    assert sorted(p.name for p in (lab.state_dir / "revisions").iterdir()) == ["r1", "r3"]


def test_a_verified_release_is_kept_with_its_image_digests(lab: Lab) -> None:
    run = apply_good(lab)
    assert run.events("verify.passed")
    release = json.loads((lab.state_dir / "revisions" / "r1" / "release.json").read_text())
    web = release["images"]["web"]
    assert web["id"].startswith("sha256:") and "@sha256:" in web["digest"]
    assert web["ref"] == lab.image
    pins = (lab.state_dir / "revisions" / "r1" / "compose.pinned.yaml").read_text()
    assert web["id"] in pins
    assert ((lab.state_dir / "revisions" / "r1" / ".env").stat().st_mode & 0o777) == 0o600


def test_a_service_that_exits_1_rolls_back_and_is_held(lab: Lab) -> None:
    apply_good(lab)
    crash = {"command": ["sh", "-c", "sleep 1; exit 1"]}
    lab.estate.tenancy.set_desired("r2", bundle(lab, log_level="debug", web=crash))
    run = lab.tick()
    rep = assert_failed_with_rollback(lab, run, "VERIFY_EXITED")
    assert "exit code 1" in rep["message"]
    assert_lkg_running(lab)
    hold = held(lab)
    assert hold is not None and hold["revision"] == "r2" and hold["rollback_ok"] is True
    assert_held_then_newer_applies(lab)


def test_a_healthcheck_that_never_passes_rolls_back(lab: Lab) -> None:
    apply_good(lab)
    sick = {
        "healthcheck": {
            # the output carries the secret: the report's detail must mask it
            "test": ["CMD", "sh", "-c", "echo not-ready-yet $$DB_PASSWORD; exit 1"],
            "interval": "1s",
            "timeout": "1s",
            "retries": 1,
        }
    }
    lab.estate.tenancy.set_desired("r2", bundle(lab, log_level="debug", web=sick))
    run = lab.tick()
    rep = assert_failed_with_rollback(lab, run, "VERIFY_UNHEALTHY")
    assert "not-ready-yet" in rep["detail"]
    assert_lkg_running(lab)
    # while r2 is held, the LKG's containers are still looked after: one removed comes back
    pulls = lab.pulls()
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    back = lab.tick()
    assert back.rc == 0 and back.summary["revision"] == "r1", back.stdout
    assert lab.estate.tenancy.reports[-1]["message"].startswith("restored")
    assert lab.pulls() == pulls
    assert_lkg_running(lab)
    assert_held_then_newer_applies(lab)


def test_an_up_that_fails_half_way_rolls_back(lab: Lab) -> None:
    apply_good(lab)
    # web is recreated with r2's .env, then the second service cannot start: its entrypoint
    # does not exist in the image (a network_mode of a missing container, as before, is now
    # refused by the local policy before anything changes)
    broken = {"entrypoint": ["/no/such/entrypoint"]}
    lab.estate.tenancy.set_desired("r2", bundle(lab, log_level="debug", extra={"broken": broken}))
    run = lab.tick()
    assert run.rc == 1, run.stdout
    assert run.errors[0]["code"] == "UP_FAILED" and run.errors[0]["phase"] == "up"
    rep = lab.estate.tenancy.reports[-1]
    assert rep["code"] == "UP_FAILED" and rep["rollback"] == {"to_revision": "r1", "ok": True}
    assert [p["name"] for p in rep["phases"]][-3:] == ["up", "rollback", "verify"]
    assert_lkg_running(lab)
    assert_held_then_newer_applies(lab)


def test_an_init_job_exiting_0_passes_and_stays_done(lab: Lab) -> None:
    init = {"command": ["sh", "-c", "echo migrated"], "restart": "no"}
    lab.estate.tenancy.set_desired("r1", bundle(lab, extra={"init": init}))
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert "finished jobs: init" in run.events("verify.passed")[0]["message"]
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert applied["services"] == ["web"]
    pulls = lab.pulls()
    steady = lab.tick()
    assert steady.summary["outcome"] == "noop", steady.stdout  # the finished job is not restored
    assert lab.pulls() == pulls


def test_a_failed_pull_backs_off_and_a_newer_revision_preempts(lab: Lab) -> None:
    apply_good(lab)
    ids = lab.containers()
    missing = lab.image.rsplit(":", 1)[0] + ":no-such-tag"
    lab.estate.tenancy.set_desired("r2", bundle(lab, image=missing))
    run = lab.tick()
    assert run.rc == 1 and run.errors[0]["code"] == "IMAGE_NOT_FOUND", run.stdout
    assert run.events("apply.backoff")
    rep = lab.estate.tenancy.reports[-1]
    assert rep["code"] == "IMAGE_NOT_FOUND" and "rollback" not in rep
    assert lab.containers() == ids, "a failed pull leaves the running containers alone"
    hold = held(lab)
    assert hold is not None and hold["next_attempt_at"] is not None
    assert_held_then_newer_applies(lab, outcome="held")


def test_a_failed_rollback_stalls_and_never_loops(lab: Lab) -> None:
    apply_good(lab)
    pins = lab.state_dir / "revisions" / "r1" / "compose.pinned.yaml"
    pins.write_text('services:\n  "web":\n    image: "sha256:' + "0" * 64 + '"\n')
    lab.estate.tenancy.set_desired("r2", bundle(lab, web={"command": ["sh", "-c", "exit 3"]}))
    run = lab.tick()
    assert run.rc == 1, run.stdout
    assert run.errors[0]["code"] == "VERIFY_EXITED"  # the real fault first
    assert run.summary["code"] == "ROLLBACK_FAILED"
    rep = lab.estate.tenancy.reports[-1]
    assert rep["code"] == "ROLLBACK_FAILED" and rep["rollback"] == {
        "to_revision": "r1",
        "ok": False,
    }
    hold = held(lab)
    assert hold is not None and hold["stalled"] is True
    status = lab.cli("status", "--json")
    body = json.loads(status.stdout)
    assert status.returncode == 7 and body["state"] == "stalled" and body["held"]["stalled"]
    pulls, reports = lab.pulls(), len(lab.estate.tenancy.reports)
    again = lab.tick()
    assert again.rc == 1 and again.summary["code"] == "ROLLBACK_FAILED"
    assert again.events("plan.stalled")
    assert lab.pulls() == pulls and len(lab.estate.tenancy.reports) == reports
    # an operator's retry applies it again (and, the LKG still broken, stalls again)
    retry = lab.tick("--retry")
    assert lab.pulls() > pulls and len(lab.estate.tenancy.reports) == reports + 1
    assert retry.summary["code"] == "ROLLBACK_FAILED"


def test_on_failure_retry_fixes_forward_without_a_rollback(lab: Lab) -> None:
    apply_good(lab)
    crash = {"command": ["sh", "-c", "sleep 1; exit 1"]}
    lab.estate.tenancy.set_desired("r2", bundle(lab, web=crash, on_failure="retry"))
    run = lab.tick()
    assert run.rc == 1 and run.errors[0]["code"] == "VERIFY_EXITED", run.stdout
    assert not run.events("rollback.start") and run.events("apply.backoff")
    rep = lab.estate.tenancy.reports[-1]
    assert rep["code"] == "VERIFY_EXITED" and "rollback" not in rep
    assert lab.containers() == {}, "no rollback: r2's exited container stays"
    hold = held(lab)
    assert hold is not None and hold["next_attempt_at"] is not None
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == "r1"
    assert_held_then_newer_applies(lab, outcome="held", lkg_running=False)


def test_a_tick_deadline_in_verify_still_rolls_back_on_the_rollbacks_own_budget(
    lab: Lab,
) -> None:
    """r2's healthcheck stays 'starting' (its first probe is an hour away), so its verify waits;
    the tick's deadline runs out there (TICK_DEADLINE). The rollback runs on its own deadline
    (rollback_budget_s), not on the spent tick's: r1 is back and verified, r2 held, not
    stalled."""
    apply_good(lab)
    lab.write_config(
        tick_deadline_s=20, verify={"stable_s": 2, "deadline_s": 300, "poll_s": 0.25, "bake_s": 0}
    )
    slow = {"test": ["CMD", "true"], "interval": "1h", "start_period": "1h"}
    lab.estate.tenancy.set_desired("r2", bundle(lab, log_level="debug", web={"healthcheck": slow}))
    run = lab.tick()
    assert run.rc == 1, run.stdout
    assert run.errors[0]["code"] == "TICK_DEADLINE", run.errors[0]
    assert run.errors[0]["phase"] == "verify"
    report = lab.estate.tenancy.reports[-1]
    assert report["code"] == "TICK_DEADLINE"
    assert report["rollback"] == {"to_revision": "r1", "ok": True}
    assert_lkg_running(lab)
    record = held(lab)
    assert record is not None and record["revision"] == "r2" and not record["stalled"]
