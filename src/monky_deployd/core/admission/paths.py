"""Host paths by identity, in the engine's view, and held (issue 45). Pure: no I/O.

The adapter (``adapters.box.docker.hostpath.follow``) walks each host path of a release one
part at a time, as the kernel does when the engine mounts it, and says what it met: a
``Where`` (every link followed, the first link whose target does not exist, every path looked
at on the way, the identity ``(st_dev, st_ino)`` of each part that exists). This module judges
those facts:

- ``faults``: a path with a dangling link anywhere on its way (POLICY_DANGLING_LINK: its target
  may be made later, by the release's own ``up`` or anyone, and the engine follows it then), or
  one whose way passes under a directory the agent's unit hides from it (POLICY_HIDDEN_PATH:
  ``config_policy.HIDDEN_BY_UNIT``, /tmp under PrivateTmp: the agent sees another directory
  there than the engine). A missing *tail* that no link leads to is left to the engine, which
  creates it as a plain directory (compose's bind) under a parent whose identity is held;
- ``above``: whether a writer (a writable mount, its source's identity) is a directory at or
  above a path's parent, compared by identity and by text (a root bound through a link is the
  same directory);
- ``hold`` / ``moved``: what the revision's ``up`` mounted, held: each pinned path's real path
  and the identity of each directory on it (``paths.held.json`` in the revision), compared on
  every tick with the path followed again and the box's writers now; a service whose path no
  longer leads where it did, or that a container can now write on the way to, is named
  (``core.lifecycle.decide``: stopped, POLICY_PATH_MOVED).

This module's top level imports nothing of the policy: the steady tick reads ``moved``.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from monky_deployd.core.admission.host import HostPath
    from monky_deployd.core.admission.rules import Violation

Ident = tuple[int, int]  # (st_dev, st_ino)


class Mount(Protocol):
    """A writer: ``core.admission.artifact.Mount`` (who, its source, writable, its identity)."""

    @property
    def who(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def writable(self) -> bool: ...
    @property
    def ident(self) -> Ident | None: ...


class Bind(Protocol):
    """A pinned path: ``core.admission.artifact.Bind`` (service, key, path)."""

    @property
    def service(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def path(self) -> str: ...


class Where(NamedTuple):
    """One host path as followed (``adapters.box.docker.hostpath.follow``): ``real`` with every link
    followed ("" when it cannot be: a loop, a part the agent may not search); ``dangling``: the
    first link on the way whose target does not exist ("": none); ``visited``: every absolute
    path looked at on the way (each part, each link's target's parts); ``chain``: each part of
    ``real`` that exists, with its identity, from ``/`` down; ``is_dir``: ``real`` exists and is
    a directory."""

    path: str
    real: str
    dangling: str = ""
    visited: tuple[str, ...] = ()
    chain: tuple[tuple[str, int, int], ...] = ()
    is_dir: bool = False

    @property
    def ident(self) -> Ident | None:
        """The identity of ``real`` itself (None: it does not exist yet)."""
        if self.chain and self.chain[-1][0] == self.real:
            return self.chain[-1][1], self.chain[-1][2]
        return None

    @property
    def above(self) -> tuple[Ident, ...]:
        """The identities of the directories above ``real`` that exist (its parent first)."""
        dirs = [(d, i) for p, d, i in self.chain if p != self.real]
        return tuple(reversed(dirs))


def _norm(path: str) -> str:
    norm = posixpath.normpath(path) if path else path
    return "/" if norm == "//" else norm


def hidden_under(path: str, hidden: Iterable[str]) -> str | None:
    """The directory of ``hidden`` that ``path`` is at or under (None: none)."""
    norm = _norm(path)
    for top in hidden:
        if norm == top or norm.startswith(top.rstrip("/") + "/"):
            return top
    return None


# where a link's text is not where the kernel goes (``/proc/<pid>/root``, ``.../fd/<n>``): a
# way through it is refused, whatever the text resolves to
MAGIC = ("/proc",)


def faults(
    found: Iterable[HostPath],
    where: Mapping[str, Where],
    hidden: Iterable[str],
    release_dir: str = "/",
) -> list[Violation]:
    """A dangling link on a host path's way, a way under a hidden directory (see the module),
    or through ``/proc`` (``MAGIC``: POLICY_PROTECTED_PATH); a build's path that stays inside
    the release (the agent's own directory) is the release's, judged by
    ``core.admission.policy``."""
    from monky_deployd.core.admission.rules import Violation, inside
    from monky_deployd.core.errors import Code

    tops = tuple(hidden)
    out: list[Violation] = []
    for host in found:
        seen = where.get(host.path)
        if seen is None:
            continue
        mine = _norm(release_dir)
        if host.build and all(inside(_norm(v), mine) for v in (host.path, seen.real or "?")):
            continue  # the release's own directory, which the agent wrote (no link in it)
        if seen.dangling:
            asks = (
                f"{host.path}: the link {seen.dangling} on its way leads to nothing that exists "
                "(what is made there later, by this release's own up or anyone, is what the "
                "engine would mount)"
            )
            out.append(Violation(host.service, host.key, asks, code=Code.POLICY_DANGLING_LINK))
            continue
        for visited in (host.path, *seen.visited):
            top = hidden_under(visited, tops)
            if top is not None:
                shown = host.path if visited == host.path else f"{host.path} (via {visited})"
                asks = (
                    f"{shown} lies under {top}, which the agent's systemd unit hides from it: "
                    "the agent sees another directory there than the engine mounts"
                )
                out.append(Violation(host.service, host.key, asks, code=Code.POLICY_HIDDEN_PATH))
                break
        magic = next((v for v in (host.path, *seen.visited) if hidden_under(v, MAGIC)), None)
        if magic is not None:
            asks = (
                f"{host.path} passes through {magic}: the kernel follows /proc's links to "
                "places their text does not name (another process's root or files)"
            )
            out.append(Violation(host.service, host.key, asks, code=Code.POLICY_PROTECTED_PATH))
    return out


def above(path: str, at: Where | None, writer: Mount) -> bool:
    """Whether ``writer`` (writable) is a directory at or above ``path``'s parent: by identity
    (its source's against each directory above ``at.real``) or by text (the path as written,
    and as resolved, below the writer's source as written)."""
    if not writer.writable:
        return False
    if writer.ident is not None and at is not None and writer.ident in at.above:
        return True
    root = _norm(writer.source)
    if not root.startswith("/"):
        return False
    for form in {_norm(path), _norm(at.real) if at is not None and at.real else ""}:
        parent = posixpath.dirname(form)
        if form.startswith("/") and parent != form and _inside(parent, root):
            return True
    return False


def _inside(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


# -- held: what the up mounted, checked on every tick ---------------------------------------


class Hold(NamedTuple):
    """A pinned path as its ``up`` found it: who (service, "" for a top-level volume's
    device), the key, the path, its real path, each existing part's identity (``/`` down) and
    whether it is a directory (a file's own identity is not held: an atomic rewrite replaces
    it in place; its directory is)."""

    service: str
    key: str
    path: str
    real: str
    chain: tuple[tuple[str, int, int], ...]
    is_dir: bool

    def dirs(self) -> tuple[tuple[str, int, int], ...]:
        """The held directories on the way (the path itself when it is one)."""
        return self.chain if self.is_dir else tuple(c for c in self.chain if c[0] != self.real)


def hold(binds: Iterable[Bind], where: Mapping[str, Where]) -> list[Hold]:
    """Each bind of the judged model as followed right before its ``up``."""
    out = []
    for bind in binds:
        seen = where.get(bind.path)
        if seen is not None and seen.real:
            chain = seen.chain
            out.append(Hold(bind.service, bind.key, bind.path, seen.real, chain, seen.is_dir))
    return out


def held_text(holds: Iterable[Hold]) -> str:
    """``paths.held.json``'s text."""
    rows = [
        {
            "service": h.service,
            "key": h.key,
            "path": h.path,
            "real": h.real,
            "chain": [list(c) for c in h.chain],
            "dir": h.is_dir,
        }
        for h in holds
    ]
    return json.dumps({"held": rows}, indent=1, sort_keys=True) + "\n"


def read_held(raw: bytes) -> list[Hold] | None:
    """``paths.held.json`` read back (None: not a record this agent wrote)."""
    try:
        data = json.loads(raw)
        out = []
        for row in data["held"]:
            chain = tuple((str(p), int(d), int(i)) for p, d, i in row["chain"])
            s, k, p, r = (str(row[n]) for n in ("service", "key", "path", "real"))
            out.append(Hold(s, k, p, r, chain, bool(row["dir"])))
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return out


def moved(
    holds: Iterable[Hold], now: Mapping[str, Where], writers: Iterable[Mount] = ()
) -> list[tuple[str, str]]:
    """``(service, why)`` for each held path that no longer leads where it did: it cannot be
    followed, a link on its way leads to nothing, it resolves elsewhere, a directory on it is
    another directory now; or a container other than the one binding it can now write a
    directory on its way (a writable mount whose source is that directory, by identity)."""
    every = list(writers)
    out: list[tuple[str, str]] = []
    for held in holds:
        seen = now.get(held.path)
        why = _why(held, seen)
        if why is None:
            dirs = {(d, i): p for p, d, i in held.dirs()}
            if held.is_dir:
                dirs.pop((held.chain[-1][1], held.chain[-1][2]), None)  # the bind itself
            hit = next((w for w in every if w.writable and w.ident in dirs), None)
            if hit is not None and hit.ident is not None:
                why = (
                    f"{hit.who} can now write {dirs[hit.ident]} on its way ({hit.source} "
                    "mounted writable): a link swapped there changes what the engine mounts"
                )
        if why is not None:
            out.append((held.service, f"{held.path} ({held.key}) {why}"))
    return out


def _why(held: Hold, seen: Where | None) -> str | None:
    if seen is None or not seen.real:
        return "can no longer be followed by this agent"
    if seen.dangling:
        return f"now has a link on its way that leads to nothing ({seen.dangling})"
    if _norm(seen.real) != _norm(held.real):
        return f"leads to {seen.real} now, not to {held.real} as at its up"
    now = {p: (d, i) for p, d, i in seen.chain}
    for path, dev, ino in held.dirs():
        if now.get(path) is None:
            return f"no longer has {path} on its way"
        if now[path] != (dev, ino):
            return f"has another directory at {path} than at its up"
    return None
