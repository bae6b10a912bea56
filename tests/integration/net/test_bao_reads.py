"""One OpenBao read per distinct KV path (issue 15), however many keys a manifest takes from it,
counted on the loopback FakeBao: with one apply's ``KvPages`` (what the tick's secrets phase
passes), a manifest of any shape over present and missing paths costs as many KV reads as it
has distinct paths, and each key still gets its own answer."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.net.bao import Bao, KvPages
from monky_deployd.config import OpenBaoCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import BaoError
from monky_deployd_testkit.fakes.clock import Clock
from monky_deployd_testkit.fakes.grant import GrantIssuer
from monky_deployd_testkit.fakes.openbao import FakeBao

ENV = "env-test-01"
PRESENT = {f"envs/{ENV}/app": {"a": "1", "b": "2", "c": "3"}, f"envs/{ENV}/db": {"user": "u"}}
MISSING = f"envs/{ENV}/never-written"
KEYS = ("a", "b", "c", "user", "absent")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBao]:
    clock = Clock()
    with FakeBao(GrantIssuer(clock), clock) as bao:
        bao.allow_env(ENV)
        for path, data in PRESENT.items():
            bao.set_secret(path, data)
        yield bao


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as client:
        yield client


def _bao(http: httpx.Client, fake: FakeBao) -> Bao:  # one per tick, as the tick makes it
    return Bao(http, OpenBaoCfg.model_validate({"host": fake.host, "port": fake.port}))


def _answer(bao: Bao, token: str, path: str, key: str, pages: KvPages) -> object:
    try:
        return bao.read_secret(token, path, key, pages)
    except BaoError as err:
        return err.code


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    manifest=st.lists(
        st.tuples(st.sampled_from([*PRESENT, MISSING]), st.sampled_from(KEYS)), max_size=12
    )
)
def test_a_manifest_costs_one_read_per_distinct_path(
    http: httpx.Client, fake: FakeBao, manifest: list[tuple[str, str]]
) -> None:
    token = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    before = len(fake.kv_paths_read)
    bao = _bao(http, fake)
    pages: KvPages = {}  # one apply's, as the tick's secrets phase keeps it
    answers = [_answer(bao, token, path, key, pages) for path, key in manifest]
    reads = Counter(fake.kv_paths_read[before:])
    assert reads == Counter({path: 1 for path in dict.fromkeys(p for p, _ in manifest)})
    # every key still gets its own answer: the value, or the refusal naming it
    for (path, key), got in zip(manifest, answers, strict=True):
        if path in PRESENT and key in PRESENT[path]:
            assert got == PRESENT[path][key]
        else:
            assert got is Code.SECRET_MISSING


def test_a_missing_key_after_a_read_is_named_with_its_path_and_key(
    http: httpx.Client, fake: FakeBao
) -> None:
    token = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    bao = _bao(http, fake)
    pages: KvPages = {}
    path = f"envs/{ENV}/app"
    assert bao.read_secret(token, path, "a", pages) == "1"
    with pytest.raises(BaoError) as missing:
        bao.read_secret(token, path, "absent", pages)
    assert missing.value.code is Code.SECRET_MISSING
    assert path in str(missing.value) and "absent" in str(missing.value)
    before = fake.kv_paths_read.count(MISSING)
    for key in ("x", "y"):  # a path that does not exist: each key named, one read in all
        with pytest.raises(BaoError) as gone:
            bao.read_secret(token, MISSING, key, pages)
        assert f"kv/{MISSING} key {key!r} is missing" in str(gone.value)
        assert "does not exist (HTTP 404)" in str(gone.value)
    assert fake.kv_paths_read.count(MISSING) == before + 1


def test_a_new_apply_or_a_read_without_pages_reads_again(http: httpx.Client, fake: FakeBao) -> None:
    token = fake.create_token(ttl_s=3600, renewable=True, meta={"env": ENV})
    path = f"envs/{ENV}/db"
    before = fake.kv_paths_read.count(path)
    bao = _bao(http, fake)
    for _ in range(3):  # three applies: a rotated secret is seen by the next one
        assert bao.read_secret(token, path, "user", {}) == "u"
    assert bao.read_secret(token, path, "user") == "u"  # doctor's single reads
    assert fake.kv_paths_read.count(path) == before + 4
