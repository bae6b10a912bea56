"""Real proof that rendered .env values reach a container byte for byte.

A compose project (busybox image, built once per session by monky_deployd_testkit.dockerlab) reads
the rendered .env two ways: service ``file`` through ``env_file: .env``, service ``interp`` through
``${VAR}`` interpolation in ``environment:``. Each container's real process environment is read
back from ``/proc/1/environ`` and compared byte for byte. Docker unavailable = failure, not skip.
"""

from __future__ import annotations

import json
import random
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from monky_deployd.adapters import fsutil
from monky_deployd.adapters.box import runner
from monky_deployd.core.faults import EnvError
from monky_deployd.core.render import envfile

pytestmark = pytest.mark.docker

MAX_VALUE = envfile.MAX_ENV_STRING_BYTES - len("V_MAX") - 2  # "V_MAX=" ... NUL

NASTY: dict[str, str] = {
    "dollar": "a$b",
    "double_dollar": "$$",
    "dollar_at_end": "x$",
    "braced": "${X}",
    "braced_empty": "${}",
    "braced_default": "${HOME:-nope}",
    "named": "$HOME",
    "single_quote": "it's",
    "only_single_quote": "'",
    "double_quote": 'say "hi"',
    "starts_double_quote": '"x',
    "ends_double_quote": 'x"',
    "both_quotes": "'\"'\"",
    "hash": "a#b",
    "spaced_hash": " # x",
    "starts_hash": "#x",
    "leading_spaces": "  lead",
    "trailing_spaces": "trail  ",
    "only_spaces": "   ",
    "curly": "{}",
    "backslash_n": "a\\nb",
    "double_backslash": "\\\\",
    "trailing_backslash": "x\\",
    "backslash_quote": '\\"',
    "backslash_dollar": "\\$X",
    "backslash_octal": "\\0123",
    "equals": "a=b=c",
    "colon": "user:pa:ss",
    "unicode": "pässwörd€",
    "emoji": "🙂🔑",
    "nbsp_edges": "\u00a0x\u00a0",
    "nel": "\u0085",
    "line_separator": "a\u2028b",
    "tab": "a\tb",
    "control": "a\x01\x1b\x7fb",
    "carriage_return": "a\rb",
    "crlf": "a\r\nb",
    "newline": "line1\nline2",
    "newline_injection": "a\nINJECTED=1",
    "trailing_newline": "x\n",
    "empty": "",
    "export_like": "export X=1",
    "long": "x" * 5000,
    "pem": "-----BEGIN KEY-----\nAbC+/=\n-----END KEY-----\n",
}


