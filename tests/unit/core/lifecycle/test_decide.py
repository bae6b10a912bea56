from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.lifecycle import schedule
from monky_deployd.core.lifecycle.decide import (
    Noop,
    decide,
    down_services,
    host_facts_usable,
    needs_container_check,
)
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.plans import Apply, Backoff, Hold, Idle, Restore, Waiting
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records.held import Held, held_record
from monky_deployd.core.records.journal import Journal

BUNDLE: dict[str, Any] = {"project": "shop", "compose": "services: {}\n"}


def flat(held: Held) -> dict[str, Any]:
    """held.json's flat fields, as the record writes them."""
    body: dict[str, Any] = json.loads(held.to_json())
    return body


def svc(name: str, state: str = "running") -> ServiceState:
    return ServiceState(name=name, state=state, health="", image="img")


def applied(
    rev: str = "r1", project: str = "shop", services: tuple[str, ...] = ("db", "web")
) -> AppliedFacts:
    return AppliedFacts(rev, project, services)


def facts(
    status: int = 200,
    desired: str | None = "r2",
    was: AppliedFacts | None = None,
    running: tuple[ServiceState, ...] | None = None,
    bundle: dict[str, Any] | None = BUNDLE,
) -> Facts:
    return Facts(status, desired, was if was is not None else applied(), running, bundle)


def test_no_desired_state_is_idle() -> None:
    assert isinstance(decide(facts(status=204, desired=None, bundle=None)), Idle)


def test_new_revision_is_applied_with_its_bundle_and_the_previous_revision() -> None:
    plan = decide(facts())
    assert isinstance(plan, Apply)
    assert (plan.revision, plan.bundle, plan.previous) == ("r2", BUNDLE, applied())
    assert "r2" in plan.reason and "r1" in plan.reason


def test_first_apply_names_none() -> None:
    plan = decide(Facts(200, "r1", None, None, BUNDLE))
    assert isinstance(plan, Apply) and plan.previous is None and "(none)" in plan.reason


def test_not_modified_with_all_running_is_noop() -> None:
    was = applied("r2")
    plan = decide(facts(304, None, was, (svc("db"), svc("web")), None))
    assert plan == Noop(was, "revision r2 is applied and all services are running")


def test_not_modified_before_any_apply_is_idle() -> None:
    assert isinstance(decide(Facts(304, None, None, None, None)), Idle)


def test_same_revision_with_a_dead_container_restores_only_the_missing() -> None:
    was = applied("r2")
    plan = decide(facts(200, "r2", was, (svc("db"), svc("web", "exited"))))
    assert isinstance(plan, Restore)
    assert (plan.applied, plan.missing) == (was, ("web",))


def test_removed_container_restores() -> None:
    plan = decide(facts(304, None, applied("r2"), (svc("db"),), None))
    assert isinstance(plan, Restore) and plan.missing == ("web",)


def test_unknown_container_state_applies() -> None:
    assert isinstance(decide(facts(200, "r2", applied("r2"), None)), Apply)


def test_unknown_container_state_without_a_bundle_is_not_an_apply() -> None:
    plan = decide(facts(304, None, applied("r2"), None, None))
    assert isinstance(plan, Idle) and "no bundle" in plan.reason


def test_container_check_only_when_desired_equals_applied() -> None:
    assert needs_container_check(304, None, "r1")
    assert not needs_container_check(304, None, None)
    assert needs_container_check(200, "r1", "r1")
    assert not needs_container_check(200, "r2", "r1")
    assert not needs_container_check(204, None, "r1")


def test_down_services_keeps_declared_order() -> None:
    assert down_services(("a", "b", "c"), (svc("b"),)) == ("a", "c")


def test_plan_kinds_name_the_journal_events() -> None:
    assert [k.kind for k in (Idle, Noop, Restore, Apply, Hold, Backoff)] == [
        "idle",
        "noop",
        "restore",
        "apply",
        "hold",
        "backoff",
    ]


# -- properties ------------------------------------------------------------------------------

revs = st.from_regex(r"[a-z0-9]{1,4}", fullmatch=True)
names = st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, max_size=4).map(tuple)
states = st.sampled_from(["running", "exited", "restarting", "created"])


