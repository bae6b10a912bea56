"""core.admission.composefile: the alias/depth budget, relative binds, an image's registry; and
prepare.check_owned (whose containers a compose project has). Classes of input, generated."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import composefile, prepare
from monky_deployd.core.admission.composefile import MAX_DEPTH, MAX_NODES, budget, image_registry
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError


def expanded_nodes(doc: Any) -> int:
    """Nodes of a loaded document with every shared object counted again (what compose sees)."""
    if isinstance(doc, dict):
        return 1 + sum(expanded_nodes(k) + expanded_nodes(v) for k, v in doc.items())
    if isinstance(doc, list):
        return 1 + sum(expanded_nodes(v) for v in doc)
    return 1


def chain(width: int, levels: int, mapping: bool) -> str:
    """``levels`` anchors, each ``width`` aliases of the one before (a list or a mapping)."""

    def item(i: int, k: int) -> str:
        ref = f"*a{i - 1}" if i else "v"
        return f"k{k}: {ref}" if mapping else ref

    lines = []
    for i in range(levels):
        body = ", ".join(item(i, k) for k in range(width))
        lines.append(f"x{i}: &a{i} " + ("{" + body + "}" if mapping else f"[{body}]"))
    return "\n".join(lines) + "\n"


@given(st.integers(1, 6), st.integers(1, 5), st.booleans())
def test_the_budget_counts_what_compose_expands(width: int, levels: int, mapping: bool) -> None:
    text = chain(width, levels, mapping)
    doc = yaml.safe_load(text)
    over = budget(text)
    assert (over is not None) == (expanded_nodes(doc) > MAX_NODES)


@given(st.integers(3, 50), st.integers(4, 14), st.booleans())
def test_alias_bombs_over_the_budget_are_named(width: int, levels: int, mapping: bool) -> None:
    if width**levels <= MAX_NODES:
        levels = 12
    assert "expands to more than" in str(budget(chain(width, levels, mapping)))


@given(st.integers(MAX_DEPTH + 1, 900), st.sampled_from(["[", "{a: "]))
def test_nesting_beyond_the_depth_is_named(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    assert "deeper than" in str(budget("x: " + opener * depth + "1" + closer * depth))


@given(st.integers(1, MAX_DEPTH - 2))
def test_nesting_within_the_depth_passes(depth: int) -> None:
    assert budget("x: " + "[" * depth + "1" + "]" * depth) is None


def test_an_alias_that_expands_deep_counts_its_depth() -> None:
    deep = "[" * 40 + "1" + "]" * 40
    assert budget(f"a: &d {deep}\nb: {'[' * 30}*d{']' * 30}\n") is not None
    assert budget(f"a: &d {deep}\nb: {'[' * 10}*d{']' * 10}\n") is None


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    assert "loop" in str(budget("a: &r [1, *r]\n"))


@pytest.mark.parametrize(
    "vol",
    [
        "./data:/data",
        ".:/app:ro",
        "../up:/x",
        "${DATA}:/d",
        "$D/x:/d",
        {"type": "bind", "source": "data", "target": "/d"},
        {"type": "bind", "source": "./d", "target": "/d"},
    ],
)
def test_relative_and_variable_binds_are_found(vol: Any) -> None:
    doc = {"services": {"web": {"volumes": [vol]}}}
    assert [w for w, _ in composefile.relative_binds(doc)] == ["compose.services.web.volumes[0]"]


@pytest.mark.parametrize(
    "vol",
    [
        "data:/data",
        "/srv/app:/data",
        "~/x:/x",
        "/anonymous",
        {"type": "volume", "source": "data", "target": "/d"},
        {"type": "bind", "source": "/srv/x", "target": "/d"},
        {"type": "tmpfs", "target": "/t"},
    ],
)
def test_named_volumes_and_absolute_binds_pass(vol: Any) -> None:
    assert composefile.relative_binds({"services": {"web": {"volumes": [vol]}}}) == []


def test_a_local_volume_bound_to_a_relative_device_is_found() -> None:
    doc = {"volumes": {"v": {"driver_opts": {"type": "none", "o": "bind", "device": "./d"}}}}
    assert composefile.relative_binds(doc) == [("compose.volumes.v.driver_opts.device", "./d")]


host = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5})+(:[1-9][0-9]{1,4})?", fullmatch=True)
path = st.from_regex(r"[a-z0-9]+(/[a-z0-9._-]+){0,2}", fullmatch=True)
ref = st.from_regex(r"(:[a-z0-9.]{1,8})?(@sha256:[0-9a-f]{8})?", fullmatch=True)


@given(host, path, ref)
def test_a_registry_part_names_the_registry(h: str, p: str, r: str) -> None:
    assert image_registry(f"{h}/{p}{r}") == h
    assert image_registry(f"{h.upper()}/{p}{r}") == h


@given(st.from_regex(r"[a-z0-9]+(/[a-z0-9_-]+)?", fullmatch=True), ref)
def test_an_image_without_a_registry_part_is_docker_hub(p: str, r: str) -> None:
    assert image_registry(p + r) == "docker.io"


def test_localhost_and_variables() -> None:
    assert image_registry("localhost/app") == "localhost"
    assert image_registry("localhost:5000/app") == "localhost:5000"
    assert image_registry("${REG}/app") is None
    assert image_registry("index.docker.io/library/redis") == "docker.io"


ROOT = "/var/lib/monky-deployd/revisions"
names = st.from_regex(r"[a-z][a-z0-9_-]{0,12}", fullmatch=True)


@given(st.dictionaries(names, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,19}", fullmatch=True)))
def test_containers_started_from_our_revisions_are_ours(revs: dict[str, str]) -> None:
    prepare.check_owned("shop", {n: f"{ROOT}/{r}" for n, r in revs.items()}, ROOT)


@given(
    st.dictionaries(
        names, st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,19}", fullmatch=True), max_size=3
    ),
    names,
    st.sampled_from(["/srv/shop", "", "/var/lib/monky-deployd/revisions-old/r1", ROOT, "/"]),
)
def test_any_container_started_elsewhere_refuses_the_project(
    revs: dict[str, str], stranger: str, where: str
) -> None:
    dirs = {n: f"{ROOT}/{r}" for n, r in revs.items()} | {stranger: where}
    with pytest.raises(DeployError) as info:
        prepare.check_owned("shop", dirs, ROOT)
    assert info.value.code is Code.PROJECT_NOT_OWNED
    assert info.value.message.startswith("compose project 'shop' already exists")
    assert stranger in info.value.message


leftover = st.builds(
    lambda kind, name: f"{kind} {name}",
    st.sampled_from(["volume", "network"]),
    st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,20}", fullmatch=True),
)


@given(st.lists(leftover, min_size=1, max_size=15, unique=True))
def test_volumes_or_networks_of_a_project_never_started_here_refuse_it(left: list[str]) -> None:
    """No container, but volumes/networks labelled with the project: the agent never started it,
    so it is someone else's (our ``up`` would adopt their volumes)."""
    with pytest.raises(DeployError) as info:
        prepare.check_owned("shop", {}, ROOT, left, known=False)
    assert info.value.code is Code.PROJECT_NOT_OWNED
    assert info.value.message.startswith("compose project 'shop' already exists")
    assert left[0] in info.value.message
    assert "nothing was pulled or changed" in info.value.message


@given(st.lists(leftover, max_size=5, unique=True))
def test_leftovers_of_a_project_the_agent_started_are_its_own(left: list[str]) -> None:
    prepare.check_owned("shop", {}, ROOT, left, known=True)


@given(st.dictionaries(names, st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1))
def test_our_containers_vouch_for_the_project_whatever_else_carries_its_label(
    revs: dict[str, str],
) -> None:
    prepare.check_owned(
        "shop", {n: f"{ROOT}/{r}" for n, r in revs.items()}, ROOT, ["volume shop_data"]
    )
