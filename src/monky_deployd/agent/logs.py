"""Logging: JSON lines on stdout for journald, or plain text on a terminal.

Every record carries ``event``, ``tick_id`` and ``phase`` (set by ``context``); failures carry
``code``. Callers log with ``log.info("sentence", extra={"event": "...", ...})``.

Every record that reaches the handler, the agent's and third-party loggers' alike, passes the
tick's ``Masker`` (``set_masker``; ``core.mask``): its message, every extra field (nested values
too) and any traceback text are masked before a formatter sees them.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pythonjsonlogger.json import JsonFormatter

from monky_deployd.core.mask import NO_SECRETS, Masker

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


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extras = {
            k: v
            for k, v in vars(record).items()
            if k not in _RESERVED and k not in ("event", "tick_id", "phase")
        }
        tail = " ".join(f"{k}={v}" for k, v in extras.items())
        head = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<7} [{record.phase}]"  # type: ignore[attr-defined]
        return f"{head} {record.getMessage()}" + (f"  ({tail})" if tail else "")


def setup(fmt: str = "auto", level: int = logging.INFO) -> None:
    """Configure the root logger once: ``fmt`` is json, text or auto (text on a terminal)."""
    if fmt == "auto":
        fmt = "text" if sys.stdout.isatty() else "json"
    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(_ContextFilter())
    handler.addFilter(_MaskFilter())
    if fmt == "json":
        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(event)s %(tick_id)s %(phase)s %(message)s",
                rename_fields={"asctime": "ts", "levelname": "level"},
                datefmt="%Y-%m-%dT%H:%M:%S%z",
            )
        )
    else:
        handler.setFormatter(_TextFormatter())
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
