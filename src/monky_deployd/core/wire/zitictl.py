"""The box's Ziti identity as its controller sees it, and the faults that view names.

The agent asks the controller's edge client API with the identity's own certificate
(``adapters.net.zitiview``: ``POST /edge/client/v1/authenticate?method=cert``, then
``/current-identity``, ``/services?configTypes=intercept.v1``, ``/current-identity/edge-routers``
and each dialable service's ``/services/{id}/edge-routers``) when the SDK cannot load the
identity or cannot dial, and in ``doctor``. This module is the pure part: the answers parsed into
a ``View`` (``identity_of``, ``services_of``, ``routers_of``: a shape it cannot use raises
``ValueError``) and what the view says about a load that hangs (``judge_load``) or a failed dial
(``judge_dial``): the missing role attribute with the one command that adds it, the intercept
port, the edge router that is offline. ``None`` when the view does not explain the failure (the
caller keeps the SDK's own words).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

Address = tuple[str, int]


@dataclass(frozen=True)
class Router:
    name: str
    online: bool


@dataclass(frozen=True)
class Service:
    id: str
    name: str
    intercepts: tuple[tuple[str, int, int], ...]  # (address, low port, high port)
    dial: bool  # the identity may dial it (permissions hold "Dial")
    routers: tuple[Router, ...] | None = None  # None: not asked

    def intercepts_addr(self, addr: Address) -> bool:
        host, port = addr
        return any(h.lower() == host.lower() and lo <= port <= hi for h, lo, hi in self.intercepts)

    def shown(self) -> str:
        where = ", ".join(
            f"{h}:{lo}" if lo == hi else f"{h}:{lo}-{hi}" for h, lo, hi in self.intercepts
        )
        return f"{self.name} ({where or 'no intercept.v1 config'})"


@dataclass(frozen=True)
class View:
    controller: str  # the URL asked
    name: str  # the identity's name on the controller
    id: str
    roles: tuple[str, ...]  # its role attributes, without the leading '#'
    services: tuple[Service, ...]  # what it may dial or bind
    routers: tuple[Router, ...]  # the edge routers it may use

    def dialable(self) -> tuple[Service, ...]:
        return tuple(s for s in self.services if s.dial)

    def serving(self, addr: Address) -> Service | None:
        return next((s for s in self.dialable() if s.intercepts_addr(addr)), None)

    def roles_shown(self) -> str:
        return ", ".join(f"#{r}" for r in self.roles) if self.roles else "none"


@dataclass(frozen=True)
class Expect:
    """What the agent dials at an address: a label and the role attribute its policy names."""

    label: str  # "tenancy's deploy API (Ziti service monky.tenancy.deploy)"
    config_key: str  # "tenancy" or "openbao"
    role: str  # "#monky-deploy-agent"


# -- parsing the client API's answers ------------------------------------------------------


def _data(doc: object) -> object:
    if not isinstance(doc, dict) or "data" not in doc:
        raise ValueError("not an edge API envelope (no data)")
    return doc["data"]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def identity_of(doc: object) -> tuple[str, str, tuple[str, ...]]:
    """``/current-identity``: (name, id, role attributes)."""
    data = _data(doc)
    if not isinstance(data, dict):
        raise ValueError("current-identity is not an object")
    roles = data.get("roleAttributes") or []
    if not isinstance(roles, list):
        raise ValueError("roleAttributes is not a list")
    return (
        _text(data.get("name")),
        _text(data.get("id")),
        tuple(r.lstrip("#") for r in roles if isinstance(r, str) and r.strip()),
    )


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _intercepts(config: object) -> tuple[tuple[str, int, int], ...]:
    if not isinstance(config, dict):
        return ()
    ic = config.get("intercept.v1")
    if not isinstance(ic, dict):
        return ()
    addresses = [a for a in _list(ic.get("addresses")) if isinstance(a, str)]
    ranges: list[tuple[int, int]] = []
    for r in _list(ic.get("portRanges")):
        if isinstance(r, dict):
            lo, hi = r.get("low"), r.get("high", r.get("low"))
            if isinstance(lo, int) and isinstance(hi, int):
                ranges.append((lo, hi))
    return tuple((a, lo, hi) for a in addresses for lo, hi in ranges)


def services_of(doc: object) -> tuple[Service, ...]:
    """``/services?configTypes=intercept.v1``: every service the identity may dial or bind."""
    data = _data(doc)
    if not isinstance(data, list):
        raise ValueError("services is not a list")
    out = []
    for item in data:
        if not isinstance(item, dict):
            raise ValueError("a service is not an object")
        out.append(
            Service(
                id=_text(item.get("id")),
                name=_text(item.get("name")),
                intercepts=_intercepts(item.get("config")),
                dial="Dial" in _list(item.get("permissions")),
            )
        )
    return tuple(out)


def routers_of(doc: object) -> tuple[Router, ...]:
    """``/current-identity/edge-routers`` (a list) or ``/services/{id}/edge-routers``
    (``{"edgeRouters": [...]}``)."""
    data = _data(doc)
    if isinstance(data, dict):
        data = data.get("edgeRouters")
    if not isinstance(data, list):
        raise ValueError("edge routers are not a list")
    return tuple(
        Router(_text(r.get("name")) or _text(r.get("id")) or "?", r.get("isOnline") is True)
        for r in data
        if isinstance(r, dict)
    )


# -- what the view says --------------------------------------------------------------------


def role_command(view: View, missing: Iterable[str]) -> str:
    """The one command that adds ``missing`` (``#x``) to the identity, keeping what it has
    (``--role-attributes`` replaces the list)."""
    roles = list(view.roles)
    roles += [m.lstrip("#") for m in missing if m.lstrip("#") not in roles]
    return f"`ziti edge update identity {view.name} --role-attributes {','.join(roles)}`"


def _missing_roles(view: View, expected: Iterable[Expect]) -> list[str]:
    return sorted({e.role for e in expected if e.role.lstrip("#") not in view.roles})


def describe(view: View) -> str:
    """What the controller says of the identity: its name, attributes, what it may dial through
    which edge routers (online or not)."""
    parts = []
    for s in view.dialable():
        routers = s.routers if s.routers is not None else view.routers
        via = ", ".join(f"{r.name} ({'online' if r.online else 'OFFLINE'})" for r in routers)
        parts.append(f"{s.shown()} via {via or 'no edge router'}")
    may = "; ".join(parts) if parts else "no service"
    return (
        f"it knows this identity as {view.name} (id {view.id}), role attributes "
        f"{view.roles_shown()}; it may dial {may}"
    )


def judge_load(view: View, expected: Mapping[Address, Expect]) -> DeployError | None:
    """A load that does not finish: the 0.6 SDK waits for ever for an identity that may dial no
    service at all. Named when the view shows exactly that; None otherwise."""
    if view.dialable():
        return None
    missing = _missing_roles(view, expected.values())
    has = "no role attribute at all" if not view.roles else f"role attributes {view.roles_shown()}"
    lacks = f" and lacks {', '.join(missing)}" if missing else ""
    hint = (
        f"on the controller: {role_command(view, missing)}"
        if missing
        else "the dial policies of the tenancy and OpenBao services on the controller: "
        f"they name role attributes {view.name} does not carry"
    )
    return DeployError(
        f"the Ziti identity {view.name} may dial no service: it has {has}{lacks} (the "
        f"controller {view.controller} says; the OpenZiti SDK never finishes loading such an "
        "identity)",
        code=Code.ZITI_ROLE_MISSING,
        hint=hint,
    )


def judge_dial(view: View, addr: Address, expect: Expect | None) -> DeployError | None:
    """A failed dial to ``addr``, explained by the controller's view; None when it does not."""
    host, port = addr
    where = f"{host}:{port}"
    service = view.serving(addr)
    if service is not None:
        return _routers_down(view, service, where)
    if expect is None:
        return None
    # No service this identity may dial intercepts the address.
    same_host = [
        s for s in view.dialable() if any(h.lower() == host.lower() for h, _, _ in s.intercepts)
    ]
    if same_host:
        shown = "; ".join(s.shown() for s in same_host)
        key = expect.config_key
        return DeployError(
            f"{key}.port in config.yaml is {port} but no Ziti service intercepts {where}: "
            f"{shown} (the controller {view.controller} says)",
            code=Code.ZITI_NO_SERVICE,
            hint=f"{key}.port in config.yaml: the port of that intercept"
            + (
                " (8081 is the tenancy pod's in-pod listener, never dialled)"
                if key == "tenancy"
                else ""
            ),
        )
    if expect.role.lstrip("#") not in view.roles:
        may = ", ".join(s.name for s in view.dialable()) or "nothing"
        return DeployError(
            f"the Ziti identity {view.name} may not dial {expect.label}: it lacks the role "
            f"attribute {expect.role} (it has {view.roles_shown()} and may dial {may}; the "
            f"controller {view.controller} says)",
            code=Code.ZITI_ROLE_MISSING,
            hint=f"on the controller: {role_command(view, [expect.role])}",
        )
    shown = "; ".join(s.shown() for s in view.dialable()) or "none"
    return DeployError(
        f"no Ziti service intercepts {where} for the identity {view.name}, although it has "
        f"{expect.role}: the services it may dial intercept {shown} (the controller "
        f"{view.controller} says)",
        code=Code.ZITI_NO_SERVICE,
        hint=f"{expect.config_key}.host/port in config.yaml against the intercept.v1 config of "
        f"{expect.label} on the controller",
    )


def _routers_down(view: View, service: Service, where: str) -> DeployError | None:
    routers: Sequence[Router] = service.routers if service.routers is not None else view.routers
    if any(r.online for r in routers):
        return None
    if not routers:
        return DeployError(
            f"no edge router serves {service.name} ({where}) for the Ziti identity {view.name} "
            f"(the controller {view.controller} says)",
            code=Code.ZITI_ROUTER_OFFLINE,
            hint="the edge-router and service-edge-router policies on the controller "
            "(`ziti edge list edge-routers`)",
        )
    names = ", ".join(r.name for r in routers)
    one = len(routers) == 1
    return DeployError(
        f"the edge router{'' if one else 's'} {names} of {service.name} ({where}) "
        f"{'is' if one else 'are'} offline (the controller {view.controller} says)",
        code=Code.ZITI_ROUTER_OFFLINE,
        hint=f"that the edge router {names} runs and reaches the controller "
        "(`ziti edge list edge-routers`; its log)",
    )
