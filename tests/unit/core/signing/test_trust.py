"""core.signing.trust (signed bundles, contract v1.3): what the signatures prove, given the box's
keys, threshold, the clock and the highest release applied. The signatures are real Ed25519 over the
real RFC 8785 bytes (``adapters.signatures``, the agent's own path: ``agent.apply.trust.tally``)."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from monky_deployd.adapters import signatures
from monky_deployd.agent.apply.trust import tally
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.signing import trust
from monky_deployd.core.signing.trustcfg import TrustCfg, keyid

ENV, REV = "env-dev-08", "r42"
NOW = 1_780_000_000.0  # 2026-05-28
FUTURE = "2027-01-15T00:00:00Z"
PAST = "2026-01-01T00:00:00+01:00"

KEYS = [Ed25519PrivateKey.from_private_bytes(bytes([i]) * 32) for i in range(1, 4)]
PUBS = [signatures.public_raw(k) for k in KEYS]
B64 = [base64.b64encode(p).decode() for p in PUBS]


def bundle(version: int = 5, expires: str = FUTURE, **extra: Any) -> dict[str, Any]:
    return {
        "project": "shop",
        "compose": "services:\n  web:\n    image: harbor.example.net/env-dev-08/web:1.4\n",
        "env_template": "DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=info\n",
        "manifest": [{"name": "DB_PASSWORD", "path": "envs/env-dev-08/app", "key": "db"}],
        "registry_host": "harbor.example.net",
        "release": {"version": version, "expires": expires},
        **extra,
    }


def signed(raw: dict[str, Any], *keys: Ed25519PrivateKey, env: str = ENV, rev: str = REV) -> Any:
    message = rfc8785.dumps(trust.payload(env, rev, raw))
    sigs = [
        {
            "keyid": keyid(signatures.public_raw(k)),
            "sig": base64.b64encode(k.sign(message)).decode(),
        }
        for k in keys
    ]
    return {**raw, "signatures": [*raw.get("signatures", []), *sigs]}


def judge(
    raw: dict[str, Any],
    rule: TrustCfg,
    *,
    now: float = NOW,
    floor: trust.Floor | None = None,
    rev: str = REV,
) -> trust.Verdict:
    valid, notes = tally(ENV, rev, raw, rule.trusted)
    return trust.judge(
        revision=rev, rule=rule, bundle=raw, valid=valid, notes=notes, now=now, floor=floor
    )


def refused(raw: dict[str, Any], rule: TrustCfg, **kw: Any) -> DeployError:
    with pytest.raises(DeployError) as caught:
        judge(raw, rule, **kw)
    return caught.value


ONE = TrustCfg(keys=[B64[0]])


def test_a_bundle_signed_by_a_trusted_key_is_verified() -> None:
    verdict = judge(signed(bundle(), KEYS[0]), ONE)
    assert isinstance(verdict, trust.Verified)
    assert verdict.release.version == 5 and verdict.keyids == (keyid(PUBS[0]),)


def test_a_signature_by_an_unknown_key_does_not_count() -> None:
    err = refused(signed(bundle(), KEYS[1]), ONE)
    assert err.code is Code.BUNDLE_UNTRUSTED and err.outcome == "refused"
    assert "not a key in trust.keys" in err.detail


def test_an_unsigned_bundle_is_refused_once_a_key_is_set_and_accepted_without_keys() -> None:
    assert refused(bundle(), ONE).code is Code.BUNDLE_UNTRUSTED
    assert refused({**bundle(), "signatures": []}, ONE).code is Code.BUNDLE_UNTRUSTED
    assert isinstance(judge(bundle(), TrustCfg()), trust.Unverified)  # the default
    migrating = TrustCfg(keys=[B64[0]], accept_unsigned=True)
    assert isinstance(judge(bundle(), migrating), trust.Unverified)
    # accepting unsigned bundles does not accept a bad signature
    assert refused(signed(bundle(), KEYS[1]), migrating).code is Code.BUNDLE_UNTRUSTED
    assert isinstance(judge(signed(bundle(), KEYS[0]), migrating), trust.Verified)


def test_the_threshold_counts_distinct_trusted_keys() -> None:
    two = TrustCfg(keys=B64, threshold=2)
    assert refused(signed(bundle(), KEYS[0]), two).code is Code.BUNDLE_UNTRUSTED
    twice = signed(signed(bundle(), KEYS[0]), KEYS[0])  # the same key twice counts once
    assert refused(twice, two).code is Code.BUNDLE_UNTRUSTED
    assert isinstance(judge(signed(bundle(), KEYS[0], KEYS[2]), two), trust.Verified)


def test_rotation_two_keys_at_once_threshold_one_has_no_gap() -> None:
    """Old key A, new key B: the box trusts both while the pipeline switches from A to B."""
    old, new = TrustCfg(keys=[B64[0]]), TrustCfg(keys=[B64[1]])
    both = TrustCfg(keys=[B64[0], B64[1]], threshold=1)
    by_old, by_new = signed(bundle(), KEYS[0]), signed(bundle(), KEYS[1])
    for rule, raw in ((old, by_old), (both, by_old), (both, by_new), (new, by_new)):
        assert isinstance(judge(raw, rule), trust.Verified)
    assert refused(by_new, old).code is Code.BUNDLE_UNTRUSTED
    assert refused(by_old, new).code is Code.BUNDLE_UNTRUSTED


def test_a_signature_for_another_env_or_revision_does_not_verify() -> None:
    assert refused(signed(bundle(), KEYS[0], env="env-prod-01"), ONE).code is (
        Code.BUNDLE_UNTRUSTED
    )
    assert refused(signed(bundle(), KEYS[0], rev="r41"), ONE).code is Code.BUNDLE_UNTRUSTED


def test_an_expired_release_is_refused() -> None:
    err = refused(signed(bundle(expires=PAST), KEYS[0]), ONE)
    assert err.code is Code.BUNDLE_EXPIRED and PAST in err.message
    at = trust.parse_time(FUTURE)
    assert at is not None
    assert refused(signed(bundle(), KEYS[0]), ONE, now=at).code is Code.BUNDLE_EXPIRED
    assert isinstance(judge(signed(bundle(), KEYS[0]), ONE, now=at - 1), trust.Verified)


@given(highest=st.integers(1, 10**6), version=st.integers(1, 10**6), same=st.booleans())
def test_a_release_older_than_the_highest_applied_is_a_replay(
    highest: int, version: int, same: bool
) -> None:
    floor = trust.Floor(highest, REV if same else "r40")
    raw = signed(bundle(version=version), KEYS[0])
    if version > highest or (version == highest and same):
        assert isinstance(judge(raw, ONE, floor=floor), trust.Verified)
    else:
        err = refused(raw, ONE, floor=floor)
        assert err.code is Code.BUNDLE_REPLAYED and str(highest) in err.message


def test_a_signed_bundle_without_a_release_is_malformed() -> None:
    raw = signed({k: v for k, v in bundle().items() if k != "release"}, KEYS[0])
    assert refused(raw, ONE).code is Code.BUNDLE_INVALID


@pytest.mark.parametrize(
    "release",
    [
        "7",
        {"version": 0, "expires": FUTURE},
        {"version": True, "expires": FUTURE},
        {"version": 3, "expires": "tomorrow"},
        {"version": 3, "expires": "2027-01-15T00:00:00"},  # no offset
        {"version": 3, "expires": FUTURE, "extra": 1},
    ],
)
def test_a_malformed_release_is_refused(release: object) -> None:
    raw = signed({**bundle(), "release": release}, KEYS[0])
    assert refused(raw, ONE).code is Code.BUNDLE_INVALID


# -- one byte changed anywhere --------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a leaf (and to each container) of ``value``."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _changed(value: Any, pick: int) -> Any:
    """``value`` with one small change: a text's character, a number, a boolean, a key."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        if not value:
            return "x"
        i = pick % len(value)
        return value[:i] + chr((ord(value[i]) + 1) % 0xD800 or 1) + value[i + 1 :]
    if value is None:
        return 0
    if isinstance(value, dict):
        return {**value, "~": 1}
    return [*value, 0]


