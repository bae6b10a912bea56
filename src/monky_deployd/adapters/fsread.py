"""The one reader of what the agent finds in its state dir and in the update-lock directory.

Anything there can be torn, replaced or planted (the lock directory is bind-mounted into apps'
containers by design), so every read of a record, a lock file or an outbox entry goes through
``read_entry``:

- no link is followed: the parent directory is opened with O_NOFOLLOW (or given as an fd) and
  the entry relative to it, also with O_NOFOLLOW;
- the open never blocks (O_NONBLOCK: a FIFO answers at once, with nothing) and never makes a
  terminal the agent's (O_NOCTTY);
- only a regular file is read (``fstat`` after the open: what was opened is what is judged);
- at most ``cap + 1`` bytes are read, so an entry of any size costs at most its cap in memory
  (a 600 MiB ledger is refused after 256 KiB + 1 bytes, never read whole);
- every fault is a ``BadEntry`` naming the path and why (``a FIFO``, ``a directory``,
  ``larger than 262144 bytes``, ``not UTF-8 text (byte 0xff at offset 3)``), never the content.

``BadEntry`` is a ``ValueError``: a caller that reads an unreadable record as absent keeps doing
so. ``wrong_type`` says the entry is not a file at all (a FIFO, a directory, a socket, a device
or a link): the tick sets such an entry aside (``adapters.box.state.aside``), ``status`` only says
so.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

__all__ = ["BadEntry", "decode", "kind_of", "read_entry"]

_CHUNK = 64 * 1024


class BadEntry(ValueError):
    """The entry at ``path`` is not a readable record; ``why`` says what it is instead."""

    def __init__(self, path: Path, why: str, *, wrong_type: bool) -> None:
        super().__init__(f"{path} is {why}")
        self.path = path
        self.why = why
        self.wrong_type = wrong_type


def kind_of(mode: int) -> str:
    """What a non-regular entry is, in words (``a FIFO``, ``a directory`` ...)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def too_large(cap: int) -> str:
    return f"larger than {cap} bytes"


def read_entry(path: Path, cap: int, *, dir_fd: int | None = None) -> bytes | None:
    """The bytes of the regular file ``path`` (at most ``cap``), or None when it does not
    exist. ``dir_fd``: an open fd of ``path``'s directory (else the directory is opened here,
    not following a link at its last component). Raises ``BadEntry``."""
    own_fd = dir_fd is None
    if dir_fd is None:
        try:
            dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise BadEntry(
                    path.parent, "not a directory (or a link)", wrong_type=True
                ) from None
            raise BadEntry(path, f"unreadable ({exc.strerror or exc})", wrong_type=False) from None
    try:
        return _read_at(dir_fd, path, cap)
    finally:
        if own_fd:
            os.close(dir_fd)


def _read_at(dir_fd: int, path: Path, cap: int) -> bytes | None:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path.name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR, errno.EOPNOTSUPP):
            try:
                mode = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except OSError:
                mode = stat.S_IFLNK if exc.errno == errno.ELOOP else 0
            raise BadEntry(path, kind_of(mode), wrong_type=True) from None
        raise BadEntry(path, f"unreadable ({exc.strerror or exc})", wrong_type=False) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadEntry(path, kind_of(st.st_mode), wrong_type=True)
        if st.st_size > cap:
            raise BadEntry(path, too_large(cap), wrong_type=False)
        parts: list[bytes] = []
        got = 0
        while got <= cap:
            chunk = os.read(fd, min(_CHUNK, cap + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > cap:  # grew while read
            raise BadEntry(path, too_large(cap), wrong_type=False)
        return b"".join(parts)
    except OSError as exc:
        raise BadEntry(path, f"unreadable ({exc.strerror or exc})", wrong_type=False) from None
    finally:
        os.close(fd)


def decode(path: Path, raw: bytes) -> str:
    """``raw`` as UTF-8 text; ``BadEntry`` naming the first bad byte and its offset."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start]
        why = f"not UTF-8 text (byte 0x{bad:02x} at offset {exc.start})"
        raise BadEntry(path, why, wrong_type=False) from None