@given(
    status=st.sampled_from([200, 204, 304]),
    desired=st.none() | revs,
    was=st.none() | st.builds(AppliedFacts, revs, st.just("shop"), names),
    running=st.none() | st.lists(st.builds(svc, st.sampled_from("abcde"), states)).map(tuple),
)
def test_decide_is_total_and_consistent(
    status: int,
    desired: str | None,
    was: AppliedFacts | None,
    running: tuple[ServiceState, ...] | None,
) -> None:
    bundle = BUNDLE if status == 200 else None
    plan = decide(Facts(status, desired, was, running, bundle))
    if status == 204:
        assert isinstance(plan, Idle)
    if isinstance(plan, Apply):
        assert plan.bundle is BUNDLE and plan.previous == was
        assert was is None or plan.revision != was.revision or running is None
    if isinstance(plan, Restore | Noop):
        assert was is not None and plan.applied == was and running is not None
    if isinstance(plan, Restore):
        assert plan.missing and set(plan.missing) <= set(was.services if was else ())
    if isinstance(plan, Noop):
        up = {s.name for s in running or () if s.state == "running"}
        assert set(plan.applied.services) <= up


def test_host_facts_are_usable_only_for_this_host() -> None:
    assert host_facts_usable({"hostname": "env-dev-08", "docker": "29"}, "env-dev-08")
    assert not host_facts_usable({"hostname": "env-dev-01"}, "env-dev-08")
    assert not host_facts_usable(None, "env-dev-08")


# -- hold and backoff --------------------------------------------------------------------------


def held(
    rev: str = "r2",
    next_at: float | None = None,
    stalled: bool = False,
    attempts: int = 1,
) -> Held:
    return held_record(
        rev, "VERIFY_EXITED", "web exited", attempts, 100.0, next_at, "r1", True, stalled
    )


def test_a_held_revision_is_not_applied_again() -> None:
    plan = decide(Facts(200, "r2", applied("r1"), None, BUNDLE, held(), 5000.0))
    assert isinstance(plan, Hold) and plan.revision == "r2"
    assert "held" in plan.reason and "--retry" in plan.reason and "r1" in plan.reason


def test_a_held_revision_still_restores_the_lkg_when_its_containers_are_gone() -> None:
    plan = decide(Facts(200, "r2", applied("r1"), (svc("db"),), BUNDLE, held(), 5000.0))
    assert isinstance(plan, Restore) and plan.missing == ("web",)
    assert plan.applied.revision == "r1" and "held" in plan.reason
    gone = decide(Facts(200, "r2", applied("r1"), (), BUNDLE, held(), 5000.0))
    assert isinstance(gone, Restore) and gone.missing == ("db", "web")
    stalled = decide(Facts(200, "r2", applied("r1"), (), BUNDLE, held(stalled=True), 5000.0))
    assert isinstance(stalled, Hold), "a stalled box is not brought up again on its own"
    forward = held_record("r2", "VERIFY_EXITED", "m", 1, 0.0, 9e9, box_changed=True)
    fixing = decide(Facts(200, "r2", applied("r1"), (), BUNDLE, forward, 5000.0))
    assert isinstance(fixing, Backoff), "on_failure retry: no rollback behind its back"
    assert needs_container_check(200, "r2", "r1", "r2")
    assert not needs_container_check(200, "r2", None, "r2")


def test_a_stalled_revision_is_held_and_says_stalled() -> None:
    plan = decide(Facts(200, "r2", applied("r1"), None, BUNDLE, held(stalled=True), 5000.0))
    assert isinstance(plan, Hold) and flat(plan.held)["stalled"] and "stalled" in plan.reason


def test_the_operator_retry_applies_a_held_revision() -> None:
    plan = decide(Facts(200, "r2", applied("r1"), None, BUNDLE, held(stalled=True), 0.0, True))
    assert isinstance(plan, Apply) and "operator retry" in plan.reason


def test_a_new_desired_revision_preempts_the_hold() -> None:
    plan = decide(Facts(200, "r3", applied("r1"), None, BUNDLE, held(), 0.0))
    assert isinstance(plan, Apply) and plan.revision == "r3"


def test_backoff_waits_until_the_next_attempt_then_applies() -> None:
    wait = decide(Facts(200, "r2", applied("r1"), None, BUNDLE, held(next_at=160.0), 159.0))
    assert isinstance(wait, Backoff) and wait.next_at == 160.0 and "in 1 s" in wait.reason
    go = decide(Facts(200, "r2", applied("r1"), None, BUNDLE, held(next_at=160.0), 160.0))
    assert isinstance(go, Apply) and "attempt 2" in go.reason


