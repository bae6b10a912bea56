"""core.records.applied: applied.json, token.json and host.json as the hand-rolled writers wrote
them.

A box upgrades in place: a file the previous writer left must load unchanged, and the models must
write the same bytes (indentation, key order, trailing newline). ``Legacy*`` below are the
removed writers and readers, verbatim but renamed: the reference. An unusable record fails with
the reason the old reader gave, never a value from the file."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.records.applied import (
    Applied,
    HostFacts,
    ServiceLabel,
    Stored,
    TokenState,
    host_facts_from_json,
    host_facts_to_json,
)

SECRET = "hvs.SECRET-token-value"

# -- the removed writers and readers -----------------------------------------------------------


@dataclass(frozen=True)
class LegacyApplied:  # adapters/box/state/state.py
    revision: str
    project: str
    services: list[str] = field(default_factory=list)
    applied_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()


@dataclass(frozen=True)
class LegacyStored:  # agent/token.py Stored
    kind: str
    token: str
    obtained_at: float
    expires_at: float
    renewable: bool
    lease_id: str = ""
    issued_ttl_s: int = 0
    grant_jti: str = ""


@dataclass(frozen=True)
class LegacyTokenState:  # agent/token.py TokenState (STATE_VERSION = 1)
    env: str
    token: LegacyStored | None = None
    lease_not_before: float | None = None

    def to_json(self) -> bytes:
        tok = None
        if self.token is not None:
            t = self.token
            tok = {
                "kind": t.kind,
                "token": t.token,
                "obtained_at": t.obtained_at,
                "expires_at": t.expires_at,
                "renewable": t.renewable,
                "lease_id": t.lease_id,
                "issued_ttl_s": t.issued_ttl_s,
                "grant_jti": t.grant_jti,
            }
        body = {
            "version": 1,
            "env": self.env,
            "token": tok,
            "lease_not_before": self.lease_not_before,
        }
        return (json.dumps(body, indent=1) + "\n").encode()

    @staticmethod
    def from_json(raw: bytes) -> LegacyTokenState:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError("not JSON (torn or truncated)") from exc
        if not isinstance(data, dict) or data.get("version") != 1:
            raise ValueError("not a version-1 token record")
        tok = data.get("token")
        stored = None
        try:
            if tok is not None:
                if tok["kind"] not in ("lease", "bootstrap") or not tok["token"]:
                    raise ValueError("unknown token kind or empty token")
                stored = LegacyStored(
                    kind=tok["kind"],
                    token=str(tok["token"]),
                    obtained_at=float(tok["obtained_at"]),
                    expires_at=float(tok["expires_at"]),
                    renewable=bool(tok["renewable"]),
                    lease_id=str(tok.get("lease_id", "")),
                    issued_ttl_s=int(tok.get("issued_ttl_s", 0)),
                    grant_jti=str(tok.get("grant_jti", "")),
                )
            nb = data.get("lease_not_before")
            return LegacyTokenState(
                env=str(data["env"]),
                token=stored,
                lease_not_before=float(nb) if nb is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a field is missing or mistyped ({type(exc).__name__})") from None


def legacy(state: TokenState) -> LegacyTokenState:
    tok = state.token
    return LegacyTokenState(
        state.env, LegacyStored(**asdict(tok)) if tok is not None else None, state.lease_not_before
    )


def legacy_token_reason(raw: bytes) -> str | None:
    try:
        LegacyTokenState.from_json(raw)
    except ValueError as exc:
        return str(exc)
    return None


def legacy_host_json(facts: dict[str, str]) -> bytes:  # agent/apply/steps.py refresh_host_facts
    return json.dumps(facts).encode()


# -- generated records -------------------------------------------------------------------------

text = st.text(max_size=30)
seconds = st.floats(allow_nan=False, allow_infinity=False)
stored = st.builds(
    Stored,
    kind=st.sampled_from(["lease", "bootstrap"]),
    token=st.text(min_size=1, max_size=40),
    obtained_at=seconds,
    expires_at=seconds,
    renewable=st.booleans(),
    lease_id=text,
    issued_ttl_s=st.integers(0, 10**7),
    grant_jti=text,
)
token_states = st.builds(
    TokenState, env=text, token=st.none() | stored, lease_not_before=st.none() | seconds
)


# -- applied.json ------------------------------------------------------------------------------


@given(revision=text, project=text, services=st.lists(text, max_size=5), applied_at=text)
def test_applied_writes_the_old_bytes_and_loads_them_unchanged(
    revision: str, project: str, services: list[str], applied_at: str
) -> None:
    old = LegacyApplied(revision, project, services, applied_at).to_json()
    new = Applied(revision, project, services, applied_at)
    assert new.to_json() == old
    assert Applied.from_json(old) == new


def test_applied_without_optional_fields_and_unreadable_records() -> None:
    assert Applied.from_json(b'{"revision": "r1", "project": "shop"}') == Applied("r1", "shop")
    for raw in (b"", b'{"revision": "r1", "proj', b"[]", b'{"revision": "r1"}',
                b'{"revision": "r1", "project": "p", "services": "web"}', b"\xff\xfe"):  # fmt: skip
        with pytest.raises(ValueError):
            Applied.from_json(raw)


# -- token.json --------------------------------------------------------------------------------


@given(state=token_states)
def test_token_record_writes_the_old_bytes_and_loads_them_unchanged(state: TokenState) -> None:
    old = legacy(state).to_json()
    assert state.to_json() == old
    assert TokenState.from_json(old) == state
    assert legacy(TokenState.from_json(old)) == LegacyTokenState.from_json(old)


def test_token_record_from_before_issued_ttl_and_grant_jti_loads() -> None:
    raw = json.dumps(
        {
            "version": 1,
            "env": "e",
            "lease_not_before": None,
            "token": {
                "kind": "lease",
                "token": SECRET,
                "obtained_at": 1.0,
                "expires_at": 2.0,
                "renewable": True,
                "lease_id": "lse_1",
            },
        }
    ).encode()
    st = TokenState.from_json(raw)
    assert st.token == Stored("lease", SECRET, 1.0, 2.0, True, "lse_1", 0, "")


def _corruptions() -> list[bytes]:
    good = TokenState("e", Stored("lease", SECRET, 1.0, 2.0, True, "lse_1", 3600, "j"), 5.0)
    raw = good.to_json()
    body: dict[str, Any] = json.loads(raw)

    def with_token(**kw: Any) -> bytes:
        return json.dumps(dict(body, token=dict(body["token"], **kw))).encode()

    def without(key: str) -> bytes:
        tok = {k: v for k, v in body["token"].items() if k != key}
        return json.dumps(dict(body, token=tok)).encode()

    out = [raw[:cut] for cut in (0, 1, len(raw) // 2, len(raw) - 3)]
    out += [b"[]", b'"x"', b"\xff", json.dumps(dict(body, version=2)).encode()]
    out += [json.dumps({k: v for k, v in body.items() if k != "env"}).encode()]
    out += [json.dumps(dict(body, token=[SECRET])).encode()]
    out += [json.dumps(dict(body, token=SECRET)).encode()]
    out += [json.dumps(dict(body, lease_not_before=SECRET)).encode()]
    out += [json.dumps(dict(body, lease_not_before=[1])).encode()]
    out += [with_token(kind="weird"), with_token(token=""), with_token(obtained_at=SECRET)]
    out += [with_token(obtained_at=None), with_token(expires_at=[SECRET])]
    out += [with_token(issued_ttl_s=SECRET), with_token(issued_ttl_s=None)]
    out += [without(k) for k in ("kind", "token", "obtained_at", "expires_at", "renewable")]
    return out


@pytest.mark.parametrize("raw", _corruptions())
def test_an_unusable_token_record_fails_with_the_old_reason_and_no_value(raw: bytes) -> None:
    with pytest.raises(ValueError) as info:
        TokenState.from_json(raw)
    assert str(info.value) == legacy_token_reason(raw)
    seen: BaseException | None = info.value
    while seen is not None:  # nothing in the chain carries the content
        assert SECRET not in str(seen)
        assert "SECRET" not in str(seen)
        seen = seen.__cause__ or seen.__context__


def test_the_token_is_never_in_a_repr() -> None:
    st = TokenState("e", Stored("bootstrap", SECRET, 1.0, 2.0, False), None)
    assert SECRET not in repr(st) and SECRET not in str(st)


# -- host.json ---------------------------------------------------------------------------------


@given(hostname=text, docker=text, compose=text)
def test_host_facts_write_the_old_bytes_and_load_them_unchanged(
    hostname: str, docker: str, compose: str
) -> None:
    old = legacy_host_json({"hostname": hostname, "docker": docker, "compose": compose})
    facts = HostFacts(hostname=hostname, docker=docker, compose=compose)
    assert host_facts_to_json(facts) == old
    assert host_facts_from_json(old) == facts


def test_unreadable_host_facts_are_none_so_the_agent_refreshes_them() -> None:
    for raw in (b"", b"{", b"[]", b'"h"', b'{"hostname": "h"}', b'{"hostname": 1, "docker": "",'
                b' "compose": ""}', b"\xff"):  # fmt: skip
        assert host_facts_from_json(raw) is None


def test_an_applied_record_keeps_its_reasons_and_fingerprint_and_old_files_still_load() -> None:
    old = b'{\n  "applied_at": "t",\n  "project": "shop",\n  "revision": "r1",\n  "services": []\n}'
    loaded = Applied.from_json(old)
    assert loaded.reasons == [] and loaded.env_hashes == {} and loaded.to_json() == old
    full = Applied(
        "r2",
        "shop",
        ["web"],
        "t",
        [{"kind": "REVISION", "detail": "r1 -> r2"}],
        "tick1",
        "c" * 64,
        {"A": "h" * 64},
        {"S": "s" * 64},
        {"web": ServiceLabel("w" * 64, "r1", "tick0")},
    )
    assert Applied.from_json(full.to_json()) == full
    assert json.loads(full.to_json())["service_labels"]["web"] == {
        "config_hash": "w" * 64,
        "revision": "r1",
        "deploy_id": "tick0",
    }
    assert loaded.service_labels == {}
