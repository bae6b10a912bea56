"""End to end (issue 34): a tick killed (SIGKILL, its whole process group) at each step of
compose's own replacement converges on the next plain tick, on both engines (scripts/test.sh
runs this file again on the second).

The kill lands on the engine's event, read from ``docker events`` as it happens (``Lab.kill_at``),
never after a sleep: the replacement's ``create`` (a new container with a temporary name beside
the running one), the old one's ``stop`` and ``destroy``, the new one's ``rename`` and
``start``. After each, one plain tick brings the desired revision up (exit 0), holds nothing,
stalls nothing and leaves no container with a temporary name; a restore and a rollback killed
the same way converge too."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit import engines
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker
TEMPORARY = re.compile(r"\A[0-9a-f]{12}_")
SERVICES = ("web", "db")


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-kill-1") as lab:
        lab.estate.tenancy.set_desired("r1", lab.bundle(services=SERVICES))
        first = lab.tick()
        assert first.rc == 0, first.stdout + first.stderr
        yield lab


def names(lab: Lab) -> dict[str, tuple[str, str]]:
    """Every container of the lab's project: name -> (state, revision label)."""
    out = subprocess.run(
        (
            "docker", "ps", "--all", "--no-trunc",
            "--filter", f"label=com.docker.compose.project={lab.project}",
            "--format", '{{.Names}}\t{{.State}}\t{{.Label "io.monky.deployd.revision"}}',
        ),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [ln.split("\t") for ln in out.splitlines() if ln.strip()]
    return {r[0]: (r[1], r[2] if len(r) > 2 else "") for r in rows}


def converged(lab: Lab, revision: str) -> None:
    """One plain tick: exit 0, ``revision`` applied, one running container per service under
    its own name, nothing held."""
    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert applied["revision"] == revision
    assert not (lab.state_dir / "held.json").exists()
    found = names(lab)
    assert not [n for n in found if TEMPORARY.match(n)], found
    assert sorted(found) == sorted(f"{lab.project}-{s}-1" for s in SERVICES), found
    assert {state for state, _ in found.values()} == {"running"}, found


def new_revision(lab: Lab, revision: str) -> None:
    """A revision whose .env differs: compose replaces every service."""
    template = f"DB_PASSWORD=${{DB_PASSWORD}}\nLOG_LEVEL={revision}\n"
    lab.estate.tenancy.set_desired(revision, lab.bundle(services=SERVICES, env_template=template))


@pytest.mark.parametrize("action", ["create", "stop", "destroy", "rename", "start"])
def test_an_apply_killed_at_any_step_of_composes_replacement_converges(
    lab: Lab, action: str
) -> None:
    new_revision(lab, "r2")
    lab.kill_at(action)
    converged(lab, "r2")


@pytest.mark.second_engine_restart
def test_an_apply_killed_and_the_engine_restarted_converges(
    tmp_path: Path, registry: Registry, web_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the second engine (the suite's own, which a test may restart), whichever pass runs:
    the kill at the replacement's create, then the engine stopped and started (a reboot, an
    upgrade), then one plain tick."""
    engines.second_available()
    monkeypatch.setenv("DOCKER_HOST", engines.SECOND_SOCK)  # the lab and the agent follow it
    with Lab(tmp_path, registry, web_image, db_password="pw-kill-2") as lab:
        lab.estate.tenancy.set_desired("r1", lab.bundle(services=SERVICES))
        first = lab.tick()
        assert first.rc == 0, first.stdout + first.stderr
        new_revision(lab, "r2")
        lab.kill_at("create")
        engines.restart_second()
        converged(lab, "r2")


def test_a_restore_killed_at_its_create_converges(lab: Lab) -> None:
    web = f"{lab.project}-web-1"
    subprocess.run(("docker", "rm", "--force", web), check=True, capture_output=True)
    lab.kill_at("create")
    converged(lab, "r1")


def test_a_rollback_killed_at_its_replacement_converges_to_the_last_known_good(
    lab: Lab,
) -> None:
    """r2's web exits at once (verify fails it: its own fault), the rollback to r1 replaces it
    and is killed there; the next tick finishes the rollback, r2 held for what it did."""
    broken = lab.bundle(services=SERVICES, web={"command": ["sh", "-c", "exit 3"]})
    lab.estate.tenancy.set_desired("r2", broken)
    lab.kill_at("create", after=3)  # r2's two creates, then the rollback's first
    run = lab.tick()
    assert run.rc in (0, 6), run.stdout + run.stderr
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert applied["revision"] == "r1"
    found = names(lab)
    assert not [n for n in found if TEMPORARY.match(n)], found
    assert {state for state, _ in found.values()} == {"running"}, found
    held = json.loads((lab.state_dir / "held.json").read_text())
    assert held["revision"] == "r2" and not held["stalled"]