@given(
    desired=revs,
    was=st.none() | st.builds(AppliedFacts, revs, st.just("shop"), names),
    held_rev=revs,
    next_at=st.none() | st.floats(0, 10_000),
    stalled=st.booleans(),
    now=st.floats(0, 10_000),
    retry=st.booleans(),
)
def test_a_hold_never_blocks_another_revision_and_retry_always_applies(
    desired: str,
    was: AppliedFacts | None,
    held_rev: str,
    next_at: float | None,
    stalled: bool,
    now: float,
    retry: bool,
) -> None:
    h = held(held_rev, next_at, stalled)
    plan = decide(Facts(200, desired, was, None, BUNDLE, h, now, retry))
    if was is not None and desired == was.revision:
        assert not isinstance(plan, Hold | Backoff)
    elif isinstance(plan, Restore):
        assert was is not None and held_rev == desired and not retry and not stalled
    elif retry or held_rev != desired:
        assert isinstance(plan, Apply)
    elif stalled or next_at is None:
        assert isinstance(plan, Hold)
    else:
        assert isinstance(plan, Backoff) == (now < next_at)
        assert isinstance(plan, Apply) == (now >= next_at)


# -- a killed tick ------------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["down", "up", "verify", "rollback"])
def test_a_tick_killed_after_the_box_changed_brings_the_lkg_back(phase: str) -> None:
    cut = Journal("r2", phase, "t1", 0.0)
    running = (svc("db"), svc("web"))  # r2's containers carry the same service names
    plan = decide(Facts(200, "r1", applied("r1"), running, BUNDLE, interrupted=cut))
    assert isinstance(plan, Restore) and plan.missing == ("db", "web")
    assert "killed" in plan.reason


@pytest.mark.parametrize("phase", ["stage", "pull", "commit"])
def test_a_tick_killed_before_the_box_changed_is_a_noop(phase: str) -> None:
    cut = Journal("r2", phase, "t1", 0.0)
    running = (svc("db"), svc("web"))
    assert isinstance(decide(Facts(304, None, applied("r1"), running, None, interrupted=cut)), Noop)


def test_a_killed_rollback_to_the_desired_revision_restores_it() -> None:
    cut = Journal("r1", "rollback", "t1", 0.0)
    running = (svc("db"), svc("web"))
    plan = decide(Facts(304, None, applied("r1"), running, None, interrupted=cut))
    assert isinstance(plan, Restore) and plan.missing == ("db", "web")


def test_a_killed_apply_of_the_desired_revision_is_resumed() -> None:
    cut = Journal("r2", "verify", "t1", 0.0)
    plan = decide(Facts(200, "r2", applied("r1"), None, BUNDLE, interrupted=cut))
    assert isinstance(plan, Apply) and plan.revision == "r2"


def restore_failed(rev: str, attempts: int, next_at: float) -> Held:
    return held_record(
        rev, "VERIFY_EXITED", "m", 0, 0.0, restore_attempts=attempts, restore_next_at=next_at
    )


@given(
    status=st.sampled_from([200, 304]),
    attempts=st.integers(1, 30),
    next_at=st.floats(1.0, 1e9),
    now=st.floats(0.0, 2e9),
    retry=st.booleans(),
)
def test_a_failed_restore_of_the_applied_revision_backs_off_until_due_or_retry(
    status: int, attempts: int, next_at: float, now: float, retry: bool
) -> None:
    was = applied("r1")
    record = restore_failed("r1", attempts, next_at)
    down = (svc("db"),)
    plan = decide(
        Facts(status, "r1" if status == 200 else None, was, down, BUNDLE, record, now, retry)
    )
    if now < next_at and not retry:
        assert isinstance(plan, Backoff) and plan.next_at == next_at
        assert "restoring revision r1" in plan.reason and "VERIFY_EXITED" in plan.reason
    else:
        assert isinstance(plan, Restore) and plan.missing == ("web",)
    running = decide(Facts(status, "r1", was, (svc("db"), svc("web")), BUNDLE, record, now))
    assert isinstance(running, Noop), "all running: nothing to restore, whatever the backoff"


