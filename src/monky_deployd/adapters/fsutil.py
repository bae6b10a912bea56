"""Atomic, private file writes.

Everything the agent persists goes through ``atomic_write``: a temporary file in the same
directory, written, fsynced, chmod-ed, renamed over the target, then the directory fsynced. A
crash at any point leaves either the previous file or the new one, never a torn mix.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from monky_deployd.core.errors import Code, DeployError


def ensure_private_dir(path: Path, mode: int = 0o700) -> Path:
    """Create ``path`` (and parents) if missing and force its mode to ``mode``."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=mode)
        if (path.stat().st_mode & 0o777) != mode:
            os.chmod(path, mode)
    except OSError as exc:
        raise DeployError(
            f"cannot create directory {path} with mode {mode:o}: {exc.strerror or exc}",
            code=Code.STATE_UNWRITABLE,
            hint=f"ownership and permissions of {path.parent} for user {user_name()}",
        ) from exc
    return path


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically; the file ends up with ``mode``."""
    directory = path.parent
    tmp_name = ""
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_name, path)
        tmp_name = ""
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise DeployError(
            f"cannot write {path}: {exc.strerror or exc}",
            code=Code.STATE_UNWRITABLE,
            hint=f"free space and permissions of {directory} for user {user_name()}",
        ) from exc
    finally:
        if tmp_name:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def read_if_exists(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DeployError(
            f"cannot read {path}: {exc.strerror or exc}",
            code=Code.STATE_UNWRITABLE,
            hint=f"ownership and mode of {path} for user {user_name()}",
        ) from exc


def user_name(uid: int | None = None) -> str:
    """The account name of ``uid`` (default: this process's effective user), or ``uid N``."""
    import pwd

    uid = os.geteuid() if uid is None else uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
