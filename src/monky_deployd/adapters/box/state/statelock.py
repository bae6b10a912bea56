"""The tick lock, ``<state_dir>/lock``: one tick at a time (``flock``), the holder's pid inside."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from monky_deployd.adapters.fsutil import link_error
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

__all__ = ["hold"]


@contextmanager
def hold(path: Path, wait_s: float) -> Iterator[None]:
    """Hold the tick lock at ``path``; wait up to ``wait_s`` for another tick, then raise
    LOCK_BUSY. The file is opened without following a link and without blocking (a FIFO
    planted there is set aside before, by ``StateDir.ensure``)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise link_error(path) from exc
        raise DeployError(
            f"cannot open the lock file {path}: {exc.strerror}",
            code=Code.STATE_UNWRITABLE,
            hint=f"ownership of {path.parent}",
        ) from exc
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    raise DeployError(
                        f"another monky-deployd tick{holder} holds {path}; "
                        f"waited {wait_s:.0f} s and gave up without touching anything",
                        code=Code.LOCK_BUSY,
                        hint="`systemctl status monky-deployd` or `pgrep -af monky-deployd`; "
                        "run again when it has finished",
                    ) from exc
                time.sleep(0.1)
        with contextlib.suppress(OSError):  # the holder's pid is a courtesy: a full disk
            os.ftruncate(fd, 0)  # must not turn the lock into an INTERNAL fault
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except (OSError, ValueError):
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