def test_a_failed_restore_behind_a_held_revision_backs_off_and_keeps_the_hold() -> None:
    record = held_record(
        "r2",
        "VERIFY_EXITED",
        "m",
        1,
        0.0,
        None,
        "r1",
        True,
        restore_attempts=2,
        restore_next_at=500.0,
    )
    wait = decide(Facts(200, "r2", applied("r1"), (), BUNDLE, record, 400.0))
    assert isinstance(wait, Backoff) and wait.revision == "r2" and wait.next_at == 500.0
    assert "restoring revision r1" in wait.reason and "2 time(s)" in wait.reason
    due = decide(Facts(200, "r2", applied("r1"), (), BUNDLE, record, 500.0))
    assert isinstance(due, Restore) and due.applied.revision == "r1"
    new = decide(Facts(200, "r3", applied("r1"), (), BUNDLE, record, 400.0))
    assert isinstance(new, Apply) and new.revision == "r3", "a new revision pre-empts it"


# -- a new revision's gate: update windows and the rollout spread (core.lifecycle.schedule)
# --------------

T = 1_790_000_000.0  # any instant: the windows below are relative to it


def _spread_bundle(spread: int) -> dict[str, Any]:
    return {**BUNDLE, "rollout": {"spread_s": spread}}


def _late_box(rev: str) -> str:
    """An identity whose rollout place for ``rev`` is past the middle of the spread."""
    return next(f"env-{i}" for i in range(1000) if schedule.place(f"env-{i}", rev) > 0.5)


def _closed_window(now: float) -> schedule.Window:
    """A one-hour daily UTC window that opened two hours before ``now``."""
    from datetime import UTC, datetime

    at = datetime.fromtimestamp(now - 7200, UTC)
    return schedule.Window(schedule.parse_window(f"* {at:%H:%M} for 1h UTC"), UTC)


def gated(**kw: Any) -> Facts:
    base = facts(bundle=kw.pop("bundle", BUNDLE), running=kw.pop("running", None))
    return replace(base, now=T, **kw)


def test_a_spread_makes_a_late_box_wait_from_its_first_sight() -> None:
    box = _late_box("r2")
    plan = decide(gated(bundle=_spread_bundle(3600), identity=box))
    assert isinstance(plan, Waiting) and plan.gate.why == "rollout"
    assert plan.gate.first_seen_at == T and plan.gate.until == T + plan.gate.offset_s
    assert plan.gate.offset_s > 1800
    # the same first sight, past the place: applied
    later = decide(
        gated(bundle=_spread_bundle(3600), identity=box, seen=schedule.Seen("r2", T - 3600))
    )
    assert isinstance(later, Apply) and later.gate is not None


def test_without_a_spread_or_windows_a_new_revision_is_applied_at_once() -> None:
    plan = decide(gated(identity="env-a"))
    assert isinstance(plan, Apply) and plan.gate is not None and not plan.gate.wait


def test_a_newer_revision_restarts_the_wait() -> None:
    box = _late_box("r2")
    plan = decide(
        gated(bundle=_spread_bundle(3600), identity=box, seen=schedule.Seen("r1x", T - 86400))
    )
    assert isinstance(plan, Waiting) and plan.gate.first_seen_at == T


def test_outside_every_window_a_new_revision_waits_but_a_restore_does_not() -> None:
    closed = (_closed_window(T),)
    plan = decide(gated(identity="env-a", windows=closed))
    assert isinstance(plan, Waiting) and plan.gate.why == "window"
    assert plan.gate.until is not None and plan.gate.until > T
    # the applied revision's services died: restored outside the window (the documented choice)
    same = replace(
        facts(desired="r1", running=(svc("db"),)), now=T, identity="env-a", windows=closed
    )
    assert isinstance(decide(same), Restore)
    # ... and while r2 waits for the window, r1 is still looked after
    meanwhile = decide(replace(gated(identity="env-a", windows=closed), running=(svc("db"),)))
    assert isinstance(meanwhile, Restore) and meanwhile.missing == ("web",)
    assert meanwhile.gate is not None and meanwhile.gate.why == "window"
    all_up = decide(
        replace(gated(identity="env-a", windows=closed), running=(svc("db"), svc("web")))
    )
    assert isinstance(all_up, Waiting)
    assert needs_container_check(200, "r2", "r1", may_wait=True)


def test_a_first_apply_waits_for_its_rollout_place_but_not_for_a_window() -> None:
    fresh = replace(facts(), applied=None, now=T, identity="env-a", windows=(_closed_window(T),))
    assert isinstance(decide(fresh), Apply)  # nothing runs that a window would protect
    box = _late_box("r2")
    spread = replace(fresh, identity=box, bundle=_spread_bundle(3600))
    assert isinstance(decide(spread), Waiting)


