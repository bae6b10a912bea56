"""Logging: the journal's native fields under systemd, JSON lines for shippers, short text on
a terminal.

Every record carries ``event``, ``tick_id`` and ``phase`` (set by ``context``); failures carry
``code``. Callers log with ``log.info("sentence", extra={"event": "...", ...})``.

The formats (``--log-format``; ``auto`` picks one):

- ``journal`` (auto when stdout IS the journal: systemd sets ``JOURNAL_STREAM=<dev>:<ino>`` to
  the stream it hands the service, ``stdout_is_journal`` compares it with stdout's ``fstat``):
  each record is one journal entry in the native protocol (``agent.journald``): MESSAGE is the
  sentence, PRIORITY the level (ERROR 3, WARNING 4, INFO 6, DEBUG 7), the fields
  ``MONKY_CODE``, ``MONKY_REVISION``, ``MONKY_TICK``, ``MONKY_PHASE``, ... So
  ``journalctl -u monky-deployd -p err`` reads as prose and ``MONKY_CODE=BAKE_FAILED`` filters.
  Without a journald socket it falls back to the text lines below, ``<N>``-prefixed.
- ``json`` (auto when stdout is neither the journal nor a terminal): one JSON object per line,
  for log shippers; on the journal each line starts with its syslog priority ``<N>`` (journald
  strips it and stores the line at that priority; ``SyslogLevelPrefix=`` is on by default).
- ``text`` (auto on a terminal): one short line per record; on the journal without the time
  (journald has its own) and ``<N>``-prefixed.

Every record that reaches the handler, the agent's and third-party loggers' alike, passes the
tick's ``Masker`` (``set_masker``; ``core.render.mask``): its message, every extra field (nested
values too) and any traceback text are masked before a formatter (or a journal field) sees them.
"""

from __future__ import annotations

import contextvars
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO, Any

from pythonjsonlogger.json import JsonFormatter

from monky_deployd.core.render.mask import NO_SECRETS, Masker

_tick_id: contextvars.ContextVar[str] = contextvars.ContextVar("tick_id", default="-")
_phase: contextvars.ContextVar[str] = contextvars.ContextVar("phase", default="-")
_masker: contextvars.ContextVar[Masker] = contextvars.ContextVar("masker", default=NO_SECRETS)

_RESERVED = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


def set_tick(tick_id: str) -> None:
    _tick_id.set(tick_id)


def set_masker(masker: Masker) -> None:
    """The masker every log line passes from now on (the tick's, as it learns its secrets)."""
    _masker.set(masker)


def masker() -> Masker:
    return _masker.get()


@contextmanager
def phase(name: str) -> Iterator[None]:
    token = _phase.set(name)
    try:
        yield
    finally:
        _phase.reset(token)


class _ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "event"):
            record.event = record.getMessage().split(" ", 1)[0] if record.msg else "log"
        record.tick_id = _tick_id.get()
        if not hasattr(record, "phase"):
            record.phase = _phase.get()
        return True


class _MaskFilter(logging.Filter):
    """Masks the message, every extra field and the traceback text with the tick's masker."""

    def filter(self, record: logging.LogRecord) -> bool:
        mask = _masker.get()
        if not len(mask):
            return True
        record.msg, record.args = mask(record.getMessage()), None
        for key, value in list(vars(record).items()):
            if key not in _RESERVED:
                setattr(record, key, mask.mask_obj(value))
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = mask(record.exc_text)
        if record.stack_info:
            record.stack_info = mask(record.stack_info)
        return True


_COLOURS = {
    logging.CRITICAL: "\033[1;31m",
    logging.ERROR: "\033[31m",
    logging.WARNING: "\033[33m",
    logging.INFO: "\033[32m",
    logging.DEBUG: "\033[2m",
}
_RESET = "\033[0m"


def _said(value: str, message: str) -> bool:
    """``value`` already stands in ``message`` as a whole word or phrase."""
    if not value:
        return True
    at = message.find(value)
    while at >= 0:
        before = message[at - 1] if at else " "
        after = message[at + len(value)] if at + len(value) < len(message) else " "
        if not (before.isalnum() or before in "_-") and not (after.isalnum() or after in "_-"):
            return True
        at = message.find(value, at + 1)
    return False


