"""The agent's state directory (``state_dir``, mode 0700): its records read and written.

The layout, every path and each record's cap, and what is set aside or refused there are
``adapters.box.state.layout``'s (``Layout``, which ``StateDir`` extends).

``StateDir`` owns every one of these paths. The records' shapes and bytes are
``core.records.applied``'; this module reads and writes them. Every file is written with
``fsutil.atomic_write`` and read with ``fsread.read_entry``: no link followed, no FIFO waited
on, regular files only, at most the record's cap (``CAPS``) read. A record that cannot be read
counts as absent (the token record's reason is the token keeper's to judge). ``ensure``
sets aside whatever the agent never wrote where it reads or writes (``set_aside_strays``,
``aside.strays``: a symbolic link is one kind of entry among the FIFO, the directory, the
socket ...), then refuses a link still there (STATE_LINK, naming the path: one that could not
be moved).
``reserve_token_room`` proves the token record can be written (TOKEN_UNSTORABLE otherwise).

"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from monky_deployd.adapters import fsread
from monky_deployd.adapters.box.state import outbox
from monky_deployd.adapters.box.state.layout import HASH_KEY_BYTES, Layout
from monky_deployd.adapters.box.state.outbox import OUTBOX_MAX
from monky_deployd.adapters.box.state.revisions import (
    COMPOSE_FILE,
    ENV_FILE,
    LABELS_FILE,
    MODEL_FILE,
    PINS_FILE,
    RELEASE_FILE,
)
from monky_deployd.adapters.fsutil import (
    atomic_write,
    fill,
    refuse_link,
)
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.applied import (
    Applied,
    HostFacts,
    TokenState,
    host_facts_from_json,
    host_facts_to_json,
)
from monky_deployd.core.records.ledger import Ledger

if TYPE_CHECKING:  # (read only when their files exist: off the no-op tick's imports)
    from monky_deployd.core.lifecycle.bake import Bake
    from monky_deployd.core.lifecycle.schedule import Seen
    from monky_deployd.core.records.held import Held
    from monky_deployd.core.records.journal import Journal
    from monky_deployd.core.records.suspend import Suspended

if TYPE_CHECKING:
    from monky_deployd.core.signing.trust import Floor

__all__ = [
    "COMPOSE_FILE",
    "ENV_FILE",
    "LABELS_FILE",
    "MODEL_FILE",
    "OUTBOX_MAX",
    "PINS_FILE",
    "RELEASE_FILE",
    "Applied",
    "StateDir",
]


class StateDir(Layout):
    # -- applied record ----------------------------------------------------------------------

    def read_applied(self) -> Applied | None:
        """The applied record; None when there is none, it is unreadable or its project
        directory is gone (the next check-in then re-applies the desired bundle)."""
        raw = self._record_or_none(self.applied_file)
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

    # -- the key of the per-key value hashes (core.records.reasons)
    # ----------------------------------

    def read_hash_key(self) -> bytes | None:
        """The key, or None when there is none (nothing was committed with it): reads only."""
        raw = self._record_or_none(self.hash_key_file)
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
        try:
            raw = self._raw(self.token_file)
        except fsread.BadEntry as exc:  # a plain ValueError, as TokenState's own reasons
            raise ValueError(str(exc)) from None
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
        raw = self._record_or_none(self.host_file)
        return None if raw is None else host_facts_from_json(raw)

    def write_host_facts(self, facts: HostFacts) -> None:
        atomic_write(self.host_file, host_facts_to_json(facts), 0o600)

    # -- held revision -----------------------------------------------------------------------

    def read_held(self) -> Held | None:
        """The held record; None when there is none or it is unreadable (nothing is held)."""
        raw = self._record_or_none(self.held_file)
        if raw is None:
            return None
        from monky_deployd.core.records.held import held_from_json

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
        raw = self._record_or_none(self.journal_file)
        if raw is None:
            return None
        from monky_deployd.core.records.journal import (
            Journal,  # (core.records.release, on first use)
        )

        try:
            return Journal.from_json(raw)
        except ValueError:
            return None

    def write_journal(self, entry: Journal) -> None:
        atomic_write(self.journal_file, entry.to_json(), 0o600)

    def clear_journal(self) -> None:
        self._remove(self.journal_file)

    # -- the bake of the last commit (core.lifecycle.bake)
    # -----------------------------------------------

    def read_bake(self) -> Bake | None:
        """The bake record; None when there is none or it is unreadable (nothing bakes)."""
        raw = self._record_or_none(self.bake_file)
        if raw is None:
            return None
        from monky_deployd.core.lifecycle.bake import Bake

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
        from monky_deployd.core.records.release import (
            Projects,  # (core.records.release, on first use)
        )

        names: set[str] = set()
        raw = self._record_or_none(self.projects_file)
        if raw is not None:
            with contextlib.suppress(ValueError):
                names.update(Projects.from_json(raw).names)
        applied = self.read_applied()
        if applied is not None:
            names.add(applied.project)
        return frozenset(names)

    def own_project(self, name: str) -> None:
        """Record ``name`` as a project the agent starts (before anything of it is created)."""
        from monky_deployd.core.records.release import (
            Projects,  # (core.records.release, on first use)
        )

        raw = self._record_or_none(self.projects_file)
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
        try:
            raw = self._raw(self.ledger_file)
            if raw is None:
                return Ledger(), "absent"
            return Ledger.from_json(raw), None
        except ValueError as exc:  # fsread.BadEntry too: the path and why, never content
            return Ledger(), str(exc)

    def write_ledger(self, ledger: Ledger, *, durable: bool = True) -> None:
        """``durable=False`` for a quiet tick (``core.records.ledger.quiet``): no fsync."""
        atomic_write(self.ledger_file, ledger.to_json(), 0o600, durable=durable)

    # -- report outbox (``outbox``) -----------------------------------------------------------

    def outbox_put(self, tick_id: str, body: bytes) -> Path:
        """Keep an undelivered report (its body is already masked) as the newest entry; the
        oldest beyond OUTBOX_MAX are dropped."""
        return outbox.put(self.outbox_dir, self.aside_dir, tick_id, body)

    def outbox(self) -> list[Path]:
        """The kept reports, oldest first (by sequence); empty when there is no outbox."""
        return outbox.entries(self.outbox_dir, self.aside_dir)

    # -- waiting (core.lifecycle.schedule: a new revision's first sight, the wait's end and why)
    # --------

    def read_waiting(self) -> Seen | None:
        """The waiting record; None when there is none or it is unreadable (a new first
        sight starts then: the wait is bounded by the spread)."""
        raw = self._record_or_none(self.waiting_file)
        if raw is None:
            return None
        from monky_deployd.core.lifecycle.schedule import seen_from_json

        try:
            return seen_from_json(raw)
        except ValueError:
            return None

    def write_waiting(self, record: Seen) -> None:
        from monky_deployd.core.lifecycle.schedule import seen_to_json

        atomic_write(self.waiting_file, seen_to_json(record), 0o600)

    def clear_waiting(self) -> None:
        self._remove(self.waiting_file)

    # -- suspend -----------------------------------------------------------------------------

    def read_suspend(self) -> Suspended | None:
        """The suspend record; None when there is none or it is unreadable (not suspended)."""
        raw = self._record_or_none(self.suspend_file)
        if raw is None:
            return None
        from monky_deployd.core.records.suspend import (
            Suspended,  # (core.records.release, on first use)
        )

        try:
            return Suspended.from_json(raw)
        except ValueError:
            return None

    def write_suspend(self, suspended: Suspended) -> None:
        atomic_write(self.suspend_file, suspended.to_json(), 0o600)

    def clear_suspend(self) -> None:
        self._remove(self.suspend_file)

    # -- trust (core.signing.trust: the highest signed release applied, v1.3)
    # ------------------------

    def read_trust(self) -> Floor | None:
        """The trust record; None when there is none or it is unreadable (no floor then: the
        next verified apply writes it again)."""
        from monky_deployd.core.signing.trust import Floor  # only an apply and status read it

        raw = self._record_or_none(self.trust_file)
        if raw is None:
            return None
        try:
            return Floor.from_json(raw)
        except ValueError:
            return None

    def write_trust(self, floor: Floor) -> None:
        atomic_write(self.trust_file, floor.to_json(), 0o600)
