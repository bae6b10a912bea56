"""Signed bundles (contract v1.3), performed: the first of an apply's checks, before any secret
is read. ``core.signing.trust`` decides from the signatures ``adapters.signatures`` verified,
this box's ``trust`` settings, the clock and ``trust.json`` (the highest release applied);
``record`` raises that floor after a verified apply's commit. Imported on the apply path only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from monky_deployd.core.records.tickrecord import rfc3339
from monky_deployd.core.signing import trust

if TYPE_CHECKING:
    from monky_deployd.adapters.box.state.state import StateDir
    from monky_deployd.agent.context import Context
    from monky_deployd.core.signing.trust import Floor
    from monky_deployd.core.signing.trustcfg import TrustCfg

log = logging.getLogger("monky_deployd")


def check(ctx: Context, revision: str, bundle: dict[str, Any]) -> trust.Verdict:
    """The bundle's verdict (``core.signing.trust.judge``); raises its refusal. Reads nothing but
    the state dir's trust record: no OpenBao, no engine."""
    rule = ctx.cfg.trust
    verdict, _ = judged(ctx.cfg.env, rule, revision, bundle, ctx.clock(), ctx.state.read_trust())
    if isinstance(verdict, trust.Verified):
        rel = verdict.release
        log.info(
            f"revision {revision} is release {rel.version}, signed by {len(verdict.keyids)} "
            f"trusted key(s) (threshold {rule.threshold}), valid until {rel.expires_text}",
            extra={
                "event": "trust.verified",
                "release": rel.version,
                "keyids": [k[:12] for k in verdict.keyids],
            },
        )
    elif rule.keys:  # unsigned, allowed by trust.accept_unsigned: say so every time
        log.warning(
            f"revision {revision} is unsigned: applied because trust.accept_unsigned is true",
            extra={"event": "trust.unsigned"},
        )
    return verdict


def judged(
    env: str,
    rule: TrustCfg,
    revision: str,
    bundle: dict[str, Any],
    now: float,
    floor: Floor | None,
) -> tuple[trust.Verdict, list[str]]:
    """The signatures tallied (when keys are trusted and the bundle is signed), then
    ``core.signing.trust.judge`` (which raises its refusal); and the tally's notes."""
    valid: frozenset[str] = frozenset()
    notes: list[str] = []
    if rule.keys and not trust.is_unsigned(bundle):
        valid, notes = tally(env, revision, bundle, rule.trusted)
    verdict = trust.judge(
        revision=revision, rule=rule, bundle=bundle, valid=valid, notes=notes, now=now, floor=floor
    )
    return verdict, notes


def tally(
    env: str, revision: str, bundle: dict[str, Any], trusted: dict[str, bytes]
) -> tuple[frozenset[str], list[str]]:
    """The trusted keys whose signature over the canonical payload verifies, and notes."""
    from monky_deployd.adapters import signatures

    found, notes = trust.signatures(bundle)
    try:
        message = signatures.canonical(trust.payload(env, revision, bundle))
    except ValueError as exc:  # JCS cannot represent it: nothing could have signed it
        return frozenset(), [*notes, f"the bundle cannot be canonicalized (RFC 8785): {exc}"]
    valid, more = trust.tally(found, trusted, lambda pub, sig: signatures.verify(pub, sig, message))
    return valid, notes + more


def record(state: StateDir, revision: str, verdict: trust.Verdict | None) -> None:
    """After a verified apply's commit: ``trust.json`` raised to its release (atomic, 0600)."""
    if not isinstance(verdict, trust.Verified):
        return
    state.write_trust(trust.after_apply(state.read_trust(), revision, verdict.release))


def running(state: StateDir, revision: str | None, now: float) -> dict[str, Any] | None:
    """``status``'s view: the highest release applied, and the running revision's release and
    whether its signatures have expired (None: no verified release was ever applied)."""
    floor = state.read_trust()
    if floor is None:
        return None
    found = floor.expires_of(revision) if revision is not None else None
    expires = trust.parse_time(found[1]) if found else None
    return {
        "highest_version": floor.version,
        "highest_revision": floor.revision,
        "running_version": found[0] if found else None,
        "running_expires": None if expires is None else rfc3339(expires, "seconds"),
        "running_expired": None if expires is None else now >= expires,
    }
