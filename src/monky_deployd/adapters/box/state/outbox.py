"""The report outbox, ``<state_dir>/outbox/``: reports tenancy did not take, for a later tick.

An entry is ``<seq>-<tick_id>.json`` (0600, the report body, already masked): ``seq`` is one
more than the largest one there (15 digits or more), so the entries' order is the order the
agent kept them in, whatever the clock did (a clock stepped back never makes the newest report
the oldest). At most ``OUTBOX_MAX`` are kept: putting one more removes the lowest sequences.

Only the agent's own entries are delivered: a regular file with such a name, at most
``ENTRY_CAP`` bytes, read through ``fsread.read_entry`` (no link followed, no FIFO waited on).
Anything else in the outbox (a directory, a link, a FIFO, a socket, a file of another name or
too large) is set aside (``aside.set_aside``, with a warning naming it), never followed, never
posted, and never a fault of the tick.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from monky_deployd.adapters import fsread
from monky_deployd.adapters.box.state import aside
from monky_deployd.adapters.fsutil import atomic_write, ensure_private_dir
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

__all__ = ["ENTRY_CAP", "OUTBOX_MAX", "drop", "entries", "put", "read"]

OUTBOX_MAX = 20
ENTRY_CAP = 1024 * 1024  # a report body is a few KiB: its texts are cut (core.records.ledger, wire)
_NAME = re.compile(r"(?P<seq>[0-9]{1,30})-[A-Za-z0-9._-]{1,128}\.json")


def _seq(name: str) -> int | None:
    m = _NAME.fullmatch(name)
    return int(m["seq"]) if m else None


def entries(directory: Path, aside_dir: Path) -> list[Path]:
    """The kept reports, lowest sequence first; empty when there is no outbox. Whatever is not
    the agent's own entry is set aside on the way."""
    try:
        found = list(_scan(directory))
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        aside.set_aside(directory, aside_dir, "not a directory")
        return []
    except OSError as exc:
        raise DeployError(
            f"cannot list the report outbox {directory}: {exc.strerror}",
            code=Code.STATE_UNWRITABLE,
            hint=f"ownership and permissions of {directory.parent}",
        ) from exc
    kept: list[tuple[int, Path]] = []
    for name in found:
        path = directory / name
        seq = _seq(name)
        why = "not a report the agent kept" if seq is None else aside.judge(path, ENTRY_CAP)
        if why is None and seq is not None:
            kept.append((seq, path))
        elif not name.startswith("."):  # a write in progress (atomic_write's temporary)
            aside.set_aside(path, aside_dir, why or "not a report the agent kept")
    return [p for _, p in sorted(kept)]


def _scan(directory: Path) -> list[str]:
    with os.scandir(directory) as it:
        return [e.name for e in it]


def put(directory: Path, aside_dir: Path, tick_id: str, body: bytes) -> Path:
    """Keep ``body`` as the newest entry; remove the lowest sequences beyond OUTBOX_MAX."""
    ensure_private_dir(directory)
    kept = entries(directory, aside_dir)
    seq = max((_seq(p.name) or 0 for p in kept), default=0) + 1
    tick = re.sub(r"[^A-Za-z0-9._-]", "_", tick_id)[:128] or "tick"
    path = directory / f"{seq:015d}-{tick}.json"
    atomic_write(path, body, 0o600)
    kept.append(path)
    for stale in kept[: max(0, len(kept) - OUTBOX_MAX)]:
        stale.unlink(missing_ok=True)
    return path


def read(path: Path) -> bytes:
    """An entry's bytes (at most ENTRY_CAP); ``fsread.BadEntry`` when it is not readable as one
    (gone, a link, not a regular file, too large)."""
    raw = fsread.read_entry(path, ENTRY_CAP)
    if raw is None:
        raise fsread.BadEntry(path, "gone", wrong_type=False)
    return raw


def drop(path: Path, aside_dir: Path) -> None:
    """Remove an entry (delivered, refused for good or not a report); one that is not a
    regular file (replaced meanwhile) is set aside instead, never followed."""
    why = aside.judge(path, ENTRY_CAP)
    if why is not None and not why.startswith("larger"):
        aside.set_aside(path, aside_dir, why)
        return
    try:
        path.unlink(missing_ok=True)
    except OSError:
        aside.set_aside(path, aside_dir, "not removable")
