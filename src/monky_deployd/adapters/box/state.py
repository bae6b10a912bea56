"""The agent's state directory (``state_dir``, mode 0700).

Layout::

    <state_dir>/lock                 flock: one tick at a time
    <state_dir>/applied.json         what is applied: revision, project, services (0600)
    <state_dir>/token.json           token bookkeeping (agent/token.py decides; 0600)
    <state_dir>/.token.room          room proved for token.json before a lease (0600)
    <state_dir>/host.json            cached host facts for the check-in (0600)
    <state_dir>/held.json            a failed revision: held, or its backoff (0600)
    <state_dir>/suspend.json         ``monky-deployd suspend``: why and until when (0600)
    <state_dir>/journal.json         the box step running now; left behind by a killed tick
    <state_dir>/bake.json            the last commit while it bakes (core.bake; 0600)
    <state_dir>/waiting.json         a new revision's first sight; while it waits, until when
                                     and why (``core.schedule``: windows, rollout; 0600)
    <state_dir>/hash.key             32 random bytes: the key of the per-key value hashes in
                                     applied.json (``core.reasons``; 0600, made at first commit)
    <state_dir>/ledger.json          the tick ledger: last tick, counters, leases, history
                                     (core.ledger; 0600; rewritten by every tick, after it)
    <state_dir>/outbox/<ts>-<tick>.json  reports tenancy did not take, oldest first (0600;
                                     at most OUTBOX_MAX, the oldest dropped)
    <state_dir>/docker/              DOCKER_CONFIG for every docker call (0700)
    <state_dir>/revisions/<rev>/     compose.yaml + .env of a revision (0700 / 0600); once
                                     verified also release.json (its images) and
                                     compose.pinned.yaml (those images by ID, for a rollback);
                                     compose.labels.yaml gives each container the revision and
                                     deploy-id labels (``core.reasons.labels_override``)

Only the applied (last-known-good) revision, the one before it and the revision being tried
are kept; ``prune_revisions`` removes the others.

``StateDir`` owns every one of these paths. The records' shapes and bytes are
``core.records``'; this module reads and writes them. Every file is written with
``fsutil.atomic_write``. A revision directory is assembled under a temporary name and renamed
into place, so a crash never leaves a half-written project. No link is followed: ``ensure``
refuses a state dir whose entries are symbolic links (STATE_LINK, naming the path), and every
open is O_NOFOLLOW (``fsutil``). Before a lease is asked for, ``reserve_token_room`` proves the
token record can be written (TOKEN_UNSTORABLE otherwise).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from monky_deployd.adapters.fsutil import (
    atomic_write,
    ensure_private_dir,
    fill,
    link_error,
    read_if_exists,
    refuse_link,
)
from monky_deployd.core.bake import Bake
from monky_deployd.core.errors import Code, DeployError
from monky_deployd.core.ledger import Ledger
from monky_deployd.core.records import (
    Applied,
    Held,
    HostFacts,
    Journal,
    Projects,
    Release,
    Suspended,
    TokenState,
    held_from_json,
    host_facts_from_json,
    host_facts_to_json,
)
from monky_deployd.core.schedule import Seen, seen_from_json, seen_to_json

__all__ = [
    "COMPOSE_FILE",
    "ENV_FILE",
    "LABELS_FILE",
    "PINS_FILE",
    "RELEASE_FILE",
    "Applied",
    "StateDir",
]

COMPOSE_FILE = "compose.yaml"
ENV_FILE = ".env"
RELEASE_FILE = "release.json"
OUTBOX_MAX = 20
PINS_FILE = "compose.pinned.yaml"
LABELS_FILE = "compose.labels.yaml"
HASH_KEY_BYTES = 32


class StateDir:
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

    def ensure(self) -> StateDir:
        ensure_private_dir(self.root, follow_link=True)
        self.refuse_links()
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
                    for name in (COMPOSE_FILE, ENV_FILE, LABELS_FILE):
                        refuse_link(Path(entry.path) / name)

    # -- lock --------------------------------------------------------------------------------

    @contextmanager
    def lock(self, wait_s: float) -> Iterator[None]:
        """Hold the tick lock; wait up to ``wait_s`` for another tick, then raise LOCK_BUSY."""
        path = self.lock_file
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise link_error(path) from exc
            raise DeployError(
                f"cannot open the lock file {path}: {exc.strerror}",
                code=Code.STATE_UNWRITABLE,
                hint=f"ownership of {self.root}",
            ) from exc
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                    if time.monotonic() >= deadline:
                        holder = _read_holder(fd)
                        raise DeployError(
                            f"another monky-deployd tick{holder} holds {path}; "
                            f"waited {wait_s:.0f} s and gave up without touching anything",
                            code=Code.LOCK_BUSY,
                            hint="`systemctl status monky-deployd` or `pgrep -af monky-deployd`; "
                            "run again when it has finished",
                        ) from exc
                    time.sleep(0.1)
            with contextlib.suppress(OSError):  # the holder's pid is a courtesy: a full disk
                os.ftruncate(fd, 0)  # must not turn the lock into an INTERNAL fault
                os.pwrite(fd, str(os.getpid()).encode(), 0)
            yield
        finally:
            os.close(fd)

    # -- applied record ----------------------------------------------------------------------

    def read_applied(self) -> Applied | None:
        """The applied record; None when there is none, it is unreadable or its project
        directory is gone (the next check-in then re-applies the desired bundle)."""
        raw = read_if_exists(self.applied_file)
        if raw is None:
            return None
        try:
            applied = Applied.from_json(raw)
        except ValueError:
            return None
        if not (self.revision_dir(applied.revision) / COMPOSE_FILE).is_file():
            return None
        return applied

    def write_applied(self, applied: Applied) -> None:
        atomic_write(self.applied_file, applied.to_json(), 0o600)

    # -- the key of the per-key value hashes (core.reasons) ----------------------------------

    def read_hash_key(self) -> bytes | None:
        """The key, or None when there is none (nothing was committed with it): reads only."""
        raw = read_if_exists(self.hash_key_file)
        return raw if raw is not None and len(raw) == HASH_KEY_BYTES else None

    def hash_key(self) -> bytes:
        """The key, made (random, 0600) when missing or not a key."""
        key = self.read_hash_key()
        if key is None:
            key = os.urandom(HASH_KEY_BYTES)
            atomic_write(self.hash_key_file, key, 0o600)
        return key

    # -- token record ------------------------------------------------------------------------

    def read_token(self) -> TokenState | None:
        """The token record; None when there is none. Raises ValueError (a reason, never the
        content) when it is unusable: what that costs is the token keeper's to say."""
        raw = read_if_exists(self.token_file)
        return None if raw is None else TokenState.from_json(raw)

    def write_token(self, state: TokenState) -> None:
        self.release_token_room()
        atomic_write(self.token_file, state.to_json(), 0o600)

    def reserve_token_room(self, size: int) -> None:
        """Prove the state dir can take a token record of ``size`` bytes before a lease is
        asked for (a lease that cannot be stored is lost: tenancy's budget is 5 an hour).
        Writes and fsyncs ``.token.room`` of that size; ``write_token`` frees it just before
        writing the record, so the record gets the room. TOKEN_UNSTORABLE when it cannot."""
        try:
            refuse_link(self.token_room)
            fill(self.token_room, size)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self.token_room)
            raise DeployError(
                f"the state dir {self.root} cannot take the token record "
                f"({exc.strerror or exc}); no lease is asked for, since one that cannot be "
                "stored would be lost",
                code=Code.TOKEN_UNSTORABLE,
                hint=f"free space (and inodes) on the filesystem of {self.root}, and its "
                "ownership; the next tick asks for the lease once there is room",
            ) from exc

    def release_token_room(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(self.token_room).st_mode):
                os.unlink(self.token_room)

    # -- host facts --------------------------------------------------------------------------

    def read_host_facts(self) -> HostFacts | None:
        """The cached host facts; None when absent, empty or unreadable (refresh them)."""
        raw = read_if_exists(self.host_file)
        return None if raw is None else host_facts_from_json(raw)

    def write_host_facts(self, facts: HostFacts) -> None:
        atomic_write(self.host_file, host_facts_to_json(facts), 0o600)

    # -- held revision -----------------------------------------------------------------------

    def read_held(self) -> Held | None:
        """The held record; None when there is none or it is unreadable (nothing is held)."""
        raw = read_if_exists(self.held_file)
        if raw is None:
            return None
        try:
            return held_from_json(raw)
        except ValueError:
            return None

    def write_held(self, held: Held) -> None:
        atomic_write(self.held_file, held.to_json(), 0o600)

    def clear_held(self) -> None:
        self._remove(self.held_file)

    def _remove(self, path: Path) -> None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise DeployError(
                f"cannot remove {path}: {exc.strerror}",
                code=Code.STATE_UNWRITABLE,
                hint=f"ownership and permissions of {self.root}",
            ) from exc

    # -- step journal ------------------------------------------------------------------------

    def read_journal(self) -> Journal | None:
        raw = read_if_exists(self.journal_file)
        if raw is None:
            return None
        try:
            return Journal.from_json(raw)
        except ValueError:
            return None

    def write_journal(self, entry: Journal) -> None:
        atomic_write(self.journal_file, entry.to_json(), 0o600)

    def clear_journal(self) -> None:
        self._remove(self.journal_file)

    # -- the bake of the last commit (core.bake) -----------------------------------------------

    def read_bake(self) -> Bake | None:
        """The bake record; None when there is none or it is unreadable (nothing bakes)."""
        raw = read_if_exists(self.bake_file)
        if raw is None:
            return None
        try:
            return Bake.from_json(raw)
        except ValueError:
            return None

    def write_bake(self, bake: Bake) -> None:
        atomic_write(self.bake_file, bake.to_json(), 0o600)

    def clear_bake(self) -> None:
        self._remove(self.bake_file)

    # -- the projects the agent started -------------------------------------------------------

    def read_projects(self) -> frozenset[str]:
        """The compose projects the agent started (``projects.json``) and the applied one;
        an unreadable record counts as none (the applied project still does)."""
        names: set[str] = set()
        raw = read_if_exists(self.projects_file)
        if raw is not None:
            with contextlib.suppress(ValueError):
                names.update(Projects.from_json(raw).names)
        applied = self.read_applied()
        if applied is not None:
            names.add(applied.project)
        return frozenset(names)

    def own_project(self, name: str) -> None:
        """Record ``name`` as a project the agent starts (before anything of it is created)."""
        raw = read_if_exists(self.projects_file)
        known = Projects()
        if raw is not None:
            with contextlib.suppress(ValueError):
                known = Projects.from_json(raw)
        if known.names and known.names[-1] == name:
            return
        atomic_write(self.projects_file, known.with_name(name).to_json(), 0o600)

    # -- tick ledger -------------------------------------------------------------------------

    def read_ledger(self) -> tuple[Ledger, str | None]:
        """The tick ledger and None; a fresh ledger and the reason when there is none (``"absent"``)
        or it is unreadable (a reason, never its content)."""
        raw = read_if_exists(self.ledger_file)
        if raw is None:
            return Ledger(), "absent"
        try:
            return Ledger.from_json(raw), None
        except ValueError as exc:
            return Ledger(), str(exc)

    def write_ledger(self, ledger: Ledger, *, durable: bool = True) -> None:
        """``durable=False`` for a quiet tick (``core.ledger.quiet``): no fsync."""
        atomic_write(self.ledger_file, ledger.to_json(), 0o600, durable=durable)

    # -- report outbox -----------------------------------------------------------------------

    def outbox_put(self, name: str, body: bytes) -> None:
        """Keep an undelivered report (its body is already masked); drop the oldest beyond
        OUTBOX_MAX. ``name`` sorts by age (``<ms>-<tick_id>``)."""
        ensure_private_dir(self.outbox_dir)
        atomic_write(self.outbox_dir / f"{name}.json", body, 0o600)
        kept = self.outbox()
        for stale in kept[: max(0, len(kept) - OUTBOX_MAX)]:
            stale.unlink(missing_ok=True)

    def outbox(self) -> list[Path]:
        """The kept reports, oldest first; empty when there is no outbox."""
        try:
            return sorted(p for p in self.outbox_dir.iterdir() if p.name.endswith(".json"))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise DeployError(
                f"cannot list the report outbox {self.outbox_dir}: {exc.strerror}",
                code=Code.STATE_UNWRITABLE,
                hint=f"ownership and permissions of {self.root}",
            ) from exc

    # -- waiting (core.schedule: a new revision's first sight, the wait's end and why) --------

    def read_waiting(self) -> Seen | None:
        """The waiting record; None when there is none or it is unreadable (a new first
        sight starts then: the wait is bounded by the spread)."""
        raw = read_if_exists(self.waiting_file)
        if raw is None:
            return None
        try:
            return seen_from_json(raw)
        except ValueError:
            return None

    def write_waiting(self, record: Seen) -> None:
        atomic_write(self.waiting_file, seen_to_json(record), 0o600)

    def clear_waiting(self) -> None:
        self._remove(self.waiting_file)

    # -- suspend -----------------------------------------------------------------------------

    def read_suspend(self) -> Suspended | None:
        """The suspend record; None when there is none or it is unreadable (not suspended)."""
        raw = read_if_exists(self.suspend_file)
        if raw is None:
            return None
        try:
            return Suspended.from_json(raw)
        except ValueError:
            return None

    def write_suspend(self, suspended: Suspended) -> None:
        atomic_write(self.suspend_file, suspended.to_json(), 0o600)

    def clear_suspend(self) -> None:
        self._remove(self.suspend_file)

    # -- releases (verified revisions) -------------------------------------------------------

    def read_release(self, revision: str) -> Release | None:
        raw = read_if_exists(self.revision_dir(revision) / RELEASE_FILE)
        if raw is None:
            return None
        try:
            return Release.from_json(raw)
        except ValueError:
            return None

    def write_release(self, release: Release) -> None:
        """release.json and the compose override pinning its images (both 0600)."""
        where = self.revision_dir(release.revision)
        atomic_write(where / RELEASE_FILE, release.to_json(), 0o600)
        atomic_write(where / PINS_FILE, release.pins().encode(), 0o600)

    def has_pins(self, revision: str) -> bool:
        return (self.revision_dir(revision) / PINS_FILE).is_file()

    # -- revisions ---------------------------------------------------------------------------

    def write_labels(self, revision: str, labels: str) -> None:
        """Replace a staged revision's labels override (``core.reasons.labels_override``)."""
        where = self.revision_dir(revision)
        refuse_link(where)
        atomic_write(where / LABELS_FILE, labels.encode(), 0o600)

    def revision_dir(self, revision: str) -> Path:
        return self.revisions_dir / revision

    def write_revision(
        self, revision: str, compose_text: str, env_text: str, labels: str = ""
    ) -> Path:
        """Assemble ``revisions/<revision>/`` under a temporary name, then rename it in place
        (``labels``: the compose override of the containers' labels, when given)."""
        final = self.revision_dir(revision)
        staging = self.revisions_dir / f".{revision}.staging"
        for path in (self.revisions_dir, staging, final):
            refuse_link(path)
        try:
            shutil.rmtree(staging, ignore_errors=True)
            ensure_private_dir(staging)
            atomic_write(staging / COMPOSE_FILE, compose_text.encode(), 0o600)
            atomic_write(staging / ENV_FILE, env_text.encode(), 0o600)
            if labels:
                atomic_write(staging / LABELS_FILE, labels.encode(), 0o600)
            if final.exists():
                old = self.revisions_dir / f".{revision}.old"
                refuse_link(old)
                shutil.rmtree(old, ignore_errors=True)
                os.rename(final, old)
                os.rename(staging, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(staging, final)
        except OSError as exc:
            raise DeployError(
                f"cannot write the project directory {final}: {exc.strerror or exc}",
                code=Code.STATE_UNWRITABLE,
                hint=f"free space and permissions of {self.revisions_dir}",
            ) from exc
        return final

    def stale_releases(self, keep: set[str]) -> list[Release]:
        """The releases of the revision directories ``prune_revisions(keep)`` would remove
        (read only: their images are removed first, so a kill in between leaks nothing)."""
        refuse_link(self.revisions_dir)
        try:
            dirs = [p for p in self.revisions_dir.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return []
        found = (self.read_release(d.name) for d in dirs if d.name not in keep)
        return [r for r in found if r is not None]

    def prune_revisions(self, keep: set[str]) -> list[Release]:
        """Remove every revision directory not in ``keep`` (and leftover staging dirs); the
        releases of the removed ones (for their images)."""
        refuse_link(self.revisions_dir)
        try:
            dirs = [p for p in self.revisions_dir.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return []
        removed: list[Release] = []
        for stale in dirs:
            if stale.name not in keep:
                release = self.read_release(stale.name)
                if release is not None:
                    removed.append(release)
                shutil.rmtree(stale, ignore_errors=True)
        return removed


def _read_holder(fd: int) -> str:
    try:
        pid = os.pread(fd, 32, 0).decode().strip()
    except OSError:
        return ""
    return f" (pid {pid})" if pid.isdigit() else ""
