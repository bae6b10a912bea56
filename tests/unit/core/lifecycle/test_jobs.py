"""core.lifecycle.jobs and the verify/plan decisions it drives: what a service is (long-running or a
job), as property tests over restart policies, exit codes, states and job durations."""

from __future__ import annotations

import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle import jobs as lifecycle
from monky_deployd.core.lifecycle.decide import Noop, decide, down_services
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.plans import Restore
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.lifecycle.verify import ContainerObs, Failed, Passed, Waiting, judge, start

POLICIES = ("no", "on-failure", "always", "unless-stopped")
WINDOW, DEADLINE = 2.0, 30.0


def obs(
    service: str, state: str, code: int = 0, restart: str = "no", started: str = "t0"
) -> ContainerObs:
    return ContainerObs(service, f"{service}-c", state, "", code, restart, started)


@given(st.sampled_from(POLICIES), st.integers(-1, 255))
def test_an_exit_is_a_finished_job_only_with_code_0_and_a_finishing_policy(
    policy: str, code: int
) -> None:
    done = lifecycle.finished("exited", code, policy)
    assert done == (code == 0 and policy in ("no", "on-failure"))
    assert not lifecycle.finished("running", 0, policy)
    assert not lifecycle.finished("dead", 0, policy)


@given(st.sampled_from(POLICIES), st.integers(0, 255))
def test_verify_passes_a_finished_job_and_fails_any_other_exit(policy: str, code: int) -> None:
    seen = (obs("web", "running", restart="always"), obs("seed", "exited", code, policy))
    got = judge(start(0.0), ("web", "seed"), seen, 0.0, window_s=WINDOW, deadline_s=DEADLINE)
    got = judge(
        got.watch if isinstance(got, Waiting) else start(0.0),
        ("web", "seed"),
        seen,
        WINDOW,
        window_s=WINDOW,
        deadline_s=DEADLINE,
    )
    if code == 0 and policy in ("no", "on-failure"):
        assert got == Passed(("web",), ("seed",))  # on-failure + exit 0: before, VERIFY_EXITED
    else:
        assert isinstance(got, Failed) and got.code is Code.VERIFY_EXITED
        assert got.service == "seed"


@given(st.floats(0.0, 2 * DEADLINE), st.integers(0, 3))
def test_an_awaited_job_passes_only_once_it_exited_0(runs_s: float, code: int) -> None:
    """A ``service_completed_successfully`` job: running through the window is not enough."""
    web = obs("web", "running", restart="always")
    watch = start(0.0)
    t = 0.0
    got: Passed | Failed | Waiting = Waiting(watch, "")
    while t <= DEADLINE + WINDOW:
        job = obs("migrate", "running") if t < runs_s else obs("migrate", "exited", code)
        got = judge(
            watch,
            ("web", "migrate"),
            (web, job),
            t,
            window_s=WINDOW,
            deadline_s=DEADLINE,
            awaited=("migrate",),
        )
        if not isinstance(got, Waiting):
            break
        watch, t = got.watch, t + 0.5
    if runs_s > DEADLINE:  # still running at the deadline
        assert isinstance(got, Failed) and got.code is Code.VERIFY_TIMEOUT
        assert "job migrate did not finish" in got.message
    elif code == 0:
        assert got == Passed(("web",), ("migrate",))
    else:
        assert isinstance(got, Failed) and got.code is Code.VERIFY_EXITED


def test_awaited_jobs_come_from_service_completed_successfully() -> None:
    compose = yaml.safe_dump(
        {
            "services": {
                "web": {
                    "depends_on": {
                        "migrate": {"condition": "service_completed_successfully"},
                        "db": {"condition": "service_healthy"},
                    }
                },
                "worker": {"depends_on": ["db"]},
                "migrate": {},
                "db": {},
            }
        }
    )
    assert lifecycle.awaited_jobs(compose) == ("migrate",)
    assert lifecycle.awaited_jobs("services: [") == ()
    assert lifecycle.awaited_jobs("42") == ()


STATES = ("running", "exited", "dead", "restarting", "paused", "created")


@given(
    st.lists(
        st.tuples(
            st.sampled_from(("web", "migrate")),
            st.sampled_from(STATES),
            st.sampled_from(("", "healthy", "unhealthy", "starting")),
            st.one_of(st.none(), st.integers(0, 3)),
        ),
        max_size=4,
    ),
    st.booleans(),
)
def test_a_service_is_ok_only_when_every_container_runs_healthy_and_a_job_done_only_on_exit_0(
    containers: list[tuple[str, str, str, int | None]], migrate_is_job: bool
) -> None:
    jobs = ("migrate",) if migrate_is_job else ()
    states = lifecycle.service_states(("web", "migrate"), jobs, containers)
    for name in ("web", "migrate"):
        mine = [c for c in containers if c[0] == name]
        ok = bool(mine) and all(s == "running" and h in ("", "healthy") for _, s, h, _ in mine)
        done = (
            name in jobs
            and bool(mine)
            and all((s == "exited" and c == 0) or s == "created" for _, s, _, c in mine)
        )
        assert (states[name] == "done") == done
        assert (states[name] == "ok") == (ok and not done)
        if not mine:
            assert states[name] == "missing"


def svc(name: str, state: str, health: str = "", code: int | None = None) -> ServiceState:
    return ServiceState(name, state, health, "img", code)


@given(st.integers(0, 3), st.sampled_from(("running", "exited")), st.booleans())
def test_the_plan_never_restores_a_finished_job_and_restores_an_unhealthy_service(
    code: int, job_state: str, web_unhealthy: bool
) -> None:
    """A migration recorded while running (it outlasted the window) that then exited 0 is done;
    an exit non-zero is down (drift: restore); an unhealthy service is down (before: noop OK)."""
    applied = AppliedFacts("r1", "shop", ("migrate", "web"), ("migrate",))
    running = (
        svc("migrate", job_state, code=code if job_state == "exited" else None),
        svc("web", "running", "unhealthy" if web_unhealthy else "healthy"),
    )
    down = down_services(applied.services, running, applied.jobs)
    expect: tuple[str, ...] = ()
    if job_state == "exited" and code != 0:
        expect += ("migrate",)
    if web_unhealthy:
        expect += ("web",)
    assert down == expect
    plan = decide(Facts(304, None, applied, running))
    assert isinstance(plan, Restore if expect else Noop)
    if isinstance(plan, Restore):
        assert plan.missing == expect
