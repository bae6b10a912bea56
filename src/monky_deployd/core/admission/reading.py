"""One reading (issue 45): what compose reads back from the file it runs is, value for value, what
was judged. Pure: no I/O.

The judged model (``core.admission.artifact``) is compose's own JSON, which compose reads back
with its YAML reader and through interpolation again. Three things keep the two readings one:

- ``host_strings``: every string the host reads (paths, names, drivers and their options, log
  options, image references, ...) is printable ASCII without ``$`` (``SAFE``), in the model as
  compose first read it and with its paths pinned: a ``$`` (compose's ``$$`` escape, undone at
  ``up``, or a ``${X}`` a resolved link brought in) or a character readers disagree on (U+0085
  is a line break to YAML, a space to nobody else; controls; non-ASCII spaces) is refused
  (POLICY_HOST_STRING). So every value a judge reads is the value ``up`` uses. Which strings: the
  key table (``core.admission.keys.SHAPES``) says it, so a key compose learns is covered the day
  it is classified: every ``JUDGED`` and every ``REFUSED`` key's value (a judge reads it, or an
  allowance lets it act), every name of a named mapping (services, volumes, networks, secrets,
  configs: names the engine and the host know), and ``ALSO_HOST``, the ``ALLOWED`` keys whose
  value the host still reads;
- ``differences``: compose's reading of the file as ``up`` reads it (``docker compose config``
  over the same ``--file`` list, ``--env-file /dev/null``, the same environment) against the
  judged model with the agent's own overrides merged (``merged``), value for value
  (POLICY_TWO_READINGS, ``two_readings`` names each key path and both values, secrets masked);
- ``drift``: the engine's existing volumes and networks of the project against the model (driver,
  options, labels, internal, ...): compose keeps an existing volume whose definition changed
  (its "Recreate?" answers no without a terminal), so the engine would mount what nobody judged.
  A difference is refused (POLICY_RESOURCE_DRIFT), never adopted.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from monky_deployd.core.admission.keys import SHAPES, Kind
from monky_deployd.core.admission.names import engine_name
from monky_deployd.core.admission.rules import Violation
from monky_deployd.core.errors import Code
from monky_deployd.core.render.mask import NO_SECRETS, Masker

HOST_STRING = Code.POLICY_HOST_STRING
TWO_READINGS = Code.POLICY_TWO_READINGS
DRIFT = Code.POLICY_RESOURCE_DRIFT

# one meaning to every reader (JSON, YAML 1.1 and 1.2, compose's interpolation, the shell, the
# engine, mount(8)): printable ASCII, no "$"
SAFE = frozenset(chr(c) for c in range(0x20, 0x7F)) - {"$"}
# ALLOWED keys whose value the host (the engine, compose, mount) still reads as a name or path
ALSO_HOST: frozenset[tuple[str, str]] = frozenset(
    {
        ("top", "name"),  # the project's name: every engine object's prefix and label
        ("service", "image"),  # the engine's image store, box-wide
        ("service", "platform"),
        ("service", "cpuset"),  # written into the host's cgroup tree
        ("port", "host_ip"),
        ("port", "published"),
        ("file_ref", "source"),  # names a top-level secret or config
        ("volume_mount", "subpath"),  # a directory inside a volume, on the host's filesystem
        ("secret", "name"),
        ("secret", "environment"),  # a variable of compose's own environment, read at up
        ("config", "name"),
        ("config", "environment"),
    }
)
SHOWN = 12  # differences named in a refusal (the rest counted)
_CUT = 60  # characters of a value shown


def unsafe(text: str) -> str | None:
    """The first character of ``text`` outside ``SAFE`` as a line names it (None: none)."""
    for char in text:
        if char not in SAFE:
            return f"{char!r} (U+{ord(char):04X})"
    return None


def _strings(value: object) -> Iterator[str]:
    """Every string in ``value``: mapping keys and values, list items, scalars."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _strings(inner)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def host_strings(model: Mapping[str, object]) -> list[Violation]:
    """Each host-side string of ``model`` (see the module) with a character outside ``SAFE``,
    once per key path; sorted."""
    found: dict[str, Violation] = {}
    _walk(model, "top", "", "", found)
    return sorted(found.values())


