"""The text log format (``--log-format text``) says each fact once, on one line per record: a
field the sentence already says (the hint after "Check:", the code before the colon, the
outcome) is not repeated in the trailing fields, a multi-line message does not end its first
line in a dangling colon, and the level is coloured on a terminal only (never with NO_COLOR, in
a pipe or on the journal). JSON keeps every field."""

from __future__ import annotations

import io
import json
import logging
import os
import pty

from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.agent import logs
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

words = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=8)
sentence = st.lists(words, min_size=1, max_size=6).map(" ".join)
lines = st.lists(sentence, min_size=1, max_size=4)


def emit(fmt: str, err: DeployError, environ: dict[str, str] | None = None) -> str:
    out = io.StringIO()
    logs.setup(fmt, logging.INFO, stream=out, environ=environ or {})
    logging.getLogger("monky_deployd.test").error(
        str(err),
        extra={"event": "tick.error", "code": err.code, "hint": err.hint, "detail": err.detail},
    )
    logging.getLogger("monky_deployd.test").error(
        f"tick refused: {err.message.splitlines()[0]}",
        extra={"event": "tick.summary", "outcome": "refused", "code": err.code, "revision": None},
    )
    return out.getvalue()


@settings(max_examples=60)
@given(lines, sentence, st.sampled_from(list(Code)), st.booleans())
def test_text_says_each_fact_once(msg_lines: list[str], hint: str, code: Code, colon: bool) -> None:
    root = logging.getLogger()
    saved = list(root.handlers)
    message = "\n".join(msg_lines)
    if colon:
        message = msg_lines[0] + ":\n" + "\n".join(msg_lines[1:] or ["at 'x': bad"])
    err = DeployError(message, code=code, hint=f"the {hint} of config.yaml")
    try:
        text = emit("text", err)
    finally:
        for h in list(root.handlers):
            root.removeHandler(h)
        for h in saved:
            root.addHandler(h)
    first, summary = text.splitlines()
    assert first.count(err.hint) == 1, first
    assert first.count(f"{code}") == 1 and "hint=" not in first and "code=" not in first
    assert "revision=" not in summary and "outcome=" not in summary
    assert summary.count(str(code)) == 1, summary  # said in the fields only
    for part in (first, summary):
        assert ": (" not in part and not part.rstrip().endswith(":")
        assert ":  (" not in part


def test_json_keeps_every_field(restore_root: None) -> None:
    err = DeployError("x is invalid:\nat 'a': bad", code=Code.CONFIG_INVALID, hint="the keys")
    rows = [json.loads(ln) for ln in emit("json", err).splitlines()]
    assert rows[0]["hint"] == "the keys" and rows[0]["code"] == "CONFIG_INVALID"
    assert rows[0]["message"].startswith("CONFIG_INVALID: x is invalid:\nat 'a': bad")
    assert rows[1]["outcome"] == "refused" and rows[1]["revision"] is None


def _tty_text(environ: dict[str, str]) -> str:
    leader, follower = pty.openpty()
    try:
        with os.fdopen(follower, "w", closefd=False) as out:
            logs.setup("text", logging.INFO, stream=out, environ=environ)
            logging.getLogger("monky_deployd.test").warning("a warning")
            out.flush()
        return os.read(leader, 4096).decode()
    finally:
        os.close(leader)
        os.close(follower)


def test_colour_on_a_terminal_only(restore_root: None) -> None:
    assert "\033[33mWARNING" in _tty_text({})
    assert "\033[" not in _tty_text({"NO_COLOR": "1"})
    err = DeployError("m", code=Code.INTERNAL)
    assert "\033[" not in emit("text", err)  # a pipe or a file: no colour
