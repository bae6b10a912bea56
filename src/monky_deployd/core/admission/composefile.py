"""What the agent checks in a bundle's compose file before anything is written. Pure: no I/O.

- ``budget``: the file's size once every YAML alias is expanded, and its depth. PyYAML keeps an
  alias as one shared object, so a few hundred bytes of nested aliases (a "billion laughs")
  load in microseconds here and then make ``docker compose``, which expands them, grow to
  gigabytes. The event stream is walked (the parser does not recurse, so deep nesting cannot
  exhaust Python's stack either) and each anchor's expanded size counted once; a file over
  ``MAX_NODES`` nodes or ``MAX_DEPTH`` levels is refused with BUNDLE_COMPOSE_TOO_COMPLEX.
- ``relative_binds``: bind mounts whose host path Compose resolves against the project
  directory (``./data:/data``). That directory is ``revisions/<rev>/``, which the agent replaces
  and prunes, so their data would be deleted with it: refused with BUNDLE_RELATIVE_BIND.
- ``image_registry``: the registry an image reference pulls from (docker.io when it names none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import yaml

MAX_NODES = 20_000  # expanded nodes (scalars + collections); real compose files: < 5,000. At
# 44,000 nodes (a 268-byte alias chain) docker compose took 95 MB and 33 s to read the file.
MAX_DEPTH = 64  # nested collections; compose's own schema goes about 8 deep
DOCKER_HUB = "docker.io"
_DOCKER_HUB_NAMES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})

try:  # libyaml's parser when PyYAML was built with it (Debian's python3-yaml is)
    _Loader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - pure-Python PyYAML
    _Loader = yaml.SafeLoader


class _Frame:
    __slots__ = ("anchor", "height", "start")

    def __init__(self, anchor: str | None, start: int) -> None:
        self.anchor, self.start, self.height = anchor, start, 0


def budget(text: str) -> str | None:
    """Why the compose file is over budget (expanded nodes or depth), or None when it is not.

    Raises ``yaml.YAMLError`` when the text is not YAML at all (the caller names that)."""
    nodes = 0
    sizes: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, height in collections)
    stack: list[_Frame] = []

    def grew(height: int) -> str | None:
        if stack:
            stack[-1].height = max(stack[-1].height, height)
        if len(stack) + height > MAX_DEPTH:
            return f"nests deeper than {MAX_DEPTH} levels once its aliases are expanded"
        if nodes > MAX_NODES:
            return (
                f"expands to more than {MAX_NODES} YAML nodes once its aliases (*name) are "
                "expanded, which docker compose would hold in memory"
            )
        return None

    for event in yaml.parse(text, Loader=_Loader):
        why: str | None = None
        if isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor is not None:
                sizes[event.anchor] = (1, 0)
            why = grew(0)
        elif isinstance(event, yaml.CollectionStartEvent):
            nodes += 1
            stack.append(_Frame(event.anchor, nodes - 1))
            why = grew(0)
        elif isinstance(event, yaml.CollectionEndEvent):
            frame = stack.pop()
            if frame.anchor is not None:
                sizes[frame.anchor] = (nodes - frame.start, frame.height + 1)
            why = grew(frame.height + 1)
        elif isinstance(event, yaml.AliasEvent):
            if any(f.anchor == event.anchor for f in stack):
                return f"has an alias (*{event.anchor}) inside its own anchor: a loop"
            size, height = sizes.get(event.anchor or "", (0, 0))  # unknown: the loader names it
            nodes += size
            why = grew(height)
        if why is not None:
            return why
    return None


# What PyYAML's constructors raise besides ``yaml.YAMLError`` for a value they cannot build:
# an impossible date (ValueError), an explicit ``!!timestamp`` that is no date (AttributeError),
# an explicit ``!!int``/``!!float`` that is no number (ValueError, OverflowError).
CONSTRUCTOR_ERRORS = (ValueError, OverflowError, TypeError, AttributeError, KeyError, IndexError)


def load(text: str) -> object:
    """The document, once ``budget`` has passed. Raises ``yaml.YAMLError`` or one of
    ``CONSTRUCTOR_ERRORS``."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader (C or Python)


