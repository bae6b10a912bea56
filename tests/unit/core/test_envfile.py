"""Unit tests for .env rendering.

The container proof is tests/integration/box/test_envfile_container.py.
"""

from __future__ import annotations

import pytest

from monky_deployd.core import envfile
from monky_deployd.core.envfile import render, template_variables
from monky_deployd.core.errors import EnvError

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


def test_contract_header_comment_is_not_a_variable():
    assert template_variables(CONTRACT_TEMPLATE) == {"DB_PASSWORD"}
    assert render(CONTRACT_TEMPLATE, {"DB_PASSWORD": "pw"}) == (
        '# rendered by the agent: substitutes every ${VAR}\nDB_PASSWORD="pw"\nLOG_LEVEL=info\n'
    )


def test_contract_template_without_the_secret_names_only_the_real_variable():
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
def test_text_that_is_not_an_assignment_never_counts(template: str):
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
def test_variables_inside_assignments_count(template: str, names: set[str]):
    assert template_variables(template) == names


def test_every_unresolved_variable_is_named_sorted_and_no_value_leaks():
    template = "C=${C}\nA=${A}\n# ${Z}\nB=x${B}y\nD=${D}\n"
    err = refused(template, {"D": "s3cr3t-value"})
    assert err.code == "ENV_INCOMPLETE"
    assert "3 variable(s)" in err.message
    assert "A, B, C" in err.message
    assert "Z" not in err.message.split(":", 1)[1]
    assert "s3cr3t-value" not in everything_said(err)


def test_extra_values_are_ignored():
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
def test_substituted_values_are_double_quoted_and_escaped(value: str, written: str):
    assert render("K=${K}\n", {"K": value}) == f"K={written}\n"


def test_substitution_inside_a_larger_unquoted_value_quotes_the_whole_value():
    rendered = render("DB_URL=postgres://u:${DB_PASSWORD}@db/x  # dsn\n", {"DB_PASSWORD": "p #'$"})
    assert rendered == 'DB_URL="postgres://u:p #\'$$@db/x"  # dsn\n'


def test_authors_literal_text_keeps_its_compose_meaning():
    # unquoted literal `$$` and `${OTHER:-d}` stay compose's; quotes/backslashes get escaped
    assert render('A=a\\b"$$${OTHER:-d}${S}\n', {"S": "s"}) == 'A="a\\\\b\\"$$${OTHER:-d}s"\n'
    # double-quoted: decoded (\t, \", \$) and re-escaped; the raw tab passes as is
    assert render('A="\\t\\"${S}\\$"\n', {"S": "s"}) == 'A="\t\\"s$$"\n'
    # single-quoted: literal, so its `$` becomes `$$` once the value is double-quoted
    assert render("A='$x \\' ${S}'\n", {"S": "s"}) == 'A="$$x \' s"\n'


def test_a_secret_after_an_unbraced_name_cannot_extend_it():
    # `$HOME` + "s..." would read as `$HOMEs`: the agent writes compose's `$HOME` as `${HOME}`
    assert render('A="$HOME${S}"\n', {"S": "suffix"}) == 'A="${HOME}suffix"\n'
    assert render("A=$HOME ${S}\n", {"S": "x"}) == 'A="${HOME} x"\n'


def test_double_quoted_escapes_are_decoded_like_compose():
    # measured with `docker compose config`: \a -> BEL, \0123 -> "S" (octal), \v -> VT, \q
    # kept; a failed \0 escape loses its 0: \0 -> \, \08 -> \8, \0777 -> \777
    rendered = render('A="\\a\\0123\\0\\08\\0777\\q\\v${S}"\n', {"S": "s"})
    assert rendered == 'A="\aS' + "\\\\" * 2 + "8" + '\\\\777\\\\q\vs"\n'


def test_lines_without_substitutions_are_kept_byte_for_byte():
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
def test_template_compose_cannot_read_is_refused_with_its_line(template: str, line: int):
    for call in (lambda: template_variables(template), lambda: render(template, {"S": "v"})):
        with pytest.raises(EnvError) as err:
            call()
        assert err.value.code == "ENV_TEMPLATE_INVALID"
        assert f"line {line} " in err.value.message


@pytest.mark.parametrize("name", sorted(envfile.RESERVED_NAMES))
def test_names_compose_takes_from_its_own_environment_are_refused(name: str):
    err = refused(f"{name}=${{S}}\n", {"S": "v"})
    assert err.code == "ENV_NAME_RESERVED"
    assert name in err.message
    assert refused(f"{name}=literal\n", {}).code == "ENV_NAME_RESERVED"


def test_reserved_names_cover_the_agents_child_environment():
    assert {"PATH", "LANG", "DOCKER_CONFIG", "DOCKER_HOST"} <= envfile.RESERVED_NAMES


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("before\0after-hunter2", "NUL"),
        ("lone\ud800surrogate-hunter2", "Unicode"),
        ("hunter2" + "x" * envfile.MAX_ENV_STRING_BYTES, "bytes"),
    ],
)
def test_values_the_format_cannot_carry_are_refused_by_name(value: str, why: str):
    err = refused("OK=${OK}\nBAD=${BAD}\n", {"OK": "fine", "BAD": value})
    assert err.code == "ENV_VALUE_UNCARRIABLE"
    assert "BAD" in err.message
    assert why in err.message
    assert "OK" not in err.message.replace("BAD", "")
    assert "hunter2" not in everything_said(err)


def test_size_limit_counts_the_name_and_the_whole_assignment():
    name = "V"
    room = envfile.MAX_ENV_STRING_BYTES - len(name) - 2
    assert render("V=${S}\n", {"S": "é" * (room // 2)})  # 2 bytes each in UTF-8
    assert render("V=${S}\n", {"S": "x" * room})
    assert refused("V=${S}\n", {"S": "x" * (room + 1)}).code == "ENV_VALUE_UNCARRIABLE"
    assert refused("V=ab${S}\n", {"S": "x" * (room - 1)}).code == "ENV_VALUE_UNCARRIABLE"


def test_every_uncarriable_variable_is_named():
    err = refused("B=${B}\nA=${A}\n", {"A": "\0", "B": "\0"})
    assert "A, B" in err.message


def test_refusal_order_template_then_reserved_then_missing_then_uncarriable():
    assert refused("oops ${A}\nPATH=${B}\n", {}).code == "ENV_TEMPLATE_INVALID"
    assert refused("PATH=${B}\nC=${C}\n", {}).code == "ENV_NAME_RESERVED"
    assert refused("A=${A}\nC=${C}\n", {"A": "\0"}).code == "ENV_INCOMPLETE"