@settings(max_examples=60, deadline=None)
@given(extra=JSON, pick=st.integers(0, 10**6), which=st.integers(0, 10**6))
def test_one_change_anywhere_in_a_signed_bundle_breaks_its_signature(
    extra: Any, pick: int, which: int
) -> None:
    raw = signed(bundle(notes=extra), KEYS[0])
    body = {k: v for k, v in raw.items() if k != "signatures"}
    paths = [p for p in _paths(body) if p]
    path = paths[which % len(paths)]
    tampered = copy.deepcopy(body)
    parent = tampered
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = _changed(parent[path[-1]], pick)
    try:
        if rfc8785.dumps(tampered) == rfc8785.dumps(body):  # no change after all (0 -> 1.0?)
            return
    except ValueError:  # 2**53 - 1 + 1: beyond JCS's integers, refused all the same (below)
        pass
    with pytest.raises(DeployError) as caught:
        judge({**tampered, "signatures": raw["signatures"]}, ONE)
    assert caught.value.code in (Code.BUNDLE_UNTRUSTED, Code.BUNDLE_INVALID, Code.BUNDLE_EXPIRED)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_one_byte_changed_in_the_compose_text_is_untrusted(data: st.DataObject) -> None:
    raw = signed(bundle(), KEYS[0])
    text = raw["compose"].encode()
    i = data.draw(st.integers(0, len(text) - 1))
    b = data.draw(st.integers(0, 127).filter(lambda b: b != text[i]))
    changed = (text[:i] + bytes([b]) + text[i + 1 :]).decode()
    assert refused({**raw, "compose": changed}, ONE).code is Code.BUNDLE_UNTRUSTED


