"""The agent only touches compose projects it started: a project of the same name that someone
else runs on the box is refused (PROJECT_NOT_OWNED) before any pull, and keeps its containers."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, busybox_image: str) -> Iterator[Lab]:
    lab = Lab(tmp_path, registry, registry.push(busybox_image, "env-e2e-01/web", "1.0"))
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": "pw"})
    try:
        yield lab
    finally:
        lab.cleanup()


def start_foreign_project(
    where: Path, project: str, image: str, services: tuple[str, ...] = ("web", "db")
) -> dict[str, str]:
    """Someone else's compose project, started by hand from ``where``; its containers."""
    where.mkdir()
    (where / "compose.yaml").write_text(
        "services:\n"
        + "".join(
            f"  {name}:\n    image: {image}\n    command: [sleep, '3600']\n    network_mode: none\n"
            for name in services
        )
    )
    subprocess.run(
        ("docker", "compose", "-p", project, "up", "-d"),
        cwd=where,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return running(project)


def running(project: str) -> dict[str, str]:
    out = subprocess.run(
        (
            "docker",
            "ps",
            "--filter",
            f"label=com.docker.compose.project={project}",
            "--format",
            '{{.ID}} {{.Label "com.docker.compose.service"}}',
        ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {svc: cid for cid, svc in (line.split() for line in out.splitlines())}


def test_a_foreign_project_of_the_same_name_is_refused_and_kept(
    lab: Lab, tmp_path: Path, busybox_image: str
) -> None:
    foreign = start_foreign_project(tmp_path / "someone-else", lab.project, busybox_image)
    assert set(foreign) == {"web", "db"}
    pulls = lab.pulls()
    lab.estate.tenancy.set_desired("r1", lab.bundle())  # services: web only (db an "orphan")
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "PROJECT_NOT_OWNED"
    first = run.errors[0]["message"]
    assert first.startswith(f"PROJECT_NOT_OWNED: compose project '{lab.project}' already exists")
    assert str(tmp_path / "someone-else") in first
    assert running(lab.project) == foreign, "the other project's containers must be untouched"
    assert lab.pulls() == pulls, "refused before any pull"
    assert not list((lab.state_dir / "revisions").iterdir())
    assert lab.estate.tenancy.reports[-1]["code"] == "PROJECT_NOT_OWNED"


def test_the_agents_own_project_is_applied_again(lab: Lab, registry: Registry) -> None:
    """The control: a project the agent started (from its revisions/) passes the check, on a new
    revision and when its containers were removed behind its back."""
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    lab.estate.tenancy.set_desired("r2", lab.bundle(services=("web", "api")))
    second = lab.tick()
    assert second.rc == 0, second.stdout
    assert set(running(lab.project)) == {"web", "api"}


def test_a_restore_never_takes_over_containers_someone_else_started(
    lab: Lab, tmp_path: Path, busybox_image: str
) -> None:
    """The applied project's container died and someone started their own project of that name:
    the restore's `up --remove-orphans` would delete theirs, so it is refused."""
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), check=True, capture_output=True)
    foreign = start_foreign_project(
        tmp_path / "someone-else", lab.project, busybox_image, services=("db",)
    )
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "PROJECT_NOT_OWNED"
    assert running(lab.project) == foreign
