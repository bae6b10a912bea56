"""Entries of the state dir that are not what the agent wrote are set aside, not tripped over.

Every kind of entry that is not what the agent writes at a path is one case, judged by its
``lstat`` (nothing opened, no link followed): a symbolic link (to a file, a directory, a FIFO,
itself, nowhere), a FIFO, a socket, a device, a directory at a record's path, a record larger
than its cap, something else at a directory's path. ``strays`` finds them, everywhere the agent
reads or writes in its state dir:

- a record path (``held.json``, ``ledger.json`` ... ``StateDir``'s ``CAPS``) or ``.token.room``;
- ``docker/``, ``revisions/``, ``outbox/`` (not a directory), and a link anywhere else among the
  state dir's own entries;
- ``docker/config.json`` (the registry login) and a link anywhere else in ``docker/``;
- in ``revisions/``: an entry that is neither a directory nor a regular file, and a revision
  directory holding a link anywhere among its entries or a ``compose.yaml``, ``.env``, labels,
  pins or ``release.json`` that is not a regular file: the whole revision is set aside (compose
  reads those files by path, following links and opening FIFOs; a revision missing one of them
  is not one the agent wrote, so none of it runs). Its ``.env`` (the secrets it held) is removed
  from ``aside/``; what was planted stays.

``sweep`` moves each into ``<state_dir>/aside/`` (0700) under ``<ns>-<path>`` (its path under the
state dir, ``/`` written ``%``), and a warning names it (``state.aside``): the tick goes on as if
the entry were absent, and the next one finds the path free. The outbox sets its own entries
aside the same way (``adapters.box.state.outbox``). ``aside/`` keeps the newest ``ASIDE_MAX``
entries (the evidence of what was planted); older ones are removed (a directory with
``shutil.rmtree``, which follows no link inside it). Nothing in ``aside/`` is ever read: ``listed``
gives each entry's path, kind (its ``lstat``) and time, for ``status``.

What stays a refusal (STATE_LINK): ``state_dir`` itself a link into a loop (``state_dir`` may be
a link an operator chose: the agent works in its target); a link that could not be moved aside
(``StateDir.refuse_links``; anything else that could not be moved is read as absent); a link
that appears after the sweep, while the tick runs (``fsutil``: every write is O_NOFOLLOW).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from monky_deployd.adapters.box.state import revisions as rev
from monky_deployd.adapters.fsread import kind_of, too_large
from monky_deployd.adapters.fsutil import ensure_private_dir
from monky_deployd.core.faults import DeployError

__all__ = ["ASIDE_MAX", "Aside", "judge", "listed", "set_aside", "strays", "sweep"]

ASIDE_MAX = 20
DIRS = ("docker", "revisions", "outbox")  # the state dir's own directories
CONFIG_NAME = "config.json"  # docker/'s one file, the registry login (docker_config writes it)
LOGIN = (CONFIG_NAME, 64 * 1024 * 1024)  # and fsutil.read_if_exists's cap for it
REVISION_FILES = (
    *(rev.COMPOSE_FILE, rev.ENV_FILE, rev.MODEL_FILE, rev.LABELS_FILE, rev.PINS_FILE),
    *(rev.RELEASE_FILE, rev.HELD_FILE),
)

log = logging.getLogger("monky_deployd")


@dataclass(frozen=True)
class Aside:
    """An entry in ``aside/``: the path it was found at (under the state dir), what it is, and
    when it was moved (seconds)."""

    path: str
    kind: str
    at: float


def judge(path: Path, cap: int) -> str | None:
    """Why the entry at ``path`` must be set aside (its ``lstat``: no open, nothing read), or
    None when it is absent or a regular file within ``cap``. A symbolic link is one kind among
    the others (``fsread.kind_of``)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return kind_of(st.st_mode)
    return too_large(cap) if st.st_size > cap else None


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _links(directory: Path, skip: set[str]) -> list[tuple[Path, str]]:
    """Every symbolic link among ``directory``'s entries but ``skip`` (none when it is not a
    directory)."""
    try:
        with os.scandir(directory) as entries:
            return [
                (Path(e.path), "a symbolic link")
                for e in entries
                if e.is_symlink() and e.name not in skip
            ]
    except OSError:
        return []


