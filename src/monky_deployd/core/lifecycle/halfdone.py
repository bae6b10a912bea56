"""What compose can leave half done in a project, and its repair. Pure: no I/O.

Compose replaces a container in steps: create the new one as ``<oldid12>_<name>``, stop the old
one, remove it, rename the new one to ``<name>``, start it. A tick killed between two steps
(systemd's timeout, the OOM killer, a power cut, a reboot) leaves a replacement with a temporary
name, two containers for one service and number, or a container created and never started; the
next ``up`` then fails on the name it wants ("Conflict. The container name ... is already in
use"), or races compose's own clean-up and takes the service down.

``plan`` reads the project's containers as the engine lists them and says what to remove and
rename so that ``up`` meets one container per service and number, under its own name:

1. a replacement never started (``created``, temporary name) is removed: it holds nothing;
2. of two or more containers for one service and number, one is kept (running first, then the
   one with its own name, then the newest) and the others removed: what runs keeps running;
3. the one kept, when it has a temporary name, is renamed to its own name.

One-off containers (``docker compose run``) are never touched; the caller lists only the
project's own containers (its compose label), never another project's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# compose's temporary name for a replacement: the old container's 12-digit ID, "_", the name
TEMPORARY = re.compile(r"\A[0-9a-f]{12}_(?P<name>.+)\Z")


@dataclass(frozen=True, order=True)
class Seen:
    """A container of the project as the engine lists it."""

    service: str
    number: str
    name: str  # without the leading "/"
    state: str  # created, running, exited, restarting, paused, dead
    created: int  # seconds since the epoch
    container_id: str
    oneoff: bool = False

    @property
    def own_name(self) -> str:
        """Its name without compose's temporary prefix."""
        found = TEMPORARY.match(self.name)
        return found.group("name") if found else self.name

    @property
    def temporary(self) -> bool:
        return TEMPORARY.match(self.name) is not None


@dataclass(frozen=True)
class Repair:
    """The containers to remove, and the ones to rename (to their own name), in that order."""

    remove: tuple[Seen, ...] = ()
    rename: tuple[Seen, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.remove or self.rename)

    def lines(self) -> list[str]:
        """One line per action, for the journal."""
        out = [
            f"removed {c.name} ({c.service}, {c.state}, {c.container_id[:12]})" for c in self.remove
        ]
        out += [f"renamed {c.name} to {c.own_name} ({c.service}, {c.state})" for c in self.rename]
        return out


def plan(containers: Iterable[Seen]) -> Repair:
    """What makes the project one container per service and number, each under its own name."""
    mine = [c for c in containers if not c.oneoff]
    remove = [c for c in mine if c.state == "created" and c.temporary]
    groups: dict[tuple[str, str], list[Seen]] = {}
    for c in mine:
        if c not in remove:
            groups.setdefault((c.service, c.number), []).append(c)
    rename = []
    for group in groups.values():
        keep = max(group, key=lambda c: (c.state == "running", not c.temporary, c.created))
        remove += [c for c in group if c is not keep]
        if keep.temporary:
            rename.append(keep)
    return Repair(tuple(sorted(remove)), tuple(sorted(rename)))
