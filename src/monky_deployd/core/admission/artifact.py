"""The judged model: what the policy judged is what compose runs. Pure: no I/O.

The policy judges compose's effective model of a release (``docker compose config --format
json`` over its compose file and rendered ``.env``: interpolation done, every relative path made
absolute). That model, with each host path the engine mounts pinned to what the judge resolved
(its links followed, ``pinned``), is written once into the revision (``compose.judged.json``,
``text``) and every compose call of the revision runs from it, with no ``.env`` of its own to
read: nothing is left for compose to look up again between the judge and ``up``.

A path resolved once is what the engine mounts only if nobody can swap a directory on its way
before the engine follows it: at ``up``, and again at every start of the container (a restart
policy mounts anew). A container can write a directory when one of its writable mounts is that
directory or above it. ``swappable`` refuses (POLICY_SWAPPABLE_PATH) each bind whose parent
directory a writer can write, where the bind or the writer is the release's own: the writers are
the release's writable binds and every container's on the box (``Mount``, the engine's facts);
``moved`` refuses a pinned path that resolves elsewhere now (judged again right before ``up``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from monky_deployd.core.admission.rules import Violation, normpath
from monky_deployd.core.errors import Code

if TYPE_CHECKING:
    from monky_deployd.core.admission.paths import Where

SWAPPABLE = Code.POLICY_SWAPPABLE_PATH


class Mount(NamedTuple):
    """A host directory or file a container has mounted (the engine's facts: a bind's source,
    a local volume's bind ``device``): who (a container, or a service of the release), its
    project (compose's label; "" for none), the host path, whether it may write there, and the
    release's service or volume key it belongs to (its own mounts only)."""

    who: str
    project: str
    source: str
    writable: bool
    key: tuple[str, str] = ("", "")  # (service, key) of a Violation naming it
    # the source's identity (st_dev, st_ino), links followed, when it exists (the adapter's
    # stat): a writer is compared with a path's directories by identity, not by text
    ident: tuple[int, int] | None = None


class Bind(NamedTuple):
    """A host path of the model the engine mounts: the service ("" for a top-level volume's
    ``device``), the key, the path, and who may write there (a writable bind's service or a
    bind volume, as a line names it; "" for a read-only mount)."""

    service: str
    key: str
    path: str
    writer: str = ""


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _plain_device(spec: Mapping[str, object]) -> str | None:
    opts = _dict(spec.get("driver_opts"))
    device = opts.get("device")
    return device if isinstance(device, str) and device.startswith("/") else None


def binds(model: Mapping[str, object]) -> list[Bind]:
    """Every host path of ``model`` the engine mounts: a service's bind sources, the ``file``
    of a secret or config it uses, a local volume's absolute ``device``."""
    found: list[Bind] = []
    for name, svc in _dict(model.get("services")).items():
        svc = _dict(svc)
        for vol in _list(svc.get("volumes")):
            vol = _dict(vol)
            if vol.get("type") == "bind" and isinstance(vol.get("source"), str):
                who = "" if vol.get("read_only") is True else f"service {name} of this release"
                found.append(Bind(name, "volumes", str(vol["source"]), who))
        for kind in ("secrets", "configs"):
            top = _dict(model.get(kind))
            for ref in _list(svc.get(kind)):
                source = ref.get("source") if isinstance(ref, dict) else ref
                file = _dict(top.get(str(source))).get("file")
                if isinstance(file, str):
                    found.append(Bind(name, kind, file))
    for name, spec in _dict(model.get("volumes")).items():
        device = _plain_device(_dict(spec))
        if device is not None:
            who = f"volume {name} of this release"
            found.append(Bind("", f"volumes.{name}.driver_opts.device", device, who))
    return found


def pinned(model: Mapping[str, object], resolved: Mapping[str, str]) -> dict[str, object]:
    """A copy of ``model`` with each path of ``binds`` replaced by what the judge resolved
    (``resolved``: a path -> its real path; a path it lacks is kept)."""
    out: dict[str, object] = json.loads(json.dumps(model))

    def pin(path: object) -> object:
        return resolved.get(path, path) or path if isinstance(path, str) else path

    for svc in _dict(out.get("services")).values():
        for vol in _list(_dict(svc).get("volumes")):
            if isinstance(vol, dict) and vol.get("type") == "bind":
                vol["source"] = pin(vol.get("source"))
    for kind in ("secrets", "configs"):
        for spec in _dict(out.get(kind)).values():
            if isinstance(spec, dict) and "file" in spec:
                spec["file"] = pin(spec["file"])
    for spec in _dict(out.get("volumes")).values():
        opts = _dict(_dict(spec).get("driver_opts"))
        if _plain_device(_dict(spec)) is not None:
            opts["device"] = pin(opts["device"])
    return out


# a JSON escape of a surrogate pair (its backslash not itself escaped): YAML's \u takes no pair
_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _astral(match: re.Match[str]) -> str:
    high, low = int(match.group(2), 16), int(match.group(3), 16)
    return match.group(1) + chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))


