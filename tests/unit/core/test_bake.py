"""core.bake: a committed revision is promoted only once it stayed up for the bake; a crash,
restart or unhealthy state inside it fails the revision, after it is drift. Property tests over
crash times around the end of the bake."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core import bake
from monky_deployd.core.verify import ContainerObs

SINCE, BAKE_S = 1000.0, 300.0
UNTIL = SINCE + BAKE_S


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
    )


def record(*observed: ContainerObs, previous: str | None = "r1") -> bake.Bake:
    prev = {"revision": previous, "project": "shop", "services": ["web"]} if previous else None
    return bake.start("r2", "shop", observed, now=SINCE, bake_s=BAKE_S, previous=prev)


def test_start_records_the_running_containers_and_the_jobs() -> None:
    b = record(
        obs(),
        obs("migrate", cid="m1", restart="no"),
        obs("seed", "exited", cid="s1", restart="on-failure"),
    )
    assert b.runs == {"web#c1": "t0", "migrate#m1": "t0"}
    assert b.jobs == ["migrate", "seed"]
    assert (b.since, b.until, b.previous_revision) == (SINCE, UNTIL, "r1")
    assert bake.Bake.from_json(b.to_json()) == b


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b'{"revision": "r2"}', b'{"revision": 1, "project": "p", "since": 0, "until": 1}'],
)
def test_an_unreadable_record_is_refused_without_its_content(raw: bytes) -> None:
    with pytest.raises(ValueError, match=r"^not a bake record$"):
        bake.Bake.from_json(raw)


@given(st.floats(SINCE, UNTIL + 3 * BAKE_S))
def test_nothing_wrong_bakes_until_the_end_then_promotes(now: float) -> None:
    b = record(obs())
    got = bake.judge(b, (obs(),), now)
    assert got == (bake.Promote() if now >= UNTIL else bake.Baking(UNTIL - now))
    assert bake.judge(b, (obs(cid="other"),), now) == bake.judge(b, (), now)  # by container id


FAULTS = ("exited", "restarted", "dead", "unhealthy", "missing")


@given(
    st.sampled_from(FAULTS),
    st.floats(SINCE, UNTIL + BAKE_S),  # when it happened
    st.floats(0.0, BAKE_S),  # how long after it the tick looked
    st.integers(0, 3),
)
def test_a_fault_inside_the_bake_fails_it_and_after_it_is_drift(
    kind: str, at: float, seen_after: float, code: int
) -> None:
    b = record(obs())
    now = at + seen_after
    if kind == "exited":
        seen: tuple[ContainerObs, ...] = (obs(state="exited", code=code, finished_at=at),)
    elif kind == "restarted":
        seen = (obs(started="t1", finished_at=at),)
    elif kind == "dead":
        seen = (obs(state="dead", finished_at=at),)
    elif kind == "unhealthy":
        seen = (obs(health="unhealthy", unhealthy_since=at),)
    else:
        seen = ()  # the container is gone: when is unknown, the tick's time counts
        at = now
    got = bake.judge(b, seen, now)
    if at < UNTIL:
        assert isinstance(got, bake.Fault)
        assert got.service == "web" and got.at == at
        assert got.unhealthy == (kind == "unhealthy")
    else:
        assert isinstance(got, bake.Promote) and got.drift.startswith("web ")


@given(st.integers(0, 3), st.sampled_from(("no", "on-failure", "always")), st.floats(0, BAKE_S))
def test_a_job_that_exits_0_is_done_any_other_exit_fails_the_bake(
    code: int, policy: str, after: float
) -> None:
    """The migration that outlasted the stable window (running at the commit) then exits."""
    job = obs("migrate", cid="m1", restart=policy)
    b = record(obs(), job)
    done = replace(job, state="exited", exit_code=code, finished_at=SINCE + after)
    got = bake.judge(b, (obs(), done), SINCE + after)
    if code == 0 and policy != "always":
        if SINCE + after < UNTIL:
            assert isinstance(got, bake.Baking) and got.left_s == pytest.approx(BAKE_S - after)
        else:
            assert got == bake.Promote()
    elif SINCE + after < UNTIL:
        assert isinstance(got, bake.Fault) and got.service == "migrate"
        assert got.state == f"exited ({code})"
    else:  # it exited as the bake ended: drift
        assert got == bake.Promote(f"migrate exited ({code})")


def test_an_unknown_time_counts_at_the_tick_and_the_first_fault_is_named() -> None:
    b = record(obs(), obs("api", cid="a1"))
    seen = (obs(state="exited", code=1), obs("api", cid="a1", state="exited", finished_at=1100))
    got = bake.judge(b, seen, 1200.0)
    assert isinstance(got, bake.Fault) and (got.service, got.at) == ("api", 1100)
    late = bake.judge(b, (obs(state="exited", code=1), obs("api", cid="a1")), UNTIL + 5)
    assert late == bake.Promote("web exited (1)")
