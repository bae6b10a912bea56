"""core.render.atrest: a revision's .env at rest read back exactly as the renderer wrote it."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from monky_deployd.core.faults import EnvError
from monky_deployd.core.render import atrest
from monky_deployd.core.render.dotenv import parse
from monky_deployd.core.render.envfile import render
from monky_deployd.core.render.mask import MIN_RUN, MIN_SECRET, Masker

# Everything a KV value may hold that a process environment can carry (no NUL, no lone
# surrogate): quotes, backslashes, `$`, `#`, newlines and every other line break Python knows
# (\v \f \x1c-\x1e \x85 U+2028 U+2029), non-ASCII letters.
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
SECRET_CHARS = st.characters(
    codec="utf-8", exclude_categories=["Cs"], exclude_characters="\0"
) | st.sampled_from(LINE_BREAKS + "\"'\\$#= {}")
SECRETS = st.text(SECRET_CHARS, min_size=1, max_size=40)

# One line of a template per shape an author writes; {v} is the variable's reference.
SHAPES = (
    "{n}=${{{v}}}",
    "{n}=${{{v}}} # note",
    "{n}=${{{v}}}   #note with ${{{v}}}",
    'export {n}="${{{v}}}"',
    "{n}: ${{{v}}}",
    "{n}='${{{v}}}' # single",
    '{n}="${{{v}}}"\t# tab',
    " {n} = ${{{v}}}",
    "{n}=pre${{{v}}}post # c",
    "{n}=${{{v}}}${{{w}}}",
    "{n}=a$$b${{{v}}}",
    "# a comment with ${{{v}}}",
    "",
    "{n}",
    "{n}=plain value",
)


@st.composite
def templates(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    names = draw(st.lists(st.sampled_from("ABCDE"), min_size=1, max_size=6))
    lines = []
    for i, v in enumerate(names):
        w = draw(st.sampled_from("ABCDE"))
        lines.append(draw(st.sampled_from(SHAPES)).format(n=f"K{i}", v=v, w=w))
    values = {v: draw(SECRETS) for v in "ABCDE"}
    return "\n".join(lines) + draw(st.sampled_from(("", "\n"))), values


def decoded(template: str, values: dict[str, str]) -> list[str]:
    """Each assignment's value as Compose decodes it, secrets put in (the test's own spelling:
    the template's parts, each reference replaced by its value, `$$` read as `$`)."""
    out = []
    for a in parse(template):
        if not a.refs:  # the author's text, written as it was: not the renderer's
            continue
        out.append(
            "".join(values[p] if ref else p.replace("$$", "$") for p, ref in a.parts_of(template))
        )
    return out


def leaked(secret: str, text: str) -> int:
    """Characters of ``secret`` that ``text`` shows in a run of 8 (a shorter one: whole)."""
    if len(secret) < MIN_RUN:
        return len(secret) if secret in text else 0
    shown = [False] * len(secret)
    for i in range(len(secret) - MIN_RUN + 1):
        if secret[i : i + MIN_RUN] in text:
            shown[i : i + MIN_RUN] = [True] * MIN_RUN
    return sum(shown)


@settings(max_examples=400)
@given(templates())
@example(
    ("K=${A} # note\n", {"A": 'Zq"ab$cd\\ef"gh$ij\\kl"mn$op"\\$x'} | dict.fromkeys("BCDE", ""))
)
@example(("K=${A}\n", {"A": "abcdefghijkl\u2028mnopqrstuvwxyz0123"} | dict.fromkeys("BCDE", "")))
@example(("K=${A}\n", {"A": "abcdefghijkl\x0bmnopq\x85rstuvwxyz"} | dict.fromkeys("BCDE", "")))
def test_every_value_the_renderer_wrote_is_read_back_exactly(
    case: tuple[str, dict[str, str]],
) -> None:
    template, values = case
    try:
        rendered = render(template, values)
    except EnvError:
        return  # not a template and values the renderer accepts
    learned = set(atrest.secrets_in_env_file(rendered))
    # every assignment's value, exactly as Compose decodes it from the file
    assert set(decoded(template, values)) <= learned
    masker = Masker(learned)
    for a in parse(template):
        parts = a.parts_of(template)
        for text, ref in parts:
            if not ref:
                continue
            secret = values[text]
            if len(parts) == 1:  # a value that is this secret alone: the secret itself
                assert secret in learned
            if len(secret) >= MIN_RUN or (len(parts) == 1 and len(secret) >= MIN_SECRET):
                assert leaked(secret, masker(secret)) == 0, (template, secret)


def test_a_value_followed_by_an_inline_comment() -> None:
    """Before: the line's whole rest (`"…" # note`) was the only value learned, so a secret
    with a quote, backslash or `$` every few characters was never masked (30 of 30 bytes)."""
    secret = 'Zq"ab$cd\\ef"gh$ij\\kl"mn$op"\\$x'
    rendered = render("K=${K} # note\n", {"K": secret})
    assert secret in atrest.secrets_in_env_file(rendered)
    assert Masker(atrest.secrets_in_env_file(rendered))(f"echo {secret}!") == "echo ***!"


def test_a_value_holding_a_unicode_line_separator_is_one_value() -> None:
    """Before: `splitlines()` cut the value at U+2028 (and \\v, \\x85 ...); Compose cuts only
    at \\n (17 of 29 bytes leaked)."""
    for sep in "\u2028\u2029\v\f\x1c\x85":
        secret = f"first-part-{sep}-second-part"
        learned = atrest.secrets_in_env_file(render("A=x\nK=${K}\n", {"K": secret}))
        assert secret in learned
        assert Masker(learned)(secret) == "***"


def test_only_double_quoted_values_are_learned() -> None:
    """The renderer writes every value it put a secret in double-quoted; an unquoted or
    single-quoted value is the author's text (LOG_LEVEL=info is not a secret)."""
    text = '# c\nA="x\\"y\\\\z\\nline$$two"\nexport B=plain-value\nC: \'single\'\nD: "dq-value"\n'
    found = set(atrest.secrets_in_env_file(text))
    assert {'x"y\\z\nline$two', "dq-value"} <= found
    assert not {"plain-value", "single", "'single'"} & found


def test_a_template_of_many_plain_lines_teaches_the_masker_nothing_of_them() -> None:
    """300,000 plain lines would have made a masker of 300,000 "secrets" (about 50 s, a GB)."""
    template = "S=${S}\n" + "".join(f"K{i:07d}=value-{i:07d}\n" for i in range(50_000))
    learned = atrest.secrets_in_env_file(render(template, {"S": "the-one-secret"}))
    assert set(learned) == {"the-one-secret", '"the-one-secret"'}


def test_a_file_compose_cannot_read_is_read_line_by_line() -> None:
    """Not a file the agent wrote (torn, edited): each line at \\n only, and its value."""
    text = 'A="no closing quote\u2028still-the-same-line\nB=ok-value\n'
    found = set(atrest.secrets_in_env_file(text))
    assert '"no closing quote\u2028still-the-same-line' in found
    assert "ok-value" in found
    text = 'K="sec\\"ret" tail\nL=${ broken\n'
    assert 'sec"ret' in atrest.secrets_in_env_file(text)