def _compose(
    project_dir: Path, project: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    argv = ("docker", "compose", "-p", project, "--project-directory", str(project_dir), *args)
    proc = subprocess.run(
        argv, cwd=project_dir, env=runner.base_env(), capture_output=True, timeout=180
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')}")
    return proc


def _environ(project_dir: Path, project: str, service: str) -> dict[str, bytes]:
    cid = _compose(project_dir, project, "ps", "-q", service).stdout.decode().strip()
    assert cid, f"no container for service {service}"
    raw = subprocess.run(
        ("docker", "exec", cid, "cat", "/proc/1/environ"),
        env=runner.base_env(),
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    env: dict[str, bytes] = {}
    for item in raw.split(b"\0"):
        if item:
            key, _, value = item.partition(b"=")
            env[key.decode()] = value
    return env


# each service's (``file``, ``interp``) environment: name -> the bytes the container saw
Envs = dict[str, dict[str, bytes]]


_PREFIX = f"monkyenv-{uuid.uuid4().hex[:6]}-"  # one per process (worker)


def _run_project(tmp: Path, image: str, env_text: str, names: list[str]) -> Envs:
    """Bring up a project reading ``env_text`` both ways; return each service's environment."""
    project = f"{_PREFIX}{uuid.uuid4().hex[:10]}"
    tmp.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(tmp / ".env", env_text.encode("utf-8"), mode=0o600)
    interp = {name: f"${{{name}}}" for name in names}
    compose = {
        "services": {
            "file": {"image": image, "command": ["sleep", "600"], "env_file": ".env"},
            "interp": {"image": image, "command": ["sleep", "600"], "environment": interp},
        }
    }
    (tmp / "compose.yaml").write_text(json.dumps(compose, indent=1))
    try:
        _compose(tmp, project, "up", "-d", "--quiet-pull")
        return {svc: _environ(tmp, project, svc) for svc in ("file", "interp")}
    finally:
        _compose(tmp, project, "down", "-t", "0", "--remove-orphans", check=False)


@pytest.fixture(scope="module")
def nasty_envs(
    busybox_image: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, bytes]]:
    names = [f"V_{key.upper()}" for key in NASTY] + ["V_MAX"]
    template = "# rendered by the agent: substitutes every ${VAR}\n" + "".join(
        f"{name}=${{{name}}}\n" for name in names
    )
    values = {f"V_{key.upper()}": value for key, value in NASTY.items()}
    values["V_MAX"] = "m" * MAX_VALUE
    text = envfile.render(template, values)
    return _run_project(tmp_path_factory.mktemp("nasty"), busybox_image, text, names)


@pytest.mark.parametrize("path", ["file", "interp"])
@pytest.mark.parametrize("key", sorted(NASTY))
def test_value_arrives_byte_exact(
    nasty_envs: Mapping[str, dict[str, bytes]], path: str, key: str
) -> None:
    env = nasty_envs[path]
    assert env.get(f"V_{key.upper()}") == NASTY[key].encode("utf-8")


@pytest.mark.parametrize("path", ["file", "interp"])
def test_longest_carriable_value_arrives(
    nasty_envs: Mapping[str, dict[str, bytes]], path: str
) -> None:
    assert nasty_envs[path]["V_MAX"] == b"m" * MAX_VALUE


@pytest.mark.parametrize("path", ["file", "interp"])
def test_newline_does_not_inject_a_variable(
    nasty_envs: Mapping[str, dict[str, bytes]], path: str
) -> None:
    assert "INJECTED" not in nasty_envs[path]


def test_one_byte_longer_is_refused_and_linux_would_refuse_it(
    busybox_image: str, tmp_path: Path
) -> None:
    """The size limit is Linux's, not a guess: the hand-written file fails at exec."""
    with pytest.raises(EnvError) as err:
        envfile.render("V_MAX=${V_MAX}\n", {"V_MAX": "m" * (MAX_VALUE + 1)})
    assert err.value.code == "ENV_VALUE_UNCARRIABLE"
    (tmp_path / ".env").write_text(f'V_MAX="{"m" * (MAX_VALUE + 1)}"\n')
    (tmp_path / "compose.yaml").write_text(
        json.dumps(
            {"services": {"one": {"image": busybox_image, "command": ["true"], "env_file": ".env"}}}
        )
    )
    project = f"{_PREFIX}{uuid.uuid4().hex[:10]}"
    try:
        proc = _compose(tmp_path, project, "run", "--rm", "-T", "one", check=False)
    finally:
        _compose(tmp_path, project, "down", "-t", "0", "--remove-orphans", check=False)
    assert proc.returncode != 0
    assert b"argument list too long" in proc.stdout + proc.stderr


# Seeded random values over an alphabet of everything the .env syntax treats specially.
ALPHABET = "$$${}''\"\"##\\\\  \t\n\r=:-a0é🙂\x01\u2028\xa0\x85"


def _random_values(count: int) -> dict[str, str]:
    rnd = random.Random(20261202)
    return {
        f"R_{i:03d}": "".join(rnd.choice(ALPHABET) for _ in range(rnd.randrange(0, 24)))
        for i in range(count)
    }


@pytest.fixture(scope="module")
def random_envs(
    busybox_image: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, str], Envs]:
    values = _random_values(300)
    template = "".join(f"{name}=${{{name}}}\n" for name in values)
    envs = _run_project(
        tmp_path_factory.mktemp("random"),
        busybox_image,
        envfile.render(template, values),
        sorted(values),
    )
    return values, envs


@pytest.mark.parametrize("path", ["file", "interp"])
def test_random_nasty_values_arrive_byte_exact(
    random_envs: tuple[dict[str, str], Envs], path: str
) -> None:
    values, envs = random_envs
    wrong = sorted(n for n, v in values.items() if envs[path].get(n) != v.encode("utf-8"))
    assert not wrong, [(n, values[n], envs[path].get(n)) for n in wrong[:5]]


# Template forms: the author's own quoting and text around a substitution must mean for compose
# exactly what it meant before, with the secret in place of ${S}.
# (name, template text, the same text with each counted ${S} replaced by SAFE0 by hand)
FORMS: tuple[tuple[str, str, str], ...] = (
    ("F_PLAIN", "F_PLAIN=${S}\n", "F_PLAIN=SAFE0\n"),
    ("F_UNQUOTED", "F_UNQUOTED=pre-${S}-post\n", "F_UNQUOTED=pre-SAFE0-post\n"),
    ("F_URL", "F_URL=postgres://u:${S}@db/x\n", "F_URL=postgres://u:SAFE0@db/x\n"),
    (
        "F_COMMENT",
        "F_COMMENT=pre ${S} post   # comment ${S}\n",
        "F_COMMENT=pre SAFE0 post   # comment ${S}\n",
    ),
    ("F_HASH_NO_SPACE", "F_HASH_NO_SPACE=a#${S}#b\n", "F_HASH_NO_SPACE=a#SAFE0#b\n"),
    (
        "F_DQ",
        'F_DQ="a \\"q\\" \\t ${S} $$ \\\\ \\$${S} $${S} end"\n',
        'F_DQ="a \\"q\\" \\t SAFE0 $$ \\\\ \\$SAFE0 $${S} end"\n',
    ),
    (
        "F_DQ_ESCAPES",
        'F_DQ_ESCAPES="\\a\\0123\\0\\08\\0777\\q\\v${S}\\b"\n',
        'F_DQ_ESCAPES="\\a\\0123\\0\\08\\0777\\q\\vSAFE0\\b"\n',
    ),
    ("F_SQ", "F_SQ='lit $$ \\' ${S} \\n'\n", "F_SQ='lit $$ \\' SAFE0 \\n'\n"),
    ("F_EXPORT", "export F_EXPORT=${S}\n", "export F_EXPORT=SAFE0\n"),
    ("F_YAML", "F_YAML: ${S}\n", "F_YAML: SAFE0\n"),
    ("F_CRLF", "F_CRLF=${S}\r\n", "F_CRLF=SAFE0\r\n"),
    ("F_SPACES", "F_SPACES =   ${S}   \n", "F_SPACES =   SAFE0   \n"),
    ("F_TWICE", "F_TWICE=${S}${S}\n", "F_TWICE=SAFE0SAFE0\n"),
    (
        "F_AFTER_DEFAULT",
        "F_AFTER_DEFAULT=${UNSET_OTHER:-d}${S}\n",
        "F_AFTER_DEFAULT=${UNSET_OTHER:-d}SAFE0\n",
    ),
    ("F_DQ_MULTILINE", 'F_DQ_MULTILINE="one\n${S}\ntwo"\n', 'F_DQ_MULTILINE="one\nSAFE0\ntwo"\n'),
    ("F_LITERAL_ONLY", "F_LITERAL_ONLY=keep $$ this\n", "F_LITERAL_ONLY=keep $$ this\n"),
)
FORM_NAMES = [name for name, _, _ in FORMS]


@pytest.fixture(scope="module")
def form_envs(
    busybox_image: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, Envs, Envs]:
    safe = "SAFE0"
    secret = "s$ec'r\"et #1 \\n ${X}\n"
    baseline = _run_project(
        tmp_path_factory.mktemp("forms-baseline"),
        busybox_image,
        "".join(base for _, _, base in FORMS),
        FORM_NAMES,
    )
    rendered = _run_project(
        tmp_path_factory.mktemp("forms-rendered"),
        busybox_image,
        envfile.render("".join(tmpl for _, tmpl, _ in FORMS), {"S": secret}),
        FORM_NAMES,
    )
    return safe, secret, baseline, rendered


@pytest.mark.parametrize("path", ["file", "interp"])
@pytest.mark.parametrize("name", FORM_NAMES)
def test_template_form_keeps_its_meaning(
    form_envs: tuple[str, str, Envs, Envs], path: str, name: str
) -> None:
    safe, secret, baseline, rendered = form_envs
    expected = baseline[path][name].replace(safe.encode(), secret.encode())
    assert rendered[path][name] == expected
    if name != "F_LITERAL_ONLY":
        assert secret.encode() in rendered[path][name]


# Seeded random templates: the author's text around ${S} in every quoting style. The baseline
# lets compose itself decide what ${S} means (S=SAFE0 is defined first in the same .env).
AUTHOR_TOKENS = (
    "a", "Z", "0", " ", "  ", "#", " #", "$", "$$", "\\", "\\\\", "\\n", "\\t", "\\$",
    "\\0", "\\012", "'", '"', "\\\"", "\\'", "{", "}", "$HOME", "${UNSET:-d}",
    "=", ":", "é", "\t",
)  # fmt: skip


def _random_line(rnd: random.Random, name: str) -> tuple[str, str]:
    """(template line, baseline line) for one assignment with a ${S} somewhere in its value."""
    tokens = [rnd.choice(AUTHOR_TOKENS) for _ in range(rnd.randrange(0, 8))]
    tokens.insert(rnd.randrange(0, len(tokens) + 1), "${S}")
    style = rnd.choice(("unquoted", "double", "single"))
    if style == "double":
        tokens = [t for t in tokens if t not in ('"', "\\")]
        value = '"' + "".join(tokens) + '"'
    elif style == "single":
        tokens = [t for t in tokens if t not in ("'", "\\")]
        value = "'" + "".join(tokens) + "'"
    else:
        tokens = [t for t in tokens if t not in ("'", '"', '\\"', "\\'")]
        value = "".join(tokens)
    line = f"{name}={value}\n"
    return line, (line.replace("${S}", "SAFE0") if style == "single" else line)


def test_random_template_lines_keep_their_meaning(busybox_image: str, tmp_path: Path) -> None:
    rnd = random.Random(4242)
    secret = "s$'\"#\\ \n{}"
    kept: list[tuple[str, str, str]] = []
    refused_lines: list[str] = []
    for i in range(150):
        name = f"T_{i:03d}"
        line, base = _random_line(rnd, name)
        try:
            envfile.render(line, {"S": secret})
        except EnvError as exc:
            assert exc.code == "ENV_TEMPLATE_INVALID", exc
            refused_lines.append(line)
            continue
        kept.append((name, line, base))
    names = [name for name, _, _ in kept]
    baseline = _run_project(
        tmp_path / "baseline", busybox_image, "S=SAFE0\n" + "".join(b for _, _, b in kept), names
    )
    rendered = _run_project(
        tmp_path / "rendered",
        busybox_image,
        envfile.render("".join(t for _, t, _ in kept), {"S": secret}),
        names,
    )
    for path in ("file", "interp"):
        wrong = [
            (line, baseline[path][name], rendered[path][name])
            for name, line, _ in kept
            if rendered[path][name] != baseline[path][name].replace(b"SAFE0", secret.encode())
        ]
        assert not wrong, (path, wrong[:3])
    for line in refused_lines[:10]:  # render refused it: compose must refuse it as well
        tmp = tmp_path / f"refused-{refused_lines.index(line)}"
        tmp.mkdir()
        proc = _compose_config(busybox_image, tmp, line.replace("${S}", "v"))
        assert proc.returncode != 0, line
    assert len(kept) > 100


# The refusals must not be stricter than compose: what render calls unreadable, compose refuses
# too, and the odd-but-valid templates render and compose reads them.
UNREADABLE = {
    "prose": "# header\nsee ${S} docs\n",
    "unterminated": 'A="abc ${S}\n',
    "invalid_ref": "A=${S} ${}\n",
    "space_in_name": "A B=${S}\n",
}
READABLE = {
    "yaml_style": "A: ${S}\n",
    "bare_name": "A\nB=${S}\n",
    "punctuated_name": "A.B-C[0]=${S}\n",
    "export_spaces": "export   A=${S}\n",
    "comment_only": "# only ${S} here\n",
    "bom": "\ufeffA=${S}\n",
    "no_final_newline": "A=${S}",
    "dollar_forms": "A=${S} $$ ${B:-x} $B\n",
}


def _compose_config(
    busybox_image: str, tmp: Path, env_text: str
) -> subprocess.CompletedProcess[bytes]:
    (tmp / ".env").write_text(env_text, encoding="utf-8")
    (tmp / "compose.yaml").write_text(
        json.dumps({"services": {"one": {"image": busybox_image, "env_file": ".env"}}})
    )
    return _compose(tmp, f"{_PREFIX}{uuid.uuid4().hex[:10]}", "config", check=False)


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_unreadable_template_is_refused_like_compose(
    busybox_image: str, tmp_path: Path, case: str
) -> None:
    template = UNREADABLE[case]
    with pytest.raises(EnvError) as err:
        envfile.render(template, {"S": "v"})
    assert err.value.code == "ENV_TEMPLATE_INVALID"
    proc = _compose_config(busybox_image, tmp_path, template.replace("${S}", "v"))
    assert proc.returncode != 0, proc.stdout


@pytest.mark.parametrize("case", sorted(READABLE))
def test_odd_but_valid_template_renders_and_compose_reads_it(
    busybox_image: str, tmp_path: Path, case: str
) -> None:
    rendered = envfile.render(READABLE[case], {"S": "v$'\"#"})
    proc = _compose_config(busybox_image, tmp_path, rendered)
    assert proc.returncode == 0, proc.stderr


def test_reserved_names_really_disagree_between_the_two_paths(
    busybox_image: str, tmp_path: Path
) -> None:
    """Why ENV_NAME_RESERVED exists: compose's own environment wins over .env for ${LANG}."""
    envs = _run_project(tmp_path, busybox_image, 'LANG="from-dotenv"\n', ["LANG"])
    assert envs["file"]["LANG"] == b"from-dotenv"
    assert envs["interp"]["LANG"] == runner.base_env()["LANG"].encode()
    with pytest.raises(EnvError) as err:
        envfile.render("LANG=${L}\n", {"L": "x"})
    assert err.value.code == "ENV_NAME_RESERVED"


@pytest.fixture(autouse=True, scope="module")
def _no_leftover_projects() -> Iterator[None]:
    yield
    label = "com.docker.compose.project"
    proc = subprocess.run(
        (
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label={label}",
            "--format",
            f'{{{{.Label "{label}"}}}}',
        ),
        env=runner.base_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    # this process's projects only: other pytest-xdist workers run theirs at the same time
    left = sorted({p for p in proc.stdout.split() if p.startswith(_PREFIX)})
    assert not left, f"compose projects left behind: {left}"
