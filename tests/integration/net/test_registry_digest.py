"""adapters.net.registry against a real htpasswd registry: the manifest digest a pull would
record, asked with a HEAD (no layer fetched), and the registry's refusals named."""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid

import pytest

from monky_deployd.adapters.net.registry import ImageRef, Registry
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.registry_cred import Credential
from monky_deployd_testkit.dockerlab import Registry as RealRegistry

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def pushed(registry: RealRegistry, busybox_image: str) -> str:
    return registry.push(busybox_image, f"monky-test/digest-{uuid.uuid4().hex[:6]}", "v1")


def test_the_digest_is_the_one_a_pull_records_and_no_blob_is_fetched(
    registry: RealRegistry, pushed: str
) -> None:
    cred = Credential(registry.username, registry.password)
    blobs = registry.request_count("/blobs/")
    gets = registry.request_count("/manifests/", ("GET",))
    reg = Registry()
    try:
        digest = reg.digest(pushed, cred, registry.host)
    finally:
        reg.close()
    assert digest.startswith("sha256:") and len(digest) == 71
    assert registry.request_count("/blobs/") == blobs
    assert registry.request_count("/manifests/", ("GET",)) == gets
    assert digest == recorded_digest(registry, pushed)


def recorded_digest(registry: RealRegistry, ref: str) -> str:
    """The digest docker records (RepoDigests) when it pulls ``ref`` with the credential."""
    with tempfile.TemporaryDirectory() as cfg:
        env = dict(os.environ, DOCKER_CONFIG=cfg)
        subprocess.run(
            ("docker", "login", "-u", registry.username, "--password-stdin", registry.host),
            input=registry.password,
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        subprocess.run(("docker", "pull", "-q", ref), capture_output=True, env=env, check=True)
    try:
        out = subprocess.run(
            ("docker", "image", "inspect", "--format", "{{index .RepoDigests 0}}", ref),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    finally:
        subprocess.run(("docker", "image", "rm", ref), capture_output=True, check=False)
    return out.rsplit("@", 1)[-1]


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        ("no-credential", Code.REGISTRY_AUTH, "no basic auth credentials"),
        ("wrong-password", Code.REGISTRY_AUTH, "HTTP 401"),
        ("unknown-tag", Code.IMAGE_NOT_FOUND, "manifest unknown"),
        ("other-host", Code.REGISTRY_AUTH, "no basic auth credentials"),
    ],
)
def test_refusals_are_named(
    registry: RealRegistry, pushed: str, change: str, code: Code, words: str
) -> None:
    cred: Credential | None = Credential(registry.username, registry.password)
    host: str | None = registry.host
    ref = pushed
    if change == "no-credential":
        cred = None
    elif change == "wrong-password":
        cred = Credential(registry.username, "not-the-password")
    elif change == "unknown-tag":
        ref = pushed.rsplit(":", 1)[0] + ":nope"
    else:
        host = "harbor.example.net"  # the credential is for another registry: not sent
    reg = Registry()
    try:
        with pytest.raises(DeployError) as caught:
            reg.digest(ref, cred, host)
    finally:
        reg.close()
    assert caught.value.code is code and words in caught.value.message
    assert "not-the-password" not in str(caught.value) and registry.password not in str(
        caught.value
    )


def test_nothing_listens_is_registry_unreachable() -> None:
    reg = Registry(timeout_s=2, deadline_s=4)
    try:
        with pytest.raises(DeployError) as caught:
            reg.digest("127.0.0.1:1/app:1", None, None)
    finally:
        reg.close()
    assert caught.value.code is Code.REGISTRY_UNREACHABLE


@pytest.mark.parametrize(
    ("image", "want"),
    [
        ("busybox", ImageRef("registry-1.docker.io", "library/busybox", "latest")),
        ("team/app:2", ImageRef("registry-1.docker.io", "team/app", "2")),
        ("docker.io/library/redis:7", ImageRef("registry-1.docker.io", "library/redis", "7")),
        ("127.0.0.1:5000/a/b:1.0", ImageRef("127.0.0.1:5000", "a/b", "1.0")),
        ("localhost/app", ImageRef("localhost", "app", "latest")),
        ("h.example/a@sha256:ab", ImageRef("h.example", "a", "sha256:ab")),
    ],
)
def test_image_references_parse_as_docker_reads_them(image: str, want: ImageRef) -> None:
    assert ImageRef.parse(image) == want
