"""The apply's pure checks: value coercion, SECRET_NOT_STRING, ENV_INCOMPLETE's names, the
registry credential, and what the box steps receive."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import prepare
from monky_deployd.core.admission.bundle import Bundle
from monky_deployd.core.faults import DeployError, EnvError

APP = {"name": "DB_PASSWORD", "path": "envs/env-dev-08/app", "key": "db_password"}
REG = {"name": "registry", "path": "envs/env-dev-08/reg", "key": "robot", "use": "registry-auth"}


def raw(template: str = "DB_PASSWORD=${DB_PASSWORD}\n", *entries: dict[str, str]) -> dict[str, Any]:
    manifest = list(entries) or [APP, REG]
    out: dict[str, Any] = {
        "project": "shop",
        "compose": "services:\n  web:\n    image: reg.example.net/web:1\n",
        "env_template": template,
        "manifest": manifest,
    }
    if any(e.get("use") for e in manifest):
        out["registry_host"] = "reg.example.net"
    return out


def bundle(*entries: dict[str, str], template: str = "DB_PASSWORD=${DB_PASSWORD}\n") -> Bundle:
    return prepare.check_bundle("r1", raw(template, *entries))


def reads(
    b: Bundle, values: dict[str, object], absent: dict[str, str] | None = None
) -> prepare.SecretReads:
    found = {e: values[e.name] for e in b.manifest if e.name in values}
    return prepare.SecretReads(found, absent or {})


def test_two_registry_entries_are_refused_at_the_bundle_check() -> None:
    second = {**REG, "name": "registry2"}
    with pytest.raises(DeployError):
        prepare.check_bundle("r1", raw("A=1\n", APP, REG, second))


def test_strings_pass_as_they_are_and_the_registry_value_stays_apart() -> None:
    b = bundle()
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": "s3cr3t", "registry": "u:p"}))
    assert dict(env.values) == {"DB_PASSWORD": "s3cr3t"}
    assert env.registry_value == "u:p"
    assert set(env.secrets) == {"s3cr3t", "u:p"}


@given(st.integers() | st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_become_their_decimal_text(number: float) -> None:
    b = bundle(APP)
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": number}))
    assert env.values["DB_PASSWORD"] == str(number)


@pytest.mark.parametrize("value", [True, False, None, ["a"], {"k": "v"}])
def test_anything_else_is_secret_not_string_naming_path_key_and_variable(value: object) -> None:
    b = bundle(APP)
    with pytest.raises(EnvError) as caught:
        prepare.env_values(b, reads(b, {"DB_PASSWORD": value}))
    err = caught.value
    assert err.code == "SECRET_NOT_STRING" and err.outcome == "refused"
    assert "envs/env-dev-08/app#db_password" in err.message and "DB_PASSWORD" in err.message
    assert repr(value) not in err.message or value in (True, False, None)


def test_incomplete_env_names_what_openbao_lacks() -> None:
    b = bundle(APP, template="DB_PASSWORD=${DB_PASSWORD}\nAPI=${API}\n")
    env = prepare.env_values(b, reads(b, {}, {"DB_PASSWORD": "envs/env-dev-08/app#db_password"}))
    with pytest.raises(EnvError) as caught:
        prepare.render_env(b.env_template, env)
    err = caught.value
    assert err.code == "ENV_INCOMPLETE"
    assert "not found in OpenBao: DB_PASSWORD (envs/env-dev-08/app#db_password)" in err.message
    assert "API" in err.message


def test_an_incomplete_env_with_nothing_absent_keeps_the_renderers_words() -> None:
    b = bundle(APP, template="DB_PASSWORD=${DB_PASSWORD}\nAPI=${API}\n")
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": "x"}))
    with pytest.raises(EnvError) as caught:
        prepare.render_env(b.env_template, env)
    assert "not found in OpenBao" not in caught.value.message


def test_render_is_the_renderers_bytes() -> None:
    b = bundle(APP)
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": "a$b"}))
    assert prepare.render_env(b.env_template, env) == 'DB_PASSWORD="a$$b"\n'


def test_no_registry_entry_means_no_credential() -> None:
    b = bundle(APP)
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": "x"}))
    assert prepare.credential(b, env) is None
    assert prepare.secrets_of(env, None) == ("x",)


def test_the_credential_and_its_password_join_the_secrets() -> None:
    b = bundle()
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": "x", "registry": "robot:pa:ss"}))
    cred = prepare.credential(b, env)
    assert cred is not None and (cred.username, cred.password) == ("robot", "pa:ss")
    assert set(prepare.secrets_of(env, cred)) == {"x", "robot:pa:ss", "pa:ss", cred.basic_auth()}
    ready = prepare.ready(b, "DB_PASSWORD=x\n", cred)
    assert (ready.project, ready.registry_host, ready.services) == (
        "shop",
        "reg.example.net",
        ("web",),
    )


def test_an_unparsable_credential_is_refused() -> None:
    b = bundle()
    env = prepare.env_values(b, reads(b, {"DB_PASSWORD": "x", "registry": "no-colon"}))
    with pytest.raises(DeployError) as caught:
        prepare.credential(b, env)
    assert caught.value.outcome == "refused"
    assert "no-colon" not in str(caught.value)
