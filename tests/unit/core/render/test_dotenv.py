"""The .env reader's fast paths (issue 15) say what the plain forms they replaced say: the quoted
body's pattern, the escape decoding, and simple lines kept as their span and names (and rendered
as the general walk's parts would be)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.render import dotenv, envfile

QUOTED_TEXT = st.text(st.sampled_from(list("ab \\\"'$\n0178{}")), max_size=40)
NAMES = st.sampled_from(["A", "B", "_x1"])
SIMPLE_VALUE = st.lists(
    st.one_of(st.sampled_from(["v", "w.x", "a:b", "{}", "x=y"]), NAMES.map(lambda n: f"${{{n}}}")),
    max_size=5,
).map(lambda words: " ".join(words))


@given(text=QUOTED_TEXT, quote=st.sampled_from("\"'"))
def test_the_quoted_body_pattern_is_the_per_character_alternation(text: str, quote: str) -> None:
    plain = re.compile(r"(?:[^\\" + quote + r"]|\\.)*", re.DOTALL)
    assert dotenv._QUOTED_BODY[quote].match(text).end() == plain.match(text).end()  # type: ignore[union-attr]


@given(text=QUOTED_TEXT)
def test_escapes_decode_as_one_substitution_per_escape(text: str) -> None:
    def one(m: re.Match[str]) -> str:
        return dotenv._decode_escape(m.group(0))

    assert dotenv._expand_escapes(text) == dotenv._ESCAPE.sub(one, text)


@given(
    lines=st.lists(st.tuples(NAMES, SIMPLE_VALUE), max_size=6), indent=st.sampled_from(["", "  "])
)
def test_simple_lines_are_their_plain_parts(lines: list[tuple[str, str]], indent: str) -> None:
    template = "".join(f"{indent}{name}={value}\n" for name, value in lines)
    found = dotenv.parse(template)
    assert [a.name for a in found] == [name for name, _ in lines]
    for a, (_, value) in zip(found, lines, strict=True):
        parts = dotenv._plain(value)
        assert template[a.start : a.end] == value
        assert a.refs == tuple(text for text, ref in parts if ref)
        if a.refs:
            assert a.parts_of(template) == parts
    values = {"A": 'a"$b\\', "B": "", "_x1": "\n"}
    rendered = envfile.render(template, values)
    for (name, value), line in zip(lines, rendered.splitlines(), strict=True):
        if "${" in value:
            expected = "".join(
                values[t].replace("$", "$$") if ref else t for t, ref in dotenv._plain(value)
            )
            assert line == f'{indent}{name}="{envfile._escape_double(expected)}"'
        else:
            assert line == f"{indent}{name}={value}"
