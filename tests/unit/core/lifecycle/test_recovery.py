"""core.lifecycle.recovery: roll back and hold after the box changed, back off otherwise."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle.recovery import (
    POLICY_VERDICTS,
    after_failure,
    after_restore,
    after_restore_failure,
    after_rollback,
    backoff_delay,
    checkin_outcome,
)
from monky_deployd.core.records.held import (
    BackingOff,
    Held,
    HeldRevision,
    Refused,
    RollbackPending,
    Stalled,
    held_from_json,
    held_record,
)


def flat(held: Held) -> dict[str, Any]:
    """held.json's flat fields, as the record writes them."""
    body: dict[str, Any] = json.loads(held.to_json())
    return body


def fail(**kw: Any) -> Any:
    args: dict[str, Any] = {
        "revision": "r2",
        "code": Code.VERIFY_EXITED,
        "message": "web exited",
        "failed_phase": "verify",
        "lkg": "r1",
        "on_failure": "rollback",
        "previous": None,
        "now": 1000.0,
        "base_s": 60.0,
        "cap_s": 3600.0,
        "jitter": 0.2,
        "u": 0.0,
    }
    args.update(kw)
    return after_failure(**args)


def test_a_failed_verify_rolls_back_to_the_lkg_and_holds() -> None:
    got = fail()
    assert got.rollback_to == "r1"
    assert flat(got.held)["next_attempt_at"] is None and flat(got.held)["rolled_back_to"] == "r1"
    assert isinstance(got.held, RollbackPending), "recorded before the rollback starts"
    assert flat(got.held)["rollback_ok"] is None
    done = after_rollback(got.held, ok=True)
    assert isinstance(done, HeldRevision) and flat(done)["rollback_ok"] is True
    stalled = after_rollback(got.held, ok=False)
    assert isinstance(stalled, Stalled)
    assert flat(stalled)["stalled"] and flat(stalled)["next_attempt_at"] is None


def test_no_rollback_before_the_box_changed_without_lkg_or_with_retry() -> None:
    for kw in ({"failed_phase": "pull"}, {"lkg": None}, {"on_failure": "retry"}):
        got = fail(**kw)
        assert got.rollback_to is None and flat(got.held)["next_attempt_at"] == 1060.0
        assert flat(got.held)["box_changed"] == (kw.get("failed_phase", "verify") != "pull")


def test_attempts_count_per_revision() -> None:
    prev = held_record("r2", "PULL_FAILED", "x", 3, 0.0, 10.0)
    assert fail(previous=prev, failed_phase="pull").held.attempts == 4
    assert fail(previous=prev, failed_phase="pull", revision="r3").held.attempts == 1


def test_checkin_outcome() -> None:
    assert checkin_outcome(None) == "applied"
    rolled = held_record("r2", "X", "m", rolled_back_to="r1", rollback_ok=True)
    assert checkin_outcome(rolled) == "rolled_back"
    assert checkin_outcome(held_record("r2", "X", "m", rolled_back_to="r1")) == "held"  # pending
    assert checkin_outcome(held_record("r2", "X", "m", next_attempt_at=5.0)) == "held"


@given(st.integers(1, 200), st.floats(0, 1))
def test_backoff_doubles_from_one_interval_capped_and_jittered_down(n: int, u: float) -> None:
    d = backoff_delay(n, 60.0, 3600.0, 0.2, u)
    plain = min(3600.0, 60.0 * 2 ** (n - 1))
    assert 0.8 * plain <= d <= plain <= 3600.0
    assert backoff_delay(n + 1, 60.0, 3600.0, 0.0, u) >= backoff_delay(n, 60.0, 3600.0, 0.0, u)


def test_prune_removes_only_images_no_kept_release_or_container_uses() -> None:
    from monky_deployd.core.lifecycle.prune import images_to_remove
    from monky_deployd.core.records.release import Release, ReleaseImage

    def rel(rev: str, *ids: str, own: bool = True) -> Release:
        images = {f"s{i}": ReleaseImage(x, own=own) for i, x in enumerate(ids)}
        return Release(rev, "p", [], images)

    pruned = [rel("r1", "sha256:a", "sha256:b", "sha256:c"), rel("r0", "sha256:d", "")]
    kept = [rel("r3", "sha256:b")]
    assert images_to_remove(pruned, kept, {"sha256:c"}) == ("sha256:a", "sha256:d")
    # an image the engine had before this project's pull (another app's rollback image, or a
    # record written before issue 45) is never this project's to remove
    foreign = [rel("r1", "sha256:a"), rel("r0", "sha256:e", own=False)]
    assert images_to_remove(foreign, [], set()) == ("sha256:a",)
    assert ReleaseImage("sha256:x").own is False


# -- no apply-rollback loop: ticks simulated through decide() and after_failure() ---------------


