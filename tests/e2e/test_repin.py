"""End to end: a restore after the box lost the last-known-good's image (`docker image rm` of
that image, as `docker image prune -a` does once no container uses it). The agent pulls it back
by the digest its release recorded, with its own registry credential, then pins as before;
when the registry no longer has that digest either, the tick says exactly that
(PINNED_IMAGE_GONE). Each test builds and pushes its own image: nothing shared is removed."""

from __future__ import annotations

import base64
import json
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import Registry, image_exists, remove_image
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


def unique_image(registry: Registry, busybox_image: str) -> tuple[str, str]:
    """A busybox image with its own ID (a label), pushed to the registry: (ref, image id)."""
    local = f"monky-test/repin-{uuid.uuid4().hex[:10]}:1"
    with tempfile.TemporaryDirectory(prefix="monky-repin-") as ctx:
        Path(ctx, "Dockerfile").write_text(
            f"FROM {busybox_image}\nLABEL monky.test.unique={uuid.uuid4().hex}\n"
        )
        subprocess.run(("docker", "build", "-q", "-t", local, ctx), check=True, capture_output=True)
    image_id = subprocess.run(
        ("docker", "image", "inspect", "--format", "{{.Id}}", local),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    ref = registry.push(local, f"env-e2e-01/repin-{uuid.uuid4().hex[:6]}", "1")
    remove_image(local)
    return ref, image_id


@pytest.fixture
def image(registry: Registry, busybox_image: str) -> Iterator[tuple[str, str]]:
    ref, image_id = unique_image(registry, busybox_image)
    yield ref, image_id
    remove_image(image_id)


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, image: tuple[str, str]) -> Iterator[Lab]:
    with Lab(tmp_path, registry, image[0], db_password="pw-repin") as lab:
        yield lab


def lose_the_image(lab: Lab, image_id: str) -> None:
    """The service's container is gone and so is its image (what `docker image prune -a`
    leaves once nothing uses it)."""
    subprocess.run(("docker", "rm", "-f", *lab.containers().values()), check=True)
    subprocess.run(
        ("docker", "image", "rm", "-f", image_id), check=True, capture_output=True, text=True
    )
    assert not image_exists(image_id)


def delete_from_registry(registry: Registry, digest_ref: str) -> None:
    """The registry no longer serves the digest (``DELETE /v2/<repo>/manifests/<digest>``)."""
    host_repo, _, digest = digest_ref.partition("@")
    repo = host_repo.partition("/")[2]
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    req = urllib.request.Request(
        f"http://{registry.host}/v2/{repo}/manifests/{digest}",
        method="DELETE",
        headers={"Authorization": f"Basic {auth}"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 202


def release(lab: Lab, revision: str) -> dict[str, object]:
    body: dict[str, object] = json.loads(
        (lab.state_dir / "revisions" / revision / "release.json").read_text()
    )
    return body


def test_a_restore_pulls_a_pruned_image_back_by_its_digest(
    lab: Lab, image: tuple[str, str]
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    lose_the_image(lab, image[1])
    pulls = lab.pulls()
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert run.summary["outcome"] == "applied" and "restored web" in run.summary["message"]
    assert run.events("repin.pull"), "pulled back by digest"
    assert lab.pulls() == pulls + 1, "one manifest request: the digest"
    assert image_exists(image[1]), "the same image ID as the release pinned"
    assert set(lab.containers()) == {"web"}
    assert lab.tick().summary["outcome"] == "noop"


def test_a_restore_whose_image_the_registry_lost_too_says_so(
    lab: Lab, registry: Registry, image: tuple[str, str]
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    images = release(lab, "r1")["images"]
    assert isinstance(images, dict)
    digest = images["web"]["digest"]
    lose_the_image(lab, image[1])
    delete_from_registry(registry, digest)
    run = lab.tick()
    assert run.rc == 1, run.stdout
    assert run.summary["code"] == "PINNED_IMAGE_GONE"
    first = run.errors[0]
    assert first["code"] == "PINNED_IMAGE_GONE", "the journal's first error line"
    assert "registry no longer has it either" in first["message"]
    assert digest in first["message"]
    report = lab.estate.tenancy.reports[-1]
    assert (report["outcome"], report["code"]) == ("failed", "PINNED_IMAGE_GONE")
    status = json.loads(lab.cli("status", "--json").stdout)
    assert status["last_tick"]["code"] == "PINNED_IMAGE_GONE"
