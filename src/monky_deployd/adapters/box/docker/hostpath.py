"""Host paths followed as the kernel follows them when the engine mounts one, and held.

``follow(path)``: the path walked one part at a time with ``lstat`` (every link's target read
and walked in its turn, ``..`` applied to what was reached, as the kernel does), giving a
``core.admission.paths.Where``: the real path, the first link whose target does not exist, every
path looked at, each existing part's identity ``(st_dev, st_ino)``. A part that does not exist
ends the identities; the parts after it are kept as written (the engine creates them as plain
directories); a ``..`` past it is not followed (the kernel stops at the missing part).

``write_held`` / ``held_now``: a revision's pinned paths as its ``up`` found them
(``paths.held.json``, atomic, 0600), and that record against the box now, on every tick: each
path followed again, the box's writable mounts by identity (``core.admission.paths.moved``).
Nothing here runs a subprocess; the steady tick pays a few ``lstat`` calls per path and two
Engine API requests.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.state.revisions import HELD_FILE
from monky_deployd.core.admission.paths import Hold, Where

if TYPE_CHECKING:
    from monky_deployd.config import DockerCfg
    from monky_deployd.core.admission.artifact import Mount

MAX_LINKS = 40  # as the kernel's ELOOP
HELD_CAP = 1024 * 1024


def follow(path: str) -> Where:
    """``path`` followed (see the module); ``real`` is "" when it cannot be (relative, a loop,
    a part this agent may not search)."""
    if not path.startswith("/"):
        return Where(path, "")
    todo = [p for p in reversed(path.split("/")) if p]
    visited: list[str] = []
    current, chain = "/", [("/", *_ident(os.lstat("/")))]
    links, dangling, missing = 0, "", False
    while todo:
        name = todo.pop()
        if name == ".":
            continue
        if name == "..":
            if missing:  # above a part that does not exist: the kernel stops there
                return Where(path, "", dangling, tuple(visited))
            current = os.path.dirname(current) or "/"
            chain = chain[:-1] if len(chain) > 1 else chain
            continue
        candidate = os.path.join(current, name)
        visited.append(candidate)
        if missing:
            current = candidate
            continue
        try:
            st = os.lstat(candidate)
        except FileNotFoundError:
            missing, current = True, candidate
            continue
        except OSError:  # EACCES, ENOTDIR, ENAMETOOLONG: what it leads to cannot be known
            return Where(path, "", dangling, tuple(visited))
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                return Where(path, "", dangling, tuple(visited))
            try:
                target = os.readlink(candidate)
            except OSError:
                return Where(path, "", dangling, tuple(visited))
            if not dangling and not os.path.exists(candidate):
                dangling = candidate  # (a loop too: nothing there the engine could mount)
            if target.startswith("/"):
                current, chain = "/", chain[:1]
            todo.extend(p for p in reversed(target.split("/")) if p)
            continue
        current = candidate
        chain.append((candidate, st.st_dev, st.st_ino))
    is_dir = not missing and chain[-1][0] == current and _isdir(current)
    return Where(path, current, dangling, tuple(visited), tuple(chain), is_dir)


def _ident(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _isdir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def identity(path: str) -> tuple[int, int] | None:
    """``path``'s identity, links followed (None: nothing there, or not to be known)."""
    try:
        return _ident(os.stat(path))
    except (OSError, ValueError):
        return None


def with_identity(mounts: Iterable[Mount]) -> list[Mount]:
    """The engine's mounts, each with its source's identity in this agent's view."""
    return [m._replace(ident=identity(m.source)) for m in mounts]


def write_held(revision_dir: Path, holds: Iterable[Hold]) -> None:
    """The revision's held paths (``core.admission.paths.held_text``), atomic, 0600."""
    from monky_deployd.adapters.fsutil import atomic_write
    from monky_deployd.core.admission.paths import held_text

    atomic_write(revision_dir / HELD_FILE, held_text(holds).encode(), 0o600)


def read_held(revision_dir: Path) -> list[Hold] | None:
    """The revision's held paths (None: no record: an up before this agent held paths)."""
    from monky_deployd.adapters import fsread
    from monky_deployd.core.admission.paths import read_held as parse

    try:
        raw = fsread.read_entry(revision_dir / HELD_FILE, HELD_CAP)
    except fsread.BadEntry:
        return None
    return parse(raw) if raw is not None else None


def held_now(docker: DockerCfg, revision_dir: Path) -> tuple[tuple[str, str], ...]:
    """``(service, why)`` for each held path of the revision that no longer leads where it
    did, or that a container can now write on the way to (``core.admission.paths.moved``);
    () when nothing is held. The engine's mounts are asked only when something is held."""
    holds = read_held(revision_dir)
    if not holds:
        return ()
    from monky_deployd.adapters.box.docker import docker_api
    from monky_deployd.core.admission.paths import moved

    now = {h.path: follow(h.path) for h in holds}
    writers = with_identity(m for m in docker_api.mounts(docker) if m.writable)
    return tuple(moved(holds, now, writers))
