"""End to end: update locks and suspend read again right before containers change, and a
rollback that is recorded before it starts (killed inside it, or stopped by a lock), against
the real CLI, a real registry and real Docker.

The lock or the suspend arrives while the tick runs: the CLI runs under a hook that, right
after journal.json says the tick entered ``pull`` (or ``verify``), does what an app or an
operator would do at that moment (writes ``<locks.dir>/<name>.lock``, or ``suspend.json`` as
``monky-deployd suspend`` writes it). The agent's own code runs unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run, parse_lines

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-recheck"

# After the os.replace that puts journal.json in place with phase PHASE, ACTION once:
#   lock:    write <lock_dir>/batch.lock (an app's lock, JSON)
#   suspend: write suspend.json as `monky-deployd suspend --reason maintenance` does
GATE_HOOK = """
import json, os, sys, time
from pathlib import Path
journal, phase, action, where = Path(sys.argv.pop(1)), *(sys.argv.pop(1) for _ in range(3))
done = []
def act():
    if action == "lock":
        Path(where).mkdir(parents=True, exist_ok=True)
        Path(where, "batch.lock").write_text(json.dumps({"holder": "batch", "reason": "job"}))
    else:
        from monky_deployd.adapters.box.state.state import StateDir
        from monky_deployd.core.records.suspend import Suspended
        StateDir(Path(where)).write_suspend(Suspended(time.time(), None, "maintenance"))
def hooked(real):
    def call(src, dst, *args, **kwargs):
        out = real(src, dst, *args, **kwargs)
        if not done and os.path.basename(dst) == journal.name:
            try:
                if json.loads(journal.read_bytes())["phase"] == phase:
                    done.append(1)
                    act()
            except (OSError, ValueError, KeyError):
                pass
        return out
    return call
