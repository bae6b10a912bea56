"""Entries of the state dir that are not what the agent wrote are set aside, not tripped over.

A record path (``held.json``, ``ledger.json`` ...) or an outbox entry that is a FIFO, a
directory, a socket or a device, or a record larger than its cap, is moved into
``<state_dir>/aside/`` (0700) under ``<ns>-<name>``, and a warning names it (``state.aside``):
the tick goes on as if the record were absent, and the next one finds the path free. An outbox
entry that is a symbolic link is moved there too, unfollowed. ``aside/`` keeps the newest
``ASIDE_MAX`` entries (the evidence of what was planted); older ones are removed (a directory
with ``shutil.rmtree``, which follows no link inside it). Nothing in ``aside/`` is ever read.

A symbolic link at a record path, at one of its directories' paths (``docker/``,
``revisions/``, ``outbox/``) or anywhere else among the state dir's own entries is set aside the
same way (the link itself, never followed: what it points at is untouched), so a planted link
never stops a tick from restoring a dead service. A link inside ``docker/`` or ``revisions/``
(where the agent writes the credential, a compose file, a .env) still refuses the state dir
(STATE_LINK, ``StateDir.refuse_links``), and so does the state dir itself being a link into a
loop; ``state_dir`` itself may be a link an operator chose.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
from pathlib import Path

from monky_deployd.adapters.fsread import kind_of, too_large
from monky_deployd.adapters.fsutil import ensure_private_dir
from monky_deployd.core.errors import DeployError

__all__ = ["ASIDE_MAX", "judge", "set_aside", "sweep"]

ASIDE_MAX = 20

log = logging.getLogger("monky_deployd")


def judge(path: Path, cap: int, *, links: bool = False) -> str | None:
    """Why the entry at ``path`` must be set aside (its ``lstat``: no open, nothing read), or
    None when it is absent or a regular file within ``cap``. ``links``: a symbolic link is set
    aside too (else it is left for STATE_LINK)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return kind_of(st.st_mode) if links else None
    if not stat.S_ISREG(st.st_mode):
        return kind_of(st.st_mode)
    return too_large(cap) if st.st_size > cap else None


def sweep(files: list[tuple[Path, int]], dirs: list[Path], aside_dir: Path) -> list[Path]:
    """Set aside each of ``files`` that is not a regular file within its cap (a symbolic link
    too) and each of ``dirs`` that is not a directory (a link too); ``aside_dir`` itself, when
    not a directory, is removed. The paths set aside."""
    done: list[Path] = []
    for path, cap in files:
        why = judge(path, cap, links=True)
        if why is not None and set_aside(path, aside_dir, why):
            done.append(path)
    for path in [*dirs, aside_dir]:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        if path == aside_dir:
            with contextlib.suppress(OSError):
                os.unlink(path)
        elif set_aside(path, aside_dir, kind_of(st.st_mode)):
            done.append(path)
    return done


def set_aside(path: Path, aside_dir: Path, why: str) -> bool:
    """Move ``path`` (any type, unfollowed) into ``aside_dir``; warn naming it and why. False
    when it could not be moved (then it stays, read as absent)."""
    try:
        ensure_private_dir(aside_dir)
        target = aside_dir / f"{time.time_ns():020d}-{path.name}"
        os.rename(path, target)
    except (OSError, DeployError) as exc:  # DeployError: aside/ itself is a planted link
        log.warning(
            f"{path} is {why} and could not be set aside ({exc}); it is read as absent",
            extra={"event": "state.aside", "path": str(path)},
        )
        return False
    log.warning(
        f"{path} is {why}, not a record the agent wrote: moved to {target} and read as absent",
        extra={"event": "state.aside", "path": str(path), "to": str(target)},
    )
    _prune(aside_dir)
    return True


def _prune(aside_dir: Path) -> None:
    try:
        names = sorted(e.name for e in os.scandir(aside_dir))
    except OSError:
        return
    for name in names[: max(0, len(names) - ASIDE_MAX)]:
        old = aside_dir / name
        with contextlib.suppress(OSError):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                os.unlink(old)
