"""The local policy's judges of what reaches the host beyond a container. Pure: no I/O.

- ``host_paths``: every value of the effective model that names something on the host (bind and
  mount sources, a secret's or config's ``file``, a build's ``context``, ``dockerfile``,
  ``additional_contexts`` and secrets, every path in a local volume's ``driver_opts``, a relative
  one too),
  for ``core.admission.policy``'s one host-path judge; a mount of a type that is not a bind,
  volume, tmpfs or image (``npipe``, ``cluster``) and a build from a URL are refused here;
- ``volumes``: a driver beyond ``local``, ``driver_opts`` other than a plain bind, an
  ``external`` volume or one named outside the project (another app's data);
- ``networks``: the host's network by any road (``network_mode``, a network named ``host``, the
  ``host`` driver), another driver, ``external`` networks and names outside the project;
- ``provider`` (compose runs a program on the host), hooks (judged as their service),
  ``use_api_socket`` (the engine's API in the container).

A value refused by default here is allowed by ``policy.keys`` naming its path (the key table's
one allowance), or by the narrow allowance its line names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from monky_deployd.core.admission.composefile import BIND_OPTIONS, mount_options
from monky_deployd.core.admission.keywalk import allowed_by
from monky_deployd.core.admission.rules import (
    REWRITE_NAMES,
    Rules,
    Violation,
    normpath,
    scope_line,
)
from monky_deployd.core.errors import Code

MOUNT_TYPES = frozenset({"bind", "volume", "tmpfs", "image"})
# additional_contexts that are not host paths: an image, another stage or service
_NOT_PATHS = ("docker-image://", "service:", "target:", "oci-layout://")
_BIND_OPTS = frozenset({"bind", "rbind", "ro", "rw", "private", "rprivate"})


class HostPath(NamedTuple):
    """A host path of the effective model: who asks (a service, or "" at the top level), the
    key, the path; ``build``: a build's, which may also lie inside the release; ``read_only``:
    a bind the container cannot write."""

    service: str
    key: str
    path: str
    build: bool = False
    read_only: bool = False


def _dict(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _is_url(text: str) -> bool:
    return "://" in text or text.startswith(("git@", "github.com/")) or text.endswith(".git")


def host_paths(config: Mapping[str, object]) -> list[HostPath]:
    """Every host path the effective configuration names (see the module)."""
    found: list[HostPath] = []
    for name, svc in _dict(config.get("services")).items():
        svc = _dict(svc)
        for vol in _list(svc.get("volumes")):
            vol = _dict(vol)
            if vol.get("type") == "bind":
                source, ro = str(vol.get("source", "")), vol.get("read_only") is True
                found.append(HostPath(name, "volumes", source, read_only=ro))
        for kind in ("secrets", "configs"):
            found += _file_refs(config, kind, name, kind, svc.get(kind))
        build = _dict(svc.get("build"))
        context = build.get("context")
        if isinstance(context, str) and not _is_url(context):
            found.append(HostPath(name, "build.context", context, True))
            dockerfile = build.get("dockerfile")
            if isinstance(dockerfile, str) and not build.get("dockerfile_inline"):
                path = dockerfile if dockerfile.startswith("/") else f"{context}/{dockerfile}"
                found.append(HostPath(name, "build.dockerfile", path, True))
        for label, extra in _dict(build.get("additional_contexts")).items():
            text = str(extra)
            if not text.startswith(_NOT_PATHS) and not _is_url(text):
                found.append(HostPath(name, f"build.additional_contexts.{label}", text, True))
        found += _file_refs(config, "secrets", name, "build.secrets", build.get("secrets"))
        for key in ("cache_from", "cache_to"):
            for entry in _list(build.get(key)):
                cache = cache_path(str(entry))
                if cache is not None:
                    found.append(HostPath(name, f"build.{key}", cache))
    for name, spec in _dict(config.get("volumes")).items():
        for key, path in _opt_paths(_dict(_dict(spec).get("driver_opts"))):
            found.append(HostPath("", f"volumes.{name}.driver_opts.{key}", path))
    return found


# BuildKit cache backends that name no host path: a registry's image, the image itself
CACHE_TYPES = frozenset({"registry", "inline"})


def _cache_fields(entry: str) -> dict[str, str] | None:
    """A ``cache_from``/``cache_to`` entry's ``key=value`` fields (``type=local,src=dir``); None
    for an image reference (no ``=`` before its first ``/`` or ``:``)."""
    head = entry.split("/", 1)[0].split(":", 1)[0]
    if "=" not in head:
        return None
    fields = {}
    for part in entry.split(","):
        key, _, value = part.partition("=")
        fields[key.strip()] = value.strip()
    return fields


def cache_path(entry: str) -> str | None:
    """The host path a BuildKit cache entry reads or writes: a ``type=local`` entry's ``src``
    or ``dest`` (a missing one: ``""``, refused), an entry written as a path (``./cache``,
    ``/x``, ``~/x``); None for an image reference (``user/app:cache``, ``type=registry,
    ref=...``, ``type=inline``), which reads no host path."""
    fields = _cache_fields(entry)
    if fields is None:
        return entry if entry.startswith(("/", ".", "~")) else None
    if fields.get("type", "") == "local":
        return fields.get("src") or fields.get("dest") or ""
    return None


def _cache_types(build: Mapping[str, object]) -> Iterable[tuple[str, str]]:
    """``(key, type)`` of each cache entry of a backend other than the registry, the image or
    a local directory (gha, s3, azblob: a service outside the box, with credentials)."""
    for key in ("cache_from", "cache_to"):
        for entry in _list(build.get(key)):
            fields = _cache_fields(str(entry))
            kind = fields.get("type", "") if fields is not None else "registry"
            if kind not in CACHE_TYPES and kind != "local":
                yield key, kind or "(none)"


def _file_refs(
    config: Mapping[str, object], kind: str, service: str, key: str, refs: object
) -> list[HostPath]:
    top = _dict(config.get(kind))
    found = []
    for ref in _list(refs):
        source = ref.get("source") if isinstance(ref, dict) else ref
        spec = top.get(str(source))
        if isinstance(spec, dict) and isinstance(spec.get("file"), str):
            found.append(HostPath(service, key, spec["file"]))
    return found


# ``o`` options of a local volume whose value is a list of paths (overlay's, ``:``-separated)
_PATH_OPTIONS = frozenset({"lowerdir", "upperdir", "workdir", "datadir"})


def _opt_paths(opts: Mapping[str, object]) -> Iterable[tuple[str, str]]:
    """Every path in a volume's ``driver_opts``, absolute or not (a relative one is resolved
    by the engine from its own working directory: refused by the host-path judge):
    ``device`` when it is absolute or the mount is a bind (``type`` none, bind or empty, or
    ``o`` with bind; another type's ``device`` is its source: ``overlay``, ``:/export``); each
    ``o`` option's value that is a path (overlay's ``lowerdir=/a:/b``, ``upperdir``,
    ``workdir``; any value holding a ``/``)."""
    device = opts.get("device")
    kind = str(opts.get("type", "")).strip()
    bind = kind in ("", "none", "bind", "rbind") or bool(mount_options(opts) & BIND_OPTIONS)
    if isinstance(device, str) and (device.startswith("/") or bind):
        yield "device", device
    for option in str(opts.get("o", "")).split(","):
        key, sep, value = option.strip().partition("=")
        for part in value.split(":") if sep else ():
            if part.startswith("/") or "/" in part or (key in _PATH_OPTIONS and part):
                yield f"o.{key}", part


def _plain_bind(opts: Mapping[str, object]) -> bool:
    """``driver_opts`` of a plain bind: no filesystem type, ``o`` only bind options (with
    ``bind``), a ``device`` (its path judged by the host-path judge)."""
    kind = str(opts.get("type", "none")).strip()
    options = mount_options(opts)
    device = opts.get("device")
    return (
        kind in ("none", "")
        and set(opts) <= {"type", "o", "device"}
        and bool(options & BIND_OPTIONS)
        and options <= _BIND_OPTS
        and isinstance(device, str)  # a relative one is refused by the host-path judge
    )


def _keys_line(path: str) -> str:
    return f"policy.keys: [{path}]"


def volumes(config: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    """The top-level volumes: see the module."""
    project = str(config.get("name", ""))
    for name, spec in sorted(_dict(config.get("volumes")).items()):
        spec = _dict(spec)
        here = f"volumes.{name}"
        checks = [
            (
                "driver",
                str(spec.get("driver") or "local") != "local",
                f"the volume driver {spec.get('driver')} (a plugin on the host)",
            ),
            (
                "driver_opts",
                bool(spec.get("driver_opts")) and not _plain_bind(_dict(spec.get("driver_opts"))),
                f"driver_opts {_opts_text(_dict(spec.get('driver_opts')))} (a mount on the host "
                "other than a plain bind)",
            ),
            *_outside("volume", name, spec, project),
        ]
        yield from _unless_keyed(here, checks, rules)


def _opts_text(opts: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(opts.items()))


def networks(config: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    """The top-level networks: see the module (``network_mode: host`` is judged with the
    other host namespaces)."""
    project = str(config.get("name", ""))
    users: dict[str, list[str]] = {}
    for svc_name, svc in sorted(_dict(config.get("services")).items()):
        for net in _dict(_dict(svc).get("networks")):
            users.setdefault(str(net), []).append(str(svc_name))
    for name, spec in sorted(_dict(config.get("networks")).items()):
        spec = _dict(spec)
        here = f"networks.{name}"
        engine_name = str(spec.get("name") or name)
        driver = str(spec.get("driver") or "bridge")
        if engine_name == "host" or driver == "host":
            for service in users.get(name, []) or [""]:
                if "network" not in rules.allows(service).host_namespaces:
                    line = scope_line(service, "host_namespaces", "network")
                    yield Violation(service, here, "the host's network", line)
            continue
        checks = [
            ("driver", driver != "bridge", f"the network driver {driver} (the host's LAN)"),
            *_outside("network", name, spec, project),
        ]
        yield from _unless_keyed(here, checks, rules)


def _outside(
    kind: str, name: str, spec: Mapping[str, object], project: str
) -> list[tuple[str, bool, str]]:
    """A volume's or network's checks for reaching beyond the project: ``external`` (the box's,
    not the release's) and a ``name`` other than the project's own."""
    own = f"{project}_{name}"
    given = spec.get("name")
    return [
        ("external", bool(spec.get("external")), f"the box's {kind} {given or name}"),
        (
            "name",
            not spec.get("external") and given not in (None, own),
            f"the name {given} (not the project's {own}: another app's {kind})",
        ),
    ]


def _unless_keyed(
    here: str, checks: list[tuple[str, bool, str]], rules: Rules
) -> Iterable[Violation]:
    """A violation per check that refuses, unless ``policy.keys`` names its path."""
    for key, refused, asks in checks:
        path = f"{here}.{key}"
        if refused and not allowed_by(path, rules.keys):
            rewrite = REWRITE_NAMES if key in ("external", "name") else ""
            yield Violation("", path, asks, _keys_line(path), rewrite=rewrite)


def service(name: str, svc: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    """A service's provider, hooks, mount types, build URLs and the engine's API socket."""
    may = rules.allows(name)
    provider = _dict(svc.get("provider"))
    program = str(provider.get("type", ""))
    if provider and program not in may.providers:
        yield Violation(
            name,
            "provider",
            f"runs the program {program or '(none)'} on the host",
            scope_line(name, "providers", program),
        )
    for hook in ("post_start", "pre_stop"):
        for item in _list(svc.get(hook)):
            if _dict(item).get("privileged") is True and not may.privileged:
                yield Violation(
                    name, f"{hook}.privileged", "true", f"policy.services.{name}.privileged: true"
                )
    if svc.get("use_api_socket") is True:
        yield Violation(
            name, "use_api_socket", "the engine's API socket", code=Code.POLICY_PROTECTED_PATH
        )
    for vol in _list(svc.get("volumes")):
        kind = str(_dict(vol).get("type", "volume"))
        if kind not in MOUNT_TYPES:
            yield Violation(name, "volumes", f"a mount of type {kind} (not the box's to give)")
        spread = str(_dict(_dict(vol).get("bind")).get("propagation", ""))
        path = f"services.{name}.volumes.bind.propagation"
        if spread in ("shared", "rshared") and not allowed_by(path, rules.keys):
            yield Violation(
                name, path, f"{spread} (mounts made in it reach the host)", _keys_line(path)
            )
    build = _dict(svc.get("build"))
    sources = [("build.context", build.get("context"))]
    sources += [
        (f"build.additional_contexts.{k}", v)
        for k, v in _dict(build.get("additional_contexts")).items()
    ]
    for key, kind in _cache_types(build):
        path = f"services.{name}.build.{key}"
        if not allowed_by(path, rules.keys):
            yield Violation(
                name, path, f"type={kind} (a cache outside the box and the registry)",
                _keys_line(path),
            )  # fmt: skip
    for key, value in sources:
        if isinstance(value, str) and _is_url(value) and not value.startswith(_NOT_PATHS):
            yield Violation(
                name, key, f"{value} (fetched from outside the release)", code=Code.POLICY_SOURCE
            )


def within_release(path: HostPath, forms: set[str], release_dir: str) -> bool:
    """A build's path inside the release's own directory (its compose file and .env)."""
    from monky_deployd.core.admission.rules import inside

    root = normpath(release_dir)
    return path.build and all(inside(f, root) for f in forms)
