"""The agent only touches compose projects it started: a project of the same name that someone
else runs on the box is refused (PROJECT_NOT_OWNED) before any pull, and keeps its containers."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry, remove_containers
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, busybox_image: str) -> Iterator[Lab]:
    image = registry.push(busybox_image, "env-e2e-01/web", "1.0")
    with Lab(tmp_path, registry, image, db_password="pw") as lab:
        yield lab


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
    # plan says what the restore would: refused, nothing to start
    status = lab.cli("plan", "--json")
    assert status.returncode == 2, status.stdout + status.stderr
    assert json.loads(status.stdout)["error"]["code"] == "PROJECT_NOT_OWNED"
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "PROJECT_NOT_OWNED"
    assert running(lab.project) == foreign


def labelled(kind: str, project: str) -> list[str]:
    out = subprocess.run(
        (
            *("docker", kind, "ls", "--format", "{{.Name}}"),
            *("--filter", f"label=com.docker.compose.project={project}"),
        ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(out.split())


@pytest.mark.parametrize("kind", ["volume", "network"])
def test_a_foreign_project_with_only_a_volume_or_network_is_refused_and_kept(
    lab: Lab, kind: str
) -> None:
    """Someone's project of that name has no container, only a volume (or a network) with
    compose's project label: our `up` would adopt it, so the apply is refused, nothing pulled."""
    name = f"{lab.project}_{uuid.uuid4().hex[:6]}"
    subprocess.run(
        ("docker", kind, "create", "--label", f"com.docker.compose.project={lab.project}", name),
        check=True,
        capture_output=True,
    )
    try:
        pulls = lab.pulls()
        lab.estate.tenancy.set_desired("r1", lab.bundle())
        run = lab.tick()
        assert run.rc == 5, run.stdout + run.stderr
        assert run.summary["code"] == "PROJECT_NOT_OWNED"
        first = run.errors[0]["message"]
        assert first.startswith(f"PROJECT_NOT_OWNED: compose project '{lab.project}' already")
        assert f"{kind} {name}" in first
        assert lab.pulls() == pulls, "refused before any pull"
        assert not list((lab.state_dir / "revisions").iterdir())
        assert not lab.containers()
        assert name in labelled(kind, lab.project), "the foreign one is untouched"
    finally:
        subprocess.run(("docker", kind, "rm", name), capture_output=True, check=False)


def test_a_project_the_agent_started_keeps_its_volumes_across_a_rename_and_back(
    lab: Lab,
) -> None:
    """The control: the agent's own project A (a named volume) is renamed to B (A is taken down,
    its volume stays: A has only a volume now) and then back to A: A is in projects.json, so
    its volume is the agent's, and the data in it survives."""
    first, second = lab.project, lab.project + "b"
    lab.extra_projects = (second,)

    def with_volume(project: str, level: str) -> dict[str, object]:
        bundle = lab.bundle(
            project=project, env_template="DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=" + level
        )
        doc = yaml.safe_load(str(bundle["compose"]))
        doc["services"]["web"]["volumes"] = ["data:/data"]
        doc["volumes"] = {"data": {}}
        bundle["compose"] = yaml.safe_dump(doc)
        return bundle

    try:
        lab.estate.tenancy.set_desired("r1", with_volume(first, "info"))
        assert lab.tick().rc == 0
        subprocess.run(
            ("docker", "exec", lab.containers()["web"], "sh", "-c", "echo kept > /data/f"),
            check=True,
        )
        lab.estate.tenancy.set_desired("r2", with_volume(second, "debug"))
        assert lab.tick().rc == 0
        assert not lab.containers(first) and labelled("volume", first), "A: a volume only"
        lab.estate.tenancy.set_desired("r3", with_volume(first, "warn"))
        run = lab.tick()
        assert run.rc == 0, run.stdout + run.stderr
        out = subprocess.run(
            ("docker", "exec", lab.containers()["web"], "cat", "/data/f"),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out == "kept\n"
    finally:
        for project in (first, second):
            remove_project(project)


def remove_project(project: str) -> None:
    """Containers, then the volumes (a volume in use cannot go) of a project a test made."""
    remove_containers(project)
    volumes = labelled("volume", project)
    if volumes:
        subprocess.run(("docker", "volume", "rm", *volumes), capture_output=True, check=False)