@given(
    desired=st.lists(st.sampled_from(["bad1", "bad2", "good"]), min_size=1, max_size=40),
    failing_phase=st.sampled_from(["verify", "up", "pull", "bundle"]),
    rollback_ok=st.booleans(),
    on_failure=st.sampled_from(["rollback", "retry"]),
)
def test_a_failing_revision_is_applied_once_per_change_when_rolled_back(
    desired: list[str], failing_phase: str, rollback_ok: bool, on_failure: str
) -> None:
    from monky_deployd.core.lifecycle.decide import decide
    from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
    from monky_deployd.core.lifecycle.plans import Apply
    from monky_deployd.core.lifecycle.services import ServiceState

    bundle = {"project": "p"}
    applied = AppliedFacts("lkg", "p", ("web",))
    running = (ServiceState("web", "running", "", "img"),)
    held: Held | None = None
    now = 0.0
    applies: list[tuple[int, str]] = []
    for tick, rev in enumerate(desired):
        if held is not None and held.revision != rev:
            held = None  # the tick forgets a hold the desired revision no longer names
        facts = Facts(200, rev, applied, running if rev == applied.revision else None, bundle)
        plan = decide(dataclasses.replace(facts, held=held, now=now))
        if isinstance(plan, Apply):
            applies.append((tick, rev))
            if rev == "good":
                applied, held = AppliedFacts("good", "p", ("web",)), None
            else:
                got = after_failure(
                    revision=rev,
                    code=Code.VERIFY_EXITED,
                    message="m",
                    failed_phase=failing_phase,
                    lkg=applied.revision,
                    on_failure=on_failure,
                    previous=held,
                    now=now,
                    base_s=60.0,
                    cap_s=3600.0,
                    jitter=0.2,
                    u=0.5,
                )
                held = got.held
                if got.rollback_to is not None:
                    held = after_rollback(held, rollback_ok)
        now += 60.0
    # per run of one unchanged bad desired revision: one apply when it is rolled back (then
    # held), else attempts that back off exponentially
    rolled_back = failing_phase in ("verify", "up") and on_failure == "rollback"
    start = 0
    for end in range(1, len(desired) + 1):
        if end < len(desired) and desired[end] == desired[start]:
            continue
        rev, length = desired[start], end - start
        count = sum(1 for t, r in applies if start <= t < end and r == rev)
        if rev != "good":
            assert count <= (1 if rolled_back else 2 + math.log2(length))
        start = end


def test_the_bundle_names_on_failure_rollback_by_default_or_retry() -> None:
    import pytest

    from monky_deployd.core.admission.bundle import validate
    from monky_deployd.core.faults import DeployError

    raw: dict[str, Any] = {"project": "shop", "compose": "services:\n  web: {image: x}\n"}
    assert validate("r1", raw).on_failure == "rollback"
    assert validate("r1", {**raw, "on_failure": "retry"}).on_failure == "retry"
    with pytest.raises(DeployError) as info:
        validate("r1", {**raw, "on_failure": "pray"})
    assert info.value.code is Code.BUNDLE_INVALID and "'on_failure'" in info.value.message


def test_the_report_carries_rollback_only_after_one() -> None:
    from monky_deployd.core.records.tickrecord import TickRecord, body
    from monky_deployd.core.wire.report import RollbackRow

    rec = TickRecord(tick_id="t", started_at=0.0)
    assert "rollback" not in body(rec)
    rec.rollback = RollbackRow(to_revision="r1", ok=False)
    assert body(rec)["rollback"] == {"to_revision": "r1", "ok": False}


@given(
    attempts=st.integers(0, 40),
    now=st.floats(0, 1e9),
    u=st.floats(0, 1),
    other=st.booleans(),
)
def test_a_failed_restore_backs_off_like_an_apply_and_keeps_a_hold(
    attempts: int, now: float, u: float, other: bool
) -> None:
    before: Held | None = None
    if other:
        before = held_record(
            "r2",
            "VERIFY_EXITED",
            "m",
            1,
            0.0,
            None,
            "r1",
            True,
            restore_attempts=attempts,
            restore_next_at=0.0 if attempts else None,
        )
    elif attempts:
        before = held_record(
            "r1", "VERIFY_TIMEOUT", "m", 0, 0.0, restore_attempts=attempts, restore_next_at=0.0
        )
    after = after_restore_failure(
        before,
        applied="r1",
        code=Code.VERIFY_EXITED,
        message="web exited 1",
        now=now,
        base_s=60,
        cap_s=3600,
        jitter=0.2,
        u=u,
    )
    assert flat(after)["restore_attempts"] == attempts + 1
    assert flat(after)["restore_next_at"] == now + backoff_delay(attempts + 1, 60, 3600, 0.2, u)
    assert flat(after)["restore_next_at"] is not None and flat(after)["restore_next_at"] > now
    if other:  # the held revision stays held, as it was
        assert before is not None
        assert (after.revision, flat(after)["rollback_ok"], flat(after)["next_attempt_at"]) == (
            "r2",
            True,
            None,
        )
        reset = held_record(**{**flat(after), "restore_attempts": 0, "restore_next_at": None})
        assert after_restore(after, "r1") == reset
    else:
        assert (after.revision, after.code, flat(after)["next_attempt_at"]) == (
            "r1",
            "VERIFY_EXITED",
            None,
        )
        assert after_restore(after, "r1") is None
    assert checkin_outcome(after) == ("rolled_back" if other else "held")


