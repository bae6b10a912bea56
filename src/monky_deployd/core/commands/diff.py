"""``monky-deployd plan``'s diff: what an apply of the desired bundle would change. Pure.

``agent.commands.plan`` gathers the facts (check-in, secrets, render, the registry's digests) and
hands them here; this module compares and renders. Values never appear: ``.env`` keys are
compared by keyed hash (``core.records.reasons``), the compose diff passes the tick's masker, and
secrets are named, never shown.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from monky_deployd.core.admission import composefile
from monky_deployd.core.records.reasons import KeyChanges, Reason

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class ImageRow:
    service: str
    image: str
    before: str = ""  # the digest the applied release recorded ("" unknown / new service)
    after: str = ""  # the digest the registry names now ("" when not asked or not known)
    error: str = ""  # why ``after`` is unknown (the plan is incomplete: exit 2)
    skipped: str = ""  # why it was not asked (a reference with a variable)

    @property
    def changed(self) -> bool:
        return bool(self.before and self.after and _bare(self.before) != _bare(self.after))


def _bare(digest: str) -> str:
    return digest.rsplit("@", 1)[-1]


@dataclass(frozen=True)
class ServiceRow:
    name: str
    action: str  # create | recreate | remove | start | keep
    why: tuple[str, ...] = ()


@dataclass
class Diff:
    """The plan's answer (``as_json`` is the ``--json`` schema in OPERATIONS.md)."""

    plan: str  # what the next tick would do: apply | restore | noop | idle | hold | backoff ...
    reason: str
    applied: str | None = None
    desired: str | None = None
    project: str | None = None
    reasons: tuple[Reason, ...] = ()
    compose_diff: str = ""
    model_diff: str = ""  # the judged models' (core.admission.artifact): what compose runs
    env: KeyChanges = field(default_factory=KeyChanges)
    secrets: KeyChanges = field(default_factory=KeyChanges)
    images: tuple[ImageRow, ...] = ()
    services: tuple[ServiceRow, ...] = ()
    token: str = ""  # the kind of token the plan used
    notes: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(
            self.reasons
            or self.compose_diff
            or self.model_diff
            or self.env
            or self.secrets
            or any(i.changed for i in self.images)
            or any(s.action != "keep" for s in self.services)
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "changes": self.changes,
            "plan": self.plan,
            "reason": self.reason,
            "applied": self.applied,
            "desired": self.desired,
            "project": self.project,
            "reasons": [r.as_wire() for r in self.reasons],
            "compose": {"changed": bool(self.compose_diff), "diff": self.compose_diff},
            "model": {"changed": bool(self.model_diff), "diff": self.model_diff},
            "env": _keys(self.env),
            "secrets": {
                "added": list(self.secrets.added),
                "removed": list(self.secrets.removed),
                "rotated": list(self.secrets.changed),
            },
            "images": [
                {
                    "service": i.service,
                    "image": i.image,
                    "before": _bare(i.before) or None,
                    "after": i.after or None,
                    "changed": i.changed,
                    "error": i.error or None,
                    "skipped": i.skipped or None,
                }
                for i in self.images
            ],
            "services": [
                {"name": s.name, "action": s.action, "why": list(s.why)} for s in self.services
            ],
            "token": self.token,
            "notes": list(self.notes),
        }

    def as_text(self) -> str:
        lines = [
            f"plan: {self.plan}: {self.reason}",
            f"applied: {self.applied or '(none)'}    desired: {self.desired or '(none)'}",
        ]
        if self.reasons:
            lines.append("reasons:")
            lines += [f"  {r.kind:<15} {r.detail}" for r in self.reasons]
        if self.env:
            lines.append(f".env keys: {self.env.describe()} (compared by hash)")
        if self.secrets:
            parts = KeyChanges(self.secrets.added, self.secrets.removed, ()).describe()
            rotated = f"rotated {', '.join(self.secrets.changed)}" if self.secrets.changed else ""
            lines.append(f"secrets: {'; '.join(p for p in (parts, rotated) if p)}")
        for i in self.images:
            if i.error or i.skipped:
                lines.append(f"image {i.service}: {i.image}: {i.error or i.skipped}")
            elif i.changed:
                lines.append(f"image {i.service}: {i.image}: {_bare(i.before)} -> {i.after}")
        if self.services:
            lines.append("services:")
            for s in self.services:
                why = f" ({'; '.join(s.why)})" if s.why else ""
                lines.append(f"  {s.action:<9} {s.name}{why}")
        lines += [f"note: {n}" for n in self.notes]
        if self.compose_diff:
            lines += ["compose:", self.compose_diff.rstrip("\n")]
        if self.model_diff:
            lines += ["judged model (what compose runs):", self.model_diff.rstrip("\n")]
        lines.append("changes: yes" if self.changes else "changes: none")
        return "\n".join(lines) + "\n"


