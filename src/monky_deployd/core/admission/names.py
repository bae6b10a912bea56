"""Names are the engine's facts (issue 40): whose is each volume, network and container a
release names, and which network a namespace key joins. Pure: no I/O.

A name is not proof of ownership: compose names a project's volume ``<project>_<key>``, so the
project ``v_db`` with the volume ``data`` and the project ``v`` with the volume ``db_data`` both
name ``v_db_data``, and compose only warns ("already exists but was created for project v")
before it mounts the other app's data. So:

- ``asked``: what to ask the engine about: every top-level volume and network of the effective
  model by its engine name (compose fills in ``name``), every service's ``container_name``;
- ``owned``: given the engine's answers (``Facts``: ``(kind, name)`` -> the project of its
  ``com.docker.compose.project`` label, None when it has none: made by hand or the engine's
  own; a name the engine does not have is absent from the mapping), refuses
  (POLICY_FOREIGN_RESOURCE) each that exists and is not the project's own, unless the
  ``volumes``/``networks`` allowance of every service using it names it (a container name has
  no allowance: compose's ``up`` would collide with it);
- ``namespaces``: ``network_mode`` and ``build.network`` name a network the engine joins *by
  its engine name* (``network_mode: back`` joins the engine's network ``back``, not the
  project's ``<project>_back``): allowed are ``none``, ``service:<a service of the release>``,
  the engine name of a non-external network of the release, or a name the ``networks``
  allowance lists; ``bridge`` and ``default`` (the engine's default bridge, shared with every
  ``docker run`` container) and any other name are refused (POLICY_FOREIGN_RESOURCE);
  ``service:<x>`` is a service of the release (compose refuses to read a model naming another,
  or itself: POLICY_UNJUDGED). ``host`` and
  ``container:<x>`` stay ``core.admission.policy``'s (``host_namespaces``; never), for every
  namespace key. The other namespace keys (``pid``, ``ipc``, ``uts``, ``userns_mode``, ``cgroup``)
  name no network: the engine reads no name in them but ``container:<x>`` (which compose's
  ``service:<x>`` becomes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from monky_deployd.core.admission.rules import Rules, Violation, scope_line
from monky_deployd.core.errors import Code

FOREIGN = Code.POLICY_FOREIGN_RESOURCE
Kind = Literal["volume", "network", "container"]
# (kind, engine name) -> the project its com.docker.compose.project label names; None: no label
Facts = Mapping[tuple[str, str], str | None]
DEFAULT_BRIDGE = frozenset({"bridge", "default"})
ENGINE_OWN = frozenset({"bridge", "host", "none"})  # the engine's predefined networks


def _dict(value: object) -> Mapping[str, object]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def engine_name(kind: str, key: str, spec: Mapping[str, object], project: str) -> str:
    """The name the engine knows a top-level volume or network by: compose's ``name`` (it
    fills it in), else the key for an external one, else ``<project>_<key>``."""
    given = spec.get("name")
    if isinstance(given, str) and given:
        return given
    return key if spec.get("external") else f"{project}_{key}"


def _project(config: Mapping[str, object], project: str) -> str:
    return str(config.get("name") or project)


def asked(config: Mapping[str, object], project: str) -> list[tuple[Kind, str]]:
    """Every name to ask the engine about (sorted, once each): the top-level volumes and
    networks by engine name (not ``host``: ``core.admission.host`` judges the host's network),
    each service's ``container_name``."""
    own = _project(config, project)
    found: set[tuple[Kind, str]] = set()
    for key, spec in _dict(config.get("volumes")).items():
        found.add(("volume", engine_name("volume", str(key), _dict(spec), own)))
    for key, spec in _dict(config.get("networks")).items():
        name = engine_name("network", str(key), _dict(spec), own)
        if name != "host":
            found.add(("network", name))
    for svc in _dict(config.get("services")).values():
        given = _dict(svc).get("container_name")
        if isinstance(given, str) and given:
            found.add(("container", given))
    return sorted(found)


def whose(owner: str | None, kind: str, name: str) -> str:
    """Words for who a resource belongs to."""
    if owner is not None:
        return f"project {owner}'s"
    if kind == "network" and name in ENGINE_OWN:
        return "the engine's own"
    return "made by hand (no com.docker.compose.project label)"


def _users(config: Mapping[str, object]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """volume key -> the services mounting it; network key -> the services on it."""
    vols: dict[str, list[str]] = {}
    nets: dict[str, list[str]] = {}
    for name, svc in sorted(_dict(config.get("services")).items()):
        svc = _dict(svc)
        for mount in _list(svc.get("volumes")):
            mount = _dict(mount)
            if mount.get("type", "volume") == "volume" and mount.get("source"):
                vols.setdefault(str(mount["source"]), []).append(str(name))
        for net in _dict(svc.get("networks")):
            nets.setdefault(str(net), []).append(str(name))
    return vols, nets


def owned(
    config: Mapping[str, object], project: str, facts: Facts, rules: Rules
) -> list[Violation]:
    """Each volume, network and container name of ``config`` the engine has and ``project``
    does not own (see the module), sorted."""
    own = _project(config, project)
    vol_users, net_users = _users(config)
    found: list[Violation] = []
    tops: list[tuple[Kind, str, dict[str, list[str]]]] = [
        ("volume", "volumes", vol_users),
        ("network", "networks", net_users),
    ]
    for kind, top, users in tops:
        for key, spec in sorted(_dict(config.get(top)).items()):
            name = engine_name(kind, str(key), _dict(spec), own)
            if (kind, name) not in facts or (kind == "network" and name == "host"):
                continue  # compose creates it (labelled ours), or policy_host judges it
            owner = facts[(kind, name)]
            if owner == own:
                continue
            asks = (
                f"the {kind} {name} already exists and is {whose(owner, kind, name)}, not {own}'s"
            )
            for service in users.get(str(key), []) or [""]:
                may = rules.allows(service)
                if name not in (may.volumes if kind == "volume" else may.networks):
                    line = scope_line(service, top, name)
                    found.append(Violation(service, f"{top}.{key}", asks, line, FOREIGN))
    for service, svc in sorted(_dict(config.get("services")).items()):
        given = _dict(svc).get("container_name")
        if not isinstance(given, str) or ("container", given) not in facts:
            continue
        owner = facts[("container", given)]
        if owner != own:
            asks = (
                f"{given}: a container of that name already exists and is "
                f"{whose(owner, 'container', given)}, not {own}'s (remove or rename it)"
            )
            found.append(
                Violation(str(service), f"services.{service}.container_name", asks, "", FOREIGN)
            )
    return sorted(set(found))


def own_networks(config: Mapping[str, object], project: str = "") -> frozenset[str]:
    """The engine names of the release's own networks: its non-external top-level networks."""
    own = _project(config, project)
    return frozenset(
        engine_name("network", str(key), _dict(spec), own)
        for key, spec in _dict(config.get("networks")).items()
        if not _dict(spec).get("external")
    )


def namespaces(config: Mapping[str, object], rules: Rules) -> Iterable[Violation]:
    """``network_mode`` and ``build.network`` of every service (see the module)."""
    services = _dict(config.get("services"))
    mine = own_networks(config)
    keys = {k: v for k, v in _dict(config.get("networks")).items() if isinstance(k, str)}
    for name, svc in sorted(services.items()):
        svc, name = _dict(svc), str(name)
        allowed = mine | rules.allows(name).networks
        mode = str(svc.get("network_mode") or "")  # service:<x>: compose's model has x
        if _names_a_network(mode) and not mode.startswith("service:") and mode not in allowed:
            yield _network(name, "network_mode", mode, keys, config)
        build = _dict(_dict(svc).get("build"))
        net = build.get("network")
        mode = "" if net is None else str(net)
        if _names_a_network(mode) and mode not in allowed:
            yield _network(name, "build.network", mode, keys, config)


def _names_a_network(mode: str) -> bool:
    """A network mode that names a network the engine looks up: not unset, ``none``, ``host``
    (``core.admission.policy``: host_namespaces) or ``container:<x>`` (``core.admission.policy``:
    never)."""
    return mode not in ("", "none") and mode.lower() != "host" and not mode.startswith("container:")


def _network(
    service: str, key: str, mode: str, keys: Mapping[str, object], config: Mapping[str, object]
) -> Violation:
    """``key`` joins the engine's network ``mode``, which is not the release's own."""
    if mode in DEFAULT_BRIDGE:
        why = "the engine's default bridge, shared with every container `docker run` starts"
    elif mode in keys:
        real = engine_name("network", mode, _dict(keys[mode]), _project(config, ""))
        why = f"the engine joins the network named {mode}, not the release's {real}"
    else:
        why = "a network that is not one of the release's own"
    return Violation(
        service, key, f"{mode} ({why})", scope_line(service, "networks", mode), FOREIGN
    )
