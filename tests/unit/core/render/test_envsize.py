"""core.render.envsize: the bytes the .env's variables take of a container's environment, and the
ENV_TOO_LARGE refusal when a service taking it as env_file could not start."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import composefile
from monky_deployd.core.faults import EnvError
from monky_deployd.core.render import envsize
from monky_deployd.core.render.envfile import render

VALUES = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\0"), max_size=30
)
NAMES = st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True)


def expected(env: dict[str, str]) -> int:
    """The test's own count: each NAME=value in UTF-8, its NUL, its 8-byte pointer."""
    return sum(len(f"{k}={v}".encode()) + 1 + 8 for k, v in env.items())


@given(st.dictionaries(NAMES, VALUES, min_size=1, max_size=8), st.data())
def test_the_bytes_of_a_rendered_env_are_those_of_its_variables(
    secrets: dict[str, str], data: st.DataObject
) -> None:
    """Each variable once, its value as Compose decodes it (quotes, escapes, `$$`)."""
    plain = data.draw(
        st.dictionaries(
            NAMES.map(lambda n: "P" + n),
            st.from_regex(r"[a-z0-9]{0,9}", fullmatch=True),
            max_size=5,
        )
    )
    lines = [f"{n}={v}" for n, v in plain.items()]
    lines += [f"S{n}=${{{n}}} # secret" for n in secrets]
    text = render("# header ${X}\n" + "\n".join(lines) + "\n", secrets)
    env = dict(plain) | {f"S{n}": v for n, v in secrets.items()}
    size, count = envsize.environment_bytes(text)
    assert (size, count) == (expected(env), len(env))
    # what lets check() skip a short file: a character of the .env is at most 4 bytes of it
    assert size <= 4 * len(text)


def test_a_repeated_name_counts_once_with_its_last_value() -> None:
    assert envsize.environment_bytes("A=1\nA=22\n") == (expected({"A": "22"}), 1)


def lines_of(count: int, value_bytes: int) -> str:
    return "".join(f"K{i:07d}={'v' * value_bytes}\n" for i in range(count))


def test_a_env_no_container_could_start_with_is_refused_by_name_and_figures() -> None:
    per = len("K0000000=") + 110 + 1 + 8
    over = envsize.ENV_BUDGET_BYTES // per + 1
    text = lines_of(over, 110)
    with pytest.raises(EnvError) as caught:
        envsize.check(text, ("web", "worker"))
    err = caught.value
    assert (err.code, err.outcome) == ("ENV_TOO_LARGE", "refused")
    assert err.message.startswith(f"the .env's {over} variables would take {over * per} bytes")
    assert "web, worker (env_file)" in err.message and "v" * 20 not in err.message
    # one variable fewer fits; no service taking the file: nothing to refuse
    envsize.check(lines_of(over - 1, 110), ("web",))
    envsize.check(text, ())


def test_the_issues_template_of_190001_plain_lines_is_refused() -> None:
    text = "DB_PASSWORD=${DB_PASSWORD}\n" + "".join(f"K{i:06d}=v\n" for i in range(190_000))
    with pytest.raises(EnvError) as caught:
        envsize.check(render(text, {"DB_PASSWORD": "pw"}), ("web",))
    assert caught.value.code == "ENV_TOO_LARGE"


def test_env_file_services() -> None:
    doc = {
        "services": {
            "web": {"image": "x", "env_file": [".env"]},
            "db": {"image": "y"},
            "job": {"image": "z", "env_file": ".env"},
            "odd": "not a mapping",
        }
    }
    assert composefile.env_file_services(doc) == ("job", "web")
    assert composefile.env_file_services({"services": []}) == ()
    assert composefile.env_file_services("text") == ()