def text(model: Mapping[str, object]) -> str:
    """The model's bytes as written into the revision: JSON, which compose reads with its YAML
    reader, so every character but printable ASCII is an escape both read alike (``\\u0085``:
    a raw U+0085 is a line break to YAML, folded into a space), but a character beyond U+FFFF,
    written as itself (YAML's ``\\u`` takes no surrogate pair). ``core.admission.reading`` checks
    compose's reading of these bytes against the model."""
    escaped = json.dumps(model, indent=1, sort_keys=True, ensure_ascii=True)
    return _PAIR.sub(_astral, escaped.replace("\x7f", "\\u007f")) + "\n"


def own_mounts(
    model: Mapping[str, object], where: Mapping[str, Where] | None = None
) -> list[Mount]:
    """The release's own writers: each writable bind and bind volume of ``binds`` (with its
    identity when ``where`` knows the path)."""
    project = str(model.get("name", ""))
    seen = where or {}
    return [
        Mount(b.writer, project, b.path, True, (b.service, b.key), _ident(seen.get(b.path)))
        for b in binds(model)
        if b.writer
    ]


def _ident(at: Where | None) -> tuple[int, int] | None:
    return at.ident if at is not None else None


def swappable(
    model: Mapping[str, object],
    engine: Iterable[Mount],
    where: Mapping[str, Where] | None = None,
) -> list[Violation]:
    """Each bind whose parent directory a writer can write (see the module): the release's
    binds against every writer, and the binds of the box's other projects against the
    release's writers. ``where``: each path followed (``core.admission.paths.Where``, the
    release's binds and the engine's mount sources): writers compared by identity too."""
    project = str(model.get("name", ""))
    seen_at = where or {}
    own = own_mounts(model, seen_at)
    seen = list(engine)
    found: list[Violation] = []
    for bind in binds(model):
        writer = _writer_above(bind.path, [*own, *seen], seen_at.get(bind.path))
        if writer is not None:
            asks = (
                f"{bind.path} lies in {normpath(writer.source)}, which {writer.who} can write: "
                "a link swapped there would change what the engine mounts (at up, and at "
                "every start)"
            )
            found.append(Violation(bind.service, bind.key, asks, code=SWAPPABLE))
    for other in (m for m in seen if m.project != project):
        writer = _writer_above(other.source, own, seen_at.get(other.source))
        if writer is not None:
            asks = (
                f"{normpath(writer.source)} (writable) holds {normpath(other.source)}, which "
                f"{other.who} mounts: a link swapped there would change what the engine mounts "
                "at that container's next start"
            )
            found.append(Violation(*writer.key, asks, code=SWAPPABLE))
    return found


def _writer_above(path: str, mounts: Iterable[Mount], at: Where | None = None) -> Mount | None:
    """The first writable mount at or above ``path``'s parent directory, by identity or by
    text (``core.admission.paths.above``; None: none)."""
    from monky_deployd.core.admission.paths import above

    return next((m for m in mounts if above(path, at, m)), None)


def moved(model: Mapping[str, object], now: Mapping[str, str]) -> list[Violation]:
    """Each pinned path of ``model`` that resolves elsewhere ``now`` (a link appeared on its
    way since the judge, or it cannot be followed any more)."""
    found = []
    for bind in binds(model):
        real = now.get(bind.path, bind.path)
        if normpath(real or "?") != normpath(bind.path):
            shown = real or "a path this agent cannot follow"
            asks = f"{bind.path} leads to {shown} now, not to what was judged"
            found.append(Violation(bind.service, bind.key, asks, code=SWAPPABLE))
    return found


# A secret or config read from ``environment: VAR`` (compose reads VAR from its own environment
# at ``up``): the judged model carries the value compose resolved when it was judged, under a
# name of the agent's own (``VALUE_PREFIX``: never a variable compose or the docker CLI reads
# as a setting), and every ``up`` hands compose exactly those variables (``child_environment``).
READS_KEY = "x-monky-deployd-reads"  # the override that asks compose each value (``reads``)
VALUES_KEY = "x-monky-deployd-values"  # the values in the judged model, as compose wrote them
VALUE_PREFIX = "MONKY_DEPLOYD_VALUE_"


# a variable's name as the judge asks compose for it: spliced into ``${NAME?...}`` (``reads``),
# so only a name that is one token there (``a-b`` would read ``a`` with the default ``b``)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def environment_reads(model: Mapping[str, object]) -> list[str]:
    """Every variable a top-level secret or config of ``model`` reads with ``environment:``
    (distinct, sorted), each a plain name (``odd_reads`` refuses the others)."""
    found = set()
    for kind in ("secrets", "configs"):
        for spec in _dict(model.get(kind)).values():
            var = _dict(spec).get("environment")
            if isinstance(var, str) and _NAME.fullmatch(var):
                found.add(var)
    return sorted(found)


