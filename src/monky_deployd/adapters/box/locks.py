"""The update-lock directory (``locks.dir``): read by every apply, written by operators.

An app bind-mounts the directory and creates ``<name>.lock`` while it must not be restarted
(a long job, a migration); ``monky-deployd lock take|release`` does the same for an operator.
The file's modification time is "since"; its content may say who holds it, why, and its own TTL
(``core.lifecycle.gates.parse_lock``: printable, capped). A missing directory means no locks. Apps
write here, so nothing in it is trusted: every file is read through ``fsread.read_entry`` (no link
followed, no FIFO waited on, at most ``MAX_LOCK_BYTES``), and an entry that is not a regular
file is no lock (``scan``: ignored and named).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from monky_deployd.adapters import fsread
from monky_deployd.adapters.fsutil import atomic_write
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle.gates import (
    LOCK_SUFFIX,
    NAME_RE,
    NAME_SHOWN,
    Lock,
    parse_lock,
    printable,
)

MAX_LOCK_BYTES = 4096
MAX_LOCKS_READ = 256  # lock files whose content is read; beyond, they lock with the default TTL


@dataclass(frozen=True)
class Scan:
    """The lock directory as read: its locks (by name) and the ``*.lock`` entries that are not
    lock files (a FIFO, a directory, a link, a socket), each as (printable name, what it is)."""

    locks: tuple[Lock, ...] = ()
    ignored: tuple[tuple[str, str], ...] = ()


def read_locks(lock_dir: Path) -> tuple[Lock, ...]:
    """Every lock file in ``lock_dir``, by name (``scan``)."""
    return scan(lock_dir).locks


def scan(lock_dir: Path) -> Scan:
    """Every ``*.lock`` entry of ``lock_dir``, by name. A regular file is a lock (its
    modification time and, for the first ``MAX_LOCKS_READ``, its first ``MAX_LOCK_BYTES``
    read through ``fsread.read_entry``: no link followed, nothing waited on); an unreadable
    one, a larger one or a hard link to some other file still locks, its content unread.
    Anything else is not a lock: ignored, and named in ``Scan.ignored``."""
    try:
        dir_fd = os.open(lock_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return Scan()
    except OSError as exc:
        raise DeployError(
            f"cannot list the update-lock directory {lock_dir}: {exc.strerror}",
            code=Code.STATE_UNWRITABLE,
            hint=f"permissions of {lock_dir} (locks.dir in config.yaml)",
        ) from exc
    try:
        with os.scandir(dir_fd) as it:
            names = sorted(e.name for e in it if e.name.endswith(LOCK_SUFFIX))
        locks: list[Lock] = []
        ignored: list[tuple[str, str]] = []
        for name in names:
            shown = name.removesuffix(LOCK_SUFFIX)
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # released while we looked
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                ignored.append((printable(shown, NAME_SHOWN), fsread.kind_of(st.st_mode)))
                continue
            content = b""
            if len(locks) < MAX_LOCKS_READ and st.st_nlink == 1:
                with contextlib.suppress(fsread.BadEntry):
                    content = (
                        fsread.read_entry(lock_dir / name, MAX_LOCK_BYTES, dir_fd=dir_fd) or b""
                    )
            locks.append(parse_lock(shown, st.st_mtime, content))
        return Scan(tuple(locks), tuple(ignored))
    finally:
        os.close(dir_fd)


def _path(lock_dir: Path, name: str) -> Path:
    if not NAME_RE.fullmatch(name):
        raise DeployError(
            f"{name!r} is not a lock name (1-64 of A-Z a-z 0-9 . _ -)",
            code=Code.CONFIG_INVALID,
            hint="the --name given to `monky-deployd lock`",
        )
    return lock_dir / f"{name}{LOCK_SUFFIX}"


def take(lock_dir: Path, name: str, holder: str, reason: str, ttl_s: float | None) -> Path:
    """Write ``<name>.lock`` (0644: apps may read it; the directory is created 0755)."""
    path = _path(lock_dir, name)
    body: dict[str, object] = {"holder": holder, "reason": reason}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    try:
        lock_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        atomic_write(path, (json.dumps(body) + "\n").encode(), 0o644)
    except OSError as exc:
        raise DeployError(
            f"cannot write the lock {path}: {exc.strerror}",
            code=Code.STATE_UNWRITABLE,
            hint=f"permissions of {lock_dir} (locks.dir in config.yaml)",
        ) from exc
    return path


def release(lock_dir: Path, name: str) -> bool:
    """Remove ``<name>.lock``; False when it did not exist."""
    path = _path(lock_dir, name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise DeployError(
            f"cannot remove the lock {path}: {exc.strerror}",
            code=Code.STATE_UNWRITABLE,
            hint=f"permissions of {lock_dir}",
        ) from exc
    return True
