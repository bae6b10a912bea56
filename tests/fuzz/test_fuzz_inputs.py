"""Fuzz: the registry credential parser, config loading, tenancy's answers (check-in, lease,
error bodies: ``core.wire.checkin`` through ``adapters.net.tenancy``) and the state files
(``StateDir`` over ``core.records.applied``). Every outcome is a value or a named refusal; reading
never writes."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd import config as config_mod
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.tenancy import Checkin, Tenancy
from monky_deployd.config import TenancyCfg
from monky_deployd.core.admission import prepare
from monky_deployd.core.faults import DeployError
from monky_deployd.core.lifecycle.schedule import Seen
from monky_deployd.core.records.applied import Applied, TokenState
from monky_deployd.core.render import registry_cred
from monky_deployd.core.wire.answers import Lease
from monky_deployd.core.wire.checkin import HostFacts

from .strategies import FUZZ, any_text, assert_named, hostile_yaml, json_values, nested

# -- registry credential -----------------------------------------------------------------------

hosts = (
    st.none()
    | st.sampled_from(["reg.example.net", "reg.example.net:5000", "docker.io"])
    | (any_text)
)
cred_values = (
    json_values
    | st.builds(lambda u, p: f"{u}:{p}", any_text, any_text)
    | st.builds(lambda u, p: json.dumps({"username": u, "password": p}), any_text, any_text)
    | st.fixed_dictionaries({}, optional={"username": json_values, "password": json_values})
)


@FUZZ
@given(value=cred_values, host=hosts)
def test_credential_parser_refuses_by_name(value: object, host: str | None) -> None:
    try:
        cred = registry_cred.parse_credential(value, host)
        config = registry_cred.render_docker_config(host, cred)
    except DeployError as err:
        assert_named(err)
        return
    assert json.loads(config)["auths"]


@FUZZ
@given(manifest=st.lists(st.dictionaries(st.sampled_from(["name", "use"]), json_values)))
def test_registry_entry_selection_refuses_by_name(manifest: list[dict[str, object]]) -> None:
    try:
        registry_cred.select_entry(manifest)
    except DeployError as err:
        assert_named(err)


# -- config ------------------------------------------------------------------------------------

CONFIG_KEYS = [
    "env", "transport", "identity", "tenancy", "openbao", "grant_file", "state_dir", "token",
    "docker", "disk", "lock_wait_s", "max_bundle_bytes", "host", "port", "timeout_s", "binary",
    "metrics", "textfile_dir",
]  # fmt: skip
configs = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda inner: st.dictionaries(st.sampled_from(CONFIG_KEYS) | any_text, inner, max_size=5),
    max_leaves=10,
).map(lambda d: dict(d, env="env-dev-08") if isinstance(d, dict) and len(d) % 2 else d)


@FUZZ
@given(data=configs)
def test_config_parse_refuses_by_name(data: Any) -> None:
    try:
        config_mod.parse(data, "config.yaml")
    except DeployError as err:
        assert_named(err)


@FUZZ
@given(text=hostile_yaml | configs.map(lambda d: yaml.safe_dump(d, allow_unicode=True)))
def test_config_load_refuses_by_name(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_bytes(text.encode("utf-8", "surrogatepass"))
        try:
            config_mod.load(path)
        except DeployError as err:
            assert_named(err)
        assert [p.name for p in Path(tmp).iterdir()] == ["config.yaml"]


# -- tenancy's answers -------------------------------------------------------------------------

bodies = (
    json_values.map(lambda v: json.dumps(v).encode())
    | st.builds(
        lambda rev, bundle: json.dumps({"revision": rev, "bundle": bundle}).encode(),
        json_values,
        json_values,
    )
    | st.builds(
        lambda code, msg, retry: json.dumps(
            {"error": {"code": code, "message": msg, "retry_after_s": retry}}
        ).encode(),
        st.sampled_from(["GRANT_SUPERSEDED", "ENV_MISMATCH", "LEASE_RATE_LIMITED"]) | json_values,
        json_values,
        json_values,
    )
    | st.builds(
        lambda lease: json.dumps({"lease": lease}).encode(),
        st.fixed_dictionaries(
            {},
            optional={k: json_values for k in ("id", "token", "ttl_s", "renewable", "accessor")},
        ),
    )
    | st.builds(
        lambda d, o: nested(d, o, "]" if o == "[" else "}").encode(),
        st.integers(1, 200_000),
        st.sampled_from(["[", '{"a":']),
    )
    | st.sampled_from([b"NaN", b"1e999999", b'"\\ud800"', b"\xff\xfe", b"", b"{", b"null"])
    | st.binary(max_size=64)
)
statuses = st.sampled_from([200, 201, 204, 304, 400, 401, 403, 404, 429, 500, 503]) | (
    st.integers(100, 599)
)


def tenancy_answering(status: int, body: bytes, headers: dict[str, str]) -> Tenancy:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    return Tenancy(client, TenancyCfg(host="127.0.0.1", port=443), "env-f", max_body_bytes=1 << 22)


@FUZZ
@given(
    status=statuses,
    body=bodies,
    headers=st.dictionaries(
        st.sampled_from(["Retry-After", "Content-Type", "ETag"]),
        st.sampled_from(["60", "-1", "1e9", "x", "application/json", ""]),
    ),
)
def test_tenancy_answers_are_values_or_named_refusals(
    status: int, body: bytes, headers: dict[str, str]
) -> None:
    tenancy = tenancy_answering(status, body, headers)
    try:
        answer = tenancy.checkin("t0k3n", {"applied": None}, "r1")
        if answer.status == 200:
            assert isinstance(answer.revision, str) and isinstance(answer.bundle, dict)
            prepare.check_bundle(answer.revision, answer.bundle)
        else:
            assert isinstance(answer, Checkin)
    except DeployError as err:
        assert_named(err)
    try:
        assert isinstance(tenancy.lease("t0k3n"), Lease)
    except DeployError as err:
        assert_named(err)
    try:
        tenancy.report("t0k3n", {"outcome": "applied"})
    except DeployError as err:
        assert_named(err)


# -- state files -------------------------------------------------------------------------------

record_bytes = (
    st.binary(max_size=80)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries(
        {},
        optional={
            k: json_values
            for k in (
                *("version", "revision", "project", "services", "applied_at", "kind", "token"),
                *("names", "first_seen_at", "until", "why", "spread_s"),
            )
        },
    ).map(lambda d: json.dumps(d).encode())
    | st.integers(1, 100_000).map(lambda d: nested(d).encode())
)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@FUZZ
@given(
    applied=record_bytes,
    token=record_bytes,
    host=record_bytes,
    projects=record_bytes,
    waiting=record_bytes,
)
def test_state_files_read_as_values_none_or_a_reason(
    applied: bytes, token: bytes, host: bytes, projects: bytes, waiting: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        state = StateDir(Path(tmp) / "s").ensure()
        state.applied_file.write_bytes(applied)
        state.token_file.write_bytes(token)
        state.host_file.write_bytes(host)
        state.projects_file.write_bytes(projects)
        state.waiting_file.write_bytes(waiting)
        before = snapshot(state.root)
        seen = state.read_waiting()  # unreadable: none (a new first sight, bounded by the spread)
        assert seen is None or isinstance(seen, Seen)
        known = state.read_projects()
        assert all(isinstance(name, str) for name in known)
        got = state.read_applied()
        assert got is None or isinstance(got, Applied)
        facts = state.read_host_facts()
        assert facts is None or isinstance(facts, HostFacts)
        try:
            stored = state.read_token()
            assert stored is None or isinstance(stored, TokenState)
        except ValueError as err:  # the documented contract: TokenKeeper names the cost
            assert type(err) is ValueError and err.__cause__ is None
        assert snapshot(state.root) == before, "reading the state dir must not write"


bake_bytes = record_bytes | st.fixed_dictionaries(
    {"revision": json_values, "project": json_values, "since": json_values, "until": json_values},
    optional={k: json_values for k in ("runs", "jobs", "previous", "failed")},
).map(lambda d: json.dumps(d).encode())


@FUZZ
@given(raw=bake_bytes)
def test_the_bake_record_reads_as_a_well_typed_record_or_none(raw: bytes) -> None:
    """bake.json (core.lifecycle.bake): whatever the file holds, a record whose every field has its
    type and finite times (a NaN would bake forever), or none; never a write."""
    import math

    from monky_deployd.core.lifecycle.bake import Bake

    with tempfile.TemporaryDirectory() as tmp:
        state = StateDir(Path(tmp) / "s").ensure()
        state.bake_file.write_bytes(raw)
        before = snapshot(state.root)
        got = state.read_bake()
        if got is not None:
            assert isinstance(got, Bake) and isinstance(got.revision, str)
            assert math.isfinite(got.since) and math.isfinite(got.until)
            assert all(isinstance(v, str) for v in got.runs.values())
        assert snapshot(state.root) == before
