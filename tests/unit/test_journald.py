"""The journal format: each record one entry in journald's native protocol (MESSAGE the sentence,
PRIORITY from the level, every structured field a ``MONKY_*`` field), binary-safe for any value,
masked like the message, too large an entry passed in a sealed memfd.

A real AF_UNIX datagram socket plays journald's (``journal_socket=``); what arrives is parsed as
journald parses it (``journald.decode``, checked here against hand-built datagrams too).
tests/system/test_journald.py reads the same entries back from a real journald.
"""

from __future__ import annotations

import array
import io
import logging
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.agent import journald, logs
from monky_deployd.core.commands.checks import one_line
from monky_deployd.core.errors import Code
from monky_deployd.core.render.mask import NO_SECRETS, Masker

log = logging.getLogger("monky_deployd.test")
keys = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True).filter(
    lambda k: k not in journald._STANDARD and k not in journald._SKIPPED and k != "event"
)
values = st.one_of(
    st.text(max_size=300),
    st.text(alphabet="=\n\r\t\x00 aé€😀", max_size=50),
    st.integers(),
    st.booleans(),
    st.lists(st.text(max_size=20), max_size=3),
)


class Journal:
    """A datagram socket standing in for /run/systemd/journal/socket."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.setblocking(False)

    def entries(self) -> list[dict[str, bytes]]:
        out: list[dict[str, bytes]] = []
        while True:
            try:
                data, anc, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(4))
            except BlockingIOError:
                return out
            if anc:  # a memfd: the entry is its content
                fds = array.array("i")
                fds.frombytes(anc[0][2])
                try:
                    data = os.pread(fds[0], 1 << 24, 0)
                finally:
                    os.close(fds[0])
            out.append(dict(journald.decode(data)))


@pytest.fixture
def journal(tmp_path: Path, restore_root: None) -> Iterator[Journal]:
    j = Journal(tmp_path / "socket")
    logs.setup("journal", logging.DEBUG, stream=io.StringIO(), journal_socket=j.path)
    logs.set_masker(NO_SECRETS)
    yield j
    j.sock.close()
    logs.set_masker(NO_SECRETS)


def test_decode_reads_both_forms() -> None:
    data = b"A=x=y\nB\n" + struct.pack("<Q", 4) + b"1\n2\0" + b"\nC=\n"
    assert list(journald.decode(data)) == [("A", b"x=y"), ("B", b"1\n2\0"), ("C", b"")]


def test_a_fault_is_one_entry_with_its_fields(journal: Journal) -> None:
    logs.set_tick("0123456789abcdef")
    with logs.phase("bake"):
        log.error(
            "BAKE_FAILED: web restarted 3 times inside the bake. Check: web's logs",
            extra={
                "event": "tick.error",
                "code": Code.BAKE_FAILED,
                "revision": "r7",
                "service": "web",
                "ok": False,
                "count": 3,
                "detail": None,
            },
        )
    (entry,) = journal.entries()
    assert (
        entry["MESSAGE"] == b"BAKE_FAILED: web restarted 3 times inside the bake. Check: web's logs"
    )
    assert entry["PRIORITY"] == b"3" and entry["SYSLOG_IDENTIFIER"] == b"monky-deployd"
    fields = {k: v for k, v in entry.items() if k.startswith("MONKY_")}
    assert fields == {
        "MONKY_EVENT": b"tick.error",
        "MONKY_CODE": b"BAKE_FAILED",
        "MONKY_REVISION": b"r7",
        "MONKY_SERVICE": b"web",
        "MONKY_OK": b"false",
        "MONKY_COUNT": b"3",
        "MONKY_TICK": b"0123456789abcdef",
        "MONKY_PHASE": b"bake",
    }  # None (detail) left out


@pytest.mark.parametrize(
    ("level", "priority"),
    [(logging.DEBUG, b"7"), (logging.INFO, b"6"), (logging.WARNING, b"4"), (logging.ERROR, b"3")],
)
def test_priority_from_the_level(journal: Journal, level: int, priority: bytes) -> None:
    log.log(level, "a sentence", extra={"event": "test.line"})
    assert [e["PRIORITY"] for e in journal.entries()] == [priority]


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=500), st.dictionaries(keys, values, max_size=5))
def test_any_message_and_fields_arrive_whole(
    journal: Journal, message: str, extra: dict[str, Any]
) -> None:
    """Multi-line, non-ASCII, ``=``, NUL, very long: each field value arrives byte for byte;
    MESSAGE too, but a multi-line one arrives as one line (its lines joined as the text log
    joins them: CONFIG_INVALID's one line per key, issue 36)."""
    log.info(message, extra={"event": "test.line", **extra})
    (entry,) = journal.entries()
    assert entry["MESSAGE"] == (one_line(message) if "\n" in message else message).encode()
    for key, value in extra.items():
        if value is None:
            continue
        assert entry[journald.field_name(key)] == journald.field_value(value).encode()


@given(st.lists(st.tuples(st.from_regex(r"[A-Z][A-Z0-9_]{0,10}", fullmatch=True), st.text())))
def test_encode_is_binary_safe(fields: list[tuple[str, str]]) -> None:
    data = journald.encode(fields)
    assert list(journald.decode(data)) == [(n, v.encode()) for n, v in fields]
    for name, value in fields:  # a newline never stands in the simple form
        if "\n" in value:
            assert name.encode() + b"=" + value.encode() not in data


@given(st.text(min_size=1, max_size=40))
def test_field_names_are_what_journald_accepts(key: str) -> None:
    name = journald.field_name(key)
    assert name.startswith("MONKY_") and len(name) <= 64
    assert all(c.isascii() and (c.isupper() or c.isdigit() or c == "_") for c in name)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=12, max_size=40).filter(
        lambda s: s.strip() == s
    )
)
def test_secrets_are_masked_in_every_field(journal: Journal, secret: str) -> None:
    logs.set_masker(Masker([secret]))
    log.error(
        f"ENV_INCOMPLETE: {secret}",
        extra={
            "event": "tick.error",
            "detail": f"the registry said: {secret}\nline two",
            "argv": ["docker", "login", secret],
            "nested": {"a": [secret]},
        },
    )
    (entry,) = journal.entries()
    # every value that carries what was logged; field names and the constant fields (where
    # in the code, the identifier, the priority) hold none of it, and a generated secret may
    # happen to be part of them (SYSLOG_IDENT)
    constant = {"SYSLOG_IDENTIFIER", "PRIORITY", "CODE_FILE", "CODE_LINE", "CODE_FUNC"}
    for key, value in entry.items():
        assert key in constant or secret.encode() not in value, key
    assert b"***" in entry["MESSAGE"] and b"***" in entry["MONKY_DETAIL"]
    assert b"***" in entry["MONKY_ARGV"] and b"***" in entry["MONKY_NESTED"]


