"""The agent's code where another user can read it: for tests that run it as a test user.

A clone may live under a directory only its owner may enter (Debian's ``/root`` is 0700): the
test user then cannot import ``monky_deployd`` from the clone's ``src`` nor its dependencies from
the clone's ``.venv``. ``pythonpath()`` gives a ``PYTHONPATH`` for the system's python that the
test user can read: the clone's own directories when every directory above them lets others
through, else a copy made once per process in a 0755 directory under /tmp (files hard-linked
where the filesystem allows, so a copy of the venv takes seconds, not its size).
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import sysconfig
import tempfile
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1]  # .../src: monky_deployd and the testkit
SYSTEM_PYTHON = Path("/usr/bin/python3")


def traversable(path: Path) -> bool:
    """Every directory from / down to ``path`` lets others through (x for others)."""
    here = path.resolve()
    return all(os.stat(part).st_mode & stat.S_IXOTH for part in (here, *here.parents))


def _link_tree(src: Path, dst: Path) -> None:
    def link_or_copy(a: str, b: str) -> object:
        try:
            os.link(a, b)
        except OSError:  # another filesystem: a copy
            shutil.copy2(a, b)
        return b

    shutil.copytree(src, dst, symlinks=True, copy_function=link_or_copy)
    for root, dirs, _ in os.walk(dst):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)  # noqa: S103 (the test user enters it)


@cache
def pythonpath() -> str:
    """A PYTHONPATH with ``monky_deployd`` and the venv's packages that any user can read."""
    site = Path(sysconfig.get_paths()["purelib"])
    if traversable(SRC) and traversable(site):
        return os.pathsep.join((str(SRC), str(site)))
    top = Path(tempfile.mkdtemp(prefix="monky-readable-", dir="/tmp"))
    atexit.register(shutil.rmtree, top, True)
    top.chmod(0o755)
    _link_tree(SRC / "monky_deployd", top / "src" / "monky_deployd")
    _link_tree(site, top / "site")
    (top / "src").chmod(0o755)
    return os.pathsep.join((str(top / "src"), str(top / "site")))
