"""Real pulls through `docker compose pull` from a real htpasswd registry (R4, R5, R6).

Every pull runs with the agent's child environment: ``runner.base_env`` plus ``DOCKER_CONFIG``
pointing at a directory written by ``docker_config.write_docker_config``. The pulled image is
removed before and after each pull so every pull really reaches the registry (the registry's
access log proves it). Docker down = these tests FAIL (the fixtures raise), they never skip.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker import docker_config
from monky_deployd.core.render import pullerrors, registry_cred
from monky_deployd_testkit.dockerlab import Registry, image_exists, remove_image

pytestmark = pytest.mark.docker

MANIFEST_READS = ("GET", "HEAD")


@pytest.fixture(scope="module")
def pushed(registry: Registry, busybox_image: str) -> str:
    """The full ref of a real image in the test registry."""
    return registry.push(busybox_image, f"monky-test/app-{uuid.uuid4().hex[:6]}", "v1")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path / "project"


@dataclass(frozen=True)
class Pull:
    result: runner.Result
    pulled: bool  # the image existed locally right after the pull

    @property
    def returncode(self) -> int:
        return self.result.returncode

    @property
    def stderr(self) -> str:
        return self.result.stderr


def compose_pull(
    project: Path, image: str, docker_dir: Path | None, extra_env: dict[str, str] | None = None
) -> Pull:
    """`docker compose -p <unique> pull` for a one-service project using ``image``."""
    project.mkdir(parents=True, exist_ok=True)
    (project / "compose.yaml").write_text(f"services:\n  app:\n    image: {image}\n")
    env = runner.base_env(docker_config.docker_env(docker_dir) if docker_dir else None)
    env.update(extra_env or {})
    remove_image(image)
    try:
        result = runner.run(
            ("docker", "compose", "-p", f"monky-t-{uuid.uuid4().hex[:10]}", "pull"),
            env=env,
            cwd=str(project),
            timeout=180,
            check=False,
        )
        return Pull(result, image_exists(image))
    finally:
        remove_image(image)


def write_dir(base: Path, registry: Registry, value: object | None) -> Path:
    docker_dir = base / "state" / "docker"
    cred = registry_cred.parse_credential(value, registry.host) if value is not None else None
    docker_config.write_docker_config(docker_dir, registry.host, cred)
    return docker_dir


@pytest.mark.parametrize("shape", ["json", "colon"])
def test_pull_succeeds_with_either_credential_shape(
    registry: Registry, pushed: str, project: Path, tmp_path: Path, shape: str
) -> None:
    value = (
        json.dumps({"username": registry.username, "password": registry.password})
        if shape == "json"
        else f"{registry.username}:{registry.password}"
    )
    assert ":" in registry.password, "the lab password holds ':' to exercise the first-colon split"
    docker_dir = write_dir(tmp_path, registry, value)
    written = (docker_dir / "config.json").read_bytes()
    reads = registry.request_count("/manifests/", MANIFEST_READS)
    result = compose_pull(project, pushed, docker_dir)
    assert result.returncode == 0, result.stderr
    assert result.pulled
    assert registry.request_count("/manifests/", MANIFEST_READS) > reads
    # docker/compose left the agent's config alone: nothing added, nothing rewritten.
    assert sorted(p.name for p in docker_dir.iterdir()) == ["config.json"]
    assert (docker_dir / "config.json").read_bytes() == written


def test_wrong_password_gives_registry_auth_with_the_registrys_words(
    registry: Registry, pushed: str, project: Path, tmp_path: Path
) -> None:
    docker_dir = write_dir(tmp_path, registry, f"{registry.username}:wrong-{uuid.uuid4().hex}")
    result = compose_pull(project, pushed, docker_dir)
    assert result.returncode != 0
    code, line = pullerrors.classify(result.stderr + result.result.stdout)
    assert code == "REGISTRY_AUTH", line
    assert "unauthorized" in line
    assert line in result.stderr, "the line is the registry's verbatim words"
    err = pullerrors.pull_error(result.stderr, returncode=result.returncode)
    assert "unauthorized" in str(err).splitlines()[0]


def test_unknown_tag_gives_image_not_found(
    registry: Registry, pushed: str, project: Path, tmp_path: Path
) -> None:
    docker_dir = write_dir(tmp_path, registry, f"{registry.username}:{registry.password}")
    result = compose_pull(project, pushed.rsplit(":", 1)[0] + ":no-such-tag", docker_dir)
    assert result.returncode != 0
    code, line = pullerrors.classify(result.stderr)
    assert code == "IMAGE_NOT_FOUND", line
    assert "manifest unknown" in line


@pytest.fixture
def root_docker_config(registry: Registry) -> Iterator[Path]:
    """Root's real ~/.docker/config.json holding a VALID login for the test registry; restored."""
    home = Path(pwd.getpwuid(0).pw_dir)
    docker_home = home / ".docker"
    path = docker_home / "config.json"
    existed_dir = docker_home.exists()
    backup = path.read_bytes() if path.exists() else None
    docker_home.mkdir(mode=0o700, exist_ok=True)
    try:
        cred = registry_cred.Credential(registry.username, registry.password)
        current = json.loads(backup) if backup else {}
        current.setdefault("auths", {})[registry.host] = {"auth": cred.basic_auth()}
        path.write_text(json.dumps(current))
        os.chmod(path, 0o600)
        yield path
    finally:
        if backup is not None:
            path.write_bytes(backup)
        else:
            path.unlink(missing_ok=True)
            if not existed_dir:
                shutil.rmtree(docker_home, ignore_errors=True)


def test_no_fallback_to_home_or_roots_login(
    registry: Registry, pushed: str, tmp_path: Path, root_docker_config: Path
) -> None:
    # A human's $HOME with a valid login for the test registry.
    human_home = tmp_path / "home" / "operator"
    (human_home / ".docker").mkdir(parents=True)
    cred = registry_cred.Credential(registry.username, registry.password)
    (human_home / ".docker" / "config.json").write_text(
        json.dumps({"auths": {registry.host: {"auth": cred.basic_auth()}}})
    )
    # Controls: both planted logins really work when docker is allowed to find them.
    via_home = compose_pull(tmp_path / "p1", pushed, None, {"HOME": str(human_home)})
    assert via_home.returncode == 0, via_home.stderr
    via_root = compose_pull(
        tmp_path / "p2", pushed, None, {"HOME": str(root_docker_config.parent.parent)}
    )
    assert via_root.returncode == 0, via_root.stderr

    # The agent: a bundle without a registry-auth entry -> {"auths": {}} and DOCKER_CONFIG set.
    docker_dir = write_dir(tmp_path, registry, None)
    assert json.loads((docker_dir / "config.json").read_text()) == {"auths": {}}
    asked = registry.request_count("/v2/")
    for home in (str(human_home), str(root_docker_config.parent.parent)):
        result = compose_pull(tmp_path / "p3", pushed, docker_dir, {"HOME": home})
        assert result.returncode != 0, f"the pull fell back to a login under {home}"
        assert not result.pulled
        code, line = pullerrors.classify(result.stderr)
        assert (code, "no basic auth credentials" in line) == ("REGISTRY_AUTH", True), line
    # The daemon asked the registry (GET /v2/ -> 401 with a basic challenge) and had nothing to
    # answer it with: the refusal is the registry's, not a local short-cut.
    assert registry.request_count("/v2/") > asked


def test_child_env_is_minimal(tmp_path: Path) -> None:
    env = runner.base_env(docker_config.docker_env(tmp_path))
    assert set(env) == {"PATH", "LANG", "DOCKER_CONFIG"}
