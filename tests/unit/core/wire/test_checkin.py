"""core.wire.checkin: the check-in and report bodies are byte for byte the hand-built ones they
replaced (boxes upgrade in place; tenancy must see the same JSON), and the answers parse as the
contract says. ``legacy_*`` below are the removed code, verbatim: the reference the models are held
to."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from monky_deployd import __version__
from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records import tickrecord as report
from monky_deployd.core.records.tickrecord import PhaseTiming, TickRecord, rfc3339
from monky_deployd.core.wire import answers
from monky_deployd.core.wire import checkin as wire

# -- the removed hand-built bodies -------------------------------------------------------------


def legacy_checkin(host: dict[str, str], applied_revision: str | None) -> dict[str, Any]:
    """agent/tick/tick.py ``_checkin`` before core.wire.checkin (``applied`` was an AppliedFacts or
    None)."""
    return {
        "agent": {"version": __version__},
        "host": host,
        "applied": {"revision": applied_revision, "outcome": "applied"}
        if applied_revision is not None
        else None,
    }


def legacy_report(rec: TickRecord) -> dict[str, Any]:
    """core/records/tickrecord.py ``body`` before core.wire.checkin."""
    return {
        "tick_id": rec.tick_id,
        "revision": rec.revision,
        "outcome": rec.outcome,
        "code": rec.code,
        "message": rec.message,
        "detail": rec.detail,
        "phases": [{"name": p.name, "ok": p.ok, "ms": p.ms} for p in rec.phases],
        "services": rec.services,
        "agent": {"version": __version__},
        "started_at": rfc3339(rec.started_at),
        "finished_at": rfc3339(rec.finished_at or rec.started_at),
    }


def on_the_wire(body: dict[str, Any]) -> bytes:
    """What ``Tenancy._post`` sends."""
    return json.dumps(body).encode()


# -- generated inputs --------------------------------------------------------------------------

text = st.text(max_size=40)
# in the order both of today's sources had: refresh_host_facts's dict and host.json's keys
host_facts = st.tuples(text, text, text).map(
    lambda t: {"hostname": t[0], "docker": t[1], "compose": t[2]}
)
OK: Literal["OK"] = "OK"
# a tick record carries a catalogue code, or "OK"
codes: st.SearchStrategy[Code | Literal["OK"]] = st.sampled_from(list(Code)) | st.just(OK)
timestamps = st.floats(min_value=0, max_value=4_000_000_000, allow_nan=False)
services = st.builds(ServiceState, text, text, text, text).map(ServiceState.as_report)
phases = st.builds(PhaseTiming, text, st.booleans(), st.integers(0, 10**9))


@st.composite
def tick_records(draw: st.DrawFn) -> TickRecord:
    return TickRecord(
        tick_id=draw(text),
        started_at=draw(timestamps),
        outcome=draw(st.sampled_from(["applied", "noop", "idle", "failed", "refused"]) | text),
        code=draw(codes),
        message=draw(text),
        detail=draw(st.text(max_size=600)),
        revision=draw(st.none() | text),
        phases=draw(st.lists(phases, max_size=12)),
        services=draw(st.lists(services, max_size=6)),
        finished_at=draw(st.none() | timestamps),
    )


# -- requests: byte-identical ------------------------------------------------------------------


@given(host=host_facts, applied=st.none() | text)
def test_checkin_body_is_byte_identical_to_the_hand_built_one(
    host: dict[str, str], applied: str | None
) -> None:
    request = wire.CheckinRequest.of(wire.HostFacts(**host), applied)
    assert on_the_wire(request.body()) == on_the_wire(legacy_checkin(host, applied))


@given(rec=tick_records())
def test_report_body_is_byte_identical_to_the_hand_built_one(rec: TickRecord) -> None:
    assert on_the_wire(report.body(rec)) == on_the_wire(legacy_report(rec))


def test_the_documented_examples_serialise_as_the_contract_shows() -> None:
    """contract.md's check-in request, key for key and in order."""
    host = wire.HostFacts(hostname="env-dev-08", docker="29.0.1", compose="2.40.0")
    body = wire.CheckinRequest.of(host, "r41").body()
    assert list(body) == ["agent", "host", "applied"]
    assert body["host"] == {"hostname": "env-dev-08", "docker": "29.0.1", "compose": "2.40.0"}
    assert body["applied"] == {"revision": "r41", "outcome": "applied"}
    assert wire.CheckinRequest.of(host, None).body()["applied"] is None
    rec = TickRecord(tick_id="t", started_at=0.0, outcome="applied", revision="r42")
    assert list(report.body(rec)) == [
        "tick_id", "revision", "outcome", "code", "message", "detail", "phases", "services",
        "agent", "started_at", "finished_at",
    ]  # fmt: skip