def _keys(k: KeyChanges) -> dict[str, list[str]]:
    return {"added": list(k.added), "removed": list(k.removed), "changed": list(k.changed)}


def compose_diff(
    old: str | None,
    new: str,
    old_name: str,
    new_name: str,
    mask: Callable[[str], str] = lambda s: s,
) -> str:
    """A unified diff of the compose files (masked: a compose file holds no secret, but a value
    pasted into it by mistake is still not printed)."""
    if old == new:
        return ""
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=old_name,
        tofile=new_name,
    )
    return mask("".join(line if line.endswith("\n") else line + "\n" for line in lines))


def service_defs(compose: str | None) -> dict[str, Any]:
    if not compose:
        return {}
    try:
        doc = composefile.load(compose)
    except Exception:  # an applied file that no longer loads: compare nothing
        return {}
    services = doc.get("services") if isinstance(doc, dict) else None
    return {str(k): v for k, v in services.items()} if isinstance(services, dict) else {}


def _uses(definition: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """The ``.env`` names a service's definition refers to (``${X}``, ``$X``; all of them
    when it reads ``env_file``)."""
    text = json.dumps(definition, sort_keys=True, default=str)
    if isinstance(definition, dict) and "env_file" in definition:
        return names
    return tuple(n for n in names if re.search(r"\$\{?" + re.escape(n) + r"(?![A-Za-z0-9_])", text))


def services(
    old_compose: str | None,
    new_compose: str,
    *,
    relabel_all: bool,
    env: KeyChanges,
    images: tuple[ImageRow, ...],
    not_running: Mapping[str, str] | None = None,
) -> tuple[ServiceRow, ...]:
    """What ``up`` would do to each service, and why. A service keeps the labels of the apply
    that last changed it (``core.records.reasons.service_labels``), so a new revision alone
    recreates nothing; ``relabel_all``: the applied record predates per-service labels, so this
    apply labels (and recreates) every service once."""
    old, new = service_defs(old_compose), service_defs(new_compose)
    moved = {i.service for i in images if i.changed}
    env_names = tuple(sorted(env.added + env.removed + env.changed))
    rows: list[ServiceRow] = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            rows.append(ServiceRow(name, "remove", ("gone from the compose file",)))
            continue
        if name not in old:
            rows.append(ServiceRow(name, "create", ("new service",)))
            continue
        why: list[str] = []
        if json.dumps(old[name], sort_keys=True, default=str) != json.dumps(
            new[name], sort_keys=True, default=str
        ):
            why.append("definition changed")
        if name in moved:
            why.append("image digest changed")
        used = _uses(new[name], env_names)
        if used:
            why.append(f".env changed ({', '.join(used)})")
        if relabel_all:
            why.append("new revision label")
        state = (not_running or {}).get(name)
        if state is not None and not why:
            rows.append(ServiceRow(name, "start", (state,)))
            continue
        rows.append(ServiceRow(name, "recreate" if why else "keep", tuple(why)))
    return tuple(rows)