class _TextFormatter(logging.Formatter):
    """One line per record for a person: the message on one line (a multi-line message's
    lines joined, no dangling colon), then only the fields the message does not already say
    (``code``, ``hint``, ``outcome`` are usually in the sentence), None values left out. The
    level is coloured when ``colour`` (a terminal without NO_COLOR)."""

    def __init__(self, colour: bool = False, clock: bool = True) -> None:
        super().__init__()
        self.colour = colour
        self.clock = clock  # the time first (not on the journal: journald has its own)

    def format(self, record: logging.LogRecord) -> str:
        from monky_deployd.core.commands.checks import one_line  # text only: off the journal's path

        message = one_line(record.getMessage())
        extras = {
            k: one_line(str(v))
            for k, v in vars(record).items()
            if k not in _RESERVED and k not in ("event", "tick_id", "phase") and v is not None
        }
        tail = " ".join(f"{k}={v}" for k, v in extras.items() if not _said(v, message))
        level = f"{record.levelname:<7}"
        if self.colour:
            level = f"{_COLOURS.get(record.levelno, '')}{level}{_RESET}"
        where = record.phase  # type: ignore[attr-defined]
        head = level if where in ("", "-") else f"{level} [{where}]"  # no phase: no tag
        if self.clock:
            head = f"{self.formatTime(record, '%H:%M:%S')} {head}"
        text = f"{head} {message}" + (f"  ({tail})" if tail else "")
        if record.exc_text:
            text += "\n" + record.exc_text
        return text


def use_colour(stream: IO[str], environ: Mapping[str, str]) -> bool:
    """Colour on a terminal only, and never with NO_COLOR set (https://no-color.org)."""
    if "NO_COLOR" in environ:
        return False
    try:
        return stream.isatty()
    except (ValueError, AttributeError):
        return False


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a logging level: ERROR 3, WARNING 4, INFO 6, DEBUG 7."""
    if levelno >= logging.CRITICAL:
        return 2
    if levelno >= logging.ERROR:
        return 3
    if levelno >= logging.WARNING:
        return 4
    if levelno >= logging.INFO:
        return 6
    return 7


def stdout_is_journal(stream: IO[str], environ: Mapping[str, str]) -> bool:
    """True when ``stream`` is the journal stream systemd named in ``JOURNAL_STREAM``.

    systemd sets ``JOURNAL_STREAM=<st_dev>:<st_ino>`` (decimal) for the stream connected to
    journald; children inherit the variable, so the device and inode must match ``stream``'s own.
    """
    value = environ.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or no file descriptor
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


class _JournalPrefix(logging.Formatter):
    """Prefix every line of ``inner``'s output with ``<N>``, the record's syslog priority."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).split("\n"))


FORMATS = ("auto", "journal", "json", "text")


def setup(
    fmt: str = "auto",
    level: int = logging.INFO,
    *,
    stream: IO[str] | None = None,
    environ: Mapping[str, str] | None = None,
    journal_socket: str | None = None,
) -> None:
    """Configure the root logger once: ``fmt`` is one of ``FORMATS`` (module docstring).

    ``stream`` is stdout unless a test passes another; ``journal_socket`` is journald's native
    socket (``agent.journald.SOCKET``) unless a test passes another.
    """
    out = sys.stdout if stream is None else stream
    env = os.environ if environ is None else environ
    journal = stdout_is_journal(out, env)
    if fmt == "auto":
        fmt = "journal" if journal else "text" if out.isatty() else "json"
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter(
            "%(asctime)s %(levelname)s %(event)s %(tick_id)s %(phase)s %(message)s",
            rename_fields={"asctime": "ts", "levelname": "level"},
            datefmt="%Y-%m-%dT%H:%M:%S%z",
        )
    else:
        on_journal = journal or fmt == "journal"
        formatter = _TextFormatter(
            colour=use_colour(out, env) and not on_journal, clock=not on_journal
        )
    if journal or fmt == "journal":
        formatter = _JournalPrefix(formatter)
    handler: logging.Handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    if fmt == "journal":
        from monky_deployd.agent import journald

        handler = journald.JournalHandler(
            journal_socket or journald.SOCKET, handler, syslog_priority
        )
    handler.addFilter(_ContextFilter())
    handler.addFilter(_MaskFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Third-party chatter (httpx request lines) stays below INFO.
    for noisy in ("httpx", "httpcore", "hvac", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def fields(**kw: Any) -> dict[str, Any]:
    """``extra=`` helper that drops None values."""
    return {k: v for k, v in kw.items() if v is not None}
