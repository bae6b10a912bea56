"""Atomic, private file writes.

Everything the agent persists goes through ``atomic_write``: a temporary file in the same
directory, written, fsynced, chmod-ed, renamed over the target, then the directory fsynced. A
crash at any point leaves either the previous file or the new one, never a torn mix.

No link is followed: the directory is opened with O_NOFOLLOW and every file in it relative to
that fd, also with O_NOFOLLOW; a link where the agent writes is refused (``STATE_LINK``), so a
link planted in the state dir never truncates, chmods or fills a file elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError


def link_error(path: Path) -> DeployError:
    """STATE_LINK: ``path``, which the agent writes, is a symbolic link (or not what it must be)."""
    try:
        where = f" (to {os.readlink(path)})"
    except OSError:
        where = ""
    return DeployError(
        f"{path} is a symbolic link{where}; the agent follows no link in its state dir, so it "
        "changed nothing",
        code=Code.STATE_LINK,
        hint=f"who put the link at {path} (only the agent's user can write its state dir); "
        "remove it, the agent recreates what it needs",
    )


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def refuse_link(path: Path) -> None:
    """Raise STATE_LINK when ``path`` itself is a symbolic link (its parents may be)."""
    if _is_link(path):
        raise link_error(path)


def ensure_private_dir(path: Path, mode: int = 0o700, *, follow_link: bool = False) -> Path:
    """Create ``path`` (and parents) if missing and force its mode to ``mode``; a link at
    ``path`` is refused (STATE_LINK), never followed to chmod what it points at, unless
    ``follow_link`` (``state_dir`` itself: where it points is the operator's choice)."""
    nofollow = 0 if follow_link else os.O_NOFOLLOW
    try:
        path.mkdir(parents=True, exist_ok=True, mode=mode)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | nofollow)
        try:
            if (os.fstat(fd).st_mode & 0o777) != mode:
                os.fchmod(fd, mode)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) or _is_link(path):
            raise link_error(path) from exc
        raise DeployError(
            f"cannot create directory {path} with mode {mode:o}: {exc.strerror or exc}",
            code=Code.STATE_UNWRITABLE,
            hint=f"ownership and permissions of {path.parent} for user {user_name()}",
        ) from exc
    return path


def open_dir(directory: Path) -> int:
    """An fd of ``directory``, opened without following a link at its last component."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(directory):
            raise link_error(directory) from exc
        raise


def atomic_write(path: Path, data: bytes, mode: int = 0o600, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically; the file ends up with ``mode``. Neither
    ``path`` nor its directory may be a symbolic link (STATE_LINK): every open is relative to
    the directory's fd, with O_NOFOLLOW. ``durable=False`` skips both fsyncs: a crashed
    process still leaves the old file or the new one, but after a power loss the file may be
    the old one or (on some filesystems) empty. Only for records whose loss costs little and
    whose reader copes with an empty file: the tick ledger on a steady no-op tick."""
    directory = path.parent
    tmp_name = ""
    dir_fd = -1
    try:
        dir_fd = open_dir(directory)
        try:
            if stat.S_ISLNK(os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                raise link_error(path)
        except FileNotFoundError:
            pass
        tmp_name = f".{path.name}.{secrets.token_hex(6)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp_name, flags, 0o600, dir_fd=dir_fd)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp_name = ""
        if durable:
            os.fsync(dir_fd)
    except OSError as exc:
        raise DeployError(
            f"cannot write {path}: {exc.strerror or exc}",
            code=Code.STATE_UNWRITABLE,
            hint=f"free space and permissions of {directory} for user {user_name()}",
        ) from exc
    finally:
        if dir_fd >= 0:
            if tmp_name:
                with contextlib.suppress(OSError):
                    os.unlink(tmp_name, dir_fd=dir_fd)
            os.close(dir_fd)


def fill(path: Path, size: int) -> None:
    """Write and fsync ``size`` bytes to ``path`` (created 0600, no link followed): proof that
    the filesystem has room for them. Raises OSError (ENOSPC, EDQUOT, EACCES ...)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(os.urandom(size))  # not zeros: a compressing filesystem keeps those
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def read_if_exists(path: Path, cap: int = 64 * 1024 * 1024) -> bytes | None:
    """The file's bytes, or None when it does not exist (``fsread.read_entry``: no link
    followed, no FIFO waited on, at most ``cap`` bytes). A link at ``path`` is refused
    (STATE_LINK); anything else that is not a readable regular file is STATE_UNWRITABLE."""
    from monky_deployd.adapters.fsread import BadEntry, read_entry

    try:
        return read_entry(path, cap)
    except BadEntry as exc:
        if exc.wrong_type and _is_link(exc.path):
            raise link_error(exc.path) from None
        raise DeployError(
            f"cannot read {exc}",
            code=Code.STATE_UNWRITABLE,
            hint=f"what is at {exc.path} (the agent writes a regular file there), its "
            f"ownership and mode for user {user_name()}",
        ) from None


def user_name(uid: int | None = None) -> str:
    """The account name of ``uid`` (default: this process's effective user), or ``uid N``."""
    import pwd

    uid = os.geteuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
