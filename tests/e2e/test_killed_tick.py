"""End to end: a tick killed with SIGKILL (its docker children too) during pull, up, verify,
commit or a rollback, against real Docker. The next tick resumes the apply (the revision is still
desired) or brings the last-known-good back (tenancy went back to it), and spends no extra
lease. (stage and down are not killed here: stage writes files atomically, down runs only on a
project rename; core.plan's unit tests cover every phase's decision.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import CLI, Lab

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-killed"


@pytest.fixture(scope="module")
def web_image(registry: Registry, busybox_image: str) -> str:
    return registry.push(busybox_image, "env-e2e-01/web", "1.0")


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    lab = Lab(tmp_path, registry, web_image)
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": SECRET})
    try:
        yield lab
    finally:
        lab.cleanup()


def kill_during(lab: Lab, phase: str) -> None:
    """Start a tick and SIGKILL it, with its docker children (as systemd kills the unit's
    cgroup), once journal.json says it is in ``phase``."""
    env = {"PATH": os.environ["PATH"], "HOME": str(lab.tmp / "home")}
    proc = subprocess.Popen(
        (*CLI, "apply", "--once", "--config", str(lab.config_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    journal = lab.state_dir / "journal.json"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if json.loads(journal.read_text())["phase"] == phase:
                    break
            except (FileNotFoundError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        assert proc.poll() is None, f"the tick ended before reaching {phase}"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert json.loads(journal.read_text())["phase"] == phase


def template(level: str) -> str:
    return "DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=" + level + "\n"


@pytest.mark.parametrize(
    ("phase", "back_to_lkg"),
    [
        ("pull", False),
        ("up", False),
        ("up", True),
        ("verify", False),
        ("verify", True),
        ("commit", False),
        ("rollback", True),
    ],
    ids=[
        "pull-resume",
        "up-resume",
        "up-lkg",
        "verify-resume",
        "verify-lkg",
        "commit-resume",
        "rollback-lkg",
    ],
)
def test_a_killed_tick(lab: Lab, phase: str, back_to_lkg: bool) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    assert lab.tick().rc == 0
    leases = lab.estate.tenancy.lease_requests
    lab.write_config(verify={"stable_s": 20, "deadline_s": 60, "poll_s": 0.25})
    r2 = lab.bundle(env_template=template("debug"))
    if phase == "rollback":  # r2 crashes, so its verify fails and the tick rolls back
        doc = yaml.safe_load(r2["compose"])
        doc["services"]["web"]["command"] = ["sh", "-c", "sleep 1; exit 1"]
        r2["compose"] = yaml.safe_dump(doc)
    lab.estate.tenancy.set_desired("r2", r2)
    kill_during(lab, phase)
    if phase == "verify":
        assert lab.container_env()["LOG_LEVEL"] == "debug"  # r2's container, not yet verified
    lab.write_config()  # short windows again
    if back_to_lkg:
        lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert run.events("journal.interrupted")
    want = "r1" if back_to_lkg else "r2"
    assert run.summary["revision"] == want
    assert lab.container_env()["LOG_LEVEL"] == ("info" if back_to_lkg else "debug")
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == want
    assert not (lab.state_dir / "journal.json").exists()
    assert lab.estate.tenancy.lease_requests == leases, "no extra lease"
    steady = lab.tick()
    assert steady.summary["outcome"] == "noop", steady.stdout
