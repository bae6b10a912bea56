"""core.wire.zitictl: the controller's client API answers parsed (any shape: a View or
ValueError, nothing else), and what the view names for a load that hangs and a failed dial, over
classes of views: the missing role attribute with the one command that adds it (keeping the
identity's own), the intercept port, the edge router offline; None where the view explains
nothing."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.errors import Code
from monky_deployd.core.wire import zitictl
from monky_deployd.core.wire.zitictl import Expect, Router, Service, View

TENANCY = Expect("tenancy's deploy API", "tenancy", "#monky-deploy-agent")
OPENBAO = Expect("OpenBao", "openbao", "#openbao-client")
T_ADDR = ("tenancy.monky.ziti", 443)
B_ADDR = ("openbao.monky.ziti", 8200)
EXPECTED = {B_ADDR: OPENBAO, T_ADDR: TENANCY}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# documents shaped like the API's, with any values inside
envelopes = st.fixed_dictionaries({"data": json_values}) | st.fixed_dictionaries(
    {"data": st.lists(st.dictionaries(st.sampled_from(["id", "name", "permissions", "config",
     "isOnline", "roleAttributes"]), json_values, max_size=5), max_size=3)}
)  # fmt: skip
# services whose intercept.v1 config holds anything at any depth the parser reads
configs = st.fixed_dictionaries(
    {"intercept.v1": json_values | st.fixed_dictionaries(
        {"addresses": json_values, "portRanges": json_values | st.lists(json_values)})}
)  # fmt: skip
service_docs = st.fixed_dictionaries(
    {"data": st.lists(st.fixed_dictionaries(
        {"id": json_values, "name": json_values, "permissions": json_values, "config": configs}))}
)  # fmt: skip
roles = st.lists(
    st.sampled_from(["monky-deploy-agent", "openbao-client", "ops", "x-y"]), unique=True
)
routers = st.lists(
    st.builds(Router, st.sampled_from(["r1", "r2", "edge-a"]), st.booleans()), max_size=3
)


@pytest.mark.parametrize("parse", [zitictl.identity_of, zitictl.services_of, zitictl.routers_of])
@given(doc=json_values | envelopes | service_docs)
def test_any_answer_parses_or_is_a_value_error(parse: Any, doc: object) -> None:
    with contextlib.suppress(ValueError):
        parse(doc)


def test_the_answers_of_a_real_controller() -> None:
    """Shapes as ziti v1.6.0 answers them (trimmed from the one-box network)."""
    name, ident_id, got = zitictl.identity_of(
        {"data": {"id": "fhwKrq03I0", "name": "box", "roleAttributes": ["monky-deploy-agent"]}}
    )
    assert (name, ident_id, got) == ("box", "fhwKrq03I0", ("monky-deploy-agent",))
    assert zitictl.identity_of({"data": {"name": "box", "roleAttributes": None}})[2] == ()
    services = zitictl.services_of(
        {
            "data": [
                {
                    "id": "1cIQ",
                    "name": "monky.tenancy.deploy",
                    "permissions": ["Dial"],
                    "config": {
                        "intercept.v1": {
                            "addresses": ["tenancy.monky.ziti"],
                            "portRanges": [{"high": 443, "low": 443}],
                            "protocols": ["tcp"],
                        }
                    },
                },
                {"id": "b", "name": "bound-only", "permissions": ["Bind"], "config": {}},
            ]
        }
    )
    assert services == (
        Service("1cIQ", "monky.tenancy.deploy", (("tenancy.monky.ziti", 443, 443),), True),
        Service("b", "bound-only", (), False),
    )
    listed = {"data": [{"name": "monky-router", "isOnline": True}, {"id": "x", "isOnline": "yes"}]}
    assert zitictl.routers_of(listed) == (Router("monky-router", True), Router("x", False))
    per_service = {"data": {"edgeRouters": [{"name": "monky-router", "isOnline": False}]}}
    assert zitictl.routers_of(per_service) == (Router("monky-router", False),)


def view(have: list[str], services: tuple[Service, ...] = (), rs: tuple[Router, ...] = ()) -> View:
    return View("https://ctrl:1280", "box", "id1", tuple(have), services, rs)


def svc(name: str, addr: tuple[str, int], routers: list[Router] | None = None) -> Service:
    rs = None if routers is None else tuple(routers)
    return Service(name, name, ((addr[0], addr[1], addr[1]),), True, rs)


@given(have=roles)
def test_a_role_command_keeps_what_the_identity_has_and_adds_what_it_lacks(have: list[str]) -> None:
    command = zitictl.role_command(view(have), ["#openbao-client", "#monky-deploy-agent"])
    listed = command.removeprefix("`ziti edge update identity box --role-attributes ").rstrip("`")
    attrs = listed.split(",")
    assert attrs[: len(have)] == have  # --role-attributes replaces the list: nothing dropped
    assert sorted(attrs) == sorted({*have, "openbao-client", "monky-deploy-agent"})


@given(have=roles, rs=routers)
def test_a_load_hangs_named_only_when_the_identity_may_dial_nothing(
    have: list[str], rs: list[Router]
) -> None:
    assert zitictl.judge_load(view(have, (svc("s", T_ADDR),), tuple(rs)), EXPECTED) is None
    err = zitictl.judge_load(view(have, (), tuple(rs)), EXPECTED)
    assert err is not None and err.code is Code.ZITI_ROLE_MISSING
    assert err.message.startswith("the Ziti identity box may dial no service: it has ")
    missing = [r for r in ("#monky-deploy-agent", "#openbao-client") if r[1:] not in have]
    if missing:
        assert f"lacks {', '.join(missing)} (" in err.message
        assert err.hint == f"on the controller: {zitictl.role_command(view(have), missing)}"
    else:  # it has both: the policies name something else
        assert "lacks" not in err.message and "dial policies" in err.hint
    if not have:
        assert "no role attribute at all" in err.message


@given(rs=st.lists(st.builds(Router, st.sampled_from(["r1", "r2"]), st.booleans()), max_size=3))
def test_a_dial_to_a_served_address_is_the_routers_or_nothing(rs: list[Router]) -> None:
    v = view(["monky-deploy-agent"], (svc("monky.tenancy.deploy", T_ADDR, rs),))
    err = zitictl.judge_dial(v, T_ADDR, TENANCY)
    if any(r.online for r in rs):
        assert err is None  # the view explains nothing: the SDK's words stay
        return
    assert err is not None and err.code is Code.ZITI_ROUTER_OFFLINE
    if rs:
        assert err.message.startswith(f"the edge router{'s' if len(rs) > 1 else ''} ")
        assert all(r.name in err.message for r in rs) and "offline" in err.message
    else:
        assert err.message.startswith("no edge router serves monky.tenancy.deploy")


def test_the_identitys_own_routers_stand_in_when_the_service_has_none_listed() -> None:
    v = view(["monky-deploy-agent"], (svc("t", T_ADDR),), (Router("r1", False),))
    err = zitictl.judge_dial(v, T_ADDR, TENANCY)
    assert err is not None and err.code is Code.ZITI_ROUTER_OFFLINE and "r1" in err.message


@given(port=st.integers(1, 65535).filter(lambda p: p != 443), have=roles)
def test_the_same_host_at_another_port_is_the_port(port: int, have: list[str]) -> None:
    v = view(have, (svc("monky.tenancy.deploy", T_ADDR, [Router("r", True)]),))
    err = zitictl.judge_dial(v, (T_ADDR[0], port), TENANCY)
    assert err is not None and err.code is Code.ZITI_NO_SERVICE
    assert err.message.startswith(
        f"tenancy.port in config.yaml is {port} but no Ziti service intercepts "
        f"tenancy.monky.ziti:{port}: monky.tenancy.deploy (tenancy.monky.ziti:443)"
    )


@given(have=roles)
def test_an_address_no_service_intercepts_is_the_role_or_the_address(have: list[str]) -> None:
    v = view(have, (svc("openbao", B_ADDR, [Router("r", True)]),))
    err = zitictl.judge_dial(v, T_ADDR, TENANCY)
    assert err is not None
    if "monky-deploy-agent" in have:
        assert (
            err.code is Code.ZITI_NO_SERVICE
            and "although it has #monky-deploy-agent" in err.message
        )
    else:
        assert err.code is Code.ZITI_ROLE_MISSING
        assert err.message.startswith(
            "the Ziti identity box may not dial tenancy's deploy API: it lacks the role "
            "attribute #monky-deploy-agent (it has "
        )
        assert err.hint == f"on the controller: {zitictl.role_command(v, ['#monky-deploy-agent'])}"
    assert zitictl.judge_dial(v, T_ADDR, None) is None  # an address the agent does not know


def test_describe_names_attributes_services_and_routers() -> None:
    v = view(
        ["monky-deploy-agent"],
        (svc("monky.tenancy.deploy", T_ADDR, [Router("r1", True), Router("r2", False)]),),
    )
    assert zitictl.describe(v) == (
        "it knows this identity as box (id id1), role attributes #monky-deploy-agent; it may "
        "dial monky.tenancy.deploy (tenancy.monky.ziti:443) via r1 (online), r2 (OFFLINE)"
    )
    assert zitictl.describe(view([])).endswith("role attributes none; it may dial no service")
