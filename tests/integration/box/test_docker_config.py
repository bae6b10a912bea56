"""adapters.box.docker.docker_config: <state_dir>/docker/config.json on disk (real files): auths
only, modes 0700/0600, atomic and idempotent rewrites, DOCKER_CONFIG/DOCKER_HOST only.

The pure parsing and the config bytes are tests/unit/core/render/test_registry_cred.py.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

from monky_deployd.adapters.box.docker import docker_config
from monky_deployd.core.render import registry_cred as ra

HOST = "harbor.example.net"
SECRET = "s3cr:et:pw"  # contains ':' on purpose


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_auths_only_with_modes(tmp_path: Path) -> None:
    docker_dir = tmp_path / "state" / "docker"
    cred = ra.Credential("robot$env", SECRET)
    assert docker_config.write_docker_config(docker_dir, "127.0.0.1:5000", cred) is True
    path = docker_dir / "config.json"
    assert mode(docker_dir) == 0o700
    assert mode(path) == 0o600
    assert path.stat().st_uid == os.geteuid()
    data = json.loads(path.read_text())
    assert set(data) == {"auths"}, "no credsStore / credHelpers / anything else"
    assert set(data["auths"]) == {"127.0.0.1:5000"}
    assert set(data["auths"]["127.0.0.1:5000"]) == {"auth"}
    decoded = base64.b64decode(data["auths"]["127.0.0.1:5000"]["auth"]).decode()
    assert decoded == f"robot$env:{SECRET}"


def test_existing_loose_directory_is_tightened(tmp_path: Path) -> None:
    docker_dir = tmp_path / "docker"
    docker_dir.mkdir(mode=0o755)
    os.chmod(docker_dir, 0o755)
    docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET))
    assert mode(docker_dir) == 0o700


def test_unchanged_credential_is_not_rewritten(tmp_path: Path) -> None:
    docker_dir = tmp_path / "docker"
    cred = ra.Credential("u", SECRET)
    assert docker_config.write_docker_config(docker_dir, HOST, cred) is True
    path = docker_dir / "config.json"
    before = path.stat()
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns - 10**9))  # detect any rewrite
    before = path.stat()
    assert docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET)) is False
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert sorted(p.name for p in docker_dir.iterdir()) == ["config.json"], "no temp files left"


def test_changed_credential_is_rewritten_atomically(tmp_path: Path) -> None:
    docker_dir = tmp_path / "docker"
    docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET))
    ino = (docker_dir / "config.json").stat().st_ino
    assert (
        docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET + "2"))
        is True
    )
    path = docker_dir / "config.json"
    assert path.stat().st_ino != ino, "atomic_write replaces the file (new inode)"
    assert mode(path) == 0o600
    auth = json.loads(path.read_text())["auths"][HOST]["auth"]
    assert base64.b64decode(auth).decode() == f"u:{SECRET}2"


def test_same_bytes_but_loose_mode_is_rewritten(tmp_path: Path) -> None:
    docker_dir = tmp_path / "docker"
    docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET))
    os.chmod(docker_dir / "config.json", 0o644)
    assert docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET)) is True
    assert mode(docker_dir / "config.json") == 0o600


def test_no_credential_writes_empty_auths(tmp_path: Path) -> None:
    docker_dir = tmp_path / "docker"
    docker_config.write_docker_config(docker_dir, HOST, ra.Credential("u", SECRET))
    assert docker_config.write_docker_config(docker_dir, None, None) is True
    assert json.loads((docker_dir / "config.json").read_text()) == {"auths": {}}
    assert SECRET not in (docker_dir / "config.json").read_text()
    assert docker_config.write_docker_config(docker_dir, None, None) is False


def test_docker_hub_uses_the_cli_key(tmp_path: Path) -> None:
    docker_config.write_docker_config(tmp_path / "d", "docker.io", ra.Credential("u", "p"))
    data = json.loads((tmp_path / "d" / "config.json").read_text())
    assert list(data["auths"]) == ["https://index.docker.io/v1/"]


def test_docker_env_is_only_docker_config_and_host(tmp_path: Path) -> None:
    assert docker_config.docker_env(tmp_path) == {"DOCKER_CONFIG": str(tmp_path)}
    assert docker_config.docker_env(tmp_path, "unix:///run/d.sock") == {
        "DOCKER_CONFIG": str(tmp_path),
        "DOCKER_HOST": "unix:///run/d.sock",
    }
