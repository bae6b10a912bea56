"""End to end: a tick killed with SIGKILL (its docker children too) during pull, up, verify,
commit or a rollback, against real Docker. The next tick resumes the apply (the revision is still
desired) or brings the last-known-good back (tenancy went back to it), and spends no extra
lease. Stage (the docker config, the revision dir) is over in a millisecond, so it is killed
from inside: the CLI runs under a hook that SIGKILLs the process at its Nth rename while the
journal says stage (each file write and the revision dir's move into place); down is killed on a
project rename. The next tick leaves nothing half-written (no temporary file, no staging dir)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, cli_env

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-killed"


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password=SECRET) as lab:
        yield lab


def kill_during(lab: Lab, phase: str) -> None:
    """Kill a tick in ``phase`` (``Lab.kill_during``); its journal stays behind."""
    lab.kill_during(phase)
    assert json.loads((lab.state_dir / "journal.json").read_text())["phase"] == phase


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
    lab.write_config(verify={"stable_s": 20, "deadline_s": 60, "poll_s": 0.25, "bake_s": 0})
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


# SIGKILL the CLI just before the os.replace/os.rename onto TARGET (a basename) while
# journal.json says "stage": config.json (the docker config), compose.yaml or .env (in the
# staging dir), or the revision (the staging dir moved into place).
STAGE_KILL_HOOK = """
import json, os, signal, sys
from pathlib import Path
journal, target = Path(sys.argv.pop(1)), sys.argv.pop(1)
def in_stage():
    try:
        return json.loads(journal.read_bytes())["phase"] == "stage"
    except (OSError, ValueError, KeyError):
        return False
def hooked(real):
    def call(src, dst, *args, **kwargs):
        if os.path.basename(dst) == target and in_stage():
            os.kill(os.getpid(), signal.SIGKILL)
        return real(src, dst, *args, **kwargs)
    return call
os.replace, os.rename = hooked(os.replace), hooked(os.rename)
from monky_deployd.cli import main
sys.exit(main())
"""


def leftovers(state_dir: Path) -> list[str]:
    return sorted(
        str(p.relative_to(state_dir))
        for p in state_dir.rglob("*")
        if p.name.endswith((".tmp", ".staging", ".old"))
    )


@pytest.mark.parametrize(
    ("target", "back_to_lkg"),
    [
        ("config.json", False),
        ("config.json", True),
        ("compose.yaml", True),
        (".env", False),
        ("r2", True),
        ("r2", False),
    ],
    ids=["config-resume", "config-lkg", "compose-lkg", "env-resume", "move-lkg", "move-resume"],
)
def test_a_tick_killed_during_stage(lab: Lab, target: str, back_to_lkg: bool) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    assert lab.tick().rc == 0
    leases = lab.estate.tenancy.lease_requests
    if target == "config.json":  # same credential: rewritten only because its mode is wrong
        (lab.state_dir / "docker" / "config.json").chmod(0o640)
    lab.estate.tenancy.set_desired("r2", lab.bundle(env_template=template("debug")))
    env = cli_env(lab.tmp / "home")
    journal = lab.state_dir / "journal.json"
    killed = subprocess.run(
        (
            *(sys.executable, "-c", STAGE_KILL_HOOK, str(journal), target),
            *("apply", "--once", "--config", str(lab.config_path)),
        ),
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stdout
    assert json.loads(journal.read_text())["phase"] == "stage"
    assert leftovers(lab.state_dir), "killed half way: something was left half-written"
    assert not (lab.state_dir / "revisions" / "r2").exists()
    assert lab.container_env()["LOG_LEVEL"] == "info", "r1 still runs"
    if back_to_lkg:
        lab.estate.tenancy.set_desired("r1", lab.bundle(env_template=template("info")))
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert run.events("state.swept")
    want = "r1" if back_to_lkg else "r2"
    assert run.summary["revision"] == want
    assert lab.container_env()["LOG_LEVEL"] == ("info" if back_to_lkg else "debug")
    assert json.loads((lab.state_dir / "applied.json").read_text())["revision"] == want
    assert leftovers(lab.state_dir) == [], "nothing half-written stays"
    assert not (lab.state_dir / "journal.json").exists()
    assert lab.estate.tenancy.lease_requests == leases, "no extra lease"
    assert lab.tick().summary["outcome"] == "noop"


@pytest.mark.parametrize("back_to_lkg", [False, True], ids=["resume", "lkg"])
def test_a_tick_killed_during_the_previous_projects_down(lab: Lab, back_to_lkg: bool) -> None:
    """r2 renames the project: the apply takes r1's project down first; killed there, the next
    tick finishes the rename, or brings r1's project back when tenancy went back to r1."""
    first, second = lab.project, lab.project + "b"
    lab.extra_projects = (second,)
    r1 = lab.bundle(env_template=template("info"))
    lab.estate.tenancy.set_desired("r1", r1)
    assert lab.tick().rc == 0
    leases = lab.estate.tenancy.lease_requests
    lab.estate.tenancy.set_desired("r2", lab.bundle(env_template=template("debug"), project=second))
    kill_during(lab, "down")
    assert not lab.containers(second), "killed before r2's up"
    if back_to_lkg:
        lab.estate.tenancy.set_desired("r1", r1)
    run = lab.tick()
    assert run.rc == 0, run.stdout
    want = "r1" if back_to_lkg else "r2"
    assert run.summary["revision"] == want
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert (applied["revision"], applied["project"]) == (want, first if back_to_lkg else second)
    assert set(lab.containers(first)) == ({"web"} if back_to_lkg else set())
    assert set(lab.containers(second)) == (set() if back_to_lkg else {"web"})
    lab.project = first if back_to_lkg else second
    assert lab.container_env()["LOG_LEVEL"] == ("info" if back_to_lkg else "debug")
    assert leftovers(lab.state_dir) == []
    assert not (lab.state_dir / "journal.json").exists()
    assert lab.estate.tenancy.lease_requests == leases, "no extra lease"
    assert lab.tick().summary["outcome"] == "noop"
