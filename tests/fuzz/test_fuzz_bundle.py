"""Fuzz: bundle validation (``prepare.check_bundle``) and the ``.env`` renderer.

Both are pure (core: no I/O, tests/repo/test_layers.py), so a refusal writes nothing by
construction; the tick tests (tests/integration/agent/test_tick_bad_bundles.py) check the state
dir stays empty for the same classes of input."""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import prepare
from monky_deployd.core.admission.bundle import Bundle
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render import envfile

from .strategies import FUZZ, any_text, assert_named, hostile_yaml, json_values

KEYS = ["project", "compose", "env_template", "manifest", "registry_host", "disk_need_bytes"]
ENTRY_KEYS = ["name", "path", "key", "use"]

manifest_entries = st.dictionaries(
    st.sampled_from(ENTRY_KEYS) | any_text,
    st.sampled_from(["DB", "A_1", "envs/e/app", "k", "registry-auth", ""]) | json_values,
    max_size=5,
)
services = st.dictionaries(
    st.from_regex(r"[a-z][a-z0-9_-]{0,6}", fullmatch=True),
    st.fixed_dictionaries(
        {},
        optional={
            "image": st.sampled_from(
                ["reg.example.net/a:1", "busybox", "Reg.Example.net:5000/x", "${R}/a", "a/b/c"]
            )
            | any_text,
            "volumes": st.lists(
                st.sampled_from(["./d:/d", "d:/d", "/abs:/d", "$X:/d", "~/x:/x", "/only"])
                | st.fixed_dictionaries(
                    {"type": st.sampled_from(["bind", "volume", "tmpfs"]), "source": any_text}
                ),
                max_size=3,
            ),
        },
    ),
    max_size=3,
)
composes = hostile_yaml | services.map(lambda s: yaml.safe_dump({"services": s}))
bundles = st.fixed_dictionaries(
    {},
    optional={
        "project": st.sampled_from(["shop", "a-b_1", "Shop", "shop\n"]) | any_text,
        "compose": composes | json_values,
        "env_template": any_text | st.just("A=${A}\n") | json_values,
        "manifest": st.lists(manifest_entries, max_size=3) | json_values,
        "registry_host": st.sampled_from(["reg.example.net", "docker.io", ""]) | json_values,
        "disk_need_bytes": st.integers() | json_values,
    },
) | st.dictionaries(st.sampled_from(KEYS) | any_text, json_values, max_size=6)
revisions = st.sampled_from(["r1", "r1\n", "a" * 65]) | any_text


@FUZZ
@given(revision=revisions, raw=bundles)
def test_bundle_validation_refuses_by_name(revision: str, raw: dict[str, Any]) -> None:
    try:
        bundle = prepare.check_bundle(revision, raw)
    except Exception as err:
        assert_named(err)
        return
    assert isinstance(bundle, Bundle)
    # What validation accepts can be written: every text is UTF-8.
    for text in (bundle.revision, bundle.project, bundle.compose, bundle.env_template):
        text.encode("utf-8")


@FUZZ
@given(revision=revisions, body=json_values)
def test_bundles_as_tenancy_sends_them(revision: str, body: Any) -> None:
    """Any JSON tenancy could send as the bundle object (after a JSON round trip)."""
    raw = json.loads(json.dumps({"b": body}))["b"]
    if not isinstance(raw, dict):
        raw = {"compose": raw}
    try:
        prepare.check_bundle(revision, raw)
    except Exception as err:
        assert_named(err)


TEMPLATE_PIECES = st.sampled_from(
    [
        "A=", "export ", "${A}", "${B:-x}", "${A:-{}", "{", "}", "$", "$A", "${", ":-", "\n",
        " ", "#", '"', "'", "\\", "=", ":", "\ufeff", "\u2028", "é", "\ud800", "\x00", "${C?e}",
    ]
)  # fmt: skip
templates = st.lists(TEMPLATE_PIECES | any_text, max_size=30).map("".join)
values = st.dictionaries(st.sampled_from(["A", "B", "C", "PATH"]), any_text, max_size=4)


@FUZZ
@given(template=templates, env=values)
def test_render_refuses_by_name(template: str, env: dict[str, str]) -> None:
    try:
        out = envfile.render(template, env)
    except DeployError as err:
        assert_named(err)
        return
    assert isinstance(out, str)


@FUZZ
@given(template=templates)
def test_template_variables_refuses_by_name(template: str) -> None:
    try:
        names = envfile.template_variables(template)
    except DeployError as err:
        assert_named(err)
        return
    assert all(isinstance(n, str) for n in names)
