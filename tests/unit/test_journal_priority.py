"""Log lines on the journal carry their syslog priority; a pipe, a file or a terminal does not.

systemd hands a service a stream connected to journald and names it in ``JOURNAL_STREAM`` as
``<st_dev>:<st_ino>``; journald reads a ``<N>`` prefix as the line's priority. Here a real file
plays the journal's stream (its own dev:ino in ``JOURNAL_STREAM``) and a real pipe plays a pipe.
tests/system/test_systemd.py checks the same with a real journald (``journalctl -p err``).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
from pathlib import Path
from typing import IO

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.agent import journald, logs
from monky_deployd_testkit.lab import CLI, cli_env

LEVELS = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


def _stream_id(f: IO[str]) -> str:
    st_ = os.fstat(f.fileno())
    return f"{st_.st_dev}:{st_.st_ino}"


def _log_all(out: IO[str], environ: dict[str, str], fmt: str = "json") -> None:
    logs.setup(fmt, logging.DEBUG, stream=out, environ=environ)
    log = logging.getLogger("monky_deployd.test")
    for levelno in LEVELS:
        log.log(levelno, "a sentence\nover two lines", extra={"event": "test.line"})
    out.flush()


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_on_the_journal_every_line_starts_with_its_priority(
    tmp_path: Path, restore_root: None, fmt: str
) -> None:
    with (tmp_path / "journal").open("w+") as out:
        _log_all(out, {"JOURNAL_STREAM": _stream_id(out)}, fmt)
        out.seek(0)
        lines = out.read().splitlines()
    if fmt == "json":
        assert [ln[:3] for ln in lines] == ["<7>", "<6>", "<4>", "<3>", "<2>"]
        bodies = [json.loads(ln[3:]) for ln in lines]
        assert [b["level"] for b in bodies] == ["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    else:  # the text format puts a record on one line (its lines joined), prefixed
        assert [ln[:3] for ln in lines] == [f"<{p}>" for p in LEVELS.values()]


def test_a_file_that_is_not_the_journal_stream_gets_plain_lines(
    tmp_path: Path, restore_root: None
) -> None:
    """JOURNAL_STREAM is inherited by children: it names the parent's stream, not this one."""
    with (tmp_path / "other").open("w+") as other, (tmp_path / "out").open("w+") as out:
        _log_all(out, {"JOURNAL_STREAM": _stream_id(other)})
        out.seek(0)
        lines = out.read().splitlines()
    assert len(lines) == 5 and all(ln.startswith("{") for ln in lines)


def test_a_pipe_gets_plain_lines(restore_root: None) -> None:
    r, w = os.pipe()
    with os.fdopen(w, "w") as out, os.fdopen(r) as inp:
        _log_all(out, {"JOURNAL_STREAM": "0:0"})
        out.close()
        lines = inp.read().splitlines()
    assert len(lines) == 5 and all(ln.startswith("{") for ln in lines)


@given(st.text(max_size=30))
def test_a_malformed_journal_stream_is_not_the_journal(value: str) -> None:
    with open(os.devnull, "w") as out:
        st_ = os.fstat(out.fileno())
        real = value == f"{st_.st_dev}:{st_.st_ino}"
        assert logs.stdout_is_journal(out, {"JOURNAL_STREAM": value}) is real


@given(st.integers(min_value=0, max_value=60))
def test_every_level_maps_to_a_syslog_priority(levelno: int) -> None:
    prio = logs.syslog_priority(levelno)
    expected = 7
    for threshold, p in sorted(LEVELS.items()):
        if levelno >= threshold:
            expected = p
    assert prio == expected


@pytest.mark.parametrize("fmt", ["auto", "json"])
def test_the_cli_prefixes_its_error_lines_on_the_journal(tmp_path: Path, fmt: str) -> None:
    """The real CLI with a missing config: the fault line is stored at priority 3 (err). With
    ``--log-format json`` the lines are JSON for a shipper; ``auto`` is the journal's native
    protocol, and with no journald socket here (no systemd) the same sentences as text lines
    (tests/unit/test_journald.py and tests/system/test_journald.py cover the socket)."""
    out_path = tmp_path / "stdout"
    argv = (
        *CLI,
        "apply",
        "--once",
        "--config",
        str(tmp_path / "missing.yaml"),
        "--log-format",
        fmt,
    )
    with out_path.open("w") as out:
        env = {**cli_env(tmp_path), "JOURNAL_STREAM": _stream_id(out)}
        proc = subprocess.run(
            argv, stdout=out, stderr=subprocess.PIPE, text=True, env=env, check=False
        )
    assert proc.returncode == 3, proc.stderr
    lines = out_path.read_text().splitlines()
    if fmt == "json":
        assert lines and all(ln.startswith("<3>{") for ln in lines), lines
        first = json.loads(lines[0][3:])
        assert first["code"] == "CONFIG_MISSING" and first["level"] == "ERROR"
    elif Path(journald.SOCKET).exists():  # a machine with journald: the lines went there
        assert lines == []
    else:
        assert lines and all(ln.startswith("<3>ERROR ") for ln in lines), lines
        assert lines[0].startswith("<3>ERROR   [config] CONFIG_MISSING: ")
    # The same run on a pipe: plain JSON lines.
    piped = subprocess.run(
        (*CLI, "apply", "--once", "--config", str(tmp_path / "missing.yaml")),
        capture_output=True,
        text=True,
        env={**cli_env(tmp_path), "JOURNAL_STREAM": "1:1"},
        check=False,
    )
    assert piped.stdout and all(ln.startswith("{") for ln in piped.stdout.splitlines())
