"""End to end (issue 45, the outside attack on the change): what compose carries over from a
container it replaces, through the real CLI, engine, compose and registry (on both engines).

compose's recreate keeps the replaced container's mount at every target the new service mounts
an anonymous volume at, and at every ``VOLUME`` its image declares: a bind included, by its
host path. Revision 1 binds ``<root>/a`` at ``/data`` (judged, fine); revision 2 declares only
an anonymous ``/data`` (or runs an image with ``VOLUME /data``) and binds ``<root>`` writable:
its judged model has no host path at ``/data``, the engine binds ``<root>/a`` there anyway, and
the container swaps ``a`` for a link to /etc and exits: its restart mounts the host's /etc,
writable, and the steady tick sees nothing (nothing held, nothing judged). Now refused right
before the ``up`` (POLICY_RESOURCE_DRIFT): a replaced container's mount is carried only when it
is an engine-made anonymous volume.

And the held-path check while tenancy's desired revision is held: every tick said REVISION_HELD
and never looked at the applied revision's moved paths."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import DOCKER, Registry, build_image
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

# web waits for ``go`` in the root, then swaps ``a`` for a link to /etc and exits (restart: always)
SWAP = "while [ ! -e /w/go ]; do sleep 0.2; done; rm -f /w/go; rm -rf /w/a; ln -s /etc /w/a; exit 1"


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-attack-1") as lab:
        yield lab


def applied_with_bind(lab: Lab) -> Path:
    """r1 applied: web binds ``<root>/a`` at /data."""
    (lab.binds / "a").mkdir(parents=True)
    lab.estate.tenancy.set_desired("r1", lab.bundle(web={"volumes": [f"{lab.binds}/a:/data"]}))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    return lab.binds / "a"


def refused_and_kept(lab: Lab, a: Path) -> None:
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "POLICY_RESOURCE_DRIFT", run.stdout
    detail = run.errors[0]["detail"]
    assert f"would get bind {a} at /data carried over from the engine's container" in detail
    (lab.binds / "go").touch()  # were r2 running, it would swap now
    assert sorted(m["Source"] for m in lab.mounts()) == [str(a)]  # r1's, as judged
    assert a.is_dir() and not a.is_symlink()


def test_a_bind_carried_over_to_an_anonymous_volume_is_refused(lab: Lab) -> None:
    a = applied_with_bind(lab)
    web = {"volumes": ["/data", f"{lab.binds}:/w"], "restart": "always"}
    web["command"] = ["sh", "-c", SWAP]
    lab.estate.tenancy.set_desired("r2", lab.bundle(web=web))
    refused_and_kept(lab, a)


def test_a_bind_carried_over_to_the_images_volume_is_refused(
    lab: Lab, registry: Registry, busybox_image: str
) -> None:
    local = f"monky-test/volume-{uuid.uuid4().hex[:8]}:1"
    build_image(local, f"FROM {busybox_image}\nVOLUME /data\n", unique=False)
    image = registry.push(local, "env-e2e-01/volume", "1")
    a = applied_with_bind(lab)
    web = {"volumes": [f"{lab.binds}:/w"], "restart": "always", "command": ["sh", "-c", SWAP]}
    lab.estate.tenancy.set_desired("r2", lab.bundle(web=web, image=image))
    refused_and_kept(lab, a)


def test_an_anonymous_volume_is_still_carried_over(lab: Lab) -> None:
    """What compose carries that holds no host path (an engine-made anonymous volume) is
    carried as before: its data survives a new revision."""
    lab.estate.tenancy.set_desired("r1", lab.bundle(web={"volumes": ["/data"]}))
    assert lab.tick().rc == 0
    web = lab.containers()["web"]
    subprocess.run(("docker", "exec", web, "touch", "/data/kept"), check=True)
    lab.estate.tenancy.set_desired("r2", lab.bundle(web={"volumes": ["/data"], "init": True}))
    run = lab.tick()
    assert (run.rc, run.summary["outcome"]) == (0, "applied"), run.stdout + run.stderr
    again = lab.containers()["web"]
    assert again != web
    check = ("docker", "exec", again, "test", "-e", "/data/kept")
    assert subprocess.run(check, capture_output=True, check=False).returncode == 0


def other_app(busybox: str, root: Path) -> str:
    """Another app's container (no project of the lab's) with ``root`` mounted writable."""
    name = f"other-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        (DOCKER, "run", "-d", "--name", name, "--network", "none",
         "-v", f"{root}:/area", busybox, "sleep", "3600"),
        check=True, capture_output=True,
    )  # fmt: skip
    return name


def test_a_held_path_is_checked_while_the_desired_revision_is_held(
    lab: Lab, busybox_image: str
) -> None:
    """Tenancy asks a revision this box refuses (held: every tick says REVISION_HELD and the
    box runs r1): a writer appearing over r1's held path is still acted on by the next tick,
    which stops the service (POLICY_PATH_MOVED), before it swaps anything."""
    area = lab.binds / "area"
    (area / "x").mkdir(parents=True)
    lab.estate.tenancy.set_desired("r1", lab.bundle(web={"volumes": [f"{area}/x:/x"]}))
    assert lab.tick().rc == 0
    lab.estate.tenancy.set_desired("r2", lab.bundle(web={"privileged": True}))
    refused = lab.tick()
    assert (refused.rc, refused.summary["code"]) == (5, "POLICY_REFUSED"), refused.stdout
    held = lab.tick()
    assert held.summary["code"] == "REVISION_HELD", held.stdout
    other = other_app(busybox_image, area)
    try:
        run = lab.tick()
        assert run.rc == 1, run.stdout + run.stderr
        assert run.summary["code"] == "POLICY_PATH_MOVED", run.stdout
        assert f"container {other} can now write {area}" in run.errors[0]["detail"]
        assert lab.containers() == {}
        again = lab.tick()  # still held, still stopped: not restored while it lasts
        assert (again.rc, again.summary["code"]) == (1, "POLICY_PATH_MOVED"), again.stdout
        assert lab.containers() == {}
    finally:
        subprocess.run((DOCKER, "rm", "-f", other), capture_output=True, check=False)
