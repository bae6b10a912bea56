"""core.admission.names (issue 40): names are the engine's facts. A volume, network or container
name of the release that the engine has and whose label names another project (or none: made
by hand) is refused unless the allowance names it; one of ours, or one the engine does not
have, never. network_mode and build.network name the engine's networks: the release's own by
engine name, none, service:, or the networks allowance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from monky_deployd.core.admission import names as policy_names
from monky_deployd.core.admission import policy
from monky_deployd.core.admission.rules import Allow, Rules
from monky_deployd.core.errors import Code

FOREIGN = Code.POLICY_FOREIGN_RESOURCE
PROJECT_RE_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_-"
projects = st.text(PROJECT_RE_CHARS, min_size=1, max_size=20).filter(lambda p: p[0].isalnum())
keys = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
# the engine's word on a name: absent (not in the facts), ours, another project's, no label
OWNERS = st.sampled_from(["absent", "ours", "other", "hand"])


def model(
    project: str, vols: Sequence[str] = (), nets: Sequence[str] = (), **svc: Any
) -> dict[str, Any]:
    """compose's effective model: ``web`` mounting each volume and on each network, with
    compose's names filled in (``<project>_<key>``)."""
    web: dict[str, Any] = {"image": "x", **svc}
    if vols:
        web["volumes"] = [{"type": "volume", "source": v, "target": f"/{v}"} for v in vols]
    if nets:
        web["networks"] = {n: None for n in nets}
    return {
        "name": project,
        "services": {"web": web},
        "volumes": {v: {"name": f"{project}_{v}"} for v in vols},
        "networks": {n: {"name": f"{project}_{n}"} for n in nets},
    }


def owner_of(word: str, project: str, other: str) -> str | None:
    return {"ours": project, "other": other, "hand": None}[word]


@given(
    projects,
    st.dictionaries(keys, OWNERS, max_size=3),
    st.dictionaries(keys, OWNERS, max_size=3),
    projects,
    st.sampled_from([None, "web", "db"]),
)
def test_a_name_the_engine_gives_to_another_project_or_nobody_is_refused_unless_allowed(
    project: str,
    vols: dict[str, str],
    nets: dict[str, str],
    other: str,
    scope: str | None,
) -> None:
    assume(other != project)
    cfg = model(project, sorted(vols), sorted(nets))
    facts: dict[tuple[str, str], str | None] = {}
    for kind, table in (("volume", vols), ("network", nets)):
        for key, word in table.items():
            if word != "absent":
                facts[(kind, f"{project}_{key}")] = owner_of(word, project, other)
    asked = policy_names.asked(cfg, project)
    assert set(asked) == {("volume", f"{project}_{k}") for k in vols} | {
        ("network", f"{project}_{k}") for k in nets
    }
    found = policy_names.owned(cfg, project, facts, Rules())
    foreign = {f"volumes.{k}" for k, w in vols.items() if w in ("other", "hand")}
    foreign |= {f"networks.{k}" for k, w in nets.items() if w in ("other", "hand")}
    assert {v.key for v in found} == foreign
    for v in found:
        kind, key = v.key.split(".", 1)
        name = f"{project}_{key}"
        assert v.code is FOREIGN and v.service == "web"
        assert v.allow_with == f"policy.services.web.{kind}: [{name}]"
        word = (vols if kind == "volumes" else nets)[key]
        assert (f"project {other}'s" if word == "other" else "made by hand") in v.asks
        assert f"the {kind[:-1]} {name} already exists" in v.asks
    # the allowances named, for every service or for web: let through; for db: not
    every = frozenset(f"{project}_{k}" for k in vols), frozenset(f"{project}_{k}" for k in nets)
    scoped = Allow(volumes=every[0], networks=every[1])
    rules = Rules(allow=scoped) if scope is None else Rules(services={scope: scoped})
    left = policy_names.owned(cfg, project, facts, rules)
    assert {v.key for v in left} == (foreign if scope == "db" else set())


@given(st.sampled_from(["v", "shop", "a-b"]), keys, keys)
def test_the_project_v_db_finds_v_s_volume_db_data_and_is_refused(
    app: str, first: str, rest: str
) -> None:
    """The attack: project ``<app>_<first>`` with the volume ``<rest>`` is compose's
    ``<app>_<first>_<rest>``, the project ``<app>``'s volume ``<first>_<rest>``."""
    theirs = f"{app}_{first}_{rest}"
    mine = f"{app}_{first}"
    cfg = model(mine, [rest])
    assert policy_names.asked(cfg, mine) == [("volume", theirs)]
    # compose's name passes the text check: only the engine's label tells
    text_only = policy.judge(cfg, Rules())
    assert not [v for v in text_only if v.key.startswith("volumes.")]
    found = policy_names.owned(cfg, mine, {("volume", theirs): app}, Rules())
    assert [(v.key, v.code) for v in found] == [(f"volumes.{rest}", FOREIGN)]
    assert f"the volume {theirs} already exists and is project {app}'s, not {mine}'s" in (
        found[0].line()
    )