def test_retry_applies_now_through_windows_and_spread() -> None:
    box = _late_box("r2")
    f = gated(bundle=_spread_bundle(3600), identity=box, windows=(_closed_window(T),), retry=True)
    assert isinstance(decide(f), Apply)


def test_a_hold_still_wins_over_the_gate() -> None:
    held = held_record("r2", "VERIFY_EXITED", "boom", 1, T - 60, None, "r1", True, False)
    f = gated(identity="env-a", held=held, running=(svc("db"), svc("web")))
    assert isinstance(decide(f), Hold)


def test_a_backoff_retry_attempt_waits_for_the_window() -> None:
    held = held_record("r2", "PULL_FAILED", "boom", 1, T - 600, T - 1)
    f = gated(identity="env-a", held=held, windows=(_closed_window(T),))
    assert isinstance(decide(f), Waiting)


def test_a_malformed_rollout_is_not_waited_for_but_refused_now() -> None:
    bad = {**BUNDLE, "rollout": {"spread_s": 10**9}}
    plan = decide(gated(bundle=bad, identity=_late_box("r2"), windows=(_closed_window(T),)))
    assert isinstance(plan, Apply)  # the bundle check refuses it (BUNDLE_INVALID), reported


# -- a job runs once per config: a done job is never in a restore (issue 26) --------------------

JOB_MADE = st.sampled_from(("r1/d1", "r0/d0", "r2/d2"))
# a container of a service: its state, exit code and whose apply made it (``done``'s or another)
RUNS = st.sampled_from(
    (
        ("exited", 0, True),  # a job's run that ran to completion (or a service stopped: exit 0)
        ("created", None, True),  # a job's container a rollback made again, never started
        ("exited", 0, False),  # another apply's run
        ("running", None, True),
        ("exited", 143, True),
        ("exited", 1, False),
        ("dead", None, True),
    )
)


@st.composite
def job_box(draw: st.DrawFn) -> tuple[tuple[ServiceState, ...], dict[str, str]]:
    """The applied revision's containers (web long-running; migrate and seed jobs, their
    ``done`` record) in any state, any apply's labels (no label-based drift: made_by empty)."""
    done = draw(st.dictionaries(st.sampled_from(("migrate", "seed")), JOB_MADE, min_size=1))
    out = []
    for name in ("web", "migrate", "seed"):
        for n in range(draw(st.integers(0, 2))):
            state, code, own = draw(RUNS)
            made = done.get(name, "r1/d1") if own else "r9/d9"
            out.append(ServiceState(name, state, "", "img", code, f"{name}{n}", made))
    return tuple(out), done


@pytest.mark.parametrize("listed", [False, True])
@pytest.mark.parametrize("path", ["steady", "held", "waiting"])
@given(box=job_box())
def test_a_done_job_is_never_restored_and_an_exited_service_always_is(
    path: str, listed: bool, box: tuple[tuple[ServiceState, ...], dict[str, str]]
) -> None:
    """Over generated container states and job records, on every path that looks after the
    applied revision (it is desired; a newer one is held; a newer one waits for its rollout
    place): a job done for its config is never in a restore; a long-running service with no
    running container (an exit 0 after ``docker stop`` too) always is. ``listed``: the record
    also lists migrate among the services (an older agent's record; before, a wait restored
    it: 4 runs in 3 ticks)."""
    from monky_deployd.core.lifecycle import jobs as lifecycle
    from monky_deployd.core.records.held import HeldRevision

    running, done = box
    jobs = lifecycle.done_jobs(done, running)  # what observe hands decide (applied.json's done)
    lkg = AppliedFacts("r1", "shop", ("web", "migrate") if listed else ("web",), jobs)
    base = Facts(304, None, lkg, running)
    if path == "held":
        held = HeldRevision("r2", "VERIFY_EXITED", "failed", rolled_back_to="r1")
        base = Facts(200, "r2", lkg, running, BUNDLE, held)
    elif path == "waiting":
        box_id = _late_box("r2")
        base = replace(gated(bundle=_spread_bundle(86400), identity=box_id), running=running)
        base = replace(base, applied=lkg)
    plan = decide(base)
    web = [c for c in running if c.name == "web"]
    web_down = not web or any(c.state != "running" for c in web)
    if web_down:
        assert isinstance(plan, Restore), plan
        assert "web" in plan.missing
    if isinstance(plan, Restore):
        assert not set(plan.missing) & set(jobs)  # never re-run a job done for its config
    else:
        assert not web_down


