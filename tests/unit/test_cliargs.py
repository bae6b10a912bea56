"""The command line's parser (cliargs.py): global options before or after the command, in any
order, and where config.yaml is (flag > $MONKY_DEPLOYD_CONFIG > default)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.cliargs import CONFIG_ENV, EXITS, commands, config_path, parse
from monky_deployd.config import DEFAULT_CONFIG_PATH

COMMANDS = {
    "apply": ["apply"],
    "status": ["status"],
    "doctor": ["doctor"],
    "plan": ["plan"],
    "resume": ["resume"],
    "lock list": ["lock", "list"],
}


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[list[str], dict[str, object]]:
    """A command with -c/--config, --debug and --log-format each given (or not) before or after
    it, in any order and spelling; what the parse must give."""
    words = draw(st.sampled_from(sorted(COMMANDS.values())))
    given: dict[str, object] = {}
    pieces: list[list[str]] = []
    if draw(st.booleans()):
        path = draw(st.sampled_from(["/etc/x.yaml", "rel/c.yaml", "/tmp/a b.yaml"]))
        spelling = draw(st.sampled_from(["-c", "--config", "--config="]))
        pieces.append([spelling + path] if spelling.endswith("=") else [spelling, path])
        given["config"] = Path(path)
    if draw(st.booleans()):
        pieces.append(["--debug"])
        given["debug"] = True
    if draw(st.booleans()):
        fmt = draw(st.sampled_from(["json", "text", "auto"]))
        pieces.append(["--log-format", fmt])
        given["log_format"] = fmt
    pieces = draw(st.permutations(pieces))
    split = draw(st.integers(0, len(pieces)))  # before the command: pieces[:split]
    argv = [w for p in pieces[:split] for w in p] + words + [w for p in pieces[split:] for w in p]
    return argv, given


@given(command_lines(), st.sampled_from([None, "/from/env.yaml", ""]))
def test_global_options_parse_the_same_before_or_after_the_command(
    case: tuple[list[str], dict[str, object]], env_value: str | None
) -> None:
    argv, want = case
    environ = {} if env_value is None else {CONFIG_ENV: env_value}
    args = parse(argv, environ)
    default_config = Path(env_value) if env_value else DEFAULT_CONFIG_PATH
    assert args.config == want.get("config", default_config)  # flag > env > default
    assert args.debug is want.get("debug", False)
    assert args.log_format == want.get("log_format", "auto")


def test_the_last_config_given_wins_whichever_side() -> None:
    args = parse(["-c", "/before.yaml", "status", "--config", "/after.yaml"], {})
    assert args.config == Path("/after.yaml")


def test_apply_alone_is_one_tick_and_once_is_accepted() -> None:
    assert parse(["apply"], {}).command == "apply"
    assert parse(["apply", "--once", "--retry"], {}).retry is True


def test_config_path_precedence() -> None:
    assert config_path(Path("/f"), {CONFIG_ENV: "/e"}) == Path("/f")
    assert config_path(None, {CONFIG_ENV: "/e"}) == Path("/e")
    assert config_path(None, {CONFIG_ENV: ""}) == DEFAULT_CONFIG_PATH
    assert config_path(None, {}) == DEFAULT_CONFIG_PATH


def test_every_command_has_its_exit_statuses() -> None:
    found = {" ".join(words) for words in commands()}
    assert found == set(EXITS), found


@pytest.mark.parametrize("argv", [["apply", "now"], ["lock"], ["lock", "steal"], []])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(argv, {})
    assert exc.value.code == 2
