from __future__ import annotations

from pathlib import Path

import pytest

from monky_deployd.config import load
from monky_deployd.core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return p


def test_contract_example_loads_with_defaults(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            """
env: env-dev-08
transport: ziti
identity: /opt/openziti/etc/identities/env-dev-08.json
tenancy: {host: tenancy.monky.ziti, port: 443}
openbao: {host: openbao.monky.ziti, port: 8200, jwt_mount: jwt-tenancy, role: see_env, kv_mount: kv}
grant_file: /etc/monky-deployd/grant.jwt
state_dir: /var/lib/monky-deployd
""",
        )
    )
    assert cfg.tenancy.port == 443 and cfg.openbao.port == 8200
    assert cfg.state_dir == Path("/var/lib/monky-deployd")


def test_minimal_config_defaults_to_the_443_intercept(tmp_path: Path) -> None:
    cfg = load(write(tmp_path, "env: env-dev-08\n"))
    assert cfg.tenancy.port == 443
    assert cfg.transport == "ziti"
    assert cfg.identity_path == Path("/opt/openziti/etc/identities/env-dev-08.json")


def test_unknown_keys_and_wrong_types_one_line_each(tmp_path: Path) -> None:
    path = write(tmp_path, "env: env-dev-08\ntenancy: {port: https, hots: x}\nstate_dri: /x\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    lines = info.value.message.splitlines()
    assert str(path) in lines[0]
    assert any(ln.startswith("at 'tenancy.port':") for ln in lines)
    assert "at 'tenancy.hots': unknown key" in lines
    assert "at 'state_dri': unknown key" in lines


def test_missing_and_not_yaml_and_not_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "nope.yaml")
    assert info.value.code == "CONFIG_MISSING"
    with pytest.raises(ConfigError, match="not valid YAML at line 2"):
        load(write(tmp_path, "env: a\n  bad: [\n"))
    with pytest.raises(ConfigError, match="must hold a YAML mapping"):
        load(write(tmp_path, "- a\n"))


def test_missing_env_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at 'env': Field required"):
        load(write(tmp_path, "transport: plain\n"))