def env_file_services(doc: object) -> tuple[str, ...]:
    """The services that name an ``env_file``, sorted: each takes the ``.env`` whole (the
    revision directory holds no other file for one to name)."""
    services = doc.get("services") if isinstance(doc, dict) else None
    if not isinstance(services, dict):
        return ()
    return tuple(
        sorted(
            str(name)
            for name, definition in services.items()
            if isinstance(definition, dict) and definition.get("env_file")
        )
    )


# -- bind mounts -------------------------------------------------------------------------------


def literal_values(template: str, secrets: Iterable[str] = ()) -> dict[str, str | None]:
    """The variables the ``.env`` template assigns, as compose reads them (the last assignment
    wins): a literal value (no reference, no ``$``) as itself, any other (a reference, a
    ``$``) and ``secrets`` (the manifest's: the agent fills them) None, not known here; {} for
    a template compose could not read (ENV_TEMPLATE_INVALID says so at render)."""
    from monky_deployd.core.faults import EnvError
    from monky_deployd.core.render.dotenv import parse

    try:
        assignments = parse(template)
    except EnvError:
        return {}
    found: dict[str, str | None] = {}
    for a in assignments:
        parts = a.parts_of(template)
        value = "".join(text for text, _ in parts)
        known = not any(ref for _, ref in parts) and "$" not in value
        found[a.name] = value if known else None
    for name in secrets:
        found[name] = None
    return found


_LEADING_VARIABLE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^${}]*))?\}"
    r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*))"
)


def _applied(source: str, env: Mapping[str, str | None]) -> str:
    """``source`` with a leading ``${VAR}``, ``$VAR``, ``${VAR:-default}`` or ``${VAR-default}``
    put in as compose interpolates it from the .env (``env``: ``literal_values``): the
    template's literal value, or the default where compose takes it (VAR unset; ``:-``: or
    empty); as written when the value is not known here (a manifest variable, a reference)
    or VAR is set nowhere and has no default."""
    lead = _LEADING_VARIABLE.match(source)
    if lead is None:
        return source
    name = lead.group("braced") or lead.group("plain") or ""
    op, default = lead.group("op"), lead.group("default") or ""
    if name in env and env[name] is None:
        return source
    value = env.get(name)
    if (op == ":-" and not value) or (op == "-" and value is None):
        value = default
    return source if value is None else value + source[lead.end() :]


def relative_binds(
    doc: dict[Any, Any], env: Mapping[str, str | None] | None = None
) -> list[tuple[str, str]]:
    """``(where, source)`` of every bind mount whose host path is not absolute once Compose
    reads it: it starts with ``.`` (relative to the project directory) or with a variable
    (``${DATA}:/data``: its value may be relative, and it is only known after rendering),
    unless the .env template assigns that variable a literal value (``env``,
    ``literal_values``) that makes it absolute: judged as compose will read it."""
    env = env or {}
    found: list[tuple[str, str]] = []
    services = doc.get("services")
    for name, svc in services.items() if isinstance(services, dict) else ():
        volumes = svc.get("volumes") if isinstance(svc, dict) else None
        for i, vol in enumerate(volumes if isinstance(volumes, list) else ()):
            where = f"compose.services.{name}.volumes[{i}]"
            source = _bind_source(vol)
            if source is not None and _not_absolute(source, env):
                found.append((where, source))
    volumes = doc.get("volumes")
    for name, spec in volumes.items() if isinstance(volumes, dict) else ():
        opts = spec.get("driver_opts") if isinstance(spec, dict) else None
        device = opts.get("device") if isinstance(opts, dict) else None
        binds = bool(mount_options(opts) & BIND_OPTIONS)  # (an overlay's device: 'overlay')
        if binds and isinstance(device, str) and _not_absolute(device, env):
            found.append((f"compose.volumes.{name}.driver_opts.device", device))
    return found