# -- answers ----------------------------------------------------------------------------------

LEASE = {"id": "lse_1", "token": "hvs.SECRET", "accessor": "acc", "ttl_s": 86400, "renewable": True}


def test_lease_answer_parses_and_hides_its_token() -> None:
    lease = answers.LeaseAnswer.model_validate({"lease": LEASE, "extra": 1}).lease
    assert (lease.id, lease.token, lease.accessor, lease.ttl_s, lease.renewable) == (
        "lse_1", "hvs.SECRET", "acc", 86400, True,
    )  # fmt: skip
    assert "hvs.SECRET" not in repr(lease) and "hvs.SECRET" not in str(lease)
    minimal = answers.LeaseAnswer.model_validate(
        {"lease": {"id": "lse_2", "token": "t", "ttl_s": "60"}}
    ).lease
    assert (minimal.accessor, minimal.ttl_s, minimal.renewable) == ("", 60, False)


@pytest.mark.parametrize(
    "answer",
    [
        {},
        {"lease": None},
        {"lease": []},
        {"lease": dict(LEASE, token="")},
        {"lease": dict(LEASE, token=None)},
        {"lease": {k: v for k, v in LEASE.items() if k != "id"}},
        {"lease": {k: v for k, v in LEASE.items() if k != "ttl_s"}},
        {"lease": dict(LEASE, ttl_s="a day")},
    ],
)
def test_lease_answer_of_the_wrong_shape_is_refused(answer: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        answers.LeaseAnswer.model_validate(answer)


def test_checkin_answer_keeps_the_bundle_as_a_dict() -> None:
    bundle = {"project": "shop", "anything": [1, {"x": None}]}
    answer = answers.CheckinAnswer.model_validate({"revision": "r1", "bundle": bundle, "etag": "x"})
    assert (answer.revision, answer.bundle) == ("r1", bundle)
    bad_answers: list[dict[str, Any]] = [
        {"bundle": bundle},
        {"revision": "", "bundle": bundle},
        {"revision": 42, "bundle": {}},
        {"revision": "r1"},
        {"revision": "r1", "bundle": []},
    ]
    for bad in bad_answers:
        with pytest.raises(ValidationError):
            answers.CheckinAnswer.model_validate(bad)


def test_error_body_fields_default_and_retry_is_a_number() -> None:
    err = answers.ErrorBody.model_validate({"error": {"code": "X"}}).error
    assert (err.code, err.message, err.retry_after_s) == ("X", "", None)
    err = answers.ErrorBody.model_validate({"error": {"retry_after_s": 30}}).error
    assert err.retry_after_s == 30
    bad_bodies: list[dict[str, Any]] = [
        {},
        {"error": "boom"},
        {"error": {"retry_after_s": "soon"}},
        {"error": {"retry_after_s": float("inf")}},
    ]
    for bad in bad_bodies:
        with pytest.raises(ValidationError):
            answers.ErrorBody.model_validate(bad)


def test_a_report_carries_its_reasons_only_when_it_has_some() -> None:
    from monky_deployd.core.records.reasons import Reason

    rec = TickRecord(tick_id="t", started_at=0.0, outcome="applied", revision="r2")
    assert "reasons" not in report.body(rec)
    rec.reasons = [Reason("REVISION", "r1 -> r2"), Reason("SECRET_ROTATED", "DB_PASSWORD")]
    assert report.body(rec)["reasons"] == [
        {"kind": "REVISION", "detail": "r1 -> r2"},
        {"kind": "SECRET_ROTATED", "detail": "DB_PASSWORD"},
    ]
