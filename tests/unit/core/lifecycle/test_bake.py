"""core.lifecycle.bake: the bake judges the revision, not the box. A committed revision is promoted
once it stayed up for the bake; its own crash, policy restart, OOM kill or unhealthy spell inside it
fails the revision, after it is drift; a removal, a stop, a restart from outside (by hand, by
the agent's own rollback or restore, by an engine restart or a reboot) never fails it. Property
tests over generated event orders at every moment of the bake."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.lifecycle import bake
from monky_deployd.core.lifecycle.services import EngineEvent
from monky_deployd.core.lifecycle.verify import ContainerObs

SINCE, BAKE_S = 1000.0, 300.0
UNTIL = SINCE + BAKE_S
STARTED = SINCE - 20  # the run verify passed started before the commit


def obs(
    service: str = "web",
    state: str = "running",
    *,
    cid: str = "c1",
    started: str = "t0",
    code: int = 0,
    restart: str = "always",
    health: str = "",
    finished_at: float = 0.0,
    unhealthy_since: float = 0.0,
    restarts: int = 0,
    oom: bool = False,
    made_by: str = "r2/d1",
    health_log: tuple[tuple[float, int], ...] = (),
) -> ContainerObs:
    return ContainerObs(
        service,
        cid,
        state,
        health,
        code,
        restart,
        started,
        finished_at=finished_at,
        unhealthy_since=unhealthy_since,
        restart_count=restarts,
        oom_killed=oom,
        revision=made_by.partition("/")[0],
        deploy_id=made_by.partition("/")[2],
        health_log=health_log,
        health_retries=3,
    )


def ev(action: str, at: float, cid: str = "c1", code: int | None = None) -> EngineEvent:
    return EngineEvent(cid, action, at, code)


def record(*observed: ContainerObs, previous: str | None = "r1") -> bake.Bake:
    prev = {"revision": previous, "project": "shop", "services": ["web"]} if previous else None
    return bake.start("r2", "shop", observed, now=SINCE, bake_s=BAKE_S, previous=prev)


def verdict(
    b: bake.Bake, seen: tuple[ContainerObs, ...], now: float, *events: EngineEvent
) -> bake.Verdict:
    return bake.judge(b, seen, now, events).verdict


def test_start_records_the_running_containers_and_the_jobs() -> None:
    b = record(
        obs(restarts=0),
        obs("migrate", cid="m1", restart="no", made_by="r2/d0"),
        obs("seed", "exited", cid="s1", restart="on-failure"),
    )
    assert b.runs == {"web#c1": "t0", "migrate#m1": "t0"}
    assert b.restarts == {"web#c1": 0, "migrate#m1": 0}
    assert b.made_by == {"web": "r2/d1", "migrate": "r2/d0"}
    assert b.jobs == ["migrate", "seed"]
    assert (b.since, b.until, b.previous_revision) == (SINCE, UNTIL, "r1")
    assert bake.Bake.from_json(b.to_json()) == b


def test_a_record_an_older_agent_wrote_still_reads() -> None:
    old = (
        b'{"jobs": [], "previous": null, "project": "shop", "revision": "r2", '
        b'"runs": {"web#c1": "t0"}, "since": 1000, "until": 1300, "failed": ""}'
    )
    b = bake.Bake.from_json(old)
    assert (b.restarts, b.watched, b.made_by, b.want) == ({}, {}, {}, {})
    assert isinstance(verdict(b, (obs(),), 1100.0), bake.Baking)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b'{"revision": "r2"}',
        b'{"revision": 1, "project": "p", "since": 0, "until": 1}',
        b'{"revision": "r", "project": "p", "since": 0, "until": 1, "restarts": {"a": "1"}}',
    ],
)
def test_an_unreadable_record_is_refused_without_its_content(raw: bytes) -> None:
    with pytest.raises(ValueError, match=r"^not a bake record$"):
        bake.Bake.from_json(raw)


@given(st.floats(SINCE, UNTIL + 3 * BAKE_S))
def test_nothing_wrong_bakes_until_the_end_then_promotes(now: float) -> None:
    b = record(obs())
    got = verdict(b, (obs(),), now)
    assert got == (bake.Promote() if now >= UNTIL else bake.Baking(UNTIL - now))


# -- the revision's own faults ---------------------------------------------------------------

OWN = ("crash", "policy-restart", "oom", "restarting", "unhealthy", "spell-event", "spell-log")


def own_fault(kind: str, at: float, code: int) -> tuple[ContainerObs, tuple[EngineEvent, ...]]:
    """The container and the engine's events after the revision's own fault at ``at``."""
    start = ev("start", STARTED)
    if kind == "crash":  # exited on its own: its die has no kill before it
        c = obs(state="exited", code=code, restart="no", finished_at=at)
        return c, (start, ev("die", at, code=code))
    if kind == "policy-restart":  # the restart policy started it again: the count grew
        return obs(started="t1", restarts=1, finished_at=at), (start, ev("die", at, code=code))
    if kind == "oom":
        return obs(state="exited", code=137, oom=True, finished_at=at), (start, ev("oom", at))
    if kind == "restarting":
        return obs(state="restarting", code=code, finished_at=at), (start,)
    if kind == "unhealthy":
        return obs(health="unhealthy", unhealthy_since=at), (start,)
    if kind == "spell-event":  # unhealthy between two ticks, healthy again at the tick
        return obs(health="healthy"), (start, ev("health_status: unhealthy", at))
    log = (*((at - 2 + i, 1) for i in range(3)), (at + 1, 0))  # three fails, then a pass
    return obs(health="healthy", health_log=log), (start,)


@given(
    st.sampled_from(OWN),
    st.floats(SINCE + 2, UNTIL + BAKE_S),  # when it happened
    st.floats(0.0, BAKE_S),  # how long after it the tick looked
    st.integers(1, 255),
)
def test_the_revisions_own_fault_inside_the_bake_fails_it_after_it_is_drift(
    kind: str, at: float, seen_after: float, code: int
) -> None:
    b = record(obs())
    c, events = own_fault(kind, at, code)
    got = verdict(b, (c,), at + seen_after, *events)
    if at < UNTIL:
        assert isinstance(got, bake.Fault), (kind, got)
        assert got.service == "web" and got.fact
        assert got.unhealthy == kind.startswith(("unhealthy", "spell"))
    else:
        assert isinstance(got, bake.Promote) and got.drift.startswith("web ")


# -- outside events: never the revision's fault ------------------------------------------------

OUTSIDE = ("rm", "stop", "docker-restart", "engine-restart", "reboot-exited", "recreated")


def outside(
    kind: str, at: float, n: int
) -> tuple[tuple[ContainerObs, ...], tuple[EngineEvent, ...]]:
    """What the engine shows after the ``n``-th outside event at ``at`` (no own fault)."""
    start = ev("start", STARTED)
    if kind == "rm":  # docker rm -f: the container is gone
        return (), (start, ev("kill", at), ev("die", at, code=137), ev("destroy", at))
    if kind == "stop":  # docker stop of a restart:no service: exit 143 or 137, or its own code
        c = obs(state="exited", code=[143, 137, 1, 0][n % 4], restart="no", finished_at=at)
        return (c,), (start, ev("kill", at), ev("die", at, code=c.exit_code))
    if kind == "docker-restart":  # the engine resets RestartCount on a start by hand
        return (obs(started=f"t{n + 1}", restarts=0, finished_at=at),), (ev("start", at),)
    if kind == "engine-restart":  # the events before the restart are gone
        return (obs(started=f"t{n + 1}", restarts=0, finished_at=at),), ()
    if kind == "reboot-exited":  # restart: no, stopped by the shutdown; no events survive
        c = obs(state="exited", code=[143, 137, 1, 2][n % 4], restart="no", finished_at=at)
        return (c,), ()
    # the agent's own rollback or restore recreated it: a new container of the same config
    return (obs(cid=f"n{n}", started=f"t{n + 1}"),), (ev("destroy", at), ev("start", at))


@given(
    st.lists(st.tuples(st.sampled_from(OUTSIDE), st.floats(SINCE, UNTIL + BAKE_S)), max_size=4),
    st.floats(0.0, BAKE_S),
)
def test_outside_events_in_any_order_never_fail_a_good_revision(
    happened: list[tuple[str, float]], seen_after: float
) -> None:
    current = obs(restarts=2)  # (a count the engine had before: a reset is not growth)
    b, now = record(current), SINCE
    for n, (kind, at) in enumerate(sorted(happened, key=lambda h: h[1])):
        seen, events = outside(kind, at, n)
        now = max(now, at) + seen_after
        judged = bake.judge(b, seen, now, events)
        assert not isinstance(judged.verdict, bake.Fault), (kind, judged)
        assert judged.drift, kind  # each one is named, with the fact it rests on
        b = judged.record
        # the tick's plan restores what is down; the bake adopts the new run of its config
        current = obs(cid=f"b{n}", started=f"b{n}")
        judged = bake.judge(b, (current,), now, ())
        assert not isinstance(judged.verdict, bake.Fault)
        b = judged.record
        assert list(b.runs) == [f"web#b{n}"]
    assert verdict(b, (current,), max(now, UNTIL)) == bake.Promote()


def test_an_outside_event_then_the_revisions_own_crash_fails_it() -> None:
    """A restart by hand does not buy a crash-looping revision a pass: its new run is watched."""
    b = record(obs())
    j = bake.judge(b, (obs(started="t1", restarts=0),), SINCE + 10, (ev("start", SINCE + 9),))
    assert isinstance(j.verdict, bake.Baking) and j.record.runs == {"web#c1": "t1"}
    crashed = obs(started="t2", restarts=1, finished_at=SINCE + 20)
    got = bake.judge(j.record, (crashed,), SINCE + 30, ()).verdict
    assert isinstance(got, bake.Fault) and got.state == "restarted"
    assert "RestartCount 0 -> 1" in got.fact


def test_a_container_another_apply_made_is_not_adopted() -> None:
    """r2's container under r1's service name (a stopped rollback): drift, never r1's run."""
    b = record(obs())
    other = obs(cid="x1", started="tx", made_by="r3/d3")
    j = bake.judge(b, (other,), UNTIL + 1, ())
    assert j.verdict == bake.Baking(0.0, "web") and j.record.runs == {}
    same = obs(cid="y1", started="ty")
    assert bake.judge(j.record, (other, same), UNTIL + 2, ()).verdict == bake.Promote()


