"""End to end: the real CLI, the loopback estate, a real registry and the real Docker engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-pa55"


@pytest.fixture
def lab(
    request: pytest.FixtureRequest, tmp_path: Path, registry: Registry, web_image: str
) -> Iterator[Lab]:
    """The fake estate; tests parametrized with "real" get the session's real OpenBao."""
    real = request.getfixturevalue("real_bao") if getattr(request, "param", "") == "real" else None
    with Lab(tmp_path, registry, web_image, real=real, db_password=SECRET) as lab:
        yield lab


@pytest.mark.parametrize("lab", ["fake", "real"], indirect=True)
def test_apply_then_noop_then_new_revision(
    lab: Lab, registry: Registry, busybox_image: str
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    assert first.summary["event"] == "tick.summary"
    assert first.summary["outcome"] == "applied" and first.summary["revision"] == "r1"
    assert set(lab.containers()) == {"web"}
    env = lab.container_env()
    assert env["DB_PASSWORD"] == SECRET and env["FROM_INTERPOLATION"] == SECRET
    assert env["LOG_LEVEL"] == "info"
    assert len(lab.estate.tenancy.reports) == 1
    rep = lab.estate.tenancy.reports[0]
    assert rep["outcome"] == "applied" and rep["code"] == "OK" and rep["revision"] == "r1"
    assert [p["name"] for p in rep["phases"]][:4] == ["config", "transport", "token", "checkin"]
    assert rep["services"][0]["state"] == "running"
    # every line carries event, tick_id and phase; no secret anywhere in the output
    assert all({"event", "tick_id", "phase"} <= set(ln) for ln in first.lines)
    assert SECRET not in first.stdout and registry.password not in first.stdout
    assert SECRET not in str(rep) and registry.password not in str(rep)
    assert not first.events("policy.compose_warning")  # compose read r1 without a word

    pulls = lab.pulls()
    ids = lab.containers()
    second = lab.tick()
    assert second.rc == 0
    assert second.summary["outcome"] == "noop"
    assert lab.pulls() == pulls, "a steady-state tick must not pull"
    assert len(lab.estate.tenancy.reports) == 1, "a steady-state tick must not report"
    assert lab.containers() == ids
    assert lab.estate.tenancy.checkins[-1]["applied"] == {"revision": "r1", "outcome": "applied"}

    new_ref = registry.push(busybox_image, "env-e2e-01/web", "1.1")
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": "rotated"})
    # r2 also labels the container with $uri, which no .env assigns: compose reads it blank
    # and warns; the apply goes on and the journal says so
    blank = {"labels": {"seen": "[$uri]"}}
    lab.estate.tenancy.set_desired("r2", lab.bundle(image=new_ref, web=blank))
    third = lab.tick()
    assert third.rc == 0, third.stdout
    (warned,) = third.events("policy.compose_warning")
    assert warned["level"] == "WARNING" and warned["revision"] == "r2", warned
    assert warned["message"] == (
        'compose warns on revision r2: The "uri" variable is not set. Defaulting to a blank string.'
    )
    assert third.summary["outcome"] == "applied" and third.summary["revision"] == "r2"
    assert lab.container_env()["DB_PASSWORD"] == "rotated"
    assert lab.containers()["web"] != ids["web"]
    assert lab.pulls() > pulls


def test_missing_variable_refuses_and_keeps_containers(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    ids = lab.containers()
    template = "# substitutes every ${VAR}\nDB_PASSWORD=${DB_PASSWORD}\nAPI_KEY=${API_KEY}\n"
    lab.estate.tenancy.set_desired("r2", lab.bundle(env_template=template))
    run = lab.tick()
    assert run.rc == 5
    first_error = run.errors[0]
    assert first_error["code"] == "ENV_INCOMPLETE"
    assert "API_KEY" in first_error["message"] and "VAR" not in first_error["message"].split()
    assert SECRET not in run.stdout
    assert lab.containers() == ids
    assert lab.estate.tenancy.reports[-1]["outcome"] == "refused"
    assert lab.estate.tenancy.reports[-1]["code"] == "ENV_INCOMPLETE"
    assert run.summary["outcome"] == "refused"


def test_secret_missing_in_openbao_refuses_naming_variable_and_path(lab: Lab) -> None:
    lab.estate.bao.delete_secret("envs/env-e2e-01/app")
    template = "DB_PASSWORD=${DB_PASSWORD}\nAPI_KEY=${API_KEY}\n"
    lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template))
    run = lab.tick()
    assert run.rc == 5
    first = run.errors[0]
    assert first["code"] == "ENV_INCOMPLETE" and first["phase"] == "render"
    assert "API_KEY, DB_PASSWORD" in first["message"]
    assert "not found in OpenBao: DB_PASSWORD (envs/env-e2e-01/app#db_password)" in first["message"]
    assert lab.containers() == {}
    assert not (lab.state_dir / "docker" / "config.json").exists()


def test_registry_secret_missing_in_openbao_is_named(lab: Lab) -> None:
    lab.estate.bao.delete_secret("envs/env-e2e-01/registry")
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    run = lab.tick()
    assert run.rc == 5
    assert run.errors[0]["code"] == "SECRET_MISSING"
    assert "envs/env-e2e-01/registry" in run.errors[0]["message"]


NASTY = "a$b $$c ${D} 'q' \"dq\" #h {} back\\slash\\n  trail  é="