def _service(path: str) -> str:
    parts = path.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "services" else ""


def _check(value: object, path: str, found: dict[str, Violation]) -> None:
    for text in _strings(value):
        bad = unsafe(text)
        if bad is not None and path not in found:
            asks = (
                f"holds {bad}, which compose, YAML and the host do not read alike (a host-side "
                "string is printable ASCII without $)"
            )
            found[path] = Violation(_service(path), path, asks, code=HOST_STRING)


def _walk(value: object, shape: str, path: str, service: str, found: dict[str, Violation]) -> None:
    if isinstance(value, list):
        for item in value:
            _walk(item, shape, path, service, found)
        return
    if not isinstance(value, dict):
        return
    table = SHAPES[shape]
    for name, inner in value.items():
        name = str(name)
        here = f"{path}.{name}" if path else name
        key = table.get(name)
        if key is None or name.startswith("x-") or inner is None:
            continue  # an unknown key is core.admission.keywalk's (POLICY_UNKNOWN_KEY)
        host = key.kind is not Kind.ALLOWED or (shape, name) in ALSO_HOST
        if key.named and isinstance(inner, dict):
            for item, spec in inner.items():
                _check(str(item), f"{here}.{item}", found)  # a name the engine knows
                if key.shape:
                    _walk(spec, key.shape, f"{here}.{item}", service, found)
                elif host:
                    _check(spec, f"{here}.{item}", found)
        elif key.shape and isinstance(inner, dict | list):
            _walk(inner, key.shape, here, service, found)
            if host and isinstance(inner, list):  # short syntax items (strings) of a judged key
                _check([i for i in inner if not isinstance(i, dict | list)], here, found)
        elif host:
            _check(inner, here, found)


# -- two readings ------------------------------------------------------------------------------


class Difference(NamedTuple):
    """One key path whose value compose reads back otherwise than it was judged."""

    path: str
    judged: object
    read: object


ABSENT = object()  # a key one reading has and the other has not


def merged(model: Mapping[str, object], *overrides: Mapping[str, object]) -> dict[str, object]:
    """``model`` with each override merged over it as compose merges the agent's own override
    files (compose.labels.yaml, compose.pinned.yaml): a mapping into a mapping key by key, any
    other value replaced."""
    out: dict[str, object] = dict(model)
    for over in overrides:
        for key, value in over.items():
            mine = out.get(key)
            if isinstance(mine, dict) and isinstance(value, dict):
                out[key] = merged(mine, value)
            else:
                out[key] = value
    return out


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        return type(a) is type(b) and a == b
    return a == b


