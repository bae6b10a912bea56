"""Log records to journald in its native protocol: the sentence as MESSAGE, the level as
PRIORITY, every structured field as a ``MONKY_*`` journal field.

systemd documents the protocol (https://systemd.io/JOURNAL_NATIVE_PROTOCOL/): one datagram per
entry to ``/run/systemd/journal/socket``, each field either ``NAME=value\\n`` or, for a value
holding a newline, the binary-safe form ``NAME\\n`` + the value's length (64-bit little endian)
+ the value + ``\\n``. An entry too large for one datagram travels in a sealed memfd passed with
``SCM_RIGHTS``. Field names are upper-case letters, digits and ``_``, at most 64 characters,
never starting with ``_`` (those are journald's own trusted fields).

So ``journalctl -u monky-deployd -p err`` reads as prose (the sentence, code first for a fault)
and ``journalctl -u monky-deployd MONKY_CODE=BAKE_FAILED`` filters. The record passes the tick's
``Masker`` before it gets here (``logs._MaskFilter``): the fields carry masked values only.
When the socket cannot be written (no journald, a full queue) the record goes to ``fallback``
(``<N>``-prefixed text on the stream), so no line is lost.
"""

from __future__ import annotations

import array
import errno
import fcntl
import json
import logging
import os
import socket
import struct
from collections.abc import Callable, Iterable, Iterator

SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "monky-deployd"
PREFIX = "MONKY_"
# A record's own attributes that are not fields (the standard LogRecord ones are left out too).
_RENAMED = {"tick_id": "TICK"}
_SKIPPED = {"message", "asctime", "taskName"}
_STANDARD = set(vars(logging.makeLogRecord({})).keys())
_NAME_MAX = 64


def field_name(key: str) -> str:
    """``code`` -> ``MONKY_CODE``, ``tick_id`` -> ``MONKY_TICK``, ``ttl-s`` -> ``MONKY_TTL_S``:
    only A-Z, 0-9 and ``_``, at most 64 characters."""
    name = _RENAMED.get(key) or "".join(c if c.isascii() and c.isalnum() else "_" for c in key)
    return (PREFIX + name.upper())[:_NAME_MAX]


def field_value(value: object) -> str:
    """A field's text: a string as it is, anything else as JSON (``true``, ``3``, ``["a"]``)."""
    if isinstance(value, str):
        return str.__str__(value)  # a StrEnum (Code) as its value
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


def record_fields(record: logging.LogRecord, priority: int) -> list[tuple[str, str]]:
    """The entry of one record (already masked): MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, the
    standard CODE_* fields and one ``MONKY_*`` field per extra attribute that is not None."""
    message = record.getMessage()
    if "\n" in message:  # a fault of one line per problem (CONFIG_INVALID): one line here too,
        from monky_deployd.core.commands.checks import one_line  # as in the text log (issue 36)

        message = one_line(message)
    if record.exc_info and not record.exc_text:  # (the masking filter formats it when it masks)
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        message += "\n" + record.exc_text
    if record.stack_info:
        message += "\n" + record.stack_info
    out = [
        ("MESSAGE", message),
        ("PRIORITY", str(priority)),
        ("SYSLOG_IDENTIFIER", IDENTIFIER),
        ("CODE_FILE", record.pathname),
        ("CODE_LINE", str(record.lineno)),
        ("CODE_FUNC", record.funcName),
    ]
    for key, value in vars(record).items():
        if key in _STANDARD or key in _SKIPPED or value is None:
            continue
        out.append((field_name(key), field_value(value)))
    return out


def encode(fields: Iterable[tuple[str, str]]) -> bytes:
    """The datagram of an entry: ``NAME=value\\n``, or the binary-safe form for a value that
    holds a newline. Values are UTF-8 (a lone surrogate is replaced, never an error)."""
    parts: list[bytes] = []
    for name, value in fields:
        data = value.encode("utf-8", "replace")
        key = name.encode("ascii")
        if b"\n" in data:
            parts.append(key + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(key + b"=" + data + b"\n")
    return b"".join(parts)


def decode(datagram: bytes) -> Iterator[tuple[str, bytes]]:
    """Parse a datagram as journald does (for tests and the fuzz tier): the fields in order."""
    at = 0
    while at < len(datagram):
        end = datagram.index(b"\n", at)
        line = datagram[at:end]
        if b"=" in line:
            name, _, value = line.partition(b"=")
            yield name.decode("ascii"), value
            at = end + 1
        else:
            (size,) = struct.unpack("<Q", datagram[end + 1 : end + 9])
            start = end + 9
            if datagram[start + size : start + size + 1] != b"\n":
                raise ValueError("binary field not followed by a newline")
            yield line.decode("ascii"), datagram[start : start + size]
            at = start + size + 1


def _send_memfd(sock: socket.socket, data: bytes, path: str) -> None:
    """An entry larger than a datagram: written to a sealed memfd whose descriptor is sent."""
    fd = os.memfd_create("monky-deployd-journal", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        seals = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]
        sock.sendmsg([], rights, 0, path)
    finally:
        os.close(fd)


class JournalHandler(logging.Handler):
    """One datagram per record to journald's native socket; ``fallback`` handles a record the
    socket would not take (and every later one: the journal is then not there)."""

    def __init__(
        self, path: str, fallback: logging.Handler, priority: Callable[[int], int]
    ) -> None:
        super().__init__()
        self.path = path
        self.fallback = fallback
        self.priority = priority  # levelno -> syslog priority (logs.syslog_priority)
        self.sock: socket.socket | None = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def emit(self, record: logging.LogRecord) -> None:
        if self.sock is not None:
            data = encode(record_fields(record, self.priority(record.levelno)))
            try:
                self.sock.sendto(data, self.path)
                return
            except OSError as exc:
                if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):  # no journald: the stream
                    self.sock.close()
                    self.sock = None
            if self.sock is not None:  # too large for a datagram
                try:
                    _send_memfd(self.sock, data, self.path)
                    return
                except OSError:
                    pass  # this record to the stream; the next tries the socket again
        self.fallback.handle(record)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.fallback.close()
        super().close()
