"""End to end: a service keeps the revision labels of the apply that last changed it. The real
CLI, the loopback estate, a real registry and the real Docker engine.

Labels are part of a container's configuration: were every service relabelled on each revision,
compose would recreate every container (a database restarted for a web change). The agent keeps
each service's config digest without the labels override in applied.json (from the ``compose
config --format json`` the local policy reads; an older agent's record holds compose's own
``config --hash``) and gives new labels only to a service whose digest moved."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def db_repo(registry: Registry, busybox_image: str) -> str:
    """db's own repository: a test pushes a new image under its tag."""
    return registry.push(busybox_image, f"env-e2e-01/labelsdb{uuid.uuid4().hex[:8]}", "1.0")


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, busybox_image: str) -> Iterator[Lab]:
    repo = registry.push(busybox_image, f"env-e2e-01/labels{uuid.uuid4().hex[:8]}", "1.0")
    with Lab(tmp_path, registry, repo, db_password="s3cr3t-labels") as lab:
        yield lab


def two_services(
    lab: Lab, web_extra: dict[str, str] | None = None, db_image: str | None = None
) -> Any:
    b = lab.bundle(services=("web", "db"))
    doc = yaml.safe_load(b["compose"])
    doc["services"]["web"]["environment"].update(web_extra or {})
    if db_image is not None:
        doc["services"]["db"]["image"] = db_image
    b["compose"] = yaml.safe_dump(doc)
    return b


def revision_of(lab: Lab) -> dict[str, tuple[str, str]]:
    """service -> (revision label, deploy-id label) of the project's running containers."""
    out = subprocess.run(
        (
            "docker",
            "ps",
            "--filter",
            f"label=com.docker.compose.project={lab.project}",
            "--format",
            '{{.Label "com.docker.compose.service"}} {{.Label "monky-deployd.revision"}} '
            '{{.Label "monky-deployd.deploy-id"}}',
        ),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {s: (r, d) for s, r, d in (ln.split() for ln in out.splitlines() if ln.strip())}


def plan_services(lab: Lab) -> dict[str, str]:
    proc = lab.cli("plan", "--json")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {s["name"]: s["action"] for s in json.loads(proc.stdout)["services"]}


def applied(lab: Lab) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((lab.state_dir / "applied.json").read_text())
    return data


def test_only_the_changed_service_is_recreated_and_relabelled(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", two_services(lab))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    ids1 = lab.containers()
    tick1 = applied(lab)["deploy_id"]
    assert revision_of(lab) == {"web": ("r1", tick1), "db": ("r1", tick1)}
    kept = applied(lab)["service_labels"]
    assert set(kept) == {"web", "db"} and kept["db"]["revision"] == "r1"

    # r2 changes only web's environment: plan and apply agree that db stays
    lab.estate.tenancy.set_desired("r2", two_services(lab, {"EXTRA": "1"}))
    assert plan_services(lab) == {"web": "recreate", "db": "keep"}
    second = lab.tick()
    assert second.rc == 0, second.stdout + second.stderr
    ids2 = lab.containers()
    tick2 = applied(lab)["deploy_id"]
    assert tick2 != tick1
    assert ids2["db"] == ids1["db"] and ids2["web"] != ids1["web"]
    assert revision_of(lab) == {"web": ("r2", tick2), "db": ("r1", tick1)}
    assert sorted(lab.labelled("r2")) == ["web"] and sorted(lab.labelled("r1")) == ["db"]
    assert applied(lab)["service_labels"]["db"] == kept["db"]

    # r3 is r2 under a new name: nothing is recreated, every label stays
    lab.estate.tenancy.set_desired("r3", two_services(lab, {"EXTRA": "1"}))
    assert plan_services(lab) == {"web": "keep", "db": "keep"}
    third = lab.tick()
    assert third.rc == 0, third.stdout + third.stderr
    assert lab.containers() == ids2
    assert revision_of(lab) == {"web": ("r2", tick2), "db": ("r1", tick1)}
    assert sorted(lab.labelled("r3")) == []


def test_a_new_image_under_the_same_tag_relabels_only_its_service(
    lab: Lab, registry: Registry, busybox_image: str, db_repo: str
) -> None:
    lab.estate.tenancy.set_desired("r1", two_services(lab, db_image=db_repo))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    ids1, tick1 = lab.containers(), applied(lab)["deploy_id"]

    # r2: the same compose file, but db's tag now names a new image (compose recreates db)
    registry.push_new_image(db_repo, busybox_image)
    lab.estate.tenancy.set_desired("r2", two_services(lab, db_image=db_repo))
    second = lab.tick()
    assert second.rc == 0, second.stdout + second.stderr
    ids2, tick2 = lab.containers(), applied(lab)["deploy_id"]
    assert ids2["web"] == ids1["web"] and ids2["db"] != ids1["db"]
    assert revision_of(lab) == {"web": ("r1", tick1), "db": ("r2", tick2)}
    assert sorted(lab.labelled("r2")) == ["db"]


def test_an_older_agents_record_is_compared_once_by_composes_own_hash(lab: Lab) -> None:
    """applied.json as an agent before issue 29 wrote it holds compose's own ``config --hash``
    per service: the next apply compares with those (one ``config --hash``), so db is not
    recreated for the agent's upgrade, and keeps the agent's digests from then on."""
    lab.estate.tenancy.set_desired("r1", two_services(lab))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    ids1, tick1 = lab.containers(), applied(lab)["deploy_id"]
    record = applied(lab)
    assert all(
        lb["config_hash"].startswith("hmac-sha256:") for lb in record["service_labels"].values()
    )
    workdir = lab.state_dir / "revisions" / "r1"
    hashes = subprocess.run(
        ("docker", "compose", "--project-name", lab.project, "--project-directory", str(workdir),
         "--file", str(workdir / "compose.yaml"), "config", "--hash", "*"),
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for line in hashes.splitlines():
        service, digest = line.split()
        record["service_labels"][service]["config_hash"] = digest
    path = lab.state_dir / "applied.json"
    path.write_text(json.dumps(record))

    lab.estate.tenancy.set_desired("r2", two_services(lab, {"EXTRA": "1"}))
    second = lab.tick()
    assert second.rc == 0, second.stdout + second.stderr
    ids2, tick2 = lab.containers(), applied(lab)["deploy_id"]
    assert ids2["db"] == ids1["db"] and ids2["web"] != ids1["web"]
    assert revision_of(lab) == {"web": ("r2", tick2), "db": ("r1", tick1)}
    labels = applied(lab)["service_labels"]
    assert all(lb["config_hash"].startswith("hmac-sha256:") for lb in labels.values())
    assert labels["db"]["revision"] == "r1"
