"""core.lifecycle.verify.judge over observation sequences: a revision passes only when it proved
itself."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle.verify import (
    ContainerObs,
    Failed,
    Passed,
    Verdict,
    Waiting,
    Watch,
    judge,
    start,
)

WINDOW, DEADLINE = 10.0, 60.0


def obs(
    service: str = "web",
    state: str = "running",
    *,
    cid: str = "c1",
    started: str = "t0",
    health: str = "",
    exit_code: int = 0,
    restart: str = "no",
    output: str = "",
) -> ContainerObs:
    return ContainerObs(service, cid, state, health, exit_code, restart, started, output)


def run(
    expected: tuple[str, ...], seq: Sequence[tuple[float, tuple[ContainerObs, ...]]]
) -> list[Verdict]:
    watch: Watch = start(seq[0][0] if seq else 0.0)
    verdicts: list[Verdict] = []
    for now, observed in seq:
        got = judge(watch, expected, observed, now, window_s=WINDOW, deadline_s=DEADLINE)
        verdicts.append(got)
        if not isinstance(got, Waiting):
            break
        watch = got.watch
    return verdicts


def test_a_steady_service_passes_after_the_window() -> None:
    got = run(("web",), [(t, (obs(),)) for t in (0.0, 5.0, 9.0, 10.0)])
    assert [type(v) for v in got] == [Waiting, Waiting, Waiting, Passed]
    assert got[-1] == Passed(("web",), ())


def test_an_init_job_that_exited_0_with_restart_no_is_done() -> None:
    seq = [(t, (obs(), obs("init", "exited"))) for t in (0.0, 10.0)]
    assert run(("init", "web"), seq)[-1] == Passed(("web",), ("init",))


def test_exit_0_with_a_restart_policy_is_a_failure() -> None:
    got = run(("web",), [(0.0, (obs(state="exited", restart="always"),))])[-1]
    assert isinstance(got, Failed) and got.code is Code.VERIFY_EXITED


def test_a_crash_names_the_service_state_and_exit_code() -> None:
    got = run(("web",), [(0.0, (obs(),)), (3.0, (obs(state="exited", exit_code=1),))])[-1]
    assert isinstance(got, Failed)
    assert (got.code, got.service, got.state) == (Code.VERIFY_EXITED, "web", "exited")
    assert "exit code 1" in got.message and "exit_code=1" in got.detail


def test_a_restart_between_polls_is_caught() -> None:
    got = run(("web",), [(0.0, (obs(),)), (3.0, (obs(started="t1", exit_code=2),))])[-1]
    assert isinstance(got, Failed) and got.state == "restarted" and "2" in got.message


def test_unhealthy_fails_with_the_health_output() -> None:
    seq = [(0.0, (obs(health="starting"),)), (2.0, (obs(health="unhealthy", output="nope"),))]
    got = run(("web",), seq)[-1]
    assert isinstance(got, Failed) and got.code is Code.VERIFY_UNHEALTHY
    assert "health_output=nope" in got.detail


def test_a_healthcheck_that_never_passes_times_out_as_unhealthy() -> None:
    got = run(("web",), [(t, (obs(health="starting"),)) for t in (0.0, 30.0, 60.0)])[-1]
    assert isinstance(got, Failed) and got.code is Code.VERIFY_UNHEALTHY


def test_one_crashing_replica_fails_the_revision_however_many_others_run() -> None:
    fine = (obs(cid="c1"), obs(cid="c2"))
    seq = [(0.0, fine), (5.0, (*fine, obs(cid="c3", state="restarting", exit_code=3)))]
    got = run(("web",), seq)[-1]
    assert (
        isinstance(got, Failed) and got.code is Code.VERIFY_EXITED and "exit_code=3" in got.detail
    )


def test_a_service_passes_once_every_replica_ran_the_whole_window() -> None:
    early, late = obs(cid="c1"), obs(cid="c2")
    seq = [(0.0, (early,)), (6.0, (early, late)), (10.0, (early, late)), (16.0, (early, late))]
    assert [type(v) for v in run(("web",), seq)] == [Waiting, Waiting, Waiting, Passed]


def test_a_missing_service_times_out() -> None:
    got = run(("db", "web"), [(t, (obs(),)) for t in (0.0, 60.0)])[-1]
    assert isinstance(got, Failed) and got.code is Code.VERIFY_TIMEOUT and got.service == "db"
    assert got.state == "missing"


# -- properties over observation sequences ----------------------------------------------------

SERVICES = ("a", "b")
states = st.sampled_from(["running", "running", "running", "exited", "restarting", "created"])
healths = st.sampled_from(["", "", "healthy", "starting", "unhealthy"])
one = st.builds(
    obs,
    st.sampled_from(SERVICES),
    states,
    cid=st.sampled_from(["c1", "c2"]),
    started=st.sampled_from(["t0", "t1"]),
    health=healths,
    exit_code=st.sampled_from([0, 1, 137]),
    restart=st.sampled_from(["no", "always"]),
)
# a container id appears at most once per snapshot (the engine lists each container once)
snapshots = st.lists(one, max_size=3, unique_by=lambda c: c.container_id).map(tuple)
gaps = st.floats(0.0, 20.0)
sequences = st.lists(st.tuples(gaps, snapshots), min_size=1, max_size=30)
Seq = list[tuple[float, tuple[ContainerObs, ...]]]


def timeline(raw: Seq) -> Seq:
    now, out = 0.0, []
    for gap, snap in raw:
        now += gap
        out.append((now, snap))
    return out


def good(c: ContainerObs) -> bool:
    return c.state == "running" and c.health in ("", "healthy")


def done(c: ContainerObs) -> bool:
    return c.state == "exited" and c.exit_code == 0 and c.restart_policy == "no"


def of(snap: tuple[ContainerObs, ...], name: str) -> list[ContainerObs]:
    """Every container of ``name``: judge looks at each (replicas too)."""
    return [c for c in snap if c.service == name]


@given(sequences)
def test_passed_only_when_every_service_ran_the_whole_window(raw: Seq) -> None:
    seq = timeline(raw)
    verdicts = run(SERVICES, seq)
    if not isinstance(verdicts[-1], Passed):
        return
    seen = seq[: len(verdicts)]
    end = seen[-1][0]
    for name in SERVICES:
        last = of(seen[-1][1], name)
        assert last, f"{name} passed with no container"
        for c in last:
            if done(c):
                continue
            assert good(c)
            key = (c.container_id, c.started_at)
            # the same run of this container, good, at every observation of the window, and
            # first seen WINDOW ago
            since = end
            for t, snap in reversed(seen):
                same = [o for o in of(snap, name) if o.container_id == c.container_id]
                if not same or not good(same[0]) or (c.container_id, same[0].started_at) != key:
                    break
                since = t
            assert end - since >= WINDOW


@given(sequences)
def test_a_crash_fails_at_once_and_nothing_outlives_the_deadline(raw: Seq) -> None:
    seq = timeline(raw)
    verdicts = run(SERVICES, seq)
    for (now, snap), verdict in zip(seq, verdicts, strict=False):
        for name in SERVICES:
            crashed = any(
                c.state == "restarting"
                or (c.state == "exited" and not done(c))
                or (c.health == "unhealthy" and not done(c))  # a finished job's health is stale
                for c in of(snap, name)
            )
            if crashed:
                assert isinstance(verdict, Failed)
        if now - seq[0][0] >= DEADLINE:
            assert not isinstance(verdict, Waiting)


@given(st.lists(gaps, min_size=1, max_size=20))
def test_a_steady_project_passes_exactly_when_the_window_is_over(times: list[float]) -> None:
    seq = timeline([(g, (obs("a"), obs("b", health="healthy"))) for g in times])
    verdicts = run(SERVICES, seq)
    for (now, _), verdict in zip(seq, verdicts, strict=False):
        assert isinstance(verdict, Passed) == (now - seq[0][0] >= WINDOW)


def test_services_behind_a_profile_or_scaled_to_zero_are_not_expected() -> None:
    from monky_deployd.core.lifecycle.verify import started_services

    compose = (
        "services:\n  web: {image: x}\n  debug: {image: x, profiles: [debug]}\n"
        "  idle: {image: x, scale: 0}\n  gone: {image: x, deploy: {replicas: 0}}\n"
    )
    names = ("debug", "gone", "idle", "web")
    assert started_services(compose, names) == ("web",)
    assert started_services("[not, a, mapping]", names) == names
