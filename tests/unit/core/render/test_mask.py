"""core.render.mask: every secret in every form masked; other text unchanged; idempotent."""

from __future__ import annotations

import base64
import json

from hypothesis import example, given, settings
from hypothesis import strategies as st

from monky_deployd.core.render import mask
from monky_deployd.core.render.mask import MARK, MIN_RUN, MIN_SECRET, Masker, forms

# Secrets drawn from everything a KV value may hold: quotes, backslashes, `$`, newlines, tabs,
# control characters, non-ASCII letters, emoji.
SECRET_CHARS = st.characters(
    codec="utf-8", categories=("L", "N", "P", "S", "Zs", "Cc"), exclude_characters="*"
)
long_secrets = st.text(SECRET_CHARS, min_size=MIN_RUN, max_size=80)
short_secrets = st.text(SECRET_CHARS, min_size=MIN_SECRET, max_size=MIN_RUN - 1)


def go_quote(s: str) -> str:
    """Go's strconv.Quote for the characters the forms know (the test's own spelling)."""
    out = []
    for c in s:
        simple = {"\a": "a", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t", "\v": "v"}
        if c in simple:
            out.append("\\" + simple[c])
        elif c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        elif ord(c) < 0x80 or c.isprintable():
            out.append(c)
        else:
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
    return '"' + "".join(out) + '"'


def runs(secret: str) -> list[str]:
    return [secret[i : i + MIN_RUN] for i in range(len(secret) - MIN_RUN + 1)]


def printed(secret: str) -> list[str]:
    """How the tools print a secret: raw, Go %q, JSON, repr, lines, shell quoting."""
    return [
        secret,
        go_quote(secret),
        json.dumps(secret),
        json.dumps(secret, ensure_ascii=False),
        repr(secret),
        "'" + secret.replace("'", "'\"'\"'") + "'",
        secret.replace("$", "$$"),
        *secret.splitlines(),
    ]


@settings(max_examples=200, deadline=None)
@given(secret=long_secrets, pre=st.text(max_size=30), post=st.text(max_size=30))
@example(secret="line one of a key\nline two\n", pre="x", post="y")
@example(secret='pa"ss$wo\\rd-é-long', pre="parsing ", post=": invalid")
def test_every_printed_form_of_a_long_secret_is_masked(secret: str, pre: str, post: str) -> None:
    m = Masker([secret])
    for form in printed(secret):
        out = m(pre + form + post)
        for run in runs(form):
            if len(form) >= MIN_RUN and run.strip():
                assert run not in out, (form, out)


@settings(max_examples=200, deadline=None)
@given(secret=long_secrets, data=st.data())
def test_any_cut_of_eight_or_more_characters_is_masked(secret: str, data: st.DataObject) -> None:
    start = data.draw(st.integers(0, len(secret) - MIN_RUN))
    end = data.draw(st.integers(start + MIN_RUN, len(secret)))
    for form in (secret[start:end], go_quote(secret)[1:-1][start:end]):
        out = Masker([secret])(f'parsing "{form}": invalid syntax')
        assert not any(run in out for run in runs(secret[start:end]))


@settings(deadline=None)
@given(secret=short_secrets, pre=st.text(max_size=20), post=st.text(max_size=20))
def test_a_short_secret_is_masked_where_it_occurs_whole(secret: str, pre: str, post: str) -> None:
    m = Masker([secret])
    for form in (secret, go_quote(secret), json.dumps(secret)):
        assert secret not in m(pre + form + post) or secret in MARK


@settings(deadline=None)
@given(
    st.text(st.characters(codec="ascii", categories=("L", "N", "P", "S")), min_size=MIN_RUN),
    st.text(max_size=200),
)
def test_text_that_shares_no_run_with_a_secret_is_unchanged(secret: str, text: str) -> None:
    m = Masker([secret])
    shares = any(run in text for f in forms(secret) for run in runs(f))
    if not shares:
        assert m(text) == text


@given(
    st.lists(
        st.text(st.characters(codec="ascii", categories=("Lu", "Ll")), min_size=3), max_size=5
    ),
    st.text(st.characters(codec="ascii", categories=("Lu", "Ll")), max_size=100),
)
def test_disjoint_alphabets_leave_text_alone(secrets: list[str], text: str) -> None:
    m = Masker(s.lower() for s in secrets)
    assert m(text.upper()) == text.upper()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=30), max_size=4), st.text(max_size=200))
@example(["x***yyyyyy", "abcdefghij"], "x***abcdefghijyyyyyy")
@example(["****"], "********")
def test_masking_is_idempotent(secrets: list[str], text: str) -> None:
    m = Masker(secrets)
    once = m(text)
    assert m(once) == once


@settings(deadline=None)
@given(st.lists(st.text(min_size=MIN_SECRET, max_size=30), min_size=1, max_size=4), st.data())
def test_secrets_inside_text_are_masked_and_the_rest_kept(
    secrets: list[str], data: st.DataObject
) -> None:
    m = Masker(secrets)
    secret = data.draw(st.sampled_from(secrets))
    out = m(f"<<{secret}>>")
    assert secret not in out or secret in MARK * 3


def test_one_and_two_character_secrets_are_not_masked() -> None:
    assert Masker(["a", "1x"])("a 1x exit status 1") == "a 1x exit status 1"


def test_extend_adds_and_keeps_what_it_knew() -> None:
    m = Masker(["first-secret-value"])
    both = m.extend(["second-secret-value", ""])
    assert both("first-secret-value second-secret-value") == "*** ***"
    assert m.extend(["first-secret-value"]) is m
    assert "first-secret" not in repr(both) and len(both) == 2


def test_mask_obj_walks_reports() -> None:
    m = Masker(["hvs.tokenvalue123"])
    body = {"message": "x hvs.tokenvalue123", "phases": [{"detail": ("hvs.tokenvalue123",)}]}
    assert m.mask_obj(body) == {"message": "x ***", "phases": [{"detail": ("***",)}]}


def test_secrets_at_rest_in_the_docker_config() -> None:
    auth = base64.b64encode(b"robot:pa:ss").decode()
    data = json.dumps({"auths": {"h:5000": {"auth": auth}}}).encode()
    assert mask.secrets_in_docker_config(data) == (auth, "robot:pa:ss", "pa:ss")
    assert mask.secrets_in_docker_config(b"not json") == ()
    assert mask.secrets_in_docker_config(b'{"auths": {"h": {"auth": "%%"}}}') == ("%%",)


def test_strings_in_a_kv_value() -> None:
    value = {"username": "robot", "password": ["pw-1", 42, True, None]}
    assert set(mask.strings_in(value)) == {"robot", "pw-1", "42"}


def test_a_secret_of_digits_is_masked_as_the_number_a_tool_reads() -> None:
    """Compose reads a port out of ``0004711`` and prints ``4711``; a digit string longer than
    an int64 (no tool reads it as one) is only its text, and builds a masker all the same."""
    assert Masker(["0004711"])("ports[4711/tcp]") == "ports[***/tcp]"
    assert Masker(["+000004711"])("target 4711") == "target ***"
    long = "1" * 5000
    assert Masker([long])(long) == "***"