def test_secret_reaches_the_container_byte_for_byte(lab: Lab) -> None:
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": NASTY})
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    run = lab.tick()
    assert run.rc == 0, run.stdout
    env = lab.container_env()
    assert env["DB_PASSWORD"] == NASTY
    assert env["FROM_INTERPOLATION"] == NASTY


def test_removed_container_comes_back_without_a_pull(lab: Lab) -> None:
    import subprocess

    lab.estate.tenancy.set_desired("r1", lab.bundle(services=("web", "worker")))
    assert lab.tick().rc == 0
    pulls = lab.pulls()
    subprocess.run(
        ("docker", "rm", "-f", lab.containers()["worker"]), check=True, capture_output=True
    )
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert run.summary["outcome"] == "applied"
    assert "worker" in run.summary["message"]
    assert set(lab.containers()) == {"web", "worker"}
    assert lab.pulls() == pulls
    report = lab.estate.tenancy.reports[-1]
    assert report["message"].startswith("restored") and "verified" in report["message"]
    assert [p["name"] for p in report["phases"]][-2:] == ["up", "verify"], "verified like an apply"
    assert {s["name"]: s["state"] for s in report["services"]} == {
        "web": "running",
        "worker": "running",
    }


def test_a_restore_that_fails_verify_is_reported_and_backs_off(lab: Lab) -> None:
    """The applied revision's container is gone and cannot start again (its host file was
    removed): the restore's verify fails. No rollback (it is the last-known-good): the tick
    reports failed naming the service, the next tick backs off (no up, no report), and once
    the cause is fixed `--retry` restores and verifies it."""
    import json
    import subprocess

    ctl = lab.binds / "ctl"
    ctl.mkdir()
    (ctl / "ok").write_text("")
    bundle = lab.bundle()
    doc = yaml.safe_load(bundle["compose"])
    doc["services"]["web"]["command"] = ["sh", "-c", "test -f /ctl/ok && exec sleep 3600"]
    doc["services"]["web"]["volumes"] = [f"{ctl}:/ctl:ro"]
    bundle["compose"] = yaml.safe_dump(doc)
    lab.estate.tenancy.set_desired("r1", bundle)
    assert lab.tick().rc == 0
    (ctl / "ok").unlink()
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    reports = len(lab.estate.tenancy.reports)
    failed = lab.tick()
    assert failed.rc == 1, failed.stdout
    assert failed.summary["code"] == "VERIFY_EXITED"
    first = failed.errors[0]["message"]
    assert first.startswith("VERIFY_EXITED: restoring revision r1 failed:"), first
    assert "web" in first
    report = lab.estate.tenancy.reports[-1]
    assert (report["outcome"], report["code"], report["revision"]) == (
        "failed",
        "VERIFY_EXITED",
        "r1",
    )
    assert "rollback" not in report, "the last-known-good is not rolled back to itself"
    assert [p["name"] for p in report["phases"]][-2:] == ["up", "verify"]
    held = json.loads((lab.state_dir / "held.json").read_text())
    assert (held["revision"], held["restore_attempts"]) == ("r1", 1)
    waiting = lab.tick()
    assert waiting.rc == 6, waiting.stdout
    assert waiting.summary["code"] == "APPLY_BACKOFF"
    assert "restoring revision r1" in waiting.summary["message"]
    assert len(lab.estate.tenancy.reports) == reports + 1, "a backing-off tick reports nothing"
    assert not lab.containers(), "and runs no up"
    (ctl / "ok").write_text("")
    fixed = lab.tick("--retry")
    assert fixed.rc == 0, fixed.stdout
    assert "verified" in fixed.summary["message"]
    assert not (lab.state_dir / "held.json").exists()
    assert lab.tick().summary["outcome"] == "noop"


def test_project_change_stops_the_previous_project(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    old = lab.project
    new = old + "b"
    lab.extra_projects = (new,)
    lab.estate.tenancy.set_desired("r2", lab.bundle(project=new))
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert lab.containers(old) == {}
    assert set(lab.containers(new)) == {"web"}


def test_unauthenticated_pull_names_the_registry_words(lab: Lab) -> None:
    manifest = [{"name": "DB_PASSWORD", "path": "envs/env-e2e-01/app", "key": "db_password"}]
    lab.estate.tenancy.set_desired("r1", lab.bundle(manifest=manifest))
    run = lab.tick()
    assert run.rc == 1
    err = run.errors[0]
    assert err["code"] == "REGISTRY_AUTH"
    assert "no basic auth credentials" in err["message"]
    assert "no basic auth credentials" in lab.estate.tenancy.reports[-1]["detail"]


def test_disk_preflight_refuses_before_any_pull_or_write(lab: Lab) -> None:
    lab.write_config(disk={"headroom_bytes": 2**60})  # no filesystem here has an exbibyte free
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    pulls = lab.pulls()
    run = lab.tick()
    assert run.rc == 5
    first = run.errors[0]
    assert first["code"] == "DISK_INSUFFICIENT" and first["phase"] == "preflight"
    assert "free" in first["message"]
    assert lab.pulls() == pulls
    assert lab.containers() == {}
    assert not (lab.state_dir / "docker" / "config.json").exists()
    assert not list((lab.state_dir / "revisions").iterdir())
    assert lab.estate.tenancy.reports[-1]["code"] == "DISK_INSUFFICIENT"
