"""core.admission.reading: one reading (issue 45). Host-side strings held to a character set with
one meaning to every reader (the key table decides which strings: every judged or refused key of
every shape is tried), compose's reading compared with the judged model value for value, the
engine's objects of the project compared with the model."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import artifact, reading
from monky_deployd.core.admission.keys import SHAPES, Kind
from monky_deployd.core.errors import Code
from monky_deployd.core.render.mask import Masker

# every form a reader may read otherwise: compose's interpolation, YAML's line breaks and
# spaces, controls, non-ASCII
BAD = ["$", "$$", "${X}", "$X", "${X:-d}", "\x85", "\u2028", "\u2029", "\xa0", "\t", "\n", "\x7f"]
BAD += ["\x00", "\u3000", "\ufeff", "é", "\U0001f600"]


def routes() -> dict[str, list[tuple[str, bool]]]:
    """For each shape of the table, the keys from the top that reach it (each: key, named)."""
    found: dict[str, list[tuple[str, bool]]] = {"top": []}
    queue = deque(["top"])
    while queue:
        shape = queue.popleft()
        for name, key in sorted(SHAPES[shape].items()):
            if key.shape and key.shape not in found:
                found[key.shape] = [*found[shape], (name, key.named)]
                queue.append(key.shape)
    return found


def placed(shape: str, key: str, value: object) -> tuple[dict[str, Any], str]:
    """A model holding ``value`` at ``key`` of a ``shape`` (named levels named ``n``), and the
    key path a line names."""
    model: dict[str, Any] = {}
    here, path = model, []
    for name, named in routes()[shape]:
        inner: dict[str, Any] = {}
        here[name] = {"n": inner} if named else inner
        path += [name, "n"] if named else [name]
        here = inner
    here[key] = value
    return model, ".".join([*path, key])


def table(*kinds: Kind) -> list[tuple[str, str]]:
    return [(s, k) for s, keys in SHAPES.items() for k, key in keys.items() if key.kind in kinds]


def test_every_shape_of_the_table_is_reached_from_the_top() -> None:
    assert set(routes()) == set(SHAPES)


def test_the_also_host_keys_are_allowed_keys_of_the_table() -> None:
    assert set(reading.ALSO_HOST) <= set(table(Kind.ALLOWED))


@pytest.mark.parametrize(
    ("shape", "key"), table(Kind.JUDGED, Kind.REFUSED) + sorted(reading.ALSO_HOST)
)
def test_every_judged_refused_and_host_key_holds_only_safe_strings(shape: str, key: str) -> None:
    for bad in BAD:
        model, path = placed(shape, key, f"/srv/a{bad}b")
        found = reading.host_strings(model)
        assert [(v.key, v.code) for v in found] == [(path, Code.POLICY_HOST_STRING)], (bad, found)
        if not SHAPES[shape][key].shape:  # inside a list or mapping too
            nested, _ = placed(shape, key, {"o": [f"a{bad}"]})
            assert reading.host_strings(nested), bad
    model, _ = placed(shape, key, "/srv/plain-ASCII_path.1:ro")
    assert reading.host_strings(model) == []


@pytest.mark.parametrize(("shape", "key"), [
    (s, k) for s, k in table(Kind.ALLOWED)
    if (s, k) not in reading.ALSO_HOST and not SHAPES[s][k].shape
])  # fmt: skip
def test_a_container_side_value_may_hold_any_string(shape: str, key: str) -> None:
    model, _ = placed(shape, key, "echo $$HOME \x85 ${X}")
    assert reading.host_strings(model) == []


@given(
    st.sampled_from(["services", "volumes", "networks", "secrets", "configs"]), st.sampled_from(BAD)
)
def test_every_name_of_a_named_mapping_is_a_host_string(top: str, bad: str) -> None:
    found = reading.host_strings({top: {f"n{bad}": {}}})
    assert [v.key for v in found] == [f"{top}.n{bad}"]


@given(st.text())
def test_unsafe_is_printable_ascii_without_dollar(text: str) -> None:
    ok = all(0x20 <= ord(c) <= 0x7E and c != "$" for c in text)
    assert (reading.unsafe(text) is None) is ok


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(JSON)
def test_a_model_read_as_it_was_judged_has_no_difference(model: object) -> None:
    assert reading.differences(model, json.loads(json.dumps(model))) == []


@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), JSON, min_size=1), st.data())
def test_a_value_read_otherwise_is_named_by_its_key_path(model: dict[str, Any], data: Any) -> None:
    key = data.draw(st.sampled_from(sorted(model)))
    read = {**model, key: "other:" + json.dumps(model[key])}  # a string: read whole
    found = reading.differences({"services": {"web": model}}, {"services": {"web": read}})
    assert [(d.path, d.judged, d.read) for d in found] == [
        (f"services.web.{key}", model[key], read[key])
    ]
    assert found[0].path.startswith("services.web.")
    assert reading.two_readings(found)[0].service == "web"


def test_types_are_read_apart_bool_int_and_string() -> None:
    assert reading.differences({"a": True}, {"a": 1})
    assert reading.differences({"a": "1"}, {"a": 1})
    assert reading.differences({"a": 1}, {"a": 1.0}) == []
    assert [d.path for d in reading.differences({"a": 1}, {})] == ["a"]


def test_two_readings_mask_secrets_and_name_both_values() -> None:
    masker = Masker(["hunter2-secret-value"])
    found = reading.differences(
        {"services": {"web": {"environment": {"P": "hunter2-secret-value\x85x"}}}},
        {"services": {"web": {"environment": {"P": "hunter2-secret-value x"}}}},
    )
    (line,) = reading.two_readings(found, masker)
    assert line.code is Code.POLICY_TWO_READINGS
    assert line.key == "services.web.environment.P"
    assert "hunter2" not in line.line() and "***" in line.line()
    many = reading.differences({str(i): i for i in range(30)}, {})
    assert len(reading.two_readings(many)) == reading.SHOWN + 1


def test_merged_is_composes_merge_of_the_agents_overrides() -> None:
    model = {"services": {"web": {"image": "a", "labels": {"x": "1"}, "command": ["a"]}}}
    labels = {"services": {"web": {"labels": {"monky-deployd.revision": "r1"}}}}
    pins = {"services": {"web": {"image": "sha256:ab"}}}
    assert reading.merged(model, pins, labels) == {
        "services": {
            "web": {
                "image": "sha256:ab",
                "labels": {"x": "1", "monky-deployd.revision": "r1"},
                "command": ["a"],
            }
        }
    }
    assert model["services"]["web"]["image"] == "a"  # a copy


def volume(**over: object) -> dict[str, object]:
    labels = {"com.docker.compose.project": "shop", "com.docker.compose.volume": "data"}
    return {"Name": "shop_data", "Driver": "local", "Options": None, "Labels": labels} | over


MODEL: dict[str, object] = {
    "name": "shop",
    "volumes": {"data": {"name": "shop_data"}},
    "networks": {"back": {"name": "shop_back"}},
}


def test_the_projects_own_volume_defined_as_the_model_is_no_drift() -> None:
    net = {"Name": "shop_back", "Driver": "bridge", "Options": {}, "Internal": False}
    net["Labels"] = {"com.docker.compose.project": "shop", "com.docker.compose.network": "back"}
    objects = {("volume", "shop_data"): [volume()], ("network", "shop_back"): [net]}
    assert reading.drift(MODEL, "shop", objects) == []
    assert reading.drift(MODEL, "shop", {}) == []  # none yet: compose creates it


def test_a_changed_volume_definition_is_drift_naming_both_and_masked() -> None:
    spec = {"name": "shop_data", "driver_opts": {"type": "none", "o": "bind", "device": "/srv/b"}}
    model = {**MODEL, "volumes": {"data": spec}}
    had = volume(Options={"type": "none", "o": "bind", "device": "/srv/a-long-secret"})
    (found,) = reading.drift(
        model, "shop", {("volume", "shop_data"): [had]}, Masker(["a-long-secret"])
    )
    assert found.code is Code.POLICY_RESOURCE_DRIFT and found.key == "volumes.data"
    assert "/srv/b" in found.asks and "a-long-secret" not in found.asks
    relabelled = volume(Labels={**volume()["Labels"], "k": "v"})  # type: ignore[dict-item]
    assert reading.drift(MODEL, "shop", {("volume", "shop_data"): [relabelled]})
    assert reading.drift(MODEL, "shop", {("volume", "shop_data"): [volume(Driver="nfs")]})
    other_key = volume(Labels={**volume()["Labels"], "com.docker.compose.volume": "x"})  # type: ignore[dict-item]
    assert reading.drift(MODEL, "shop", {("volume", "shop_data"): [other_key]})


def test_another_projects_object_is_not_drift_but_foreign() -> None:
    theirs = volume(Driver="nfs", Labels={"com.docker.compose.project": "other"})
    assert reading.drift(MODEL, "shop", {("volume", "shop_data"): [theirs]}) == []


def test_a_changed_network_is_drift() -> None:
    labels = {"com.docker.compose.project": "shop", "com.docker.compose.network": "back"}
    net = {"Name": "shop_back", "Driver": "bridge", "Options": {}, "Labels": labels}
    model = {**MODEL, "networks": {"back": {"name": "shop_back", "internal": True}}}
    (found,) = reading.drift(model, "shop", {("network", "shop_back"): [net]})
    assert found.key == "networks.back" and "internal" in found.asks


@given(st.text(max_size=20))
def test_the_models_bytes_read_back_as_json_and_hold_printable_ascii_or_astral(value: str) -> None:
    text = artifact.text({"v": value, f"k{value[:3]}": 1})  # a key from the value, never "v"
    assert json.loads(text) == {"v": value, f"k{value[:3]}": 1}
    assert all(0x20 <= ord(c) <= 0x7E or c == "\n" or ord(c) > 0xFFFF for c in text)


# -- what compose carries over from a container it replaces (the outside attack on issue 45) ---


def _row(service: str, *mounts: Mapping[str, object]) -> dict[str, object]:
    labels = {"com.docker.compose.service": service}
    return {"Labels": labels, "Names": [f"/p-{service}-1"], "Mounts": list(mounts)}


_BIND: dict[str, object] = {
    "Type": "bind",
    "Source": "/srv/app/a",
    "Destination": "/data",
    "RW": True,
}
_ANON: dict[str, object] = {
    "Type": "volume",
    "Name": "ab" * 32,
    "Driver": "local",
    "Destination": "/data",
}


def _web(*volumes: Mapping[str, object]) -> dict[str, object]:
    return {"services": {"web": {"image": "web", "volumes": list(volumes)}}}


def test_a_bind_carried_to_an_anonymous_target_is_refused() -> None:
    found = reading.carried(
        _web({"type": "volume", "target": "/data/"}), [_row("web", _BIND)], {"web": frozenset()}
    )
    assert [(v.code, v.service) for v in found] == [(Code.POLICY_RESOURCE_DRIFT, "web")]
    assert "bind /srv/app/a at /data carried over from the engine's container p-web-1" in (
        found[0].asks
    )


def test_a_bind_carried_to_the_images_volume_or_an_unknown_image_is_refused() -> None:
    for declared in (frozenset({"/data"}), None):
        found = reading.carried(_web(), [_row("web", _BIND)], {"web": declared})
        assert [v.code for v in found] == [Code.POLICY_RESOURCE_DRIFT]


def test_what_is_not_carried_or_holds_no_host_path_passes() -> None:
    own = {"type": "bind", "source": "/srv/app/a", "target": "/data"}
    Case = tuple[dict[str, object], list[dict[str, object]], frozenset[str] | None]
    cases: list[Case] = [
        (_web(own), [_row("web", _BIND)], None),  # the new service's own mount there
        (_web(), [_row("web", _BIND)], frozenset()),  # dropped, no VOLUME: not carried
        (_web({"type": "volume", "target": "/data"}), [_row("web", _ANON)], None),
        (_web(), [_row("gone", _BIND)], None),  # an orphan: removed, never replaced
        (_web(), [_row("web", {**_BIND, "Type": "tmpfs"})], None),
    ]
    for config, rows, declared in cases:
        assert reading.carried(config, rows, {"web": declared}) == [], (config, rows)


@given(st.text(alphabet="0123456789abcdefg", min_size=63, max_size=65))
def test_only_an_engine_made_anonymous_volume_is_carried(name: str) -> None:
    vol: dict[str, object] = {**_ANON, "Name": name}
    found = reading.carried(_web(), [_row("web", vol)], {"web": None})
    anonymous = len(name) == 64 and "g" not in name
    assert (found == []) is anonymous


def test_a_volume_of_the_model_may_be_carried_another_may_not() -> None:
    vol: dict[str, object] = {"Type": "volume", "Name": "p_data", "Destination": "/data"}
    config = {**_web(), "name": "p", "volumes": {"data": {}}}
    assert reading.carried(config, [_row("web", vol)], {"web": None}) == []
    gone = {**_web(), "name": "p"}
    assert [v.code for v in reading.carried(gone, [_row("web", vol)], {"web": None})] == [
        Code.POLICY_RESOURCE_DRIFT
    ]
