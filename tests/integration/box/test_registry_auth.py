"""registry_auth: both credential shapes, every refusal, modes, idempotent rewrite (real files)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from monky_deployd.adapters.box import docker_config
from monky_deployd.core import registry_cred as ra
from monky_deployd.core.errors import RegistryAuthError

HOST = "harbor.example.net"
SECRET = "s3cr:et:pw"  # contains ':' on purpose


def entry(name: str = "registry", use: str | None = "registry-auth") -> dict[str, object]:
    e: dict[str, object] = {"name": name, "path": "envs/env-dev-08/registry", "key": "robot"}
    if use is not None:
        e["use"] = use
    return e


# --- select_entry -------------------------------------------------------------------------


def test_select_entry_finds_the_single_registry_auth_entry() -> None:
    reg = entry()
    manifest = [entry("DB_PASSWORD", None), reg]
    assert ra.select_entry(manifest) is reg


def test_select_entry_none_without_one() -> None:
    assert ra.select_entry([entry("DB_PASSWORD", None)]) is None
    assert ra.select_entry([]) is None


def test_two_registry_auth_entries_are_refused() -> None:
    with pytest.raises(RegistryAuthError) as err:
        ra.select_entry([entry("a"), entry("DB", None), entry("b")])
    assert err.value.code == "REGISTRY_AUTH_DUPLICATE"
    assert "'a'" in err.value.message and "'b'" in err.value.message
    assert err.value.outcome == "refused"


# --- parse_credential: the shapes ---------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        json.dumps({"username": "robot$env", "password": SECRET}),
        '  {"username": "robot$env", "password": "s3cr:et:pw"}\n',
        {"username": "robot$env", "password": SECRET},
        f"robot$env:{SECRET}",
    ],
    ids=["json-text", "json-text-padded", "json-object", "colon-string"],
)
def test_both_shapes_parse(value: object) -> None:
    cred = ra.parse_credential(value, HOST)
    assert cred == ra.Credential("robot$env", SECRET)


def test_colon_shape_splits_at_first_colon() -> None:
    cred = ra.parse_credential("u:a:b::c", "127.0.0.1:5000")
    assert (cred.username, cred.password) == ("u", "a:b::c")


def test_repr_hides_the_password() -> None:
    cred = ra.Credential("u", SECRET)
    assert SECRET not in repr(cred) and SECRET not in str(cred)


@pytest.mark.parametrize(
    "host",
    ["harbor.example.net", "harbor", "10.0.0.5:5000", "127.0.0.1:1", "[::1]:5000", "a-b.c:65535"],
)
def test_valid_hosts(host: str) -> None:
    assert ra.parse_credential("u:p", host).username == "u"


# --- parse_credential: refusals -----------------------------------------------------------


def refusal(value: object, host: str | None = HOST) -> RegistryAuthError:
    with pytest.raises(RegistryAuthError) as err:
        ra.parse_credential(value, host)
    text = str(err.value) + err.value.detail + err.value.hint
    assert SECRET not in text, "the password leaked into the refusal"
    if isinstance(value, str):
        assert value not in text or len(value) < 3, "the raw value leaked into the refusal"
    assert err.value.outcome == "refused"
    return err.value


@pytest.mark.parametrize("host", [None, "", "   "])
def test_missing_registry_host(host: str | None) -> None:
    assert refusal(f"u:{SECRET}", host).code == "REGISTRY_HOST_MISSING"


@pytest.mark.parametrize(
    "host",
    [
        "https://harbor.example.net",
        "harbor.example.net/project",
        "user@harbor",
        "harbor:0",
        "harbor:99999",
        "harbor:port",
        "-harbor",
        "har bor",
        "harbor.",
    ],
)
def test_invalid_registry_host(host: str) -> None:
    err = refusal(f"u:{SECRET}", host)
    assert err.code == "REGISTRY_HOST_INVALID"
    assert "host[:port]" in err.message


@pytest.mark.parametrize(
    "value",
    [
        "no-colon-at-all" + SECRET.replace(":", ""),
        '{"username": "u", "password": "' + SECRET,  # truncated JSON
        json.dumps({"user": "u", "password": SECRET}),
        json.dumps({"username": "u"}),
        json.dumps({"username": "u", "password": 12345678}),
        {"username": ["u"], "password": SECRET},
        12345,
        None,
        ["u", SECRET],
        f"u:{SECRET}\n",  # a trailing newline: refused, never silently trimmed
        json.dumps({"username": "a:b", "password": SECRET}),
    ],
    ids=[
        "no-colon",
        "bad-json",
        "wrong-key",
        "no-password-key",
        "number-password",
        "list-username",
        "int",
        "none",
        "list",
        "trailing-newline",
        "colon-in-username",
    ],
)
def test_malformed(value: object) -> None:
    assert refusal(value).code == "REGISTRY_CREDENTIAL_MALFORMED"


@pytest.mark.parametrize(
    "value",
    [
        f":{SECRET}",
        "robot:",
        ":",
        json.dumps({"username": "", "password": SECRET}),
        {"username": "robot", "password": ""},
    ],
)
def test_empty(value: object) -> None:
    assert refusal(value).code == "REGISTRY_CREDENTIAL_EMPTY"


# --- write_docker_config ------------------------------------------------------------------


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
