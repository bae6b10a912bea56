"""What a killed tick leaves half-written in the state dir, removed by the next one (under the
state lock, before anything else).

A SIGKILL can land inside any write of a box step: ``fsutil.atomic_write`` then leaves its
temporary ``.<name>.<12 hex>.tmp`` beside the file it was replacing (the file itself is whole:
old or new), and ``StateDir.write_revision`` leaves ``revisions/.<rev>.staging`` (assembled, not
renamed into place) or, while replacing a revision of the same name, ``revisions/.<rev>.old``
with no ``revisions/<rev>``. The sweep removes the temporaries and staging dirs and puts an
``.old`` back when its revision is missing. It touches only what ticks write (ticks hold the
lock): in the state dir itself only the temporaries of the tick's own records, never
``suspend.json``'s (written by ``monky-deployd suspend`` without the lock), nothing in the
outbox or the lock directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from pathlib import Path

from monky_deployd.adapters.box.state.state import StateDir

_TMP = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{12}\.tmp")
# the records a tick writes at the top of the state dir (the ones ``suspend`` writes are not)
_TICK_RECORDS = frozenset(
    {
        *("applied.json", "token.json", "host.json", "held.json", "journal.json"),
        *("projects.json", "hash.key", "ledger.json", "waiting.json", "bake.json"),
    }
)


def sweep(state: StateDir) -> list[str]:
    """Remove a killed tick's half-written leftovers; the paths removed (or put back)."""
    done: list[str] = []
    for directory, names in (
        (state.root, _TICK_RECORDS),
        (state.docker_dir, None),
        (state.revisions_dir, None),
    ):
        for entry in _entries(directory):
            match = _TMP.fullmatch(entry.name)
            ours = match is not None and (names is None or match["name"] in names)
            if ours and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    done.append(entry.path)
    for entry in _entries(state.revisions_dir):
        if not entry.is_dir(follow_symlinks=False) or not entry.name.startswith("."):
            continue
        if entry.name.endswith(".staging"):
            shutil.rmtree(entry.path, ignore_errors=True)
            done.append(entry.path)
        elif entry.name.endswith(".old"):
            final = state.revisions_dir / entry.name[1:].removesuffix(".old")
            with contextlib.suppress(OSError):
                if final.exists() or final.is_symlink():
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:  # killed between the two renames: the revision had been whole
                    os.rename(entry.path, final)
                done.append(entry.path)
    return done


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        return list(os.scandir(directory))
    except OSError:
        return []