def _revision(path: Path) -> str | None:
    """Why the revision directory ``path`` must be set aside whole, or None."""
    try:
        with os.scandir(path) as entries:
            for e in entries:
                if e.is_symlink():
                    return f"a revision holding a symbolic link ({e.name})"
                if e.name in REVISION_FILES and not e.is_file(follow_symlinks=False):
                    kind = kind_of(e.stat(follow_symlinks=False).st_mode)
                    return f"a revision whose {e.name} is {kind}"
    except OSError:
        return None
    return None


def strays(root: Path, caps: Mapping[str, int]) -> list[tuple[Path, str]]:
    """What the state dir ``root`` holds where the agent reads or writes that it never wrote
    there (the module's list), each with why; reads nothing but directory entries and
    ``lstat``s. ``caps``: each record at the top with the most bytes it may have."""
    found: list[tuple[Path, str]] = []
    for name, cap in caps.items():
        why = judge(root / name, cap)
        if why is not None:
            found.append((root / name, why))
    for name in DIRS:
        st = _lstat(root / name)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            found.append((root / name, kind_of(st.st_mode)))
    found += _links(root, {*caps, *DIRS, "aside"})
    docker = root / "docker"
    if (st := _lstat(docker)) is not None and stat.S_ISDIR(st.st_mode):
        why = judge(docker / LOGIN[0], LOGIN[1])
        found += [(docker / LOGIN[0], why)] if why is not None else []
        found += _links(docker, {LOGIN[0]})
    revisions = root / "revisions"
    if (st := _lstat(revisions)) is not None and stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError), os.scandir(revisions) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    why = _revision(Path(e.path))
                elif not e.is_file(follow_symlinks=False):
                    why = kind_of(e.stat(follow_symlinks=False).st_mode)
                else:
                    why = None  # a plain file there is never read
                if why is not None:
                    found.append((Path(e.path), why))
    return found


def sweep(root: Path, caps: Mapping[str, int], aside_dir: Path) -> list[Path]:
    """Set aside each of ``strays``; ``aside_dir`` itself, when not a directory, is removed.
    The paths set aside."""
    st = _lstat(aside_dir)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError):
            os.unlink(aside_dir)
    done: list[Path] = []
    for path, why in strays(root, caps):
        target = set_aside(path, aside_dir, why)
        if target is None:
            continue
        done.append(path)
        env = target / ".env"
        if path.parent.name == "revisions" and (st := _lstat(env)) and stat.S_ISREG(st.st_mode):
            with contextlib.suppress(OSError):  # its secrets do not stay at rest in aside/
                os.unlink(env)
    return done


def _label(path: Path, aside_dir: Path) -> str:
    """``path`` under the state dir, ``/`` written ``%`` (no state entry's name holds one)."""
    try:
        rel = path.relative_to(aside_dir.parent)
    except ValueError:
        rel = Path(path.name)
    return str(rel).replace("/", "%")


def set_aside(path: Path, aside_dir: Path, why: str) -> Path | None:
    """Move ``path`` (any type, unfollowed) into ``aside_dir``; warn naming it and why. Where
    it went; None when it could not be moved (then it stays, read as absent)."""
    try:
        ensure_private_dir(aside_dir)
        target = aside_dir / f"{time.time_ns():020d}-{_label(path, aside_dir)}"
        os.rename(path, target)
    except (OSError, DeployError) as exc:  # DeployError: aside/ itself is a planted link
        log.warning(
            f"{path} is {why} and could not be set aside ({exc}); it is read as absent",
            extra={"event": "state.aside", "path": str(path)},
        )
        return None
    log.warning(
        f"{path} is {why}, not what the agent wrote there: moved to {target}, never followed, "
        "and read as absent",
        extra={"event": "state.aside", "path": str(path), "to": str(target)},
    )
    _prune(aside_dir)
    return target


def listed(aside_dir: Path) -> list[Aside]:
    """What ``aside/`` holds, newest first (nothing in it opened or followed)."""
    found: list[Aside] = []
    try:
        with os.scandir(aside_dir) as entries:
            names = sorted((e.name for e in entries), reverse=True)
    except OSError:
        return found
    for name in names:
        stamp, _, label = name.partition("-")
        st = _lstat(aside_dir / name)
        if stamp.isdigit() and label and st is not None:
            kind = "a file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
            found.append(Aside(label.replace("%", "/"), kind, int(stamp) / 1e9))
    return found


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
