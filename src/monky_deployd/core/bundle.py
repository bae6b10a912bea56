"""The desired bundle: its model and validation.

``validate(revision, raw)`` turns tenancy's JSON into a ``Bundle`` or raises BUNDLE_INVALID
naming every problem (``at 'manifest[1].path': ...``). Everything here runs before any file or
container is touched, so a malformed bundle changes nothing on the box.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from monky_deployd.core.errors import Code, DeployError

PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
VAR_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PATH_SEGMENT_RE = re.compile(r"^[A-Za-z0-9._-]+$")
KNOWN_KEYS = {
    "project",
    "compose",
    "env_template",
    "manifest",
    "registry_host",
    "disk_need_bytes",
    "on_failure",
}
ON_FAILURE = ("rollback", "retry")  # "rollback" when absent (core.recovery)
REGISTRY_AUTH = "registry-auth"


@dataclass(frozen=True)
class ManifestEntry:
    name: str
    path: str
    key: str
    use: str | None = None


@dataclass(frozen=True)
class Bundle:
    revision: str
    project: str
    compose: str
    env_template: str
    manifest: tuple[ManifestEntry, ...]
    registry_host: str | None
    disk_need_bytes: int | None
    services: tuple[str, ...]
    on_failure: str = "rollback"

    @property
    def env_entries(self) -> tuple[ManifestEntry, ...]:
        return tuple(e for e in self.manifest if e.use is None)

    @property
    def registry_entries(self) -> tuple[ManifestEntry, ...]:
        return tuple(e for e in self.manifest if e.use == REGISTRY_AUTH)


def validate(revision: str, raw: dict[str, Any]) -> Bundle:
    problems: list[str] = []

    def bad(where: str, what: str) -> None:
        problems.append(f"at '{where}': {what}")

    if not REVISION_RE.fullmatch(revision):
        bad("revision", "must be 1-64 of A-Z a-z 0-9 . _ - starting with a letter or digit")
    for key in sorted(set(raw) - KNOWN_KEYS):
        bad(key, "unknown key")

    project = raw.get("project")
    if not isinstance(project, str) or not PROJECT_RE.fullmatch(project):
        bad("project", "must match ^[a-z0-9][a-z0-9_-]{0,62}$")

    compose = raw.get("compose")
    services: tuple[str, ...] = ()
    if not isinstance(compose, str) or not compose.strip():
        bad("compose", "must be a non-empty compose file")
    else:
        services = _compose_services(compose, bad)

    template = raw.get("env_template", "")
    if not isinstance(template, str):
        bad("env_template", "must be a string")
    elif "\x00" in template:
        bad("env_template", "must not contain NUL bytes")

    manifest = _manifest(raw.get("manifest", []), bad)

    registry_host = raw.get("registry_host")
    if registry_host is not None and (not isinstance(registry_host, str) or not registry_host):
        bad("registry_host", "must be a non-empty string")

    need = raw.get("disk_need_bytes")
    if need is not None and (isinstance(need, bool) or not isinstance(need, int) or need < 0):
        bad("disk_need_bytes", "must be a non-negative integer number of bytes")

    on_failure = raw.get("on_failure", "rollback")
    if on_failure not in ON_FAILURE:
        bad("on_failure", "must be 'rollback' or 'retry'")

    if problems:
        raise DeployError(
            f"the bundle for revision {revision!r} is malformed, nothing was changed:\n"
            + "\n".join(problems),
            code=Code.BUNDLE_INVALID,
            hint="the bundle published to tenancy for this environment",
        )
    assert isinstance(project, str) and isinstance(compose, str) and isinstance(template, str)
    return Bundle(
        revision=revision,
        project=project,
        compose=compose,
        env_template=template,
        manifest=manifest,
        registry_host=registry_host if isinstance(registry_host, str) else None,
        disk_need_bytes=need if isinstance(need, int) else None,
        services=services,
        on_failure=str(on_failure),
    )


def _compose_services(text: str, bad: Any) -> tuple[str, ...]:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        bad("compose", f"is not valid YAML{where}")
        return ()
    if not isinstance(doc, dict):
        bad("compose", f"must be a YAML mapping, found {type(doc).__name__}")
        return ()
    services = doc.get("services")
    if not isinstance(services, dict) or not services:
        bad("compose.services", "must be a non-empty mapping of services")
        return ()
    return tuple(sorted(str(name) for name in services))


def _manifest(raw: object, bad: Any) -> tuple[ManifestEntry, ...]:
    if not isinstance(raw, list):
        bad("manifest", "must be a list")
        return ()
    entries: list[ManifestEntry] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        where = f"manifest[{i}]"
        if not isinstance(item, dict):
            bad(where, "must be a mapping with name, path and key")
            continue
        for key in sorted(set(item) - {"name", "path", "key", "use"}):
            bad(f"{where}.{key}", "unknown key")
        name, path, key, use = (item.get(k) for k in ("name", "path", "key", "use"))
        if use is not None and use != REGISTRY_AUTH:
            bad(f"{where}.use", f"unknown use {use!r} (only {REGISTRY_AUTH!r})")
        if not isinstance(name, str) or not name:
            bad(f"{where}.name", "must be a non-empty string")
        elif use is None and not VAR_NAME_RE.fullmatch(name):
            bad(f"{where}.name", f"{name!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
        elif use is None and name in seen:
            bad(f"{where}.name", f"{name!r} appears twice")
        if not isinstance(path, str) or not _safe_path(path):
            bad(f"{where}.path", "must be a relative path of [A-Za-z0-9._-] segments without '..'")
        if not isinstance(key, str) or not key:
            bad(f"{where}.key", "must be a non-empty string")
        if isinstance(name, str) and use is None:
            seen.add(name)
        if all(isinstance(v, str) for v in (name, path, key)):
            entries.append(
                ManifestEntry(str(name), str(path), str(key), use if use is None else str(use))
            )
    return tuple(entries)


def _safe_path(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and all(
        p not in ("", ".", "..") and PATH_SEGMENT_RE.fullmatch(p) for p in parts
    )
