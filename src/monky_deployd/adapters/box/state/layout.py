"""The state directory's layout (``state_dir``, mode 0700): every path the agent owns there, each
record's cap, the tick lock, and what the agent never wrote where it reads or writes (set aside,
or a link refused). ``StateDir`` (``adapters.box.state.state``) extends ``Layout`` with each
record's read and write.

Layout::

    <state_dir>/lock                 flock: one tick at a time (``statelock``)
    <state_dir>/applied.json         what is applied: revision, project, services (0600)
    <state_dir>/token.json           token bookkeeping (agent/token.py decides; 0600)
    <state_dir>/.token.room          room proved for token.json before a lease (0600)
    <state_dir>/host.json            cached host facts for the check-in (0600)
    <state_dir>/held.json            a failed revision: held, or its backoff (0600)
    <state_dir>/suspend.json         ``monky-deployd suspend``: why and until when (0600)
    <state_dir>/journal.json         the box step running now; left behind by a killed tick
    <state_dir>/bake.json            the last commit while it bakes (core.lifecycle.bake)
    <state_dir>/waiting.json         a new revision's first sight and its wait
    (core.lifecycle.schedule) <state_dir>/trust.json           the highest signed release applied
    (core.signing.trust: v1.3) <state_dir>/hash.key             the key of applied.json's per-key
    hashes (core.records.reasons) <state_dir>/ledger.json          the tick ledger
    (core.records.ledger), rewritten after every tick <state_dir>/outbox/              reports
    tenancy did not take, by sequence (``outbox``) <state_dir>/aside/               entries set
    aside where a record belongs (``aside``) <state_dir>/docker/              DOCKER_CONFIG for
    every docker call (0700) <state_dir>/revisions/<rev>/     a revision's project dir and release
    (``revisions``)

"""

from __future__ import annotations

import errno
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Self

from monky_deployd.adapters import fsread
from monky_deployd.adapters.box.state import aside, statelock
from monky_deployd.adapters.box.state.revisions import (
    COMPOSE_FILE,
    ENV_FILE,
    HELD_FILE,
    LABELS_FILE,
    MODEL_FILE,
    Revisions,
)
from monky_deployd.adapters.fsutil import ensure_private_dir, link_error, refuse_link
from monky_deployd.core.records.ledger import MAX_BYTES as LEDGER_MAX

HASH_KEY_BYTES = 32
RECORD_CAP = 64 * 1024  # a record's bytes at most (``CAPS``: the larger ones)
CAPS = {  # every record at the top of the state dir, with the most bytes it may have
    "lock": 64,
    "applied.json": 64 * 1024 * 1024,  # a keyed hash per .env key: grows with the bundle
    "token.json": 64 * 1024 * 1024,  # its loss costs a lease: only a bound on memory
    "host.json": RECORD_CAP,
    "held.json": RECORD_CAP,
    "suspend.json": RECORD_CAP,
    "journal.json": RECORD_CAP,
    "waiting.json": RECORD_CAP,
    "bake.json": 64 * 1024 * 1024 + RECORD_CAP,  # the previous LKG's applied.json inside
    "hash.key": HASH_KEY_BYTES,
    "projects.json": RECORD_CAP,
    "trust.json": RECORD_CAP,
    "ledger.json": LEDGER_MAX,
}


class Layout(Revisions):
    def __init__(self, root: Path) -> None:
        # state_dir itself may be a link (the operator's choice): the agent works in its target
        self.root = Path(os.path.realpath(root)) if root.is_symlink() else root
        root = self.root
        self.lock_file = root / "lock"
        self.docker_dir = root / "docker"
        self.revisions_dir = root / "revisions"
        self.applied_file = root / "applied.json"
        self.token_file = root / "token.json"
        self.token_room = root / ".token.room"
        self.host_file = root / "host.json"
        self.held_file = root / "held.json"
        self.suspend_file = root / "suspend.json"
        self.outbox_dir = root / "outbox"
        self.journal_file = root / "journal.json"
        self.bake_file = root / "bake.json"
        self.hash_key_file = root / "hash.key"
        self.projects_file = root / "projects.json"
        self.ledger_file = root / "ledger.json"
        self.waiting_file = root / "waiting.json"
        self.trust_file = root / "trust.json"
        self.aside_dir = root / "aside"

    def ensure(self) -> Self:
        ensure_private_dir(self.root, follow_link=True)
        self.set_aside_strays()  # a link too: set aside, never followed
        self.refuse_links()  # one that could not be set aside
        ensure_private_dir(self.docker_dir)
        ensure_private_dir(self.revisions_dir)
        return self

    def refuse_links(self) -> None:
        """STATE_LINK, naming the path, when an entry the agent writes is a symbolic link: the
        state dir's own entries, ``docker/``'s, ``revisions/``'s and each revision's
        compose.yaml and .env. (``state_dir`` itself may be a link an operator chose.)"""
        for directory in (self.root, self.docker_dir, self.revisions_dir):
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise link_error(directory) from exc
                continue
            for entry in entries:
                if entry.is_symlink():
                    raise link_error(Path(entry.path))
                if directory == self.revisions_dir and entry.is_dir(follow_symlinks=False):
                    for name in (COMPOSE_FILE, ENV_FILE, LABELS_FILE, MODEL_FILE, HELD_FILE):
                        refuse_link(Path(entry.path) / name)

    # -- lock --------------------------------------------------------------------------------

    def lock(self, wait_s: float) -> AbstractContextManager[None]:
        """Hold the tick lock; wait up to ``wait_s`` for another tick, then raise LOCK_BUSY."""
        return statelock.hold(self.lock_file, wait_s)

    # -- reading a record ----------------------------------------------------------------------

    def _raw(self, path: Path) -> bytes | None:
        """A record's bytes (``fsread.read_entry``, its cap from ``CAPS``); None when absent.
        Raises ``fsread.BadEntry`` (a ValueError naming the path and why, never the content)."""
        return fsread.read_entry(path, CAPS.get(path.name, RECORD_CAP))

    def _record_or_none(self, path: Path) -> bytes | None:
        try:
            return self._raw(path)
        except fsread.BadEntry:
            return None

    def _swept(self) -> dict[str, int]:
        return {**CAPS, self.token_room.name: CAPS["token.json"]}

    def set_aside_strays(self) -> list[Path]:
        """Set aside (``aside.sweep``) whatever the state dir holds where the agent reads or
        writes that it never wrote there: a symbolic link, a FIFO, a socket, a device, a
        directory at a record's path, a record over its cap, a revision holding a link ... (the
        list is ``aside.strays``'). The paths set aside."""
        return aside.sweep(self.root, self._swept(), self.aside_dir)

    def strays(self) -> list[tuple[Path, str]]:
        """What the next tick sets aside, each with why (``status``: nothing moved, nothing
        opened)."""
        return aside.strays(self.root, self._swept())

    def set_aside(self) -> list[aside.Aside]:
        """What ticks set aside (``aside/``), newest first."""
        return aside.listed(self.aside_dir)
