"""The copies a build reads (``core.admission.builds.copies``), made without following a link.

Each judged source (its links resolved when it was judged) is opened from ``/`` one component
at a time with ``O_NOFOLLOW``: a link that appeared on its way since (a container swapped a
directory) fails the open instead of being followed. Below it every entry is opened relative to
its directory (``dir_fd``), never by a path: a directory or a regular file is copied (its mode
bits without setuid, setgid or sticky), a symbolic link is copied as a link (its target text;
never followed: a build reads the copy's entries as they are), anything else (a device, a FIFO,
a socket), a context's ``.dockerignore`` that is not a regular file (compose opens it following
links) and more than ``MAX_ENTRIES`` entries, ``MAX_BYTES`` bytes or ``MAX_DEPTH`` levels are
refused (POLICY_BUILD_CONTEXT). What is copied is what the build reads: nothing a container can
write afterwards reaches it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

if TYPE_CHECKING:
    from monky_deployd.core.admission.builds import Copy

MAX_ENTRIES = 20_000
MAX_BYTES = 512 * 1024 * 1024
MAX_DEPTH = 64
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1024 * 1024


class _Refused(Exception):
    """Why a copy cannot be made (a sentence)."""


@dataclass
class _Budget:
    entries: int = 0
    size: int = 0

    def take(self, entries: int = 0, size: int = 0) -> None:
        self.entries += entries
        self.size += size
        if self.entries > MAX_ENTRIES:
            raise _Refused(f"it holds more than {MAX_ENTRIES} entries")
        if self.size > MAX_BYTES:
            raise _Refused(f"it holds more than {MAX_BYTES // (1024 * 1024)} MiB")


def make(copies: Iterable[Copy], into: Path) -> None:
    """Every copy of ``copies`` made under ``into`` (the revision's staging directory);
    POLICY_BUILD_CONTEXT naming the service and path when one cannot be made as judged."""
    budget = _Budget()
    for copy in copies:
        dest = into / copy.dest
        try:
            dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not copy.source:  # a path of the release itself: nothing a build should read
                dest.mkdir(mode=0o700)
                continue
            fd = _open_judged(copy.source, copy.file)
            try:
                if copy.file:
                    _file(fd, dest, budget)
                else:
                    dest.mkdir(mode=0o700)
                    _tree(fd, dest, budget, 0)
                    _regular(dest / ".dockerignore")
            finally:
                os.close(fd)
        except (_Refused, OSError) as exc:
            why = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
            raise DeployError(
                f"the build path {copy.source} of service {copy.service} ({copy.key}) cannot be "
                f"copied for its build as it was judged: {why}; nothing was built",
                code=Code.POLICY_BUILD_CONTEXT,
                hint=f"{copy.source}: no symbolic link on its way (what was judged: its links "
                "resolved), only directories, regular files and links below it, at most "
                f"{MAX_ENTRIES} entries and {MAX_BYTES // (1024 * 1024)} MiB; or build the "
                "image in the release pipeline, push it and name it in `image:` without "
                "`build:`",
            ) from exc


def _regular(path: Path) -> None:
    """``path`` (a context's ``.dockerignore``, which compose and the CLI open following links)
    absent or a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise _Refused(f"its {path.name} is not a regular file (compose would follow it)")


def _open_judged(path: str, file: bool) -> int:
    """``path`` (absolute, normalized, its links resolved when judged) opened from ``/`` one
    component at a time, never following a link (ELOOP, ENOTDIR when one appeared)."""
    parts = [p for p in path.split("/") if p]
    fd = os.open("/", _DIR)
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt = os.open(part, _FILE if (last and file) else _DIR, dir_fd=fd)
            os.close(fd)
            fd = nxt
        if file and not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _Refused("it is not a regular file")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _file(fd: int, dest: Path, budget: _Budget) -> None:
    """The regular file open at ``fd`` copied to ``dest`` (its mode bits, no set-id)."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _Refused(f"{dest.name} is not a regular file any more")
    budget.take(entries=1)
    out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        while chunk := os.read(fd, _CHUNK):
            budget.take(size=len(chunk))
            os.write(out, chunk)
        os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
    finally:
        os.close(out)


def _tree(fd: int, dest: Path, budget: _Budget, depth: int) -> None:
    """The directory open at ``fd`` copied into ``dest`` (made): see the module."""
    if depth > MAX_DEPTH:
        raise _Refused(f"it is more than {MAX_DEPTH} directories deep")
    with os.scandir(fd) as entries:
        names = sorted(e.name for e in entries)
    for name in names:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        target = dest / name
        if stat.S_ISLNK(st.st_mode):
            budget.take(entries=1)
            os.symlink(os.readlink(name, dir_fd=fd), target)
        elif stat.S_ISDIR(st.st_mode):
            budget.take(entries=1)
            child = os.open(name, _DIR, dir_fd=fd)
            try:
                target.mkdir(mode=0o700)
                _tree(child, target, budget, depth + 1)
                os.chmod(target, stat.S_IMODE(os.fstat(child).st_mode) & 0o777 | 0o700)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            child = os.open(name, _FILE, dir_fd=fd)
            try:
                _file(child, target, budget)
            finally:
                os.close(child)
        else:
            raise _Refused(f"{name} is neither a directory, a regular file nor a link")
