"""The desired bundle: its model and validation.

``validate(revision, raw)`` turns tenancy's JSON into a ``Bundle`` or raises BUNDLE_INVALID
naming every problem (``at 'manifest[1].path': ...``). Everything here runs before any file or
container is touched, so a malformed bundle changes nothing on the box. Two faults of the compose
file have their own codes (``core.admission.composefile``): BUNDLE_COMPOSE_TOO_COMPLEX (over the
alias expansion or depth budget; checked before the file is loaded at all) and BUNDLE_RELATIVE_BIND.

Every text must be valid Unicode (no lone surrogate: JSON's ``"\ud800"``), since it is written
to a file or compared as UTF-8. When ``registry_host`` is set, every image the compose file
names literally must come from it (an image without a registry part comes from docker.io); an
image whose registry part is a variable is left to the pull. Without ``registry_host`` the agent
has no credential and images may come from any registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

import yaml

from monky_deployd.core.admission import composefile
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle import schedule

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
    "rollout",
    "release",  # contract v1.3: core.signing.trust reads them, before this validation
    "signatures",
}
ON_FAILURE = ("rollback", "retry")  # "rollback" when absent (core.lifecycle.recovery)
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
    env_file_services: tuple[str, ...] = ()  # the services that take the .env whole (env_file)

    @property
    def env_entries(self) -> tuple[ManifestEntry, ...]:
        return tuple(e for e in self.manifest if e.use is None)

    @property
    def registry_entries(self) -> tuple[ManifestEntry, ...]:
        return tuple(e for e in self.manifest if e.use == REGISTRY_AUTH)


def validate(revision: str, raw: dict[str, Any], *, binds: bool = True) -> Bundle:
    """The bundle, validated (BUNDLE_INVALID); ``binds``: its relative and ``~`` binds refused
    too (BUNDLE_RELATIVE_BIND; ``bundle check`` judges them apart, ``check_binds``)."""
    problems: list[str] = []

    def bad(where: str, what: str) -> None:
        problems.append(f"at '{where}': {what}")

    for where, text in _texts(revision, raw):
        if not _is_unicode(text):
            bad(where, "is not valid Unicode text (it holds a lone surrogate such as \\ud800)")
    if problems:  # nothing else can be read safely
        raise _invalid(revision, problems)

    if not REVISION_RE.fullmatch(revision):
        bad("revision", "must be 1-64 of A-Z a-z 0-9 . _ - starting with a letter or digit")
    for key in sorted(set(raw) - KNOWN_KEYS):
        bad(key, "unknown key")

    project = raw.get("project")
    if not isinstance(project, str) or not PROJECT_RE.fullmatch(project):
        bad("project", "must match ^[a-z0-9][a-z0-9_-]{0,62}$")

    compose = raw.get("compose")
    services: tuple[str, ...] = ()
    doc: dict[Any, Any] = {}
    if not isinstance(compose, str) or not compose.strip():
        bad("compose", "must be a non-empty compose file")
    else:
        loaded = _compose_doc(revision, compose, bad)
        if loaded is not None:
            doc = loaded
            services = _compose_services(doc, bad)

    template = raw.get("env_template", "")
    if not isinstance(template, str):
        bad("env_template", "must be a string")
    elif "\x00" in template:
        bad("env_template", "must not contain NUL bytes")

    manifest = _manifest(raw.get("manifest", []), bad)

    registry_host = raw.get("registry_host")
    if registry_host is not None and (not isinstance(registry_host, str) or not registry_host):
        bad("registry_host", "must be a non-empty string")
    elif isinstance(registry_host, str):
        _check_images(doc, registry_host, bad)

    need = raw.get("disk_need_bytes")
    if need is not None and (isinstance(need, bool) or not isinstance(need, int) or need < 0):
        bad("disk_need_bytes", "must be a non-negative integer number of bytes")

    on_failure = raw.get("on_failure", "rollback")
    if on_failure not in ON_FAILURE:
        bad("on_failure", "must be 'rollback' or 'retry'")

    if "rollout" in raw and (why := schedule.spread_problem(raw["rollout"])) is not None:
        bad("rollout", why)  # contract v1.2: {"spread_s": 0..86400}

    if problems:
        raise _invalid(revision, problems)
    if binds:
        check_binds(revision, doc, _literals(template, manifest))
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
        env_file_services=composefile.env_file_services(doc),
    )


def _where(where: str) -> tuple[str, str]:
    """``compose.services.web.volumes[0]`` as a violation's (service, key path)."""
    path = where.removeprefix("compose.")
    parts = path.split(".")
    return (parts[1] if parts[0] == "services" and len(parts) > 2 else ""), path


def _literals(template: object, manifest: tuple[ManifestEntry, ...]) -> dict[str, str | None]:
    """What the .env template assigns literally (``composefile.literal_values``)."""
    if not isinstance(template, str):
        return {}
    return composefile.literal_values(template, (e.name for e in manifest))


def _target(doc: dict[Any, Any], where: str) -> str:
    """The container path of the bind at ``where`` (``compose.services.web.volumes[0]``); ""
    for a volume's device."""
    head, _, index = where.removeprefix("compose.services.").rpartition(".volumes[")
    services = doc.get("services")
    svc = services.get(head) if isinstance(services, dict) else None
    vols = svc.get("volumes") if isinstance(svc, dict) else None
    try:
        vol = vols[int(index.rstrip("]"))] if isinstance(vols, list) else None
    except (ValueError, IndexError):
        return ""
    if isinstance(vol, dict):
        return str(vol.get("target", ""))
    text = str(vol) if vol is not None else ""
    cut = composefile.first_colon(text)
    return text[cut + 1 :].split(":", 1)[0] if cut >= 0 else ""


