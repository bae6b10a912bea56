"""The update-lock directory (``locks.dir``): read by every apply, written by operators.

An app bind-mounts the directory and creates ``<name>.lock`` while it must not be restarted
(a long job, a migration); ``monky-deployd lock take|release`` does the same for an operator.
The file's modification time is "since"; its content may say who holds it, why, and its own TTL
(``core.gates.parse_lock``). A missing directory means no locks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from monky_deployd.adapters.fsutil import atomic_write
from monky_deployd.core.errors import Code, DeployError
from monky_deployd.core.gates import LOCK_SUFFIX, NAME_RE, Lock, parse_lock

MAX_LOCK_BYTES = 4096


def read_locks(lock_dir: Path) -> tuple[Lock, ...]:
    """Every ``*.lock`` file in ``lock_dir``, by name; an unreadable one still locks."""
    try:
        entries = sorted(p for p in lock_dir.iterdir() if p.name.endswith(LOCK_SUFFIX))
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise DeployError(
            f"cannot list the update-lock directory {lock_dir}: {exc.strerror}",
            code=Code.STATE_UNWRITABLE,
            hint=f"permissions of {lock_dir} (locks.dir in config.yaml)",
        ) from exc
    locks: list[Lock] = []
    for path in entries:
        name = path.name.removesuffix(LOCK_SUFFIX)
        try:
            since = path.stat().st_mtime
        except FileNotFoundError:
            continue  # released while we looked
        try:
            with open(path, "rb") as fh:
                content = fh.read(MAX_LOCK_BYTES)
        except OSError:
            content = b""
        locks.append(parse_lock(name, since, content))
    return tuple(locks)


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
