"""Unit tests for .env rendering.

The container proof is tests/integration/box/test_envfile_container.py.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from monky_deployd.core.faults import EnvError
from monky_deployd.core.render import envfile
from monky_deployd.core.render.envfile import render, template_variables

CONTRACT_TEMPLATE = (
    "# rendered by the agent: substitutes every ${VAR}\n"
    "DB_PASSWORD=${DB_PASSWORD}\n"
    "LOG_LEVEL=info\n"
)


def refused(template: str, values: dict[str, str]) -> EnvError:
    with pytest.raises(EnvError) as err:
        render(template, values)
    assert err.value.outcome == "refused"
    return err.value


def everything_said(err: EnvError) -> str:
    return " ".join((str(err), err.message, err.hint, err.detail, repr(err.args)))


# -- R13: what counts as a variable -----------------------------------------------------------


def test_contract_header_comment_is_not_a_variable() -> None:
    assert template_variables(CONTRACT_TEMPLATE) == {"DB_PASSWORD"}
    assert render(CONTRACT_TEMPLATE, {"DB_PASSWORD": "pw"}) == (
        '# rendered by the agent: substitutes every ${VAR}\nDB_PASSWORD="pw"\nLOG_LEVEL=info\n'
    )


def test_contract_template_without_the_secret_names_only_the_real_variable() -> None:
    err = refused(CONTRACT_TEMPLATE, {})
    assert err.code == "ENV_INCOMPLETE"
    assert "DB_PASSWORD" in err.message
    assert "VAR" not in err.message.replace("DB_PASSWORD", "")


@pytest.mark.parametrize(
    "template",
    [
        "# ${A}\n",
        "   # indented ${A}\n",
        "\t# tab-indented ${A}\n",
        "#${A}",
        "X=1 # trailing comment ${A}\n",
        'X="1" # after a quoted value ${A}\n',
        "X=1\n# ${A}\nY=2\n",
        "A\n",  # a bare name: compose copies it from its own environment
        "X=1\nTRAILING",  # text without `=` at the end of the file is not an assignment
    ],
)
def test_text_that_is_not_an_assignment_never_counts(template: str) -> None:
    assert template_variables(template) == set()
    assert render(template, {}) == template


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("A=${X}\n", {"X"}),
        ("export A=${X}\n", {"X"}),
        ("  export   A = ${X}\n", {"X"}),
        ("A: ${X}\n", {"X"}),  # compose's yaml-style assignment
        ('A="${X} and ${Y}"\n', {"X", "Y"}),
        ("A='${X}'\n", {"X"}),  # single quotes: compose keeps them literal, the agent substitutes
        ("A=pre${X}post${Y}\n", {"X", "Y"}),
        ("A=$${X}\n", set()),  # $$ is compose's escaped dollar: literal ${X}
        ('A="\\$${X}"\n', {"X"}),  # \$ is an escaped dollar, then a real ${X}
        ('A="\\${X}"\n', set()),  # \$ escapes the reference itself
        ("A=${X:-default} $X ${X-d} ${X:?e}\n", set()),  # compose's own forms are left to compose
        ("A=${X}${X}\n", {"X"}),
        ('A="multi\nline ${X}"\nB=${Y}\n', {"X", "Y"}),
        ("A=${X}\r\nB=${Y}\r\n", {"X", "Y"}),
        ("\ufeffA=${X}\n", {"X"}),
    ],
)
def test_variables_inside_assignments_count(template: str, names: set[str]) -> None:
    assert template_variables(template) == names


def test_every_unresolved_variable_is_named_sorted_and_no_value_leaks() -> None:
    template = "C=${C}\nA=${A}\n# ${Z}\nB=x${B}y\nD=${D}\n"
    err = refused(template, {"D": "s3cr3t-value"})
    assert err.code == "ENV_INCOMPLETE"
    assert "3 variable(s)" in err.message
    assert "A, B, C" in err.message
    assert "Z" not in err.message.split(":", 1)[1]
    assert "s3cr3t-value" not in everything_said(err)


def test_extra_values_are_ignored() -> None:
    assert render("A=${A}\n", {"A": "1", "UNUSED": "2"}) == 'A="1"\n'


# -- quoting ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", '"plain"'),
        ("a$b", '"a$$b"'),
        ("${X}", '"$${X}"'),
        ("it's", '"it\'s"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a # b", '"a # b"'),
        ("  both  ", '"  both  "'),
        ("back\\slash", '"back\\\\slash"'),
        ("x\\", '"x\\\\"'),
        ("\\n", '"\\\\n"'),
        ("l1\nl2", '"l1\\nl2"'),
        ("cr\r", '"cr\\r"'),
        ("tab\t", '"tab\t"'),
        ("a=b", '"a=b"'),
        ("pässwörd🙂", '"pässwörd🙂"'),
        ("", '""'),
    ],
)
def test_substituted_values_are_double_quoted_and_escaped(value: str, written: str) -> None:
    assert render("K=${K}\n", {"K": value}) == f"K={written}\n"


def test_substitution_inside_a_larger_unquoted_value_quotes_the_whole_value() -> None:
    rendered = render("DB_URL=postgres://u:${DB_PASSWORD}@db/x  # dsn\n", {"DB_PASSWORD": "p #'$"})
    assert rendered == 'DB_URL="postgres://u:p #\'$$@db/x"  # dsn\n'


def test_authors_literal_text_keeps_its_compose_meaning() -> None:
    # unquoted literal `$$` and `${OTHER:-d}` stay compose's; quotes/backslashes get escaped
    assert render('A=a\\b"$$${OTHER:-d}${S}\n', {"S": "s"}) == 'A="a\\\\b\\"$$${OTHER:-d}s"\n'
    # double-quoted: decoded (\t, \", \$) and re-escaped; the raw tab passes as is
    assert render('A="\\t\\"${S}\\$"\n', {"S": "s"}) == 'A="\t\\"s$$"\n'
    # single-quoted: literal, so its `$` becomes `$$` once the value is double-quoted
    assert render("A='$x \\' ${S}'\n", {"S": "s"}) == 'A="$$x \' s"\n'


def test_a_secret_after_an_unbraced_name_cannot_extend_it() -> None:
    # `$HOME` + "s..." would read as `$HOMEs`: the agent writes compose's `$HOME` as `${HOME}`
    assert render('A="$HOME${S}"\n', {"S": "suffix"}) == 'A="${HOME}suffix"\n'
    assert render("A=$HOME ${S}\n", {"S": "x"}) == 'A="${HOME} x"\n'


def test_double_quoted_escapes_are_decoded_like_compose() -> None:
    # measured with `docker compose config`: \a -> BEL, \0123 -> "S" (octal), \v -> VT, \q
    # kept; a failed \0 escape loses its 0: \0 -> \, \08 -> \8, \0777 -> \777
    rendered = render('A="\\a\\0123\\0\\08\\0777\\q\\v${S}"\n', {"S": "s"})
    assert rendered == 'A="\aS' + "\\\\" * 2 + "8" + '\\\\777\\\\q\vs"\n'


def test_lines_without_substitutions_are_kept_byte_for_byte() -> None:
    template = (
        "\ufeff# header ${VAR}\r\n"
        "  LOG_LEVEL =  info   # keep\r\n"
        "QUOTED='a b'\n"
        'ESC="x\\ty"\n'
        "BARE\n"
        "\n"
        "S=${S}\n"
        "LAST=no-newline"
    )
    rendered = render(template, {"S": "v"})
    assert rendered == template.replace("S=${S}", 'S="v"')


# -- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "line"),
    [
        ("# header\nsee ${S} docs\n", 2),
        ('A=1\nB="abc ${S}\n', 2),
        ("A=${S} ${}\n", 1),
        ("A=${1}\n", 1),
        ("A B=${S}\n", 1),
        ("A=1\n\nkey/with/slash=2\n", 3),
    ],
)
def test_template_compose_cannot_read_is_refused_with_its_line(template: str, line: int) -> None:
    for call in (lambda: template_variables(template), lambda: render(template, {"S": "v"})):
        with pytest.raises(EnvError) as err:
            call()
        assert err.value.code == "ENV_TEMPLATE_INVALID"
        assert f"line {line} " in err.value.message


@pytest.mark.parametrize("name", sorted(envfile.RESERVED_NAMES))
def test_names_compose_takes_from_its_own_environment_are_refused(name: str) -> None:
    err = refused(f"{name}=${{S}}\n", {"S": "v"})
    assert err.code == "ENV_NAME_RESERVED"
    assert name in err.message
    assert refused(f"{name}=literal\n", {}).code == "ENV_NAME_RESERVED"


@pytest.mark.parametrize("name", ["PATHX", "XPATH", "LANG_", "MY_DOCKER_HOST", "XCOMPOSE_FILE"])
def test_a_name_that_only_contains_a_reserved_one_is_the_authors(name: str) -> None:
    assert render(f"{name}=${{S}}\n", {"S": "s"}) == f'{name}="s"\n'


@given(
    prefix=st.sampled_from(envfile.COMPOSE_SETTING_PREFIXES),
    rest=st.from_regex(r"[A-Z0-9_]{0,20}", fullmatch=True),
    literal=st.booleans(),
)
def test_every_name_compose_reads_as_its_setting_is_refused_by_name(
    prefix: str, rest: str, literal: bool
) -> None:
    name = prefix + rest
    if name in envfile.RESERVED_NAMES:
        return  # ENV_NAME_RESERVED (test above)
    line = f"{name}=literal\n" if literal else f"export {name}=${{S}}\n"
    err = refused(f"OK=1\n{line}", {"S": "hunter2"})
    assert err.code == "ENV_COMPOSE_SETTING"
    assert name in err.message
    assert "hunter2" not in everything_said(err)


def test_a_compose_setting_in_a_comment_or_a_value_is_no_assignment() -> None:
    text = "# COMPOSE_DISABLE_ENV_FILE=1\nA=COMPOSE_PROFILES=x\n"
    assert render(text, {}) == text


def test_reserved_names_cover_the_agents_child_environment() -> None:
    assert {"PATH", "LANG", "DOCKER_CONFIG", "DOCKER_HOST"} <= envfile.RESERVED_NAMES


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("before\0after-hunter2", "NUL"),
        ("lone\ud800surrogate-hunter2", "Unicode"),
        ("hunter2" + "x" * envfile.MAX_ENV_STRING_BYTES, "bytes"),
    ],
)
def test_values_the_format_cannot_carry_are_refused_by_name(value: str, why: str) -> None:
    err = refused("OK=${OK}\nBAD=${BAD}\n", {"OK": "fine", "BAD": value})
    assert err.code == "ENV_VALUE_UNCARRIABLE"
    assert "BAD" in err.message
    assert why in err.message
    assert "OK" not in err.message.replace("BAD", "")
    assert "hunter2" not in everything_said(err)


def test_size_limit_counts_the_name_and_the_whole_assignment() -> None:
    name = "V"
    room = envfile.MAX_ENV_STRING_BYTES - len(name) - 2
    assert render("V=${S}\n", {"S": "é" * (room // 2)})  # 2 bytes each in UTF-8
    assert render("V=${S}\n", {"S": "x" * room})
    assert refused("V=${S}\n", {"S": "x" * (room + 1)}).code == "ENV_VALUE_UNCARRIABLE"
    assert refused("V=ab${S}\n", {"S": "x" * (room - 1)}).code == "ENV_VALUE_UNCARRIABLE"


def test_every_uncarriable_variable_is_named() -> None:
    err = refused("B=${B}\nA=${A}\n", {"A": "\0", "B": "\0"})
    assert "A, B" in err.message


def test_refusal_order_template_then_reserved_then_missing_then_uncarriable() -> None:
    assert refused("oops ${A}\nPATH=${B}\n", {}).code == "ENV_TEMPLATE_INVALID"
    assert refused("PATH=${B}\nC=${C}\n", {}).code == "ENV_NAME_RESERVED"
    assert refused("A=${A}\nC=${C}\n", {"A": "\0"}).code == "ENV_INCOMPLETE"


# -- compose's reading, case by case (each expected value checked with `docker compose config`) --


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        # a bare NAME line ends at its newline; the next line is its own statement
        ("A\nB=${S}\n", 'A\nB="s"\n'),
        # key and value may hold any letter (X included)
        ("XY=${S}\n", 'XY="s"\n'),
        ("A=X${S}X\n", 'A="XsX"\n'),
        # the inline comment starts at the FIRST " #"
        ("A=${S} # c1 # c2\n", 'A="s" # c1 # c2\n'),
        ("A=${S}#not-a-comment\n", 'A="s#not-a-comment"\n'),
        # trailing white space is Go's unicode.IsSpace: \x1f is not space, U+3000 is
        ("A=${S}\x1f\n", 'A="s\x1f"\n'),
        ("A=${S}\u3000\t\n", 'A="s"\u3000\t\n'),
        ("A=${S}", 'A="s"'),
        # compose's $NAME after the secret is kept (as ${NAME}); $$ stays compose's
        ("A=${S}$HOME\n", 'A="s${HOME}"\n'),
        ("A=$$HOME${S}\n", 'A="$$HOMEs"\n'),
        ("A=$ ${S} $\n", 'A="$ s $"\n'),
        # single quotes: every author's `$` doubled once double-quoted, before and after
        ("A='${S}$x'\n", 'A="s$$x"\n'),
        ("A='$${S}'\n", 'A="$$s"\n'),
        ("A='${S}'x\n", 'A="s"x\n'),
        # a `${NAME:-default}` runs to its first balanced `}`; compose skips the character after
        # each `{`, so `{}` inside a default opens without closing
        ("A=${X:-{a}}${S}\n", 'A="${X:-{a}}s"\n'),
        # ... to the last `}` of its line: a `$NAME` after it stays as written there, since an
        # added `}` would pull it into the default (compose then refused the file)
        ("A=${S}${X:-{}}$HOME\n", 'A="s${X:-{}}$HOME"\n'),
        ('A="${S}${X:-{}}$HOME\n$HOME${S}"\n', 'A="s${X:-{}}$HOME\\n${HOME}s"\n'),
        ("A=${X:-d}${S}${Y:+e}\n", 'A="${X:-d}s${Y:+e}"\n'),
        # ... but only to the end of ITS line: a newline before the default does not end it
        # early, and on each line after it a `$NAME` gets its braces again
        ('A="${S}\n${X:-{}}$HOME"\n', 'A="s\\n${X:-{}}$HOME"\n'),
        ('A="${S}${X:-{}}\n$HOME${S}"\n', 'A="s${X:-{}}\\n${HOME}s"\n'),
        ('A="${S}${X:-{}}\nx$HOME${S}\ny"\n', 'A="s${X:-{}}\\nx${HOME}s\\ny"\n'),
        # white space around `=` and after `export`
        ("export\tA\t=\t${S}\n", 'export\tA\t=\t"s"\n'),
        ("  A=${S}\n\n\n  B=${S}", '  A="s"\n\n\n  B="s"'),
        # an empty value at the very end of the file
        ("A=${S}\nB=", 'A="s"\nB='),
        ("A=${S}\nB=\t", 'A="s"\nB=\t'),
        # a name without `=` at the very end is no assignment, not even of a reserved name
        ("A=${S}\nPATH", 'A="s"\nPATH'),
    ],
)
def test_compose_reading(template: str, rendered: str) -> None:
    assert render(template, {"S": "s"}) == rendered


@pytest.mark.parametrize(
    ("template", "names"),
    [
        ("A=${X:-{a}${S}}\n", set()),  # the ${S} is inside compose's default
        ("A=${X:-${Y}}${S}\n", {"S"}),
    ],
)
def test_what_compose_owns_is_never_substituted(template: str, names: set[str]) -> None:
    assert template_variables(template) == names


@pytest.mark.parametrize(
    ("escape", "decoded"),
    [
        ("\\0377", "ÿ"),  # octal 255: the last byte value
        ("\\0400", "\\400"),  # 256 does not decode: kept, the 0 dropped
        ("\\0101", "A"),
        ("\\08", "\\8"),
        ("\\0", "\\"),
        ("\\012", "\\12"),  # fewer than three digits after the rewrite
        ("\\b\\f\\r", "\b\f\r"),
        ("\\x41", "\\x41"),  # Go's \x is not one of compose's escapes
    ],
)
def test_double_quoted_escapes(escape: str, decoded: str) -> None:
    expected = decoded.replace("\\", "\\\\").replace("\r", "\\r")
    assert render(f'A="{escape}${{S}}"\n', {"S": "s"}) == f'A="{expected}s"\n'


def test_an_escaped_quote_inside_each_kind_of_quote() -> None:
    assert render('A="\\"${S}\\""\n', {"S": "s"}) == 'A="\\"s\\""\n'
    assert render("A='\\'${S}'\n", {"S": "s"}) == 'A="\'s"\n'
    assert render("A='a\\b${S}'\n", {"S": "s"}) == 'A="a\\\\bs"\n'


# -- refusals, word for word ------------------------------------------------------------------

TEMPLATE_HINT = (
    "the bundle's env_template: each line must be a comment, blank, NAME=value "
    "(values with spaces or # quoted), or a bare NAME"
)


@pytest.mark.parametrize(
    ("template", "what"),
    [
        ("\nsee ${S}\n", "line 2 has '$' where a variable name was expected"),
        ("A=1\r\nkey/x=2\n", "line 2 has '/' where a variable name was expected"),
        ('A=1\nB="x', "line 2 has a quoted value without its closing quote"),
        ("A=1\nB='x\n\n", "line 2 has a quoted value without its closing quote"),
        ("A=${}\n", "line 1 has a `${` that is not a valid ${NAME} reference"),
        ('\n\nA="${9}"\n', "line 3 has a `${` that is not a valid ${NAME} reference"),
        # a default with no `}` on the rest of its line (compose: `Invalid template`; the next
        # line's `}` does not close it)
        ("A=${B:-x\n", "line 1 has a `${` that is not a valid ${NAME} reference"),
        ("\nA=$S ${B:-x\n", "line 2 has a `${` that is not a valid ${NAME} reference"),
        ("A=${B:-x\nC=}\n", "line 1 has a `${` that is not a valid ${NAME} reference"),
        ("# c\nA B=1\n", "line 2 has a variable name containing a space"),
        ("A=1\nexport   ", "line 2 has `export` without a variable name"),
        ("export\t", "line 1 has `export` without a variable name"),
    ],
)
def test_template_refusals(template: str, what: str) -> None:
    err = refused(template, {"S": "v"})
    assert (err.code, err.hint) == ("ENV_TEMPLATE_INVALID", TEMPLATE_HINT)
    assert err.message == f"the .env template cannot be read by docker compose: {what}"


def test_export_alone_on_a_line_is_a_bare_name() -> None:
    assert render("export \nA=${S}\n", {"S": "s"}) == 'export \nA="s"\n'


def test_reserved_refusal_names_each_clash_sorted() -> None:
    err = refused("PATH=${S}\nLANG=1\nPATH=2\n", {"S": "v"})
    assert err.message == (
        "the .env template assigns LANG, PATH, which docker compose takes from the agent's own "
        "environment instead of .env when interpolating the compose file, so the value would not "
        "reach the container the same way through both paths"
    )
    assert err.hint == (
        "rename the variable in the bundle's env_template; reserved: "
        "DOCKER_CONFIG, DOCKER_HOST, LANG, PATH"
    )


def test_incomplete_refusal_word_for_word() -> None:
    err = refused("A=${A}\nB=${B}${A}\n", {})
    assert err.message == (
        "the .env template uses 2 variable(s) that have no value: A, B (neither a manifest "
        "entry nor assigned on an earlier line of the template)"
    )
    assert err.hint == (
        "the bundle's manifest needs an entry (without `use`) for each variable named, and each "
        "entry's OpenBao KV path and key must exist; or assign it above the line that uses it "
        "(docs/envfile.md)"
    )


def test_uncarriable_refusal_names_every_fault_word_for_word() -> None:
    values = {"A": "\0", "B": "\ud800", "C": "x" * 131072, "D": "fine"}
    err = refused("A=${A}\nB=${B}\nC=${C}\nD=${D}\n", values)
    assert err.message == (
        "the .env file cannot carry A, B, C: "
        "A contains a NUL character, which no process environment can hold; "
        "B is not valid Unicode text (a lone surrogate), so it has no UTF-8 bytes; "
        "C would make an environment string of about 131075 bytes; "
        "Linux starts no process with one longer than 131072 bytes"
    )
    assert err.hint == (
        "the secret's value in OpenBao (store it encoded, e.g. base64, if it must hold such data)"
    )


def test_a_value_with_nul_is_named_for_the_nul_even_when_also_too_long() -> None:
    err = refused("A=${A}\n", {"A": "\0" + "x" * 200_000})
    assert err.message == (
        "the .env file cannot carry A: "
        "A contains a NUL character, which no process environment can hold"
    )


def test_the_assignment_is_named_when_its_parts_together_are_too_long() -> None:
    err = refused("LONG=${A}${B}\n", {"A": "x" * 70_000, "B": "y" * 70_000})
    assert err.message == (
        "the .env file cannot carry LONG: LONG would make an environment string of about "
        "140006 bytes; Linux starts no process with one longer than 131072 bytes"
    )


def test_the_kernels_limit_is_131072_bytes_per_environment_string() -> None:
    # Linux MAX_ARG_STRLEN = 32 pages of 4 KiB: "NAME=value" plus its NUL, in UTF-8 bytes.
    assert render("V=${S}\n", {"S": "x" * 131069}) == 'V="' + "x" * 131069 + '"\n'
    assert refused("V=${S}\n", {"S": "x" * 131070}).code == "ENV_VALUE_UNCARRIABLE"
    assert render("VV=${S}\n", {"S": "é" * 65534})  # 2 bytes each: 131068 + 2 + 2 = 131072
    assert refused("VV=${S}\n", {"S": "é" * 65534 + "x"}).code == "ENV_VALUE_UNCARRIABLE"


def test_literal_lines_are_not_the_agents_to_measure() -> None:
    template = "BIG=" + "x" * 200_000 + "\nA=${S}\n"
    assert render(template, {"S": "s"}) == template.replace("${S}", '"s"')


# -- properties ---------------------------------------------------------------------------------


def compose_double_quoted(text: str) -> str:
    """What compose makes of the inside of a double-quoted value the agent wrote (escapes it
    writes: \\\\ \\" \\n \\r, then interpolation: $$ -> $)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            out.append({"\\": "\\", '"': '"', "n": "\n", "r": "\r"}[text[i + 1]])
            i += 2
        elif ch == "$":
            assert text[i + 1] == "$", text
            out.append("$")
            i += 2
        else:
            assert ch != '"', text
            out.append(ch)
            i += 1
    return "".join(out)


SECRETS = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\0"), max_size=40)


@given(SECRETS)
def test_any_carriable_secret_reaches_compose_unchanged(secret: str) -> None:
    rendered = render("K=${K}\n", {"K": secret})
    assert rendered.startswith('K="') and rendered.endswith('"\n')
    assert compose_double_quoted(rendered[3:-2]) == secret


@given(SECRETS, SECRETS)
def test_secrets_around_literal_text_keep_their_order(a: str, b: str) -> None:
    rendered = render("K=pre${A}mid${B}post # c\n", {"A": a, "B": b})
    assert rendered.endswith('" # c\n')
    assert compose_double_quoted(rendered[3 : -len(" # c\n") - 1]) == f"pre{a}mid{b}post"


@given(st.text(max_size=20))
def test_a_secret_is_refused_exactly_when_no_environment_can_hold_it(secret: str) -> None:
    cannot = "\0" in secret or any(0xD800 <= ord(c) <= 0xDFFF for c in secret)
    try:
        render("K=${K}\n", {"K": secret})
    except EnvError as err:
        assert cannot and err.code == "ENV_VALUE_UNCARRIABLE"
    else:
        assert not cannot


@given(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True), st.text("abc:/$ 8", max_size=12))
def test_a_reference_to_an_earlier_line_is_composes_own_and_kept(name: str, literal: str) -> None:
    """Issue 47: ``${AD_PORT}`` after ``AD_PORT=8080`` in the same template is a reference
    compose resolves when it reads the .env (no manifest entry needed: left as written); one
    before its assignment, or to a name never assigned, has no value (ENV_INCOMPLETE)."""
    assume(name != "SECRET")
    first = f"{name}='{literal}'\n"
    out = envfile.render(f"{first}URL=x:${{{name}}}/${{SECRET}}\n", {"SECRET": "s$"})
    assert out == f'{first}URL="x:${{{name}}}/s$$"\n'
    err = refused(f"URL=${{{name}}}\n{first}", {})
    assert err.code == "ENV_INCOMPLETE" and name in err.message