def test_a_removed_service_keeps_the_bake_waiting_until_it_runs_again() -> None:
    b = record(obs())
    j = bake.judge(b, (), UNTIL + 5, (ev("destroy", SINCE + 5),))
    assert j.verdict == bake.Baking(0.0, "web")
    assert "gone" in j.drift[0]


@given(st.integers(0, 3), st.sampled_from(("no", "on-failure", "always")), st.floats(0, BAKE_S))
def test_a_job_that_exits_0_is_done_any_other_exit_fails_the_bake(
    code: int, policy: str, after: float
) -> None:
    """The migration that outlasted the stable window (running at the commit) then exits on its
    own (the engine's events show its die and no kill)."""
    job = obs("migrate", cid="m1", restart=policy, made_by="r2/d0")
    b = record(obs(), job)
    done = replace(job, state="exited", exit_code=code, finished_at=SINCE + after)
    events = (ev("start", STARTED, "m1"), ev("die", SINCE + after, "m1", code))
    got = verdict(b, (obs(), done), SINCE + after, *events)
    if code == 0 and policy != "always":
        if SINCE + after < UNTIL:
            assert isinstance(got, bake.Baking) and got.left_s == pytest.approx(BAKE_S - after)
        else:
            assert got == bake.Promote()
    elif code == 0:  # a long-running service's exit 0: not a crash, drift (restored)
        assert isinstance(got, bake.Baking | bake.Promote)
    elif SINCE + after < UNTIL:
        assert isinstance(got, bake.Fault) and got.service == "migrate"
        assert got.state == f"exited ({code})"
    else:  # it exited as the bake ended: drift
        assert got == bake.Promote(f"migrate exited ({code})")


def test_an_unknown_time_counts_at_the_tick_and_the_first_fault_is_named() -> None:
    b = record(obs(), obs("api", cid="a1", made_by="r2/d0"))
    seen = (
        obs(state="restarting", code=1),
        obs("api", cid="a1", state="restarting", finished_at=1100),
    )
    got = verdict(b, seen, 1200.0)
    assert isinstance(got, bake.Fault) and (got.service, got.at) == ("api", 1100)
    late = verdict(b, (obs(state="restarting", code=1), obs("api", cid="a1")), UNTIL + 5)
    assert late == bake.Promote("web restarting")