@settings(max_examples=40, deadline=None)
@given(garbage=JSON)
def test_malformed_signatures_never_count(garbage: Any) -> None:
    raw = {**bundle(), "signatures": garbage}
    if garbage == [] or "signatures" not in raw:
        return
    with pytest.raises(DeployError) as caught:
        judge(raw, ONE)
    assert caught.value.code is Code.BUNDLE_UNTRUSTED


# -- RFC 8785 -----------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(value=JSON)
def test_canonical_bytes_are_the_library_s_and_independent_of_key_order(value: Any) -> None:
    assert signatures.canonical(value) == rfc8785.dumps(value)
    reparsed = json.loads(json.dumps(value, sort_keys=False, indent=1))
    if isinstance(value, dict):
        reordered = dict(reversed(list(value.items())))
        assert signatures.canonical(reordered) == signatures.canonical(value)
    assert signatures.canonical(reparsed) == signatures.canonical(value)


def test_canonical_form_matches_rfc_8785_s_rules() -> None:
    assert signatures.canonical({"b": [1, "é"], "a": {"d": None, "c": True}}) == (
        '{"a":{"c":true,"d":null},"b":[1,"é"]}'.encode()
    )
    with pytest.raises(ValueError):
        signatures.canonical({"n": 2**60})  # beyond JSON's safe integers


# -- the floor record -----------------------------------------------------------------------------


@given(versions=st.lists(st.integers(1, 100), min_size=1, max_size=30))
def test_the_floor_only_rises_and_keeps_the_newest_releases(versions: list[int]) -> None:
    floor: trust.Floor | None = None
    for i, v in enumerate(versions):
        floor = trust.after_apply(floor, f"r{i}", trust.Release(v, 0.0, FUTURE))
        floor = trust.Floor.from_json(floor.to_json())
    assert floor is not None
    assert floor.version == max(versions)
    last_max = len(versions) - 1 - versions[::-1].index(max(versions))
    assert floor.revision == f"r{last_max}"
    assert len(floor.releases) == min(len(versions), trust.RELEASES_KEPT)
    assert floor.expires_of(f"r{len(versions) - 1}") == (versions[-1], FUTURE)


@pytest.mark.parametrize("raw", [b"", b"{}", b'{"highest": 3}', b"[1]", b"\xff"])
def test_an_unreadable_floor_record_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        trust.Floor.from_json(raw)


# -- the settings ---------------------------------------------------------------------------------


def test_trust_settings_refuse_what_could_never_apply() -> None:
    with pytest.raises(ValueError, match="threshold"):
        TrustCfg(keys=[B64[0]], threshold=2)
    with pytest.raises(ValueError, match="threshold"):
        TrustCfg(keys=[B64[0], B64[0]], threshold=2)  # one key twice
    with pytest.raises(ValueError, match="accept_unsigned"):
        TrustCfg(accept_unsigned=False)
    with pytest.raises(ValueError, match="not 32"):
        TrustCfg(keys=[base64.b64encode(b"x" * 31).decode()])
    with pytest.raises(ValueError, match="base64"):
        TrustCfg(keys=["not base64!"])
    assert TrustCfg().unsigned_ok and not TrustCfg(keys=[B64[0]]).unsigned_ok


@settings(max_examples=60, deadline=None)
@given(garbage=JSON | st.fixed_dictionaries({"version": JSON, "expires": JSON | st.text()}))
def test_any_release_value_is_read_or_refused_as_malformed(garbage: Any) -> None:
    try:
        got = trust.release(REV, {"release": garbage})
    except DeployError as err:
        assert err.code is Code.BUNDLE_INVALID and "at 'release" in err.message
    else:
        assert garbage is None or (got is not None and got.version >= 1)


def test_an_integer_beyond_jcs_in_a_tampered_bundle_is_refused_with_a_code() -> None:
    """2**53 - 1 signed, 2**53 received: JCS cannot write it; refused, not a crash."""
    raw = signed(bundle(notes=[2**53 - 1]), KEYS[0])
    tampered = {**raw, "notes": [2**53]}
    with pytest.raises(DeployError) as caught:
        judge(tampered, ONE)
    assert caught.value.code in (Code.BUNDLE_UNTRUSTED, Code.BUNDLE_INVALID)
