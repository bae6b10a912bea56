"""End to end: a job runs once per config, and a service is never taken for a finished job
(issue 26). The real CLI, the loopback estate, a real registry and the real Docker engine; each
job run appends a line to a file in a bind-mounted directory, so the tests count runs. Each test
failed on main before the change (4189b48)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd.core.lifecycle import schedule
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker

DAY = 86400
ENV = "env-e2e-01"  # the lab's environment: the box's identity for its rollout place


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="jobs-pw") as lab:
        lab.write_config(verify={"stable_s": 2, "deadline_s": 30, "poll_s": 0.25, "bake_s": 0})
        yield lab


def runs_dir(lab: Lab) -> Path:
    d = lab.binds / "runs"
    d.mkdir(exist_ok=True)
    d.chmod(0o777)
    return d


def bundle(
    lab: Lab,
    *,
    job: str = "echo migrated",
    web: str = "sleep 3600",
    tag: str = "run",
    **extra: Any,
) -> dict[str, Any]:
    """web (long-running) and migrate (a restart "no" job that appends ``tag`` to runs/migrate;
    ``tag`` is part of its config)."""
    b = lab.bundle(**extra)
    doc = yaml.safe_load(b["compose"])
    base = dict(doc["services"]["web"])
    mount = [f"{runs_dir(lab)}:/runs"]
    doc["services"] = {
        "web": {**base, "command": ["sh", "-c", web], "restart": "unless-stopped"},
        "migrate": {
            **base,
            "command": ["sh", "-c", f"echo {tag} >> /runs/migrate; {job}"],
            "restart": "no",
            "volumes": mount,
        },
    }
    b["compose"] = yaml.safe_dump(doc)
    return b


# A job that runs until the test releases it (a file in the runs bind): it outlasts verify's
# stable window however long `up` and verify take on a loaded box, which `sleep 4` did not.
HELD_JOB = "until [ -e /runs/go ]; do sleep 0.1; done"


def release_job(lab: Lab) -> None:
    """Let HELD_JOB end, and wait until the engine reports migrate exited."""
    (runs_dir(lab) / "go").touch()
    end = time.monotonic() + 30
    while lab.states("migrate") != ["exited"]:
        assert time.monotonic() < end, lab.states("migrate")
        time.sleep(0.1)


def job_runs(lab: Lab) -> int:
    f = runs_dir(lab) / "migrate"
    return len(f.read_text().splitlines()) if f.exists() else 0


def job_tags(lab: Lab) -> list[str]:
    """The tag of every run of migrate so far, in order."""
    f = runs_dir(lab) / "migrate"
    return f.read_text().split() if f.exists() else []


def status(lab: Lab) -> tuple[int, dict[str, Any]]:
    st = lab.cli("status", "--json")
    return st.returncode, json.loads(st.stdout)


def ok(run: Run, outcome: str) -> None:
    assert run.rc == 0, run.stdout + run.stderr
    assert run.summary["outcome"] == outcome, run.stdout


def r1_whose_job_outlasted_verify_and_ended(lab: Lab) -> None:
    """r1 applied; its migrate (tag v1) outlasted verify's stable window, then exited 0."""
    lab.estate.tenancy.set_desired("r1", bundle(lab, tag="v1", job=HELD_JOB))
    ok(lab.tick(), "applied")
    assert lab.states("migrate") == ["running"]
    release_job(lab)


def late_revision() -> str:
    """A revision name whose rollout place for this box is late (it waits a day's spread)."""
    return next(r for i in range(10_000) if schedule.place(ENV, r := f"r2-{i}") > 0.5)


def test_a_waiting_revision_never_re_runs_the_last_known_goods_job(lab: Lab) -> None:
    """r1's migration outlasts verify's stable window (running when verify passed), then ends.
    Before: every tick while r2 waited restored r1's "missing" migrate: 4 runs in 3 ticks."""
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", bundle(lab, job=HELD_JOB))
    ok(lab.tick(), "applied")
    assert lab.states("migrate") == ["running"]
    release_job(lab)
    assert job_runs(lab) == 1
    waiting = bundle(lab, job="echo v2")
    waiting["rollout"] = {"spread_s": DAY}
    tenancy.set_desired(late_revision(), waiting)
    for _ in range(3):
        run = lab.tick()
        assert (run.rc, run.summary["outcome"]) == (7, "waiting"), run.stdout
    assert job_runs(lab) == 1


