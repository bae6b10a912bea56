from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.config import load
from monky_deployd.core.faults import ConfigError


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


# -- update_windows ---------------------------------------------------------------------------


def test_update_windows_load_with_their_zones(tmp_path: Path) -> None:
    cfg = load(
        write(
            tmp_path,
            'env: env-dev-08\nupdate_windows: ["Mon..Fri 02:00 for 3h Europe/Berlin", '
            '"* 23:30 for 1h30m UTC"]\n',
        )
    )
    assert [w.spec.duration_s for w in cfg.windows] == [3 * 3600, 5400]
    assert str(cfg.windows[0].tz) == "Europe/Berlin"
    assert load(write(tmp_path, "env: env-dev-08\n")).windows == ()


def test_each_bad_window_is_one_line(tmp_path: Path) -> None:
    text = (
        "env: env-dev-08\nupdate_windows:\n"
        "  - Mon..Fri 02:00 for 3h Europe/Berlin\n"
        "  - Mon 25:00 for 1h UTC\n"
        "  - Mon 01:00 for 1h Mars/Base\n"
        "  - every night\n"
        "  - 42\n"
    )
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    lines = info.value.message.splitlines()[1:]
    assert lines == [
        "at 'update_windows.1': Value error, 25:00 is not a time of day (00:00 to 23:59)",
        "at 'update_windows.2': Value error, 'Mars/Base' is not a time zone of the tz database "
        "(like Europe/Berlin or UTC; is the tzdata package installed?)",
        "at 'update_windows.3': Value error, 'every night' is not a window: write DAYS HH:MM "
        "for DURATION ZONE, e.g. 'Mon..Fri 02:00 for 3h Europe/Berlin'",
        "at 'update_windows.4': Input should be a valid string",
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_window_text_loads_or_is_one_named_line(text: str) -> None:
    from monky_deployd.config import parse

    try:
        cfg = parse({"env": "env-dev-08", "update_windows": [text]}, "config.yaml")
    except ConfigError as err:
        assert err.message.splitlines()[1].startswith("at 'update_windows.0': ")
        assert len(err.message.splitlines()) == 2
    else:
        assert len(cfg.windows) == 1


KEY_A = "W2P//Jh+GuN0XRZ/8YNWJeqq98wn1V/wAnhutKXEogA="  # a raw Ed25519 public key, base64


def test_trust_defaults_accept_unsigned_and_keys_load(tmp_path: Path) -> None:
    assert load(write(tmp_path, "env: env-dev-08\n")).trust.unsigned_ok  # nobody signs yet
    cfg = load(write(tmp_path, f"env: env-dev-08\ntrust: {{keys: ['{KEY_A}'], threshold: 1}}\n"))
    assert len(cfg.trust.trusted) == 1 and not cfg.trust.unsigned_ok  # a key: signed only


def test_each_bad_trust_setting_is_one_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, "env: env-dev-08\ntrust: {keys: ['abc', '" + KEY_A + "'], treshold: 2}\n"
    )
    with pytest.raises(ConfigError) as info:
        load(path)
    lines = info.value.message.splitlines()
    assert any(ln.startswith("at 'trust.keys.0':") and "base64" in ln for ln in lines)
    assert "at 'trust.treshold': unknown key" in lines
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, f"env: env-dev-08\ntrust: {{keys: ['{KEY_A}'], threshold: 2}}\n"))
    assert "no bundle could ever be applied" in info.value.message