def odd_reads(model: Mapping[str, object]) -> list[Violation]:
    """Each secret or config of ``model`` whose ``environment:`` names no plain variable
    (POLICY_HOST_STRING): the judge asks compose its value through interpolation, where
    ``a-b`` or ``A}`` reads another variable or a default, while ``up`` reads the name as
    written."""
    found = []
    for kind in ("secrets", "configs"):
        for name, spec in sorted(_dict(model.get(kind)).items()):
            var = _dict(spec).get("environment")
            if isinstance(var, str) and not _NAME.fullmatch(var):
                asks = (
                    f"reads {var!r}, which is no variable name ([A-Za-z_][A-Za-z0-9_]*): the "
                    "judge would read another value than `up`"
                )
                key = f"{kind}.{name}.environment"
                found.append(Violation("", key, asks, code=Code.POLICY_HOST_STRING))
    return found


def reads(names: Iterable[str]) -> str:
    """An override file asking compose the value of each of ``names`` as it interpolates
    (the release's .env; ``?``: an unset one stops compose with its own words, as ``up``
    would)."""
    why = "a secret or config reads it with environment:, and the release's .env does not set it"
    return json.dumps({READS_KEY: {name: "${" + name + "?" + why + "}" for name in names}})


def supplied(model: Mapping[str, object], values: object) -> dict[str, object]:
    """A copy of ``model`` whose secrets and configs read from ``environment:`` read the
    agent's own variable instead, with its value (``values``: each variable's value as
    compose wrote it, a literal ``$`` as ``$$``) kept in ``VALUES_KEY``; nothing else is
    changed. A variable missing from ``values`` keeps its name (compose names it at ``up``)."""
    values = _dict(values)
    out: dict[str, object] = json.loads(json.dumps(model))
    out.pop(VALUES_KEY, None)
    names = {v: f"{VALUE_PREFIX}{i}" for i, v in enumerate(environment_reads(out), 1)}
    kept: dict[str, str] = {}
    for kind in ("secrets", "configs"):
        for spec in _dict(out.get(kind)).values():
            var = _dict(spec).get("environment")
            value = values.get(var) if isinstance(var, str) else None
            if isinstance(spec, dict) and isinstance(var, str) and isinstance(value, str):
                spec["environment"] = names[var]
                kept[names[var]] = value
    if kept:
        out[VALUES_KEY] = kept
    return out


def child_environment(model: Mapping[str, object]) -> dict[str, str]:
    """The variables ``up`` of ``model`` hands compose (``supplied``): each value as compose
    reads it (``$$`` is a literal ``$``)."""
    found = _dict(model.get(VALUES_KEY))
    return {
        name: value.replace("$$", "$")
        for name, value in found.items()
        if name.startswith(VALUE_PREFIX) and isinstance(value, str) and "\0" not in value
    }


# Linux's MAX_ARG_STRLEN: the most one string of a new process's environment may take, its NUL
# counted; ``execve`` refuses a longer one (E2BIG) before compose runs at all
ARG_STRLEN = 32 * 4096
_TOO_LARGE = Code.ENV_TOO_LARGE
REWRITE_SMALLER = (
    "a value of at most 128 KiB; larger content as a config's `content:` in the compose file "
    "or a file the image carries"
)


def too_large(model: Mapping[str, object]) -> list[Violation]:
    """Each secret or config of ``model`` (``supplied``) whose value ``up`` could not hand
    compose (ENV_TOO_LARGE): its variable longer than ``ARG_STRLEN``, or all of them together
    over the environment a process can start with (``core.render.envsize``'s budget). Judged
    with the model, so what is admitted is what ``up`` can start."""
    from monky_deployd.core.render.envsize import ENV_BUDGET_BYTES, POINTER_BYTES

    values = child_environment(model)
    sizes = {k: len(f"{k}={v}".encode("utf-8", "surrogatepass")) + 1 for k, v in values.items()}
    found: list[Violation] = []
    for kind in ("secrets", "configs"):
        for name, spec in sorted(_dict(model.get(kind)).items()):
            size = sizes.get(str(_dict(spec).get("environment")), 0)
            if size > ARG_STRLEN:
                asks = (
                    f"reads a value of {size} bytes from compose's environment, over the "
                    f"{ARG_STRLEN} bytes Linux lets one variable of a process's environment "
                    "take: `up` could not start compose"
                )
                key = f"{kind}.{name}.environment"
                found.append(Violation("", key, asks, code=_TOO_LARGE, rewrite=REWRITE_SMALLER))
    total = sum(sizes.values()) + len(sizes) * POINTER_BYTES
    if total > ENV_BUDGET_BYTES and not found:
        asks = (
            f"read {total} bytes from compose's environment together, over the "
            f"{ENV_BUDGET_BYTES} bytes a process can start with: `up` could not start compose"
        )
        keys = "secrets and configs with environment:"
        found.append(Violation("", keys, asks, code=_TOO_LARGE, rewrite=REWRITE_SMALLER))
    return found
