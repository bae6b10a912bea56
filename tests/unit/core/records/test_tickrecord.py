"""core.records.tickrecord.masked: the report's free text is masked, its identifiers are sent as
they are."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.errors import Code
from monky_deployd.core.records import tickrecord as report
from monky_deployd.core.records.reasons import Reason
from monky_deployd.core.records.tickrecord import PhaseTiming, TickRecord
from monky_deployd.core.render.mask import MIN_RUN, Masker
from monky_deployd.core.wire.report import RollbackRow

NAME_CHARS = st.characters(codec="ascii", categories=("L", "N"), include_characters="-._")
REVISIONS = st.text(NAME_CHARS, min_size=MIN_RUN, max_size=30)
TICK_IDS = st.text(NAME_CHARS, min_size=MIN_RUN, max_size=30)
AROUND = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


def record(revision: str, tick_id: str, code: Code, secret: str) -> TickRecord:
    return TickRecord(
        tick_id=tick_id,
        started_at=1_700_000_000.0,
        outcome="failed",
        code=code,
        message=f"service web exited 1: {secret}",
        detail=f"health output: {secret}",
        revision=revision,
        phases=[PhaseTiming("pull", True, 12), PhaseTiming("verify", False, 2000)],
        services=[
            {
                "name": "web",
                "state": f"exited ({secret})",
                "health": f"unhealthy {secret}",
                "image": secret,
            }
        ],
        finished_at=1_700_000_001.0,
        rollback=RollbackRow(to_revision=revision + "-lkg", ok=True),
        reasons=[Reason("REVISION", f"{revision}-lkg -> {revision}")],
    )


@given(REVISIONS, TICK_IDS, st.sampled_from(list(Code)), AROUND, AROUND, st.sampled_from("rtc"))
def test_identifiers_are_sent_as_they_are_when_a_secret_holds_them(
    revision: str, tick_id: str, code: Code, before: str, after: str, holds: str
) -> None:
    """A secret whose value contains the revision name, the tick id or the code: before, the
    report went out with ``"revision": "***"`` (or tick_id, code), which tenancy cannot match."""
    inside = {"r": revision, "t": tick_id, "c": code.value}[holds]
    secret = before + inside + after
    rec = record(revision, tick_id, code, secret)
    plain = report.body(rec)
    body = report.masked(plain, Masker([secret]))
    # the identifiers, unchanged
    for key in ("tick_id", "revision", "outcome", "code", "phases", "agent", "reasons"):
        assert body[key] == plain[key], key
    assert body["started_at"] == plain["started_at"]
    assert body["rollback"] == {"to_revision": revision + "-lkg", "ok": True}
    assert body["services"][0]["name"] == "web"
    # the free text, masked: no run of 8 of the secret is left in it
    words = [
        body["message"],
        body["detail"],
        *(body["services"][0][k] for k in report.SERVICE_WORDS),
    ]
    for text in words:
        assert "***" in text
        assert not any(secret[i : i + MIN_RUN] in text for i in range(len(secret) - MIN_RUN + 1)), (
            text
        )
    assert json.loads(json.dumps(body)) == body


def test_masking_returns_a_copy_and_leaves_a_body_without_secrets_as_it_was() -> None:
    rec = record("r42-release", "tick-0001-abc", Code.VERIFY_UNHEALTHY, "nothing-secret-here")
    plain = report.body(rec)
    snapshot = json.dumps(plain)
    assert report.masked(plain, Masker()) == plain
    assert report.masked(plain, Masker(["nothing-secret-here"])) != plain
    assert json.dumps(plain) == snapshot