def test_a_rollback_never_re_runs_a_job_whose_config_it_kept(lab: Lab) -> None:
    """r2 changes only web, which fails verify; the rollback brings r1 back. Before: r2's up and
    the rollback's up each started r1's exited migrate again (3 runs)."""
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", bundle(lab))
    ok(lab.tick(), "applied")
    tenancy.set_desired("r2", bundle(lab, web="exit 3"))
    failed = lab.tick()
    assert failed.rc == 1 and lab.estate.tenancy.reports[-1]["rollback"]["ok"], failed.stdout
    assert any(e["service"] == "migrate" for e in failed.events("up.job_done")), failed.stdout
    assert job_runs(lab) == 1


def test_a_new_job_config_runs_once(lab: Lab) -> None:
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", bundle(lab))
    ok(lab.tick(), "applied")
    tenancy.set_desired("r2", bundle(lab, job="echo v2"))
    ok(lab.tick(), "applied")
    assert job_runs(lab) == 2
    tenancy.set_desired("r3", bundle(lab, job="echo v2", web="sleep 3601"))
    ok(lab.tick(), "applied")  # only web changed: the job's config did not, not run again
    for _ in range(2):
        ok(lab.tick(), "noop")
    assert job_runs(lab) == 2


def test_a_service_stopped_by_hand_that_exits_0_is_restored_not_taken_for_a_job(
    lab: Lab,
) -> None:
    """A restart "no" service that exits 0 on SIGTERM, stopped with `docker stop`. Before: never
    restored ("all services are running"), `status` exit 0."""
    b = lab.bundle()
    doc = yaml.safe_load(b["compose"])
    graceful = "trap 'exit 0' TERM; while true; do sleep 1; done"
    doc["services"]["web"].update(command=["sh", "-c", graceful], restart="no")
    b["compose"] = yaml.safe_dump(doc)
    lab.estate.tenancy.set_desired("r1", b)
    ok(lab.tick(), "applied")
    cid = lab.containers()["web"]
    subprocess.run(("docker", "stop", "-t", "5", cid), check=True, capture_output=True)
    code = subprocess.run(
        ("docker", "inspect", "--format", "{{.State.ExitCode}}", cid),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert code == "0"
    st = lab.cli("status", "--json")
    assert st.returncode != 0 and json.loads(st.stdout)["state"] != "ok", st.stdout
    run = lab.tick()
    ok(run, "applied")  # restored
    assert "web" in lab.containers()
    time.sleep(0.5)
    assert lab.cli("status").returncode == 0


def test_a_rollback_never_re_runs_the_lkgs_job_after_the_failed_revision_changed_it(
    lab: Lab,
) -> None:
    """r2 changes migrate (it runs once) and web, which fails verify; the rollback brings r1's
    config back: its migrate container is made again and not started (r1's ran to completion
    already). Failed on main (88375a4): the rollback ran r1's migrate again (v1, v2, v1)."""
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", bundle(lab, tag="v1"))
    ok(lab.tick(), "applied")
    tenancy.set_desired("r2", bundle(lab, tag="v2", web="exit 3"))
    failed = lab.tick()
    assert failed.rc == 1 and lab.estate.tenancy.reports[-1]["rollback"]["ok"], failed.stdout
    time.sleep(1)
    assert job_tags(lab) == ["v1", "v2"]
    assert lab.states("migrate") == ["created"]  # r1's config, never started
    [kept] = failed.events("up.job_done")  # the rollback's (r2's up ran its new config)
    assert kept["service"] == "migrate" and "made again, not started" in kept["message"]
    code, st = status(lab)
    assert (code, st["state"]) == (6, "held"), st  # r2 held; r1 runs as it should
    assert st["services"]["done_jobs"] == ["migrate"], st
    assert {"service": "migrate", "state": "done"} in st["health"]["services"], st
    held = lab.tick()  # r2 is held; r1's job is done: nothing restored
    assert (held.rc, held.summary["outcome"]) == (6, "held"), held.stdout
    assert job_tags(lab) == ["v1", "v2"]


def test_a_restore_after_a_lock_stopped_rollback_never_re_runs_the_lkgs_job(lab: Lab) -> None:
    """r2 changes migrate (it runs: v2) and its web fails; a lock taken during its verify stops
    the rollback (the lock is the app's); tenancy goes back to r1 and the lock goes. r2's
    migrate container under r1's service name is drift (never a job of r1's record): restored
    with r1's config (`up --no-deps`), made and not started, since r1's ran to completion.
    Failed on main (88375a4): the restore ran r1's migrate again (v1, v2, v1)."""
    from tests.e2e.test_recheck import hooked_tick

    locks = lab.tmp / "locks"
    lab.write_config(
        verify={"stable_s": 2, "deadline_s": 30, "poll_s": 0.25, "bake_s": 0},
        locks={"dir": str(locks), "default_ttl_s": 3600},
    )
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", bundle(lab, tag="v1"))
    ok(lab.tick(), "applied")
    tenancy.set_desired("r2", bundle(lab, tag="v2", web="exit 3"))
    run = hooked_tick(lab, "verify", "lock")
    assert run.rc == 1 and "rollback to r1 is pending" in run.summary["message"], run.stdout
    assert job_tags(lab) == ["v1", "v2"]
    tenancy.set_desired("r1", bundle(lab, tag="v1"))
    (locks / "batch.lock").unlink()
    restored = lab.tick()
    ok(restored, "applied")
    [plan] = restored.events("plan.restore")
    assert "migrate's container was made by r2/" in plan["message"], plan["message"]
    time.sleep(1)
    assert job_tags(lab) == ["v1", "v2"]
    assert lab.states("migrate") == ["created"]
    assert any(e["service"] == "migrate" for e in restored.events("up.job_done")), restored.stdout
    ok(lab.tick(), "noop")
    rc, st = status(lab)
    assert (rc, st["state"]) == (0, "ok"), st


def test_a_restore_after_a_killed_tick_never_re_runs_the_lkgs_job(lab: Lab) -> None:
    """A tick applying r2 (a new migrate config) is killed in its verify; tenancy goes back to
    r1, and the next tick restores r1's whole project: r1's migrate is made again, not run.
    Failed on main (88375a4): the restore ran r1's migrate again (v1, v2, v1)."""
    tenancy = lab.estate.tenancy
    tenancy.set_desired("r1", bundle(lab, tag="v1"))
    ok(lab.tick(), "applied")
    tenancy.set_desired("r2", bundle(lab, tag="v2", web="sleep 3601"))
    lab.kill_during("verify", "r2")
    end = time.monotonic() + 10
    while job_tags(lab) != ["v1", "v2"] and time.monotonic() < end:
        time.sleep(0.1)
    assert job_tags(lab) == ["v1", "v2"]
    tenancy.set_desired("r1", bundle(lab, tag="v1"))
    run = lab.tick()
    ok(run, "applied")  # restored
    time.sleep(1)
    assert job_tags(lab) == ["v1", "v2"]
    assert lab.states("migrate") == ["created"]
    assert any(e["service"] == "migrate" for e in run.events("up.job_done")), run.stdout
    ok(lab.tick(), "noop")


def test_a_rollback_keeps_a_job_that_outlasted_verify_and_then_ended_on_its_own(lab: Lab) -> None:
    """r1's migrate outlasts verify's stable window (r1 records it among its services), then
    exits 0 on its own: the next tick's events rule records it done. r2 changes it and fails;
    the rollback makes r1's migrate again, not started, and its verify does not wait for it.
    Failed on main (4f621c9): v1, v2, v1."""
    tenancy = lab.estate.tenancy
    r1_whose_job_outlasted_verify_and_ended(lab)
    noop = lab.tick()
    ok(noop, "noop")
    assert [e["service"] for e in noop.events("job.done")] == ["migrate"], noop.stdout
    tenancy.set_desired("r2", bundle(lab, tag="v2", web="exit 3"))
    failed = lab.tick()
    assert failed.rc == 1 and lab.estate.tenancy.reports[-1]["rollback"]["ok"], failed.stdout
    time.sleep(1)
    assert job_tags(lab) == ["v1", "v2"]
    assert lab.states("migrate") == ["created"]


def test_a_job_that_ended_after_verify_is_not_re_run_by_the_very_next_revision(lab: Lab) -> None:
    """r1's migrate outlasts verify's stable window, then exits 0 on its own; the next tick
    brings r2, which changes only web (no no-op tick in between to record the job done). The
    apply asks the engine first: migrate is done for its config, left out of r2's ``up``.
    Failed on main (8d87d0a): r2's up started the exited migrate again (v1, v1)."""
    tenancy = lab.estate.tenancy
    r1_whose_job_outlasted_verify_and_ended(lab)
    tenancy.set_desired("r2", bundle(lab, tag="v1", job=HELD_JOB, web="sleep 3601"))
    second = lab.tick()
    ok(second, "applied")
    assert [e["service"] for e in second.events("job.done")] == ["migrate"], second.stdout
    time.sleep(1)
    assert job_tags(lab) == ["v1"]
    assert lab.states("migrate") == ["exited"]
    ok(lab.tick(), "noop")  # and no later tick takes it for down
    assert job_tags(lab) == ["v1"]