def test_a_container_name_of_another_project_or_made_by_hand_is_refused_with_no_allowance() -> None:
    cfg = model("shop", container_name="db")
    assert policy_names.asked(cfg, "shop") == [("container", "db")]
    everything = Rules(allow=Allow(volumes=frozenset({"db"}), networks=frozenset({"db"})))
    for owner, words in (("crm", "project crm's"), (None, "made by hand")):
        found = policy_names.owned(cfg, "shop", {("container", "db"): owner}, everything)
        assert [(v.key, v.code, v.allow_with) for v in found] == [
            ("services.web.container_name", FOREIGN, "")
        ]
        assert found[0].line().startswith("services.web.container_name db: a container of that")
        assert words in found[0].line() and "no allowance permits it" in found[0].line()
    assert not policy_names.owned(cfg, "shop", {("container", "db"): "shop"}, Rules())
    assert not policy_names.owned(cfg, "shop", {}, Rules())


def test_a_volume_no_service_mounts_is_judged_under_policy_allow() -> None:
    cfg = {"name": "shop", "services": {"web": {"image": "x"}}, "volumes": {"d": {"name": "x"}}}
    found = policy_names.owned(cfg, "shop", {("volume", "x"): None}, Rules())
    assert [(v.service, v.allow_with) for v in found] == [("", "policy.allow.volumes: [x]")]
    allowed = Rules(allow=Allow(volumes=frozenset({"x"})))
    assert not policy_names.owned(cfg, "shop", {("volume", "x"): None}, allowed)


def test_an_external_network_and_the_engines_bridge_by_name_are_asked_and_judged() -> None:
    cfg = model("shop", nets=["proxy", "br"])
    cfg["networks"] = {"proxy": {"name": "proxy", "external": True}, "br": {"name": "bridge"}}
    assert policy_names.asked(cfg, "shop") == [("network", "bridge"), ("network", "proxy")]
    facts = {("network", "proxy"): "edge", ("network", "bridge"): None}
    found = policy_names.owned(cfg, "shop", facts, Rules())
    assert {(v.key, v.asks.split(", not")[0]) for v in found} == {
        ("networks.proxy", "the network proxy already exists and is project edge's"),
        ("networks.br", "the network bridge already exists and is the engine's own"),
    }


def test_the_hosts_network_is_left_to_policy_host() -> None:
    cfg = model("shop", nets=["h"])
    cfg["networks"] = {"h": {"name": "host", "external": True}}
    assert policy_names.asked(cfg, "shop") == []
    assert not policy_names.owned(cfg, "shop", {("network", "host"): None}, Rules())


MODES = st.sampled_from(
    ["none", "host", "bridge", "default", "back", "shop_back", "other_net", "service:db"]
)


@given(MODES, MODES, st.sampled_from([None, "web", "db"]))
def test_network_mode_and_build_network_join_only_the_releases_own_networks_or_allowed(
    mode: str, build_net: str, scope: str | None
) -> None:
    cfg = model("shop", nets=["back"], network_mode=mode)
    cfg["services"]["web"]["build"] = {"context": "/r", "network": build_net}
    cfg["services"]["db"] = {"image": "x", "networks": {"back": None}}
    found = {(v.key, v.code) for v in policy_names.namespaces(cfg, Rules())}
    ours = {"none", "host", "shop_back"}  # host: core.admission.policy (host_namespaces)
    want = set()
    if mode not in ours and not mode.startswith("service:"):
        want.add(("network_mode", FOREIGN))
    if build_net not in ours:  # service: is no build network: a name like any other
        want.add(("build.network", FOREIGN))
    assert found == want
    # the key `back` is not the release's network: the engine joins the one named back
    for v in policy_names.namespaces(cfg, Rules()):
        name = v.asks.split(" ", 1)[0]
        assert v.allow_with == f"policy.services.web.networks: [{name}]"
        if name == "back":
            assert "the engine joins the network named back, not the release's shop_back" in v.asks
        if name in ("bridge", "default"):
            assert "the engine's default bridge" in v.asks
    # the allowance naming them lets them through (for every service or for web; not for db)
    names = frozenset({mode, build_net})
    rules = (
        Rules(allow=Allow(networks=names))
        if scope is None
        else Rules(services={scope: Allow(networks=names)})
    )
    left = {(v.key, v.code) for v in policy_names.namespaces(cfg, rules)}
    assert left == (want if scope == "db" else set())


def test_network_mode_through_the_whole_judge_keeps_container_and_host_as_they_were() -> None:
    cfg = model("shop", network_mode="container:abc")
    assert [(v.key, v.code) for v in policy.judge(cfg, Rules())] == [
        ("network_mode", Code.POLICY_REFUSED)
    ]
    cfg = model("shop", network_mode="host")
    assert [v.allow_with for v in policy.judge(cfg, Rules())] == [
        "policy.services.web.host_namespaces: [network]"
    ]
    cfg = model("shop", network_mode="other_default")
    err = policy.refusal("r2", policy.judge(cfg, Rules()))
    assert err.code is FOREIGN
    assert "network_mode other_default (a network that is not one of the release's own)" in (
        err.message
    )
