"""Signed bundles (contract v1.3): what a bundle's signatures prove. Pure: no I/O, no clock.

The release pipeline signs ``{"env", "revision", "bundle"}`` (the bundle without its
``signatures``) in RFC 8785 canonical form with Ed25519 release keys; the box trusts the keys
and the threshold of its config (``core.signing.trustcfg``). ``agent.apply.trust`` canonicalizes
and checks each signature (``adapters.signatures``); this module decides, before any secret is read:

    unsigned (no signatures, or [])      applied when trust.accept_unsigned allows (the default
                                         while no key is set), else BUNDLE_UNTRUSTED
    no trust.keys                        applied unchecked (signatures are not looked at)
    fewer distinct trusted keys whose    BUNDLE_UNTRUSTED, naming why each signature did not
    signature verifies than threshold    count (no trusted key with that id, bad signature, ...)
    no or malformed ``release``          BUNDLE_INVALID (a signed bundle says its version and
                                         expiry: without them it could be replayed forever)
    ``release.expires`` passed           BUNDLE_EXPIRED
    ``release.version`` below the        BUNDLE_REPLAYED (also the highest version itself under
    highest this box applied             another revision: a version is never reused)

The highest applied version is ``trust.json`` (``Floor``), written after each verified apply's
commit. The agent's own rollback to its last-known-good runs from the box's own records and
is never judged here, so it is never refused.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.signing.trustcfg import TrustCfg

KEYID_RE = re.compile(r"^[0-9a-f]{64}$")
RFC3339_RE = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", re.ASCII)
SIG_BYTES = 64
RELEASES_KEPT = 16  # trust.json keeps the newest releases' versions and expiries (status)
HINT = (
    "the signatures the release pipeline attached (`monky-deployd bundle verify`) and this "
    "box's trust.keys, trust.threshold and trust.accept_unsigned in config.yaml"
)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Release:
    version: int
    expires: float
    expires_text: str


@dataclass(frozen=True)
class Verified:
    """The signatures meet the threshold; the release is fresh and not older than applied."""

    release: Release
    keyids: tuple[str, ...]


@dataclass(frozen=True)
class Unverified:
    """Applied without a signature check: ``why`` (no key configured, or unsigned allowed)."""

    why: str


Verdict = Verified | Unverified


def payload(env: str, revision: str, bundle: Mapping[str, Any]) -> dict[str, Any]:
    """The object the release key signs: the bundle without its ``signatures``."""
    body = {k: v for k, v in bundle.items() if k != "signatures"}
    return {"env": env, "revision": revision, "bundle": body}


def is_unsigned(bundle: Mapping[str, Any]) -> bool:
    return "signatures" not in bundle or bundle["signatures"] == []


def signatures(bundle: Mapping[str, Any]) -> tuple[list[Signature], list[str]]:
    """The bundle's well-formed signatures, and a note for each malformed one."""
    raw = bundle.get("signatures", [])
    if not isinstance(raw, list):
        return [], [f"'signatures' is a {type(raw).__name__}, not a list"]
    found: list[Signature] = []
    notes: list[str] = []
    for i, item in enumerate(raw):
        keyid = item.get("keyid") if isinstance(item, dict) else None
        text = item.get("sig") if isinstance(item, dict) else None
        if not isinstance(keyid, str) or not KEYID_RE.fullmatch(keyid):
            notes.append(f"signature {i}: keyid is not 64 lowercase hex digits")
            continue
        try:
            sig = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
        except (binascii.Error, ValueError):
            sig = b""
        if len(sig) != SIG_BYTES:
            notes.append(f"signature {i} (key {keyid[:12]}): sig is not a base64 Ed25519 signature")
            continue
        found.append(Signature(keyid, sig))
    return found, notes


def tally(
    found: list[Signature], trusted: Mapping[str, bytes], check: Callable[[bytes, bytes], bool]
) -> tuple[frozenset[str], list[str]]:
    """The distinct trusted keys whose signature ``check(public_key, sig)`` accepts, and why
    each other signature did not count."""
    valid: set[str] = set()
    notes: list[str] = []
    for s in found:
        public = trusted.get(s.keyid)
        if public is None:
            notes.append(f"signature by key {s.keyid[:12]}: not a key in trust.keys")
        elif not check(public, s.sig):
            notes.append(
                f"signature by key {s.keyid[:12]}: does not verify (the bundle, env or "
                "revision differs from what the key signed)"
            )
        else:
            valid.add(s.keyid)
    return frozenset(valid), notes