def differences(judged: object, read: object, path: str = "") -> list[Difference]:
    """Every key path where ``read`` (compose's reading) is not ``judged``, value for value:
    a mapping key by key, a list item by item (lists of other lengths: the whole list)."""
    if isinstance(judged, dict) and isinstance(read, dict):
        found: list[Difference] = []
        for key in sorted({*map(str, judged), *map(str, read)}):
            here = f"{path}.{key}" if path else key
            found += differences(judged.get(key, ABSENT), read.get(key, ABSENT), here)
        return found
    if isinstance(judged, list) and isinstance(read, list) and len(judged) == len(read):
        return [
            d
            for i, (a, b) in enumerate(zip(judged, read, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    if isinstance(judged, dict | list) or isinstance(read, dict | list):
        return [] if judged == read else [Difference(path, judged, read)]
    return [] if _same(judged, read) else [Difference(path, judged, read)]


def _shown(value: object, masker: Masker) -> str:
    if value is ABSENT:
        return "nothing"
    text = masker(repr(value))
    return text if len(text) <= _CUT else text[: _CUT - 3] + "..."


def two_readings(found: Sequence[Difference], masker: Masker = NO_SECRETS) -> list[Violation]:
    """One violation per difference (the first ``SHOWN``), each naming the key path and both
    readings, masked (the model holds the release's secrets, interpolated)."""
    out = []
    for diff in found[:SHOWN]:
        asks = (
            f"was judged as {_shown(diff.judged, masker)} but compose reads "
            f"{_shown(diff.read, masker)} from the file it runs"
        )
        out.append(
            Violation(_service(diff.path), diff.path or "(the model)", asks, code=TWO_READINGS)
        )
    if len(found) > SHOWN:
        more = f"and {len(found) - SHOWN} more key paths read otherwise than judged"
        out.append(Violation("", "(the model)", more, code=TWO_READINGS))
    return out


# -- the engine's objects of the project -------------------------------------------------------

PROJECT_LABEL = "com.docker.compose.project"
_COMPOSE = "com.docker.compose."
# (kind, engine name) -> the engine's objects of that exact name (GET /volumes/{name}, the rows
# of GET /networks?filters=name), as it answers them
Objects = Mapping[tuple[str, str], Sequence[Mapping[str, object]]]


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _own_labels(labels: object) -> dict[str, str]:
    """Labels less compose's own (``com.docker.compose.*``: its version, config hash)."""
    return {str(k): str(v) for k, v in _dict(labels).items() if not str(k).startswith(_COMPOSE)}


def _strs(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in _dict(value).items()}


def _volume_fields(
    spec: Mapping[str, object], found: Mapping[str, object]
) -> list[tuple[str, object, object]]:
    return [
        ("driver", spec.get("driver") or "local", found.get("Driver")),
        ("driver_opts", _strs(spec.get("driver_opts")), _strs(found.get("Options"))),
        ("labels", _own_labels(spec.get("labels")), _own_labels(found.get("Labels"))),
    ]


# options the engine shows that mirror a field (EnableIPv4/EnableIPv6), not the model's driver_opts
_MIRRORED = frozenset({"com.docker.network.enable_ipv4", "com.docker.network.enable_ipv6"})


def _network_fields(
    spec: Mapping[str, object], found: Mapping[str, object]
) -> list[tuple[str, object, object]]:
    opts = {k: v for k, v in _strs(found.get("Options")).items() if k not in _MIRRORED}
    fields: list[tuple[str, object, object]] = [
        ("driver", spec.get("driver") or "bridge", found.get("Driver")),
        ("driver_opts", _strs(spec.get("driver_opts")), opts),
        ("labels", _own_labels(spec.get("labels")), _own_labels(found.get("Labels"))),
        ("internal", bool(spec.get("internal")), bool(found.get("Internal"))),
        ("attachable", bool(spec.get("attachable")), bool(found.get("Attachable"))),
    ]
    for key, field in (("enable_ipv6", "EnableIPv6"), ("enable_ipv4", "EnableIPv4")):
        if spec.get(key) is not None and field in found:  # the engine's default otherwise
            fields.append((key, bool(spec.get(key)), bool(found.get(field))))
    return fields


def drift(
    config: Mapping[str, object], project: str, objects: Objects, masker: Masker = NO_SECRETS
) -> list[Violation]:
    """Each top-level volume and network of ``config`` (not external) the engine already has
    as ``project``'s (its compose label) and defines otherwise than the model (see the module);
    sorted. Another project's or a hand-made one is ``core.admission.names``' (FOREIGN)."""
    own = str(config.get("name") or project)
    found: list[Violation] = []
    for kind, top in (("volume", "volumes"), ("network", "networks")):
        for key, spec in sorted(_dict(config.get(top)).items()):
            spec = _dict(spec)
            if spec.get("external"):
                continue
            name = engine_name(kind, str(key), spec, own)
            for obj in objects.get((kind, name), ()):
                labels = _dict(obj.get("Labels"))
                if labels.get(PROJECT_LABEL) != own:
                    continue
                fields = (_volume_fields if kind == "volume" else _network_fields)(spec, obj)
                mark = labels.get(f"{_COMPOSE}{kind}")
                if mark is not None and str(mark) != str(key):
                    fields.append((f"{_COMPOSE}{kind} label", str(key), mark))
                apart = [(f, want, have) for f, want, have in fields if want != have]
                if apart:
                    said = "; ".join(
                        f"{f} {masker(repr(have))} on the engine, {masker(repr(want))} in the model"
                        for f, want, have in apart
                    )
                    asks = (
                        f"(the engine's {kind} {name}, this project's) exists defined otherwise: "
                        f"{said}; compose would keep it as it is, so what runs is not what was "
                        "judged"
                    )
                    found.append(Violation("", f"{top}.{key}", asks, code=DRIFT))
    return sorted(set(found))


def asked_objects(config: Mapping[str, object], project: str) -> Iterable[tuple[str, str]]:
    """The (kind, engine name) of each non-external top-level volume and network."""
    own = str(config.get("name") or project)
    for kind, top in (("volume", "volumes"), ("network", "networks")):
        for key, spec in _dict(config.get(top)).items():
            if not _dict(spec).get("external"):
                yield kind, engine_name(kind, str(key), _dict(spec), own)


# -- what compose carries over from a container it replaces -------------------------------------

_SERVICE_LABEL = "com.docker.compose.service"


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _anonymous(mount: Mapping[str, object]) -> bool:
    """An engine-made anonymous volume (a 64-hex name, the local driver): no host path."""
    name = str(mount.get("Name") or "")
    return (
        mount.get("Type") == "volume"
        and len(name) == 64
        and all(c in "0123456789abcdef" for c in name)
        and str(mount.get("Driver") or "local") == "local"
    )


def _sourced(spec: Mapping[str, object]) -> set[str]:
    """The targets ``spec``'s own volumes mount something at (not an anonymous volume)."""
    out = set()
    for vol in _list(spec.get("volumes")):
        if isinstance(vol, dict) and vol.get("source") and vol.get("target"):
            out.add(posixpath.normpath(str(vol["target"])))
    return out


def _unsourced(spec: Mapping[str, object]) -> set[str]:
    """The targets of ``spec``'s anonymous volumes (no source)."""
    out = set()
    for vol in _list(spec.get("volumes")):
        if isinstance(vol, dict) and not vol.get("source") and vol.get("target"):
            out.add(posixpath.normpath(str(vol["target"])))
    return out


def carried(
    config: Mapping[str, object],
    containers: Sequence[Mapping[str, object]],
    image_volumes: Mapping[str, frozenset[str] | None],
) -> list[Violation]:
    """Each mount compose would carry over from a container of the project it replaces into
    the new one although the judged model does not say it: compose's recreate keeps the old
    container's mount (a bind, any volume) at every target the new service mounts an anonymous
    volume at, or its image declares a ``VOLUME`` at (``image_volumes``: per service, None when
    not known: every target). Only an engine-made anonymous volume or one of the model's own
    top-level volumes may be carried; anything else is refused (POLICY_RESOURCE_DRIFT), never
    adopted. ``containers``: the Engine API's rows (``Labels``, ``Names``, ``Mounts``)."""
    services = _dict(config.get("services"))
    own = str(config.get("name") or "")
    judged = {  # the model's own volumes, judged at the top level (their devices held)
        engine_name("volume", str(key), _dict(spec), own)
        for key, spec in _dict(config.get("volumes")).items()
        if not _dict(spec).get("external")
    }
    found: list[Violation] = []
    for row in containers:
        service = str(_dict(row.get("Labels")).get(_SERVICE_LABEL) or "")
        spec = services.get(service)
        if not isinstance(spec, dict):
            continue  # an orphan: removed by the up, never replaced
        declared = image_volumes.get(service)
        names = row.get("Names")
        who = str(names[0]).lstrip("/") if isinstance(names, list) and names else "?"
        for mount in _list(row.get("Mounts")):
            if not isinstance(mount, dict) or mount.get("Type") == "tmpfs" or _anonymous(mount):
                continue
            if mount.get("Type") == "volume" and str(mount.get("Name")) in judged:
                continue  # a volume of the model: judged, compared (``drift``) and held
            target = posixpath.normpath(str(mount.get("Destination") or "/"))
            if target in _sourced(spec):
                continue  # the new service's own mount there is what runs
            if target in _unsourced(spec) or declared is None or target in declared:
                what = mount.get("Source") if mount.get("Type") == "bind" else mount.get("Name")
                asks = (
                    f"would get {mount.get('Type')} {what} at {target} carried over from the "
                    f"engine's container {who} it replaces (compose keeps a replaced "
                    "container's mount at an anonymous volume's target or the image's VOLUME): "
                    "not in the judged model"
                )
                found.append(Violation(service, f"services.{service}.volumes", asks, code=DRIFT))
    return sorted(set(found))
