"""core.admission.keys: the allow-list over compose's effective model, walked at every level.

Generated documents put one key of the table (or a key it does not know) at every place the
table walks, with a generated value: a refused key that asks something and an unknown key are
refused naming their path, until ``policy.keys`` names that path; an allowed or judged key is
never a key fault. tests/repo/test_policy_table.py holds the table to compose's own schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import keywalk, policy
from monky_deployd.core.admission.keys import SHAPES, Kind
from monky_deployd.core.admission.rules import Rules
from monky_deployd.core.errors import Code

Build = Callable[[dict[str, Any]], dict[str, Any]]


def places() -> list[tuple[str, str, str, Build]]:
    """Every place the walk reaches: (shape, path prefix, service, wrap a leaf object there)."""
    found: list[tuple[str, str, str, Build]] = []
    todo: list[tuple[str, str, str, Build]] = [("top", "", "", lambda leaf: leaf)]
    while todo:
        shape, prefix, service, wrap = todo.pop()
        if any(p[0] == shape and p[1].count(".") <= prefix.count(".") for p in found):
            continue  # each shape once, at its shallowest place
        found.append((shape, prefix, service, wrap))
        for name, key in SHAPES[shape].items():
            if not key.shape or key.kind is Kind.REFUSED:
                continue
            item = "web" if shape == "top" and name == "services" else "n1"
            here = f"{prefix}.{name}" if prefix else name
            owner = "web" if item == "web" else service

            def inner(
                leaf: dict[str, Any],
                wrap: Build = wrap,
                name: str = name,
                key: Any = key,
                item: str = item,
            ) -> dict[str, Any]:
                value: Any = {item: leaf} if key.named else [leaf]
                return wrap({name: value})

            todo.append((key.shape, f"{here}.{item}" if key.named else here, owner, inner))
    return found


PLACES = places()
VALUES = st.one_of(
    st.just(True),
    st.integers(1, 9),
    st.text(min_size=1, max_size=8),
    st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=2),
    st.dictionaries(st.text(min_size=1, max_size=4), st.text(max_size=4), min_size=1, max_size=2),
)


def keyed(shape: str) -> list[str]:
    return sorted(SHAPES[shape])


@given(st.sampled_from(PLACES), st.data(), VALUES)
def test_a_refused_key_is_refused_by_its_path_until_policy_keys_names_it(
    place: tuple[str, str, str, Build], data: st.DataObject, value: Any
) -> None:
    shape, prefix, service, wrap = place
    refused = [k for k in keyed(shape) if SHAPES[shape][k].kind is Kind.REFUSED]
    if not refused:
        return
    name = data.draw(st.sampled_from(refused))
    path = f"{prefix}.{name}" if prefix else name
    faults = keywalk.walk(wrap({name: value}))
    assert [(f.path, f.service, f.code) for f in faults] == [(path, service, Code.POLICY_REFUSED)]
    assert keywalk.walk(wrap({name: value}), [path]) == []
    star = ".".join("*" if i % 2 else part for i, part in enumerate(path.split(".")))
    assert keywalk.walk(wrap({name: value}), [star]) == []


@given(st.sampled_from(PLACES), st.from_regex(r"\A[a-z][a-z_]{0,12}\Z"), VALUES)
def test_a_key_the_table_does_not_know_is_refused_naming_its_path(
    place: tuple[str, str, str, Build], name: str, value: Any
) -> None:
    shape, prefix, service, wrap = place
    if name in SHAPES[shape]:
        return
    path = f"{prefix}.{name}" if prefix else name
    faults = keywalk.walk(wrap({name: value}))
    assert [(f.path, f.service, f.code) for f in faults] == [
        (path, service, Code.POLICY_UNKNOWN_KEY)
    ]
    found = policy.judge(wrap({name: value}), Rules())
    mine = [v for v in found if v.key == path]
    assert [(v.code, v.allow_with) for v in mine] == [
        (Code.POLICY_UNKNOWN_KEY, f"policy.keys: [{path}]")
    ]
    assert policy.refusal("r9", mine).code is Code.POLICY_UNKNOWN_KEY
    assert path in policy.refusal("r9", mine).message
    # an extension, or a null value, asks nothing
    assert keywalk.walk(wrap({f"x-{name}": value, name: None})) == []


@given(st.sampled_from(PLACES), st.data(), VALUES)
def test_an_allowed_or_judged_key_is_never_a_key_fault(
    place: tuple[str, str, str, Build], data: st.DataObject, value: Any
) -> None:
    shape, _, _, wrap = place
    known = [k for k in keyed(shape) if SHAPES[shape][k].kind is not Kind.REFUSED]
    name = data.draw(st.sampled_from(known))
    if SHAPES[shape][name].shape and isinstance(value, dict):
        return  # a mapping under a walked key is keys, not a value: the other tests' case
    assert keywalk.walk(wrap({name: value})) == []


def test_the_walk_reaches_every_shape_of_the_table() -> None:
    assert {p[0] for p in PLACES} == set(SHAPES)


def test_a_refused_key_that_asks_nothing_is_not_refused() -> None:
    assert keywalk.walk({"services": {"web": {"oom_kill_disable": False, "runtime": "x"}}}) == [
        keywalk.KeyFault("services.web.runtime", "web", SHAPES["service"]["runtime"].why)
    ]
    assert keywalk.walk({"services": {"web": {"runtime": ""}}}) == []
    assert keywalk.walk({"services": {"web": {"models": {}, "external_links": []}}}) == []


# issue 40: "allowed as it is" means its effect stays inside the container's own namespaces
# and cgroup; what does not is judged or refused (OPERATIONS.md's table says why)
BEYOND_THE_CGROUP = {
    ("service", "logging"): (Kind.JUDGED, "logging"),
    ("service", "oom_score_adj"): (Kind.JUDGED, "oom_score_adj"),
    ("service", "ulimits"): (Kind.JUDGED, "ulimits"),
    ("build", "ulimits"): (Kind.JUDGED, "ulimits"),
    ("service", "blkio_config"): (Kind.JUDGED, "weights"),
    ("service", "cpu_shares"): (Kind.JUDGED, "weights"),
    ("service", "annotations"): (Kind.REFUSED, ""),
    ("service", "cpu_rt_runtime"): (Kind.REFUSED, ""),
    ("service", "cpu_rt_period"): (Kind.REFUSED, ""),
    ("network", "ipam"): (Kind.REFUSED, ""),
}


def test_what_acts_beyond_the_containers_cgroup_is_not_allowed_as_it_is() -> None:
    for (shape, name), (kind, judge) in BEYOND_THE_CGROUP.items():
        key = SHAPES[shape][name]
        assert key.kind is kind, (shape, name)
        if judge:
            assert key.why == judge, (shape, name)
    cfg = {
        "services": {
            "web": {
                "annotations": {"org.systemd.property.Delegate": "yes"},
                "cpu_rt_runtime": 950000,
            }
        },
        "networks": {"lan": {"ipam": {"config": [{"subnet": "192.168.1.0/24"}]}}},
    }
    assert [f.path for f in keywalk.walk(cfg)] == [
        "networks.lan.ipam",
        "services.web.annotations",
        "services.web.cpu_rt_runtime",
    ]
    assert (
        keywalk.walk(cfg, ("services.*.annotations", "services.web.cpu_rt_*", "networks.lan.ipam"))
        == []
    )