@given(st.booleans(), st.floats(0, 1e9))
def test_a_policy_refusal_is_held_until_the_revision_changes_or_retry(
    retry: bool, now: float
) -> None:
    from monky_deployd.core.records.held import Refused

    held = Refused("r2", "POLICY_REFUSED", "refused", "p1", 3, 10.0)
    base = replace(facts(running=(svc("db"), svc("web"))), held=held, now=now, retry=retry)
    plan = decide(base)
    if retry:
        assert isinstance(plan, Apply)
    else:
        assert isinstance(plan, Hold) and "this box's policy refused it" in plan.reason
    # a new desired revision is not held by another's refusal
    assert not isinstance(decide(replace(base, desired_revision="r3")), Hold)


def test_a_moved_held_path_stops_the_services_that_mount_it_before_any_restore() -> None:
    """Issue 45: on the steady tick (304) too; only what still runs is stopped; a volume's
    device ("") names every service; a dead service is not restored while it lasts."""
    from monky_deployd.core.lifecycle.plans import Stop

    was = applied("r2")
    moved = (("web", "/srv/x (volumes) leads to /etc now"),)
    running = (svc("db"), svc("web"))
    plan = decide(replace(facts(304, None, was, running, None), moved=moved))
    assert isinstance(plan, Stop)
    assert (plan.services, plan.stop, plan.moved) == (("web",), ("web",), moved)
    assert "leads to /etc now" in plan.reason
    stopped = (svc("db"), svc("web", "exited"))
    again = decide(replace(facts(304, None, was, stopped, None), moved=moved))
    assert isinstance(again, Stop) and again.stop == ()  # not restored: still moved
    volume = decide(replace(facts(304, None, was, running, None), moved=(("", "x"),)))
    assert isinstance(volume, Stop) and volume.stop == ("db", "web")
    # once it leads where it did: the dead service is restored
    assert isinstance(decide(facts(304, None, was, stopped, None)), Restore)


def test_retry_restores_a_moved_service_which_the_restore_judges_anew() -> None:
    was, moved = applied("r2"), (("web", "x"),)
    stopped = (svc("db"), svc("web", "exited"))
    f = replace(facts(304, None, was, stopped, None), moved=moved, retry=True)
    assert isinstance(decide(f), Restore)


@given(st.sampled_from(["refused", "backoff"]), st.booleans())
def test_a_moved_held_path_stops_the_services_while_the_desired_revision_is_held(
    kind: str, retry: bool
) -> None:
    """The outside attack on issue 45: tenancy asks a revision the box refuses (or one backing
    off); the applied revision's moved path is still acted on (Stop), not a Hold; a new desired
    revision is applied (judged anew) and ``--retry`` lets the restore judge it."""
    from monky_deployd.core.lifecycle.plans import Stop
    from monky_deployd.core.records.held import BackingOff, Refused

    held: Held = (
        Refused("r2", "POLICY_REFUSED", "refused", "p1", 3, 10.0)
        if kind == "refused"
        else BackingOff("r2", "UP_FAILED", "failed", 1e12)
    )
    moved = (("web", "/srv/x (volumes) leads to /etc now"),)
    base = replace(facts(running=(svc("db"), svc("web"))), held=held, moved=moved, retry=retry)
    plan = decide(base)
    assert isinstance(plan, Stop) is not retry
    if not retry:
        assert isinstance(plan, Stop) and plan.stop == ("web",)
    assert not isinstance(decide(replace(base, desired_revision="r3")), Stop)


def test_a_moved_held_path_stops_the_services_while_a_new_revision_waits() -> None:
    """A new desired revision waiting for its rollout place (a spread of a day, first seen
    now) does not keep the applied revision's moved path mounted."""
    from monky_deployd.core.lifecycle.plans import Stop

    box, moved = _late_box("r2"), (("web", "x"),)
    running = (svc("db"), svc("web"))
    base = gated(bundle=_spread_bundle(86400), identity=box, running=running, moved=moved)
    waiting = decide(replace(base, moved=()))
    assert isinstance(waiting, Waiting), waiting
    assert isinstance(decide(base), Stop)