def test_a_traceback_is_in_the_message(journal: Journal) -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.debug("unexpected exception", exc_info=True, extra={"event": "tick.bug"})
    (entry,) = journal.entries()
    assert entry["MESSAGE"].startswith(b"unexpected exception\nTraceback (most recent call last):")
    assert entry["MESSAGE"].endswith(b"RuntimeError: boom")


def test_an_entry_larger_than_a_datagram_travels_in_a_memfd(journal: Journal) -> None:
    big = "x" * 400_000 + "\nthe end"
    log.warning("a long one", extra={"event": "test.big", "detail": big})
    (entry,) = journal.entries()
    assert entry["MONKY_DETAIL"] == big.encode() and entry["PRIORITY"] == b"4"


def test_without_a_journal_socket_the_lines_go_to_the_stream(
    tmp_path: Path, restore_root: None
) -> None:
    out = io.StringIO()
    logs.setup("journal", logging.INFO, stream=out, journal_socket=str(tmp_path / "none"))
    log.error("CONFIG_MISSING: no config", extra={"event": "tick.error", "code": "CONFIG_MISSING"})
    log.info("second", extra={"event": "test.line"})
    lines = out.getvalue().splitlines()
    # no time (journald has its own), no [-] tag for a line outside every phase (issue 36)
    assert lines[0].startswith("<3>ERROR   CONFIG_MISSING: no config"), lines
    assert lines[1].startswith("<6>INFO    second")


def test_auto_is_the_journal_when_stdout_is_the_journal_stream(
    tmp_path: Path, restore_root: None
) -> None:
    j = Journal(tmp_path / "socket")
    with (tmp_path / "stream").open("w+") as out:
        st_ = os.fstat(out.fileno())
        env = {"JOURNAL_STREAM": f"{st_.st_dev}:{st_.st_ino}"}
        logs.setup("auto", logging.INFO, stream=out, environ=env, journal_socket=j.path)
        log.info("on the journal", extra={"event": "test.line"})
        logs.setup("json", logging.INFO, stream=out, environ=env, journal_socket=j.path)
        log.info("for a shipper", extra={"event": "test.line"})
        out.seek(0)
        written = out.read()
    assert [e["MESSAGE"] for e in j.entries()] == [b"on the journal"]
    assert written.startswith('<6>{"ts": ') and "for a shipper" in written
    j.sock.close()
