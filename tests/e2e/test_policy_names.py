"""End to end (issue 40): names are the engine's facts. The real CLI asks the real engine whose
each volume, network and container name of a release is (on both engines: scripts/test.sh runs
this file again on the second).

- the project ``<v>_db`` with the volume ``data`` is compose's ``<v>_db_data``, the app
  ``<v>``'s volume ``db_data``: refused (POLICY_FOREIGN_RESOURCE), nothing changed, the app's
  file untouched, no container of ``<v>_db``;
- a volume made by hand under the project's own compose name: refused, then applied once
  config.yaml's ``volumes`` allowance names it;
- ``network_mode`` naming another compose project's network: refused, then applied (the
  container in that network) once the ``networks`` allowance names it.

Each test has its own projects (the lab's random name) and removes the volumes and networks it
made, so pytest-xdist workers keep apart."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry, remove_containers
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker


def docker(*args: str, check: bool = True) -> str:
    return subprocess.run(
        ("docker", *args), capture_output=True, text=True, check=check
    ).stdout.strip()


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-names-1") as lab:
        try:
            yield lab
        finally:  # the volumes a test made: compose's down keeps them, cleanup too
            for project in (lab.project, *lab.extra_projects):
                remove_containers(project)
            for name in docker("volume", "ls", "-q", check=False).split():
                if name.startswith(lab.project):
                    docker("volume", "rm", "-f", name, check=False)


def applied(lab: Lab, revision: str, bundle: dict[str, Any]) -> Run:
    lab.estate.tenancy.set_desired(revision, bundle)
    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    assert run.summary["outcome"] == "applied"
    return run


def ours(lab: Lab) -> list[str]:
    """The engine's volumes whose names start with the lab's project (other workers' apart)."""
    return [n for n in docker("volume", "ls", "-q").split() if n.startswith(lab.project)]


def refused(lab: Lab, bundle: dict[str, Any], revision: str) -> Run:
    """Publish ``bundle`` as ``revision`` and tick: refused in the policy phase for a foreign
    resource, and nothing on the box changed."""
    before, pulls = lab.containers(), lab.pulls()
    revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
    volumes = ours(lab)
    lab.estate.tenancy.set_desired(revision, bundle)
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["outcome"] == "refused"
    assert run.summary["code"] == "POLICY_FOREIGN_RESOURCE"
    report = lab.estate.tenancy.reports[-1]
    assert (report["outcome"], report["revision"], report["code"]) == (
        "refused",
        revision,
        "POLICY_FOREIGN_RESOURCE",
    )
    assert run.errors[0]["phase"] == "policy", run.errors[0]["message"]
    assert lab.containers() == before
    assert lab.pulls() == pulls
    assert sorted(p.name for p in (lab.state_dir / "revisions").iterdir()) == revisions
    assert ours(lab) == volumes
    return run


def lines(run: Run) -> list[str]:
    detail: str = run.errors[0]["detail"]
    return detail.splitlines()


def test_a_project_name_that_makes_composes_name_another_apps_volume_is_refused(
    lab: Lab,
) -> None:
    app = lab.project  # the app V, with its database volume db_data
    bundle = lab.bundle(web={"volumes": ["db_data:/data"]}, top={"volumes": {"db_data": {}}})
    applied(lab, "r1", bundle)
    theirs = f"{app}_db_data"
    labels = json.loads(docker("volume", "inspect", theirs, "--format", "{{json .Labels}}"))
    assert labels["com.docker.compose.project"] == app
    web = lab.containers()["web"]
    docker("exec", web, "sh", "-c", "echo app-v-database > /data/db")
    # the project <app>_db with the volume data: compose's <app>_db_data, the same name
    attacker = f"{app}_db"
    lab.extra_projects = (attacker,)
    evil = lab.bundle(
        project=attacker,
        web={"volumes": ["data:/data"], "command": ["sh", "-c", "echo evil > /data/db"]},
        top={"volumes": {"data": {}}},
    )
    run = refused(lab, evil, "r2")
    want = (
        f"service web: volumes.data the volume {theirs} already exists and is project {app}'s, "
        f"not {attacker}'s (allow with policy.services.web.volumes: [{theirs}])"
    )
    assert want in lines(run), lines(run)
    assert f"the volume {theirs} already exists and is project {app}'s" in run.errors[0]["message"]
    assert docker("exec", web, "cat", "/data/db") == "app-v-database"
    assert lab.containers() == {"web": web}
    every = docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={attacker}")
    assert every == ""
    # plan says the same, and changes nothing either
    plan = lab.cli("plan")
    assert "POLICY_FOREIGN_RESOURCE" in plan.stdout + plan.stderr, plan.stdout + plan.stderr
    assert docker("exec", web, "cat", "/data/db") == "app-v-database"


def test_a_volume_made_by_hand_under_the_projects_own_name_is_refused_unless_allowed(
    lab: Lab,
) -> None:
    applied(lab, "r1", lab.bundle())
    hand = f"{lab.project}_data"
    docker("volume", "create", hand)
    docker("run", "--rm", "-v", f"{hand}:/v", lab.image, "sh", "-c", "echo by-hand > /v/f")
    bundle = lab.bundle(web={"volumes": ["data:/data"]}, top={"volumes": {"data": {}}})
    run = refused(lab, bundle, "r2")
    assert (
        f"service web: volumes.data the volume {hand} already exists and is made by hand "
        f"(no com.docker.compose.project label), not {lab.project}'s "
        f"(allow with policy.services.web.volumes: [{hand}])"
    ) in lines(run), lines(run)
    # the box's policy names it: the revision is judged again, and applies on that volume
    lab.write_config(
        policy={"allow": {"bind_roots": [str(lab.binds)]}, "services": {"web": {"volumes": [hand]}}}
    )
    applied(lab, "r2", bundle)
    web = lab.containers()["web"]
    assert docker("exec", web, "cat", "/data/f") == "by-hand"


@pytest.fixture
def other_network(lab: Lab, busybox_image: str) -> Iterator[str]:
    """A network of another compose project (``up --no-start``: its network and container,
    labelled by compose), removed after the lab's containers leave it."""
    other = f"{lab.project}o"
    compose = lab.tmp / "other.yaml"
    compose.write_text(
        json.dumps({"services": {"s": {"image": busybox_image, "pull_policy": "never"}}})
    )
    docker("compose", "-p", other, "-f", str(compose), "up", "--no-start")
    try:
        yield f"{other}_default"
    finally:
        remove_containers(lab.project)
        docker("compose", "-p", other, "-f", str(compose), "down", check=False)


def test_network_mode_naming_another_projects_network_is_refused_unless_allowed(
    lab: Lab, other_network: str
) -> None:
    labels = json.loads(docker("network", "inspect", other_network, "--format", "{{json .Labels}}"))
    assert labels["com.docker.compose.project"] == f"{lab.project}o"
    applied(lab, "r1", lab.bundle())
    bundle = lab.bundle(web={"network_mode": other_network})
    run = refused(lab, bundle, "r2")
    assert (
        f"service web: network_mode {other_network} (a network that is not one of the "
        f"release's own) (allow with policy.services.web.networks: [{other_network}])"
    ) in lines(run), lines(run)
    lab.write_config(
        policy={
            "allow": {"bind_roots": [str(lab.binds)]},
            "services": {"web": {"networks": [other_network]}},
        }
    )
    applied(lab, "r2", bundle)
    web = lab.containers()["web"]
    assert docker("inspect", web, "--format", "{{.HostConfig.NetworkMode}}") == other_network
