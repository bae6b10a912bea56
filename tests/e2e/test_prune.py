"""End to end: a commit keeps the last-known-good and the release before it, removes older
revision directories and the images only they ran, never an image a container still uses."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import Registry, image_exists, remove_image
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


def unique_image(registry: Registry, busybox_image: str, tag: str) -> tuple[str, str]:
    """A busybox image with its own ID, pushed as ``tag``: (ref, image id)."""
    return registry.push_unique_image(busybox_image, "env-e2e-01/prune", tag)


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, busybox_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, busybox_image, db_password="pw") as lab:
        yield lab


@pytest.mark.parametrize("foreign_container", [False, True], ids=["unused", "used-elsewhere"])
def test_a_commit_prunes_old_releases_and_only_their_unused_images(
    lab: Lab, registry: Registry, busybox_image: str, foreign_container: bool
) -> None:
    images = [unique_image(registry, busybox_image, t) for t in ("1", "2", "3")]
    other = f"monky-test-foreign-{uuid.uuid4().hex[:8]}"
    try:
        for n, (ref, _) in enumerate(images[:2], start=1):
            lab.estate.tenancy.set_desired(f"r{n}", lab.bundle(image=ref))
            assert lab.tick().rc == 0
        if foreign_container:  # another project's (stopped) container uses r1's image
            subprocess.run(
                ("docker", "create", "--name", other, images[0][1], "true"),
                check=True,
                capture_output=True,
            )
        lab.estate.tenancy.set_desired("r3", lab.bundle(image=images[2][0]))
        run = lab.tick()
        assert run.rc == 0, run.stdout
        revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
        assert revisions == ["r2", "r3"]
        assert image_exists(images[0][1]) == foreign_container
        assert image_exists(images[1][1]) and image_exists(images[2][1])  # LKG and previous
        pruned = run.events("prune.image")
        # an image a container uses is not even tried; an unused one is removed
        assert [e["removed"] for e in pruned] == ([] if foreign_container else [True])
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)
        lab.cleanup()  # the project's containers, so their images can go
        for _, image_id in images:
            remove_image(image_id)


# SIGKILL the CLI as it starts `docker image rm` (the commit's image GC); the agent's own code
# runs unchanged, the hook only chooses the moment of the kill
GC_KILL_HOOK = """
import os, signal, subprocess, sys
real = subprocess.run
def run(argv, *args, **kwargs):
    if tuple(argv[1:3]) == ("image", "rm"):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(argv, *args, **kwargs)
subprocess.run = run
from monky_deployd.cli import main
sys.exit(main())
"""


def test_a_tick_killed_during_the_image_gc_leaks_no_image(
    lab: Lab, registry: Registry, busybox_image: str
) -> None:
    """The image GC removes the images before the releases that name them: killed in
    between, the next tick finishes it (before: release.json went first, the image leaked)."""
    images = [unique_image(registry, busybox_image, t) for t in ("1", "2", "3")]
    try:
        for n, (ref, _) in enumerate(images[:2], start=1):
            lab.estate.tenancy.set_desired(f"r{n}", lab.bundle(image=ref))
            assert lab.tick().rc == 0
        leases = lab.estate.tenancy.lease_requests
        lab.estate.tenancy.set_desired("r3", lab.bundle(image=images[2][0]))
        killed = subprocess.run(
            (
                *(sys.executable, "-c", GC_KILL_HOOK),
                *("apply", "--once", "--config", str(lab.config_path)),
            ),
            capture_output=True,
            env=lab.env(),
            timeout=300,
            check=False,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stdout
        assert image_exists(images[0][1])
        revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
        assert revisions == ["r1", "r2", "r3"], "r1's release still names its image"
        pulls = lab.pulls()
        run = lab.tick()
        assert run.rc == 0 and run.summary["outcome"] == "noop", run.stdout
        assert run.events("prune.resumed")
        assert not image_exists(images[0][1]), "the GC finished: no leaked image"
        assert image_exists(images[1][1]) and image_exists(images[2][1])
        assert sorted(p.name for p in (lab.state_dir / "revisions").iterdir()) == ["r2", "r3"]
        assert lab.pulls() == pulls and lab.estate.tenancy.lease_requests == leases
        assert not (lab.state_dir / "journal.json").exists()
    finally:
        lab.cleanup()
        for _, image_id in images:
            remove_image(image_id)
