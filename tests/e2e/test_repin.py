"""End to end: a restore after the box lost the last-known-good's image (`docker image rm` of
that image, as `docker image prune -a` does once no container uses it). The agent pulls it back
by the digest its release recorded, with its own registry credential, then pins as before;
when the registry no longer has that digest either, the tick says exactly that
(PINNED_IMAGE_GONE). Each test builds and pushes its own image: nothing shared is removed."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry, image_exists, remove_image
from monky_deployd_testkit.lab import Lab, Run, parse_lines

pytestmark = pytest.mark.docker


def unique_image(registry: Registry, busybox_image: str) -> tuple[str, str]:
    """A busybox image with its own ID, pushed to the registry: (ref, image id)."""
    return registry.push_unique_image(busybox_image, "env-e2e-01/repin")


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
    pulls, by_digest = lab.pulls(), lab.registry.request_count("/manifests/sha256:")
    run = lab.tick()
    assert run.rc == 0, run.stdout
    assert run.summary["outcome"] == "applied" and "restored web" in run.summary["message"]
    assert len(run.events("repin.pull")) == 1, "pulled back by digest, once"
    # only the digest's manifest was read (the containerd image store reads it more than once)
    digest_reads = lab.registry.request_count("/manifests/sha256:") - by_digest
    assert digest_reads >= 1 and lab.pulls() == pulls + digest_reads, "no tag was pulled"
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


# After the os.replace that puts journal.json in place with phase "verify" (the failed
# revision's containers replaced the last-known-good's), remove IMAGE_ID as an image prune would
RMI_HOOK = """
import json, os, subprocess, sys
from pathlib import Path
journal, image_id = Path(sys.argv.pop(1)), sys.argv.pop(1)
done = []
def hooked(real):
    def call(src, dst, *args, **kwargs):
        out = real(src, dst, *args, **kwargs)
        if not done and os.path.basename(dst) == journal.name:
            try:
                phase = json.loads(journal.read_bytes())["phase"]
            except (OSError, ValueError, KeyError):
                phase = ""
            if phase == "verify":
                done.append(1)
                subprocess.run(("docker", "image", "rm", "-f", image_id), capture_output=True)
        return out
    return call
os.replace = hooked(os.replace)
from monky_deployd.cli import main
sys.exit(main())
"""


def test_a_rollback_pulls_the_pruned_lkg_image_back_by_its_digest(
    lab: Lab, registry: Registry, busybox_image: str, image: tuple[str, str]
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    assert lab.tick().rc == 0
    other, other_id = unique_image(registry, busybox_image)
    try:
        r2 = lab.bundle(image=other)
        doc = yaml.safe_load(r2["compose"])
        doc["services"]["web"]["command"] = ["sh", "-c", "sleep 1; exit 1"]
        r2["compose"] = yaml.safe_dump(doc)
        lab.estate.tenancy.set_desired("r2", r2)
        pulls = lab.pulls()
        images = release(lab, "r1")["images"]
        assert isinstance(images, dict)
        by_digest = "/manifests/" + images["web"]["digest"].partition("@")[2]
        digest_reads = registry.request_count(by_digest)
        proc = subprocess.run(
            (
                *(sys.executable, "-c", RMI_HOOK, str(lab.state_dir / "journal.json"), image[1]),
                *("apply", "--once", "--config", str(lab.config_path)),
            ),
            capture_output=True,
            text=True,
            env=lab.env(),
            timeout=300,
            check=False,
        )
        run = Run(proc.returncode, parse_lines(proc.stdout), proc.stdout, proc.stderr)
        assert run.rc == 1 and run.summary["code"] == "VERIFY_EXITED", run.stdout
        assert run.events("repin.pull"), "the LKG's image came back by digest"
        assert lab.estate.tenancy.reports[-1]["rollback"] == {"to_revision": "r1", "ok": True}
        assert image_exists(image[1])
        assert len(run.events("repin.pull")) == 1, "the LKG's, once"
        assert registry.request_count(by_digest) > digest_reads
        assert lab.pulls() > pulls
        assert json.loads((lab.state_dir / "held.json").read_text())["rollback_ok"] is True
    finally:
        lab.cleanup()
        remove_image(other_id)