def check_binds(
    revision: str, doc: dict[Any, Any], env: dict[str, str | None] | None = None
) -> None:
    """BUNDLE_RELATIVE_BIND: a bind whose host path is relative or starts with a variable
    (``composefile.relative_binds``), or one that starts with ``~`` (``home_paths``), each a
    line with how the bundle writes it instead."""
    from monky_deployd.core.admission.rules import HOME, Refusal, Violation, bind_rewrite

    binds = composefile.relative_binds(doc, env)
    homes = composefile.home_paths(doc)
    if not binds and not homes:
        return
    found = [
        Violation(
            *_where(where),
            (
                f"{source} is not an absolute host path: it would live in the agent's revision "
                "directory, replaced on every apply and pruned"
            )
            if not source.startswith("$")
            else (
                f"{source} starts with a variable the .env template does not set to an "
                "absolute path on a line of its own (a manifest variable, one assigned "
                "nothing or a relative path): compose would read a relative bind, in the "
                "agent's revision directory, replaced on every apply and pruned"
            ),
            code=Code.BUNDLE_RELATIVE_BIND,
            rewrite=bind_rewrite(source, _target(doc, where))
            + (
                ", or the variable set in the env_template (`DATA=/srv/app/data`)"
                if source.startswith("$")
                else ""
            ),
        )
        for where, source in binds
    ]
    found += [
        Violation(
            *_where(where),
            f"{source} {HOME}",
            code=Code.BUNDLE_RELATIVE_BIND,
            rewrite="the absolute host path written out (/srv/app/data), or a named volume",
        )
        for where, source in homes
    ]
    said = [f"at '{where}': {source!r}" for where, source in binds]
    said += [f"at '{where}': {source!r} (~ is no home directory here)" for where, source in homes]
    what = "is not absolute" if binds else "starts with ~"
    raise Refusal(
        f"the compose file of revision {revision!r} bind-mounts a host path that {what}, "
        "nothing was changed: " + "; ".join(said),
        code=Code.BUNDLE_RELATIVE_BIND,
        hint="a relative bind (./data) would live in the agent's revision directory, which "
        "is replaced on every apply and pruned: use a named volume or an absolute host path "
        "written out (/srv/app/data, not ${DATA})"
        + ("; compose runs without HOME, so ~ is a directory of the release" if homes else "")
        + ' (each line below says how to write it; OPERATIONS.md, "Writing a bundle")',
        violations=found,
    )


def _invalid(revision: str, problems: list[str]) -> DeployError:
    return DeployError(
        f"the bundle for revision {revision!r} is malformed, nothing was changed:\n"
        + "\n".join(problems),
        code=Code.BUNDLE_INVALID,
        hint="the bundle published to tenancy for this environment",
    )


def _texts(revision: str, raw: dict[str, Any]) -> list[tuple[str, str]]:
    """Every text of the bundle the agent uses, with where it is."""
    found = [("revision", revision)]
    found += [(k, v) for k, v in raw.items() if isinstance(v, str)]
    found += [(f"key {k!r}", k) for k in raw if isinstance(k, str)]
    manifest = raw.get("manifest")
    for i, item in enumerate(manifest if isinstance(manifest, list) else ()):
        if isinstance(item, dict):
            found += [(f"manifest[{i}].{k}", v) for k, v in item.items() if isinstance(v, str)]
            found += [(f"manifest[{i}] key", k) for k in item if isinstance(k, str)]
    return found


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _compose_doc(revision: str, text: str, bad: Any) -> dict[Any, Any] | None:
    """The compose file as a mapping (None after noting why it is not one). Over budget: raised
    at once (BUNDLE_COMPOSE_TOO_COMPLEX), before the file is ever loaded."""
    try:
        why = composefile.budget(text)
        if why is None:
            doc = composefile.load(text)
    except yaml.YAMLError as exc:
        if "nesting depth" in str(getattr(exc, "problem", "")):  # libyaml's own limit (1000)
            _too_complex(revision, f"nests deeper than {composefile.MAX_DEPTH} levels")
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        bad("compose", f"is not valid YAML{where}")
        return None
    except composefile.CONSTRUCTOR_ERRORS:  # a constructor's refusal (an impossible date)
        bad("compose", "is not valid YAML (a value cannot be read, such as an impossible date)")
        return None
    if why is not None:
        _too_complex(revision, why)
    if not isinstance(doc, dict):
        bad("compose", f"must be a YAML mapping, found {type(doc).__name__}")
        return None
    return doc


def _too_complex(revision: str, why: str) -> NoReturn:
    raise DeployError(
        f"the compose file of revision {revision!r} {why}; refused before anything was written",
        code=Code.BUNDLE_COMPOSE_TOO_COMPLEX,
        hint=f"the bundle's compose file: at most {composefile.MAX_NODES} YAML nodes and "
        f"{composefile.MAX_DEPTH} levels with every alias (*name, <<: *name) expanded",
    )


def _check_images(doc: dict[Any, Any], registry_host: str, bad: Any) -> None:
    want = composefile.registry_name(registry_host)
    for service, image in composefile.images(doc):
        got = composefile.image_registry(image)
        if got is not None and got != want:
            bad(
                f"compose.services.{service}.image",
                f"{image!r} comes from {got}, not from the bundle's registry_host {want} "
                "(the only registry the agent holds a credential for; an image without a "
                "registry part comes from docker.io)",
            )


def _compose_services(doc: dict[Any, Any], bad: Any) -> tuple[str, ...]:
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
