"""core.render.registry_cred, pure: the credential's shapes, every refusal word for word, config
bytes.

The file written on disk (modes, atomic rewrite, DOCKER_CONFIG) is
tests/integration/box/test_docker_config.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.faults import DeployError
from monky_deployd.core.render import registry_cred as rc

HOST = "harbor.example.net"
SECRET = "s3cr:et:pw"
HOST_HINT = (
    "the bundle's registry_host in tenancy: a bare `host` or `host:port` such as "
    "harbor.example.net or 10.0.0.5:5000 (no scheme, path or user)"
)
SHAPE_HINT = (
    'the registry robot\'s KV value in OpenBao: {"username": ..., "password": ...} '
    "or username:password"
)
NEITHER = 'the registry-auth entry is neither JSON {"username", "password"} nor username:password'


def said(call: Callable[[], object]) -> tuple[str, str, str]:
    """(code, message, hint) of the refusal ``call()`` raises; never the secret, always refused."""
    with pytest.raises(DeployError) as info:
        call()
    err = info.value
    assert err.outcome == "refused"
    assert SECRET not in " ".join((str(err), err.message, err.hint, err.detail, repr(err.args)))
    return err.code, err.message, err.hint


# -- select_entry ---------------------------------------------------------------------------


def test_duplicate_registry_entries_are_named_in_manifest_order() -> None:
    manifest: list[dict[str, object]] = [
        {"name": "b", "use": "registry-auth"},
        {"name": "DB", "path": "p", "key": "k"},
        {"use": "registry-auth"},
        {"name": "a", "use": "registry-auth"},
    ]
    assert said(lambda: rc.select_entry(manifest)) == (
        "REGISTRY_AUTH_DUPLICATE",
        "the bundle's manifest has 3 entries marked use: registry-auth ('b', '?', 'a'); "
        "exactly one registry credential is allowed",
        "the environment's manifest in tenancy: keep one registry-auth entry",
    )


def test_select_entry_returns_the_one_entry_or_none() -> None:
    reg: dict[str, object] = {"name": "r", "use": "registry-auth"}
    assert rc.select_entry([{"name": "A"}, reg]) is reg
    assert rc.select_entry([{"name": "A"}, {"name": "r", "use": "other"}]) is None
    assert rc.select_entry([]) is None


# -- check_registry_host ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "harbor",
        "h",
        "harbor.example.net",
        "HARBOR.Example.NET",
        "10.0.0.5:5000",
        "127.0.0.1:1",
        "a-b.c:65535",
        "[::1]:5000",
        "[fe80::1]",
        "a" * 63 + ".net",
        "x.y:00080",
    ],
)
def test_bare_hosts_are_accepted_as_they_are(host: str) -> None:
    assert rc.check_registry_host(host) == host


@pytest.mark.parametrize("host", [None, "", " ", "\t\n"])
def test_no_host_is_missing(host: str | None) -> None:
    assert said(lambda: rc.check_registry_host(host)) == (
        "REGISTRY_HOST_MISSING",
        "the bundle has a registry-auth entry but no registry_host, so the agent cannot tell "
        "which registry the credential is for",
        HOST_HINT,
    )


def test_the_source_is_named() -> None:
    _, message, _ = said(lambda: rc.check_registry_host(None, "the stored bundle"))
    assert message.startswith("the stored bundle has a registry-auth entry but no registry_host")
    _, message, _ = said(lambda: rc.check_registry_host("a/b", "the stored bundle"))
    assert message == "the stored bundle's registry_host 'a/b' is not host[:port]"


@pytest.mark.parametrize(("host", "kind"), [(5, "int"), (["h"], "list"), (b"h", "bytes")])
def test_a_host_that_is_not_text_is_invalid(host: object, kind: str) -> None:
    assert said(lambda: rc.check_registry_host(host)) == (  # type: ignore[arg-type]
        "REGISTRY_HOST_INVALID",
        f"the bundle's registry_host is a {kind}, not a host name",
        HOST_HINT,
    )


@pytest.mark.parametrize(
    "host",
    [
        "https://harbor.example.net",
        "harbor.example.net/project",
        "user@harbor",
        "harbor:0",
        "harbor:65536",
        "harbor:123456",
        "harbor:",
        "harbor:port",
        "-harbor",
        "harbor-",
        "har bor",
        "harbor.",
        ".harbor",
        "a..b",
        "a" * 64 + ".net",
        "harbor.example.net\n",  # Python's `$` also matches before a final newline
        " harbor",
        "[::1",
        "[]",
    ],
)
def test_anything_but_host_port_is_invalid(host: str) -> None:
    assert said(lambda: rc.check_registry_host(host)) == (
        "REGISTRY_HOST_INVALID",
        f"the bundle's registry_host {host!r} is not host[:port]",
        HOST_HINT,
    )


def test_a_long_invalid_host_is_shown_cut_to_80_characters() -> None:
    at_80 = "h" * 79 + "/"
    assert said(lambda: rc.check_registry_host(at_80))[1] == (
        f"the bundle's registry_host {at_80!r} is not host[:port]"
    )
    at_81 = "h" * 80 + "/"
    assert said(lambda: rc.check_registry_host(at_81))[1] == (
        f"the bundle's registry_host {'h' * 77 + '...'!r} is not host[:port]"
    )


# -- parse_credential -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        json.dumps({"username": "robot$env", "password": SECRET}),
        ' \n {"username": "robot$env", "password": "s3cr:et:pw"}\n',
        {"username": "robot$env", "password": SECRET},
        {"username": "robot$env", "password": SECRET, "extra": 1},
        f"robot$env:{SECRET}",
    ],
)
def test_both_shapes_give_the_same_credential(value: object) -> None:
    assert rc.parse_credential(value, HOST) == rc.Credential("robot$env", SECRET)


def test_the_host_is_checked_before_the_value() -> None:
    assert said(lambda: rc.parse_credential(5, None))[0] == "REGISTRY_HOST_MISSING"
    assert said(lambda: rc.parse_credential(5, "a/b"))[0] == "REGISTRY_HOST_INVALID"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("{x", "it starts with '{' but is not valid JSON"),
        ("  {" + SECRET, "it starts with '{' but is not valid JSON"),
        (json.dumps({"password": SECRET}), "the JSON object has no 'username' key"),
        (json.dumps({"username": "u"}), "the JSON object has no 'password' key"),
        ({"username": None, "password": SECRET}, "the JSON object has no 'username' key"),
        (
            json.dumps({"username": 1, "password": SECRET}),
            "username and password must be JSON strings",
        ),
        ({"username": "u", "password": 7}, "username and password must be JSON strings"),
        ("no-colon-" + SECRET.replace(":", ""), "a string without ':'"),
        (12345, "a JSON int"),
        (None, "a JSON NoneType"),
        (["u", SECRET], "a JSON list"),
    ],
)
def test_values_of_neither_shape_say_why(value: object, why: str) -> None:
    assert said(lambda: rc.parse_credential(value, HOST)) == (
        "REGISTRY_CREDENTIAL_MALFORMED",
        f"{NEITHER} ({why})",
        SHAPE_HINT,
    )


def test_the_source_names_the_entry_in_every_refusal() -> None:
    source = "the registry-auth entry 'robot'"
    assert said(lambda: rc.parse_credential("nocolon", HOST, source=source))[1].startswith(
        source + " is neither JSON"
    )
    assert said(lambda: rc.parse_credential(":" + SECRET, HOST, source=source))[1] == (
        source + " has an empty username"
    )
    assert said(lambda: rc.parse_credential("u\t:" + SECRET, HOST, source=source))[1] == (
        source + " has a control character in its username (a trailing newline?)"
    )
    assert said(
        lambda: rc.parse_credential({"username": "a:b", "password": SECRET}, HOST, source=source)
    )[1] == (source + " has a ':' in its username, which basic auth cannot carry")


@pytest.mark.parametrize(
    ("value", "missing"),
    [
        (":" + SECRET, "username"),
        ("robot:", "password"),
        (":", "username"),
        ({"username": "", "password": SECRET}, "username"),
        ({"username": "robot", "password": ""}, "password"),
    ],
)
def test_an_empty_half_is_named(value: object, missing: str) -> None:
    assert said(lambda: rc.parse_credential(value, HOST)) == (
        "REGISTRY_CREDENTIAL_EMPTY",
        f"the registry-auth entry has an empty {missing}",
        "the registry robot's KV value in OpenBao: both username and password are set",
    )


@pytest.mark.parametrize(
    ("value", "what"),
    [
        (f"robot\n:{SECRET}", "username"),
        (f"robot:{SECRET}\n", "password"),
        (f"robot:{SECRET}\x00", "password"),
        (f"robot:{SECRET}\x1f", "password"),
        (f"robot:{SECRET}\x7f", "password"),
        ({"username": "r\x01", "password": SECRET}, "username"),
    ],
)
def test_control_characters_are_refused_never_trimmed(value: object, what: str) -> None:
    assert said(lambda: rc.parse_credential(value, HOST)) == (
        "REGISTRY_CREDENTIAL_MALFORMED",
        f"the registry-auth entry has a control character in its {what} (a trailing newline?)",
        "the registry robot's KV value in OpenBao: store it without newlines",
    )


def test_a_colon_in_a_json_username_is_refused() -> None:
    value = {"username": "robot:x", "password": SECRET}
    assert said(lambda: rc.parse_credential(value, HOST)) == (
        "REGISTRY_CREDENTIAL_MALFORMED",
        "the registry-auth entry has a ':' in its username, which basic auth cannot carry",
        "the registry robot's KV value in OpenBao",
    )


@pytest.mark.parametrize("text", ["~", " ", "é", "\x80", "ü€"])
def test_printable_and_unicode_characters_pass(text: str) -> None:
    cred = rc.parse_credential({"username": "u" + text, "password": text + SECRET}, HOST)
    assert cred == rc.Credential("u" + text, text + SECRET)


_SAFE = st.characters(min_codepoint=0x20, max_codepoint=0x2FF, exclude_characters="\x7f")


@given(st.text(_SAFE.filter(lambda c: c != ":"), min_size=1), st.text(_SAFE, min_size=1))
def test_the_colon_shape_splits_at_the_first_colon(user: str, password: str) -> None:
    if user.lstrip().startswith("{"):
        user = "u" + user
    cred = rc.parse_credential(f"{user}:{password}", HOST)
    assert (cred.username, cred.password) == (user, password)
    decoded = base64.b64decode(cred.basic_auth(), validate=True).decode()
    assert decoded == f"{user}:{password}"


def test_basic_auth_is_base64_of_user_colon_password() -> None:
    assert rc.Credential("robot$env", "pässw:rd").basic_auth() == (
        base64.b64encode("robot$env:pässw:rd".encode()).decode("ascii")
    )
    assert rc.Credential("u", "p").basic_auth() == "dTpw"


def test_repr_hides_the_password() -> None:
    assert repr(rc.Credential("robot", SECRET)) == "Credential(username='robot')"


# -- render_docker_config ---------------------------------------------------------------------


def test_config_bytes_hold_auths_only() -> None:
    assert rc.render_docker_config(HOST, rc.Credential("u", "p")) == (
        b'{\n  "auths": {\n    "harbor.example.net": {\n      "auth": "dTpw"\n    }\n  }\n}\n'
    )


def test_without_a_credential_the_config_is_anonymous() -> None:
    assert rc.render_docker_config(None, None) == b'{\n  "auths": {}\n}\n'
    assert rc.render_docker_config("not a host!", None) == b'{\n  "auths": {}\n}\n'


@pytest.mark.parametrize(
    "host", ["docker.io", "index.docker.io", "registry-1.docker.io", "Docker.IO"]
)
def test_docker_hub_names_use_the_clis_key(host: str) -> None:
    data = json.loads(rc.render_docker_config(host, rc.Credential("u", "p")))
    assert data == {"auths": {"https://index.docker.io/v1/": {"auth": "dTpw"}}}
    assert rc.config_key(host) == "https://index.docker.io/v1/"


@pytest.mark.parametrize("host", ["docker.io.example.net", "hub.docker.com", "127.0.0.1:5000"])
def test_other_hosts_are_their_own_key(host: str) -> None:
    assert rc.config_key(host) == host


def test_a_credential_needs_a_valid_host_to_be_rendered() -> None:
    assert said(lambda: rc.render_docker_config(None, rc.Credential("u", SECRET)))[0] == (
        "REGISTRY_HOST_MISSING"
    )
    assert said(lambda: rc.render_docker_config("a/b", rc.Credential("u", SECRET)))[0] == (
        "REGISTRY_HOST_INVALID"
    )


# -- cases carried over from the old tests/integration/box/test_registry_auth.py ----------------
# (its other pure cases are covered above, word for word)


def refusal(value: object, host: str | None = HOST) -> DeployError:
    with pytest.raises(DeployError) as err:
        rc.parse_credential(value, host)
    text = str(err.value) + err.value.detail + err.value.hint
    assert SECRET not in text, "the password leaked into the refusal"
    if isinstance(value, str):
        assert value not in text or len(value) < 3, "the raw value leaked into the refusal"
    assert err.value.outcome == "refused"
    return err.value


def test_a_blank_registry_host_is_missing() -> None:
    assert refusal(f"u:{SECRET}", "   ").code == "REGISTRY_HOST_MISSING"


def test_a_port_beyond_65535_is_invalid() -> None:
    err = refusal(f"u:{SECRET}", "harbor:99999")
    assert err.code == "REGISTRY_HOST_INVALID"
    assert "host[:port]" in err.message


@pytest.mark.parametrize(
    "value",
    [
        '{"username": "u", "password": "' + SECRET,  # truncated JSON
        json.dumps({"user": "u", "password": SECRET}),
        json.dumps({"username": "u", "password": 12345678}),
        {"username": ["u"], "password": SECRET},
        f"u:{SECRET}\n",  # a trailing newline: refused, never silently trimmed
        json.dumps({"username": "a:b", "password": SECRET}),
    ],
    ids=[
        "bad-json",
        "wrong-key",
        "number-password",
        "list-username",
        "trailing-newline",
        "colon-in-username",
    ],
)
def test_malformed_values_never_echo_the_value(value: object) -> None:
    assert refusal(value).code == "REGISTRY_CREDENTIAL_MALFORMED"


@pytest.mark.parametrize(
    ("value", "what"),
    [
        ({"username": "robot\ud800", "password": SECRET}, "username"),
        ({"username": "robot", "password": SECRET + "\udfff"}, "password"),
        ("robot\udc80:" + SECRET, "username"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_the_field_never_the_value(
    value: object, what: str
) -> None:
    source = "the registry-auth entry 'robot'"
    assert said(lambda: rc.parse_credential(value, HOST, source=source)) == (
        "REGISTRY_CREDENTIAL_MALFORMED",
        f"{source} has a {what} that is not valid Unicode text (a lone surrogate, such as "
        "JSON's \\ud800), which basic auth cannot carry",
        "the registry robot's KV value in OpenBao",
    )
