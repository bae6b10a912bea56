"""The revisions under ``<state_dir>/revisions/``: each revision's project directory and, once
verified, its release record (``StateDir`` inherits these; a mixin only to keep the state
module's size in check).

    revisions/<rev>/    compose.yaml + .env of a revision (0700 / 0600) and compose.judged.json,
                        the model the policy judged: what every compose call runs (0600,
                        it holds the interpolated secrets); once verified also
                        release.json (its images) and compose.pinned.yaml (those images by ID,
                        for a rollback); compose.labels.yaml gives each container the revision
                        and deploy-id labels (``core.records.reasons.labels_override``)

Only the applied (last-known-good) revision, the one before it and the revision being tried
are kept; ``prune_revisions`` removes the others.

A revision directory is assembled under a temporary name and renamed into place, so a crash
never leaves a half-written project; no link is followed (``fsutil``). ``release.json`` is read
through ``fsread.read_entry`` (at most ``RELEASE_CAP`` bytes).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from monky_deployd.adapters import fsread
from monky_deployd.adapters.fsutil import atomic_write, ensure_private_dir, refuse_link
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

if TYPE_CHECKING:  # (core.records.release: loaded where a release is read)
    from monky_deployd.core.lifecycle.boxsteps import BuildCopies
    from monky_deployd.core.records.release import Release

COMPOSE_FILE = "compose.yaml"
ENV_FILE = ".env"
RELEASE_FILE = "release.json"
PINS_FILE = "compose.pinned.yaml"
LABELS_FILE = "compose.labels.yaml"
MODEL_FILE = "compose.judged.json"  # the judged model (core.admission.artifact): what compose runs
HELD_FILE = (
    "paths.held.json"  # its host paths as its last up found them (adapters.box.docker.hostpath)
)
RELEASE_CAP = 1024 * 1024


class Revisions:
    revisions_dir: Path

    # -- releases (verified revisions) -------------------------------------------------------

    def read_release(self, revision: str) -> Release | None:
        from monky_deployd.core.records.release import Release

        try:
            raw = fsread.read_entry(self.revision_dir(revision) / RELEASE_FILE, RELEASE_CAP)
            return None if raw is None else Release.from_json(raw)
        except ValueError:  # fsread.BadEntry too
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
        """Replace a staged revision's labels override
        (``core.records.reasons.labels_override``)."""
        where = self.revision_dir(revision)
        refuse_link(where)
        atomic_write(where / LABELS_FILE, labels.encode(), 0o600)

    def revision_dir(self, revision: str) -> Path:
        return self.revisions_dir / revision

    def write_revision(
        self,
        revision: str,
        compose_text: str,
        env_text: str,
        labels: str = "",
        model: str = "",
        builds: BuildCopies = (),
    ) -> Path:
        """Assemble ``revisions/<revision>/`` under a temporary name, then rename it in place
        (``labels``: the compose override of the containers' labels, when given; ``model``:
        the judged model every compose call runs, ``core.admission.artifact``; ``builds``: the
        copies its builds read, ``adapters.box.buildcopy``: POLICY_BUILD_CONTEXT when one
        cannot be made, and the staging directory is removed)."""
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
            if model:
                atomic_write(staging / MODEL_FILE, model.encode(), 0o600)
            if builds:
                from monky_deployd.adapters.box.state import buildcopy
                from monky_deployd.core.admission.builds import Copy

                try:
                    buildcopy.make((Copy(*b) for b in builds), staging)
                except DeployError:
                    shutil.rmtree(staging, ignore_errors=True)
                    raise
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