os.replace = hooked(os.replace)
from monky_deployd.cli import main
sys.exit(main())
"""


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        lab.write_config(locks={"dir": str(tmp_path / "locks"), "default_ttl_s": 3600})
        yield lab


def template(level: str) -> str:
    return "DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=" + level + "\n"


def hooked_tick(lab: Lab, phase: str, action: str) -> Run:
    where = lab.tmp / "locks" if action == "lock" else lab.state_dir
    proc = subprocess.run(
        (
            *(sys.executable, "-c", GATE_HOOK, str(lab.state_dir / "journal.json")),
            *(phase, action, str(where)),
            *("apply", "--once", "--config", str(lab.config_path)),
        ),
        capture_output=True,
        text=True,
        env=lab.env(),
        timeout=300,
        check=False,
    )
    return Run(proc.returncode, parse_lines(proc.stdout), proc.stdout, proc.stderr)


def crashing(lab: Lab) -> dict[str, Any]:
    r2 = lab.bundle(env_template=template("debug"))
    doc = yaml.safe_load(r2["compose"])
    doc["services"]["web"]["command"] = ["sh", "-c", "sleep 1; exit 1"]
    r2["compose"] = yaml.safe_dump(doc)
    return r2


def held(lab: Lab) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((lab.state_dir / "held.json").read_text())
    return body


@pytest.mark.parametrize("action", ["lock", "suspend"])
def test_a_lock_or_suspend_taken_during_the_pull_stops_the_up(lab: Lab, action: str) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    assert lab.tick().rc == 0
    ids = lab.containers()
    reports = len(lab.estate.tenancy.reports)
    pulls = lab.pulls()
    lab.estate.tenancy.set_desired("r2", lab.bundle(env_template=template("debug")))
    run = hooked_tick(lab, "pull", action)
    code = "UPDATE_LOCKED" if action == "lock" else "SUSPENDED"
    assert run.rc == 6, run.stdout
    assert (run.summary["outcome"], run.summary["code"]) == ("held", code)
    assert run.events("gate.blocked")
    assert lab.pulls() > pulls, "the pull ran (the lock came after the plan)"
    assert lab.containers() == ids, "no container was recreated under the lock"
    assert lab.container_env()["LOG_LEVEL"] == "info"
    assert len(lab.estate.tenancy.reports) == reports, "no report, as a plan-time lock"
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == "r1"
    assert not (lab.state_dir / "journal.json").exists()
    # released: the next tick applies r2
    if action == "lock":
        (lab.tmp / "locks" / "batch.lock").unlink()
    else:
        assert lab.cli("resume").returncode == 0
    done = lab.tick()
    assert done.rc == 0 and done.summary["revision"] == "r2", done.stdout
    assert lab.container_env()["LOG_LEVEL"] == "debug"


def test_a_lock_taken_during_verify_leaves_the_rollback_pending_until_released(
    lab: Lab,
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    assert lab.tick().rc == 0
    lab.estate.tenancy.set_desired("r2", crashing(lab))
    run = hooked_tick(lab, "verify", "lock")
    assert run.rc == 1, run.stdout
    assert run.summary["code"] == "VERIFY_EXITED"
    assert "rollback to r1 is pending" in run.summary["message"]
    assert run.errors[0]["code"] == "VERIFY_EXITED", "the first error line is the real fault"
    pending = held(lab)
    assert (pending["revision"], pending["rolled_back_to"], pending["rollback_ok"]) == (
        "r2",
        "r1",
        None,
    )
    report = lab.estate.tenancy.reports[-1]
    assert report["outcome"] == "failed" and report["revision"] == "r2"
    pulls = lab.pulls()
    locked = lab.tick()  # still locked: nothing changes, r2 is not applied again
    assert (locked.rc, locked.summary["code"]) == (6, "UPDATE_LOCKED"), locked.stdout
    (lab.tmp / "locks" / "batch.lock").unlink()
    done = lab.tick()
    assert done.rc == 0, done.stdout
    assert done.summary["revision"] == "r1"
    assert lab.container_env()["LOG_LEVEL"] == "info"
    after = held(lab)
    assert (after["revision"], after["rollback_ok"], after["attempts"]) == ("r2", True, 1)
    assert lab.pulls() == pulls, "no pull of the bad revision"
    assert lab.tick().summary["code"] == "REVISION_HELD"


@pytest.mark.parametrize(
    ("phase", "revision"), [("rollback", "r1"), ("verify", "r1")], ids=["rollback", "its-verify"]
)
def test_a_tick_killed_inside_the_rollback_while_the_bad_revision_is_still_desired(
    lab: Lab, phase: str, revision: str
) -> None:
    """The failure is recorded before the rollback starts: the next tick finishes the rollback
    (no pull of the bad revision, no lease) and holds it; before, it applied r2 again."""
    lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    assert lab.tick().rc == 0
    leases = lab.estate.tenancy.lease_requests
    lab.write_config(
        verify={"stable_s": 20, "deadline_s": 60, "poll_s": 0.25},
        locks={"dir": str(lab.tmp / "locks")},
    )
    lab.estate.tenancy.set_desired("r2", crashing(lab))
    lab.kill_during(phase, revision)
    pulls = lab.pulls()
    assert held(lab)["rollback_ok"] is None, "recorded before the rollback started"
    lab.write_config(locks={"dir": str(lab.tmp / "locks")})
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert run.summary["revision"] == "r1"
    assert run.events("journal.interrupted")
    assert lab.container_env()["LOG_LEVEL"] == "info"
    after = held(lab)
    assert (after["revision"], after["rollback_ok"], after["attempts"]) == ("r2", True, 1)
    assert lab.pulls() == pulls, "no extra pull of the bad revision"
    assert lab.estate.tenancy.lease_requests == leases, "no extra lease"
    assert lab.estate.tenancy.reports[-1]["rollback"] == {"to_revision": "r1", "ok": True}
    steady = lab.tick()
    assert (steady.rc, steady.summary["code"]) == (6, "REVISION_HELD"), steady.stdout