# held.json: a sum type whose bytes stay the flat record every version wrote
flat_records = st.builds(
    held_record,
    revision=st.sampled_from(["r1", "r2"]),
    code=st.sampled_from(["VERIFY_EXITED", "PULL_FAILED"]),
    message=st.text(max_size=20),
    attempts=st.integers(0, 5),
    failed_at=st.floats(0, 1e10),
    next_attempt_at=st.none() | st.floats(0, 1e10),
    rolled_back_to=st.none() | st.just("r0"),
    rollback_ok=st.none() | st.booleans(),
    stalled=st.booleans(),
    box_changed=st.booleans(),
    restore_attempts=st.integers(0, 5),
    restore_next_at=st.none() | st.floats(0, 1e10),
)


@given(flat_records)
def test_each_variant_round_trips_through_held_json(held: Held) -> None:
    raw = held.to_json()
    assert held_from_json(raw) == held
    assert held_from_json(raw).to_json() == raw
    assert set(json.loads(raw)) == {
        "revision", "code", "message", "attempts", "failed_at", "next_attempt_at",
        "rolled_back_to", "rollback_ok", "stalled", "box_changed", "restore_attempts",
        "restore_next_at",
    }  # fmt: skip


def test_records_written_by_the_current_version_load_as_their_variant() -> None:
    """The flat bytes the writer before the sum type wrote (json.dumps indent=2, sorted keys)
    for each case it produced, and the variant each means; written back byte-identical."""
    cases: list[tuple[dict[str, Any], str]] = [
        ({"rolled_back_to": "r1", "rollback_ok": True}, "HeldRevision"),
        ({"rolled_back_to": "r1", "rollback_ok": False, "stalled": True}, "Stalled"),
        ({"next_attempt_at": 1060.0, "box_changed": True}, "BackingOff"),
        ({"attempts": 0, "restore_attempts": 2, "restore_next_at": 5.0}, "RestoreBackoff"),
        ({"rolled_back_to": "r1"}, "RollbackPending"),
    ]
    for fields, kind in cases:
        body = {
            "revision": "r2",
            "code": "VERIFY_EXITED",
            "message": "web exited",
            "attempts": 1,
            "failed_at": 1000.0,
            "next_attempt_at": None,
            "rolled_back_to": None,
            "rollback_ok": None,
            "stalled": False,
            "box_changed": False,
            "restore_attempts": 0,
            "restore_next_at": None,
            **fields,
        }
        raw = json.dumps(body, indent=2, sort_keys=True).encode()
        held = held_from_json(raw)
        assert type(held).__name__ == kind
        assert held.to_json() == raw


POLICY_CODES = st.sampled_from(sorted(POLICY_VERDICTS))


@given(POLICY_CODES, st.sampled_from(["policy", "render"]), st.none() | st.just("r1"))
def test_a_policy_verdict_is_held_under_its_policy_not_backed_off(
    code: Code, phase: str, lkg: str | None
) -> None:
    step = fail(code=code, failed_phase=phase, lkg=lkg, policy="p1")
    assert step.rollback_to is None
    assert step.held == Refused("r2", code.value, "web exited", "p1", 1, 1000.0)
    again = fail(code=code, failed_phase=phase, lkg=lkg, policy="p1", previous=step.held)
    assert isinstance(again.held, Refused) and again.held.attempts == 2
    assert held_from_json(step.held.to_json()) == step.held
    assert json.loads(step.held.to_json())["policy"] == "p1"
    assert checkin_outcome(step.held) == "held"


def test_compose_failing_to_read_a_release_backs_off() -> None:
    step = fail(code=Code.POLICY_UNJUDGED, failed_phase="policy", policy="p1")
    assert isinstance(step.held, BackingOff)


@given(st.floats(0, 1e6), st.floats(0, 1e6))
def test_a_refusal_keeps_the_lkgs_restore_backoff_and_forgets_it_once_restored(
    failed_at: float, now: float
) -> None:
    held = Refused("r2", "POLICY_REFUSED", "m", "p1", 1, failed_at)
    after = after_restore_failure(
        held,
        applied="r1",
        code=Code.VERIFY_EXITED,
        message="db exited",
        now=now,
        base_s=60.0,
        cap_s=3600.0,
        jitter=0.0,
        u=0.0,
    )
    assert isinstance(after, Refused) and after.restore is not None
    assert held_from_json(after.to_json()) == after
    assert after_restore(after, "r1") == held
