"""Image names as the real engine keys them (issue 45's attack: box-wide names).

``core.admission.builds.ref`` is how POLICY_FOREIGN_TAG compares a release's image name with
the names other projects' containers run. Every spelling the engine stores as one tag must give
one text, or a release writes another app's tag in a spelling the comparison misses
(``index.docker.io/team/app:1`` is the engine's ``team/app:1``) and moves it. Checked against
the engine itself: each spelling is tagged for real and its ``ref`` must be the name the engine
lists; and a container made from one spelling is found as a user of another.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from monky_deployd.adapters.box.docker import images
from monky_deployd.config import DockerCfg
from monky_deployd.core.admission import builds
from monky_deployd.core.errors import Code
from monky_deployd_testkit.dockerlab import build_image

pytestmark = pytest.mark.docker


def _cfg() -> DockerCfg:
    return DockerCfg(host=os.environ.get("DOCKER_HOST") or None)


def _docker(*args: str) -> str:
    return subprocess.run(("docker", *args), check=True, capture_output=True, text=True).stdout


def _spellings(team: str, app: str) -> list[str]:
    """Every way of writing Docker Hub's ``team/app`` and ``app`` the reference library
    accepts, with and without a tag, and a registry's own name."""
    found = []
    for tag in ("", ":1"):
        for prefix in ("", "docker.io/", "index.docker.io/"):
            found.append(f"{prefix}{team}/{app}{tag}")
            found.append(f"{prefix}{app}{tag}")
            found.append(f"{prefix}library/{app}{tag}")
        found.append(f"registry-1.docker.io/{team}/{app}{tag}")
        found.append(f"localhost:5999/{team}/{app}{tag}")
    return found


def test_every_spelling_of_a_tag_gives_the_name_the_engine_lists(busybox_image: str) -> None:
    team, app = f"a45team{uuid.uuid4().hex[:6]}", f"a45app{uuid.uuid4().hex[:6]}"
    for spelling in _spellings(team, app):
        _docker("tag", busybox_image, spelling)
        try:
            listed = _docker("image", "inspect", "--format", "{{json .RepoTags}}", spelling)
            named = {builds.ref(t) for t in json.loads(listed)}
            assert builds.ref(spelling) in named, (spelling, builds.ref(spelling), listed)
        finally:
            subprocess.run(("docker", "rmi", spelling), capture_output=True, check=False)


def test_another_apps_tag_written_through_an_alias_is_refused(busybox_image: str) -> None:
    """Another app's container runs ``team/app:1``; a release that builds
    ``index.docker.io/team/app:1`` (the same tag to the engine) is refused."""
    team = f"a45team{uuid.uuid4().hex[:6]}"
    theirs, other = f"{team}/app:1", f"monky-other-{uuid.uuid4().hex[:8]}"
    _docker("tag", busybox_image, theirs)
    _docker("create", "--name", other, "--label", f"com.docker.compose.project={other}",
            theirs, "true")  # fmt: skip
    try:
        users = images.users(_cfg())
        for written in (f"index.docker.io/{team}/app:1", f"docker.io/{team}/app:1", theirs):
            model = {
                "name": "mine",
                "services": {"web": {"image": written, "build": {"context": "/x"}}},
            }
            found = builds.foreign_tags(model, "mine", users)
            assert [(v.key, v.code) for v in found] == [("image", Code.POLICY_FOREIGN_TAG)], written
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)
        subprocess.run(("docker", "rmi", theirs), capture_output=True, check=False)


def test_a_pull_over_another_apps_built_image_is_refused_on_either_store(
    busybox_image: str,
) -> None:
    """Another app's container runs an image it built on the box; a release that pulls that
    name would replace it (its next recreate runs whatever the registry holds there). The
    classic store gives a built image no RepoDigest; the containerd image store gives it one
    (its own ID), so a RepoDigest is no evidence there: either way the pull is refused."""
    other = f"monky-other-{uuid.uuid4().hex[:8]}"
    theirs = f"127.0.0.1:5999/{other}/app:1"
    build_image(theirs, f"FROM {busybox_image}\n")
    _docker("create", "--name", other, "--label", f"com.docker.compose.project={other}",
            theirs, "true")  # fmt: skip
    try:
        users = images.users(_cfg())
        assert users[builds.ref(theirs)] == builds.User(frozenset({other}), False)
        model = {"name": "mine", "services": {"web": {"image": theirs}}}
        found = builds.foreign_tags(model, "mine", users)
        assert [(v.key, v.code) for v in found] == [("image", Code.POLICY_FOREIGN_TAG)]
    finally:
        subprocess.run(("docker", "rm", "-f", other), capture_output=True, check=False)
        subprocess.run(("docker", "rmi", theirs), capture_output=True, check=False)