def home_paths(doc: dict[Any, Any]) -> list[tuple[str, str]]:
    """``(where, path)`` of every host path that starts with ``~`` (a bind's source, a secret's
    or config's ``file``, a local volume's ``device``): the agent runs compose without
    ``HOME``, and compose then reads ``~`` as a directory of the release."""
    found: list[tuple[str, str]] = []
    services = doc.get("services")
    for name, svc in services.items() if isinstance(services, dict) else ():
        volumes = svc.get("volumes") if isinstance(svc, dict) else None
        for i, vol in enumerate(volumes if isinstance(volumes, list) else ()):
            source = _bind_source(vol)
            if source is not None and source.startswith("~"):
                found.append((f"compose.services.{name}.volumes[{i}]", source))
    for kind in ("secrets", "configs"):
        top = doc.get(kind)
        for name, spec in top.items() if isinstance(top, dict) else ():
            file = spec.get("file") if isinstance(spec, dict) else None
            if isinstance(file, str) and file.startswith("~"):
                found.append((f"compose.{kind}.{name}.file", file))
    volumes = doc.get("volumes")
    for name, spec in volumes.items() if isinstance(volumes, dict) else ():
        opts = spec.get("driver_opts") if isinstance(spec, dict) else None
        device = opts.get("device") if isinstance(opts, dict) else None
        if isinstance(device, str) and device.startswith("~"):
            found.append((f"compose.volumes.{name}.driver_opts.device", device))
    return found


BIND_OPTIONS = frozenset({"bind", "rbind"})  # a local volume's `o` that makes it a bind


def mount_options(opts: object) -> frozenset[str]:
    """The options of a local volume's ``driver_opts.o`` (``"bind,ro"``), each stripped."""
    text = str(opts.get("o", "")) if isinstance(opts, dict) else ""
    return frozenset(o.strip() for o in text.split(",") if o.strip())


def _bind_source(vol: object) -> str | None:
    """The host path of a bind mount in either syntax; None for a named or anonymous volume."""
    if isinstance(vol, str):
        cut = first_colon(vol)
        if cut < 0:  # "/data": an anonymous volume
            return None
        source = vol[:cut]
        return source if source.startswith((".", "/", "~", "$")) else None  # else: a name
    if isinstance(vol, dict) and vol.get("type") == "bind":
        long_source = vol.get("source")
        return long_source if isinstance(long_source, str) else None
    return None


def first_colon(text: str) -> int:
    """Where the short syntax's source ends: its first ``:`` outside a ``${...}`` (compose
    interpolates before it splits: ``${DIR:-/srv}/x:/x``); -1 for none."""
    depth = 0
    for i, ch in enumerate(text):
        if ch == "{" and i and text[i - 1] == "$":
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        elif ch == ":" and not depth:
            return i
    return -1


def _not_absolute(path: str, env: Mapping[str, str | None] | None = None) -> bool:
    """``path`` is relative as compose reads it (``~`` is ``home_paths``'s, as written; a
    value the .env puts in must be absolute itself)."""
    applied = _applied(path, env or {})
    return not applied.startswith(("/", "~") if applied == path else "/")


# -- images ------------------------------------------------------------------------------------


def images(doc: dict[Any, Any]) -> Iterator[tuple[str, str]]:
    """``(service, image)`` for every service that names an image."""
    services = doc.get("services")
    for name, svc in services.items() if isinstance(services, dict) else ():
        image = svc.get("image") if isinstance(svc, dict) else None
        if isinstance(image, str):
            yield str(name), image


def image_registry(image: str) -> str | None:
    """The registry ``image`` is pulled from, as docker reads a reference: the part before the
    first ``/`` when it has a ``.`` or ``:`` or is ``localhost``, else docker.io (``busybox``,
    ``library/redis``, ``team/app``). None when that part is a variable (known only to Compose)."""
    first, slash, _ = image.partition("/")
    if "$" in first:
        return None
    if slash and ("." in first or ":" in first or first == "localhost"):
        return registry_name(first)
    return DOCKER_HUB


def registry_name(host: str) -> str:
    """A registry host as compared: lower case, Docker Hub's aliases as docker.io."""
    host = host.lower()
    return DOCKER_HUB if host in _DOCKER_HUB_NAMES else host