def release(revision: str, bundle: Mapping[str, Any]) -> Release | None:
    """The bundle's ``release``; None when absent; BUNDLE_INVALID when malformed."""
    raw = bundle.get("release")
    if raw is None:
        return None
    problems = []
    version = raw.get("version") if isinstance(raw, dict) else None
    expires = raw.get("expires") if isinstance(raw, dict) else None
    if not isinstance(raw, dict):
        problems.append("at 'release': must be a mapping with version and expires")
    else:
        for key in sorted(set(raw) - {"version", "expires"}):
            problems.append(f"at 'release.{key}': unknown key")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            problems.append("at 'release.version': must be an integer >= 1")
    when = parse_time(expires) if isinstance(expires, str) else None
    if isinstance(raw, dict) and when is None:
        problems.append("at 'release.expires': must be an RFC 3339 time with its offset")
    if problems or when is None or not isinstance(version, int):
        raise DeployError(
            f"the bundle for revision {revision!r} is malformed, nothing was changed:\n"
            + "\n".join(problems),
            code=Code.BUNDLE_INVALID,
            hint="the bundle published to tenancy for this environment",
        )
    assert isinstance(expires, str)
    return Release(version, when, expires)


def parse_time(text: str) -> float | None:
    """An RFC 3339 time (with ``Z`` or an offset) as seconds since the epoch, else None."""
    if not RFC3339_RE.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text.upper().replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        return None


@dataclass(frozen=True)
class Floor:
    """``trust.json``: the highest release version this box applied (and under which revision),
    and the newest verified releases' versions and expiries, oldest first."""

    version: int
    revision: str
    releases: tuple[tuple[str, int, str], ...] = ()  # (revision, version, expires)

    def to_json(self) -> bytes:
        body = {
            "highest": {"version": self.version, "revision": self.revision},
            "releases": [{"revision": r, "version": v, "expires": e} for r, v, e in self.releases],
        }
        return json.dumps(body, indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Floor:
        try:
            data = json.loads(raw)
            high = data["highest"]
            version, revision = high["version"], high["revision"]
            rows = tuple((r["revision"], r["version"], r["expires"]) for r in data["releases"])
        except (ValueError, RecursionError, TypeError, KeyError):
            raise ValueError("not a trust record") from None
        ok = isinstance(version, int) and isinstance(revision, str)
        if not ok or not all(
            isinstance(r, str) and isinstance(v, int) and isinstance(e, str) for r, v, e in rows
        ):
            raise ValueError("not a trust record")
        return Floor(version, revision, rows)

    def expires_of(self, revision: str) -> tuple[int, str] | None:
        """The version and expiry of ``revision`` when it was applied verified."""
        for r, v, e in reversed(self.releases):
            if r == revision:
                return v, e
        return None


def after_apply(floor: Floor | None, revision: str, rel: Release) -> Floor:
    """The record after ``revision`` (verified, ``rel``) was committed."""
    rows = tuple(row for row in (floor.releases if floor else ()) if row[0] != revision)
    rows = (*rows, (revision, rel.version, rel.expires_text))[-RELEASES_KEPT:]
    if floor is not None and floor.version > rel.version:
        return Floor(floor.version, floor.revision, rows)
    return Floor(rel.version, revision, rows)


def judge(
    *,
    revision: str,
    rule: TrustCfg,
    bundle: Mapping[str, Any],
    valid: frozenset[str],
    notes: list[str],
    now: float,
    floor: Floor | None,
) -> Verdict:
    """Whether ``bundle`` may be applied (see the module's table); raises the refusal."""
    rel = release(revision, bundle)
    if is_unsigned(bundle):
        if rule.unsigned_ok:
            return Unverified("the bundle is unsigned and trust.accept_unsigned allows it")
        raise DeployError(
            f"revision {revision!r} is unsigned and this box applies only bundles signed by "
            f"{rule.threshold} of its {len(rule.trusted)} trusted release key(s); "
            "nothing was changed",
            code=Code.BUNDLE_UNTRUSTED,
            hint=HINT,
        )
    if not rule.keys:
        return Unverified("no trust.keys configured: signatures not checked")
    if len(valid) < rule.threshold:
        raise DeployError(
            f"revision {revision!r} is signed by {len(valid)} trusted release key(s), "
            f"fewer than trust.threshold {rule.threshold}; nothing was changed",
            code=Code.BUNDLE_UNTRUSTED,
            hint=HINT,
            detail="\n".join(notes),
        )
    if rel is None:
        raise DeployError(
            f"the bundle for revision {revision!r} is malformed, nothing was changed:\n"
            "at 'release': a signed bundle must carry its version and expiry",
            code=Code.BUNDLE_INVALID,
            hint="the release pipeline's `release` object (contract v1.3)",
        )
    if now >= rel.expires:
        raise DeployError(
            f"revision {revision!r}'s signatures expired at {rel.expires_text} (release "
            f"{rel.version}); nothing was changed",
            code=Code.BUNDLE_EXPIRED,
            hint="publish a freshly signed release; and that this box's clock is right "
            "(`timedatectl`)",
        )
    if floor is not None and (
        rel.version < floor.version or (rel.version == floor.version and revision != floor.revision)
    ):
        raise DeployError(
            f"revision {revision!r} is release {rel.version}, but this box already applied "
            f"release {floor.version} ({floor.revision}): an older release is not applied "
            "again; nothing was changed",
            code=Code.BUNDLE_REPLAYED,
            hint="tenancy's desired revision for this environment (an old release sent "
            "again); a fix is a new release with a higher version",
        )
    return Verified(rel, tuple(sorted(valid)))
