"""What runs, judged from the engine's own facts (issue 26), pure parts: a job done for its config
(``core.lifecycle.jobs``: done_jobs, undecided, ran_to_completion, kept_jobs), another apply's
container or an orphan (``core.lifecycle.services``: foreign, orphans) and the plan that follows
(``core.lifecycle.decide``: drift, never ``noop``). Property tests over generated containers,
labels and engine event orders."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.lifecycle import jobs as lifecycle
from monky_deployd.core.lifecycle.decide import Noop, decide
from monky_deployd.core.lifecycle.facts import AppliedFacts, Facts
from monky_deployd.core.lifecycle.plans import Restore
from monky_deployd.core.lifecycle.services import (
    EngineEvent,
    ServiceState,
    foreign,
    orphans,
    same_apply,
)

MADE = st.sampled_from(("r1/d1", "r1/d2", "r2/d3", ""))
STATES = st.sampled_from(("running", "exited", "created"))


@st.composite
def containers(draw: st.DrawFn) -> tuple[ServiceState, ...]:
    out = []
    for n in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(("web", "migrate", "worker")))
        state = draw(STATES)
        code = draw(st.integers(0, 2)) if state == "exited" else None
        out.append(ServiceState(name, state, "", "img", code, f"c{n}", draw(MADE)))
    return tuple(out)


def ran_or_kept(c: ServiceState) -> bool:
    """A done job's container: its run exited 0, or a rollback made it again, never started."""
    return (c.state == "exited" and c.exit_code == 0) or c.state == "created"


@given(
    containers(),
    st.dictionaries(st.sampled_from(("web", "migrate")), MADE.filter(bool)),
    st.dictionaries(st.sampled_from(("web", "migrate")), MADE),
)
def test_a_job_is_done_only_when_every_container_of_it_is_the_recorded_applys_run_or_kept(
    running: tuple[ServiceState, ...], done: dict[str, str], labels: dict[str, str]
) -> None:
    got = set(lifecycle.done_jobs(done, running))
    for name in ("web", "migrate", "worker"):
        mine = [c for c in running if c.name == name]
        want = (
            name in done
            and bool(mine)
            and all(ran_or_kept(c) and c.made_by == done[name] for c in mine)
        )
        assert (name in got) == want
    # an undecided container is an exited-0 one of a may-finish service done does not account for
    for c in lifecycle.undecided(("migrate",), done, running):
        assert c.name == "migrate" and c.exit_code == 0 and done.get("migrate") != c.made_by
    # ... and never another apply's than applied.json's labels name (a rollback a lock stopped
    # left the failed revision's job: drift, not a run of the applied config)
    for c in lifecycle.undecided(("migrate",), done, running, labels):
        assert not labels.get("migrate") or same_apply(labels["migrate"], c.made_by)
    assert set(lifecycle.undecided(("migrate",), done, running, labels)) <= set(
        lifecycle.undecided(("migrate",), done, running)
    )


def ev(action: str, at: float, code: int | None = None) -> EngineEvent:
    return EngineEvent("c1", action, at, code)


@given(
    st.lists(
        st.tuples(st.sampled_from(("kill", "stop", "restart", "destroy")), st.floats(0, 100)),
        max_size=3,
    ),
    st.integers(0, 3),
    st.booleans(),
)
def test_a_run_ran_to_completion_only_when_no_kill_precedes_its_exit_0(
    outside: list[tuple[str, float]], code: int, reaches_back: bool
) -> None:
    events = [ev("start", 0.0)] if reaches_back else []
    events += [ev(a, t) for a, t in outside]
    events.append(ev("die", 101.0, code))
    killed = any(a == "kill" for a, _ in outside)
    got = lifecycle.ran_to_completion("c1", sorted(events, key=lambda e: e.at))
    assert got == (reaches_back and code == 0 and not killed)
    assert not lifecycle.ran_to_completion("other", events)


@given(
    containers(), st.dictionaries(st.sampled_from(("web", "migrate")), MADE.filter(bool)), st.data()
)
def test_an_up_keeps_a_job_exactly_when_its_config_is_the_one_that_ran(
    running: tuple[ServiceState, ...], done: dict[str, str], data: st.DataObject
) -> None:
    wanted = data.draw(st.dictionaries(st.sampled_from(("web", "migrate")), MADE.filter(bool)))
    kept = {k.service: k for k in lifecycle.kept_jobs(done, wanted, running)}
    for name in ("web", "migrate"):
        same = name in done and wanted.get(name) == done[name]  # the same apply: the same config
        assert (name in kept) == same  # kept (never started again) iff so; a new config runs once
        if same:
            mine = [c for c in running if c.name == name]
            assert kept[name].made_by == done[name]
            # its container gone or another apply's (a failed revision's run): made again with
            # the done config, not started
            assert kept[name].recreate == (not mine or any(c.made_by != done[name] for c in mine))
    for name in set(kept) & set(lifecycle.done_jobs(done, running)):
        assert not kept[name].recreate  # a job done on the box is left exactly as it is


@given(
    containers(), st.dictionaries(st.sampled_from(("web", "migrate", "worker")), MADE.filter(bool))
)
def test_another_applys_container_is_foreign_and_the_exact_one_never(
    running: tuple[ServiceState, ...], made_by: dict[str, str]
) -> None:
    got = dict(foreign(made_by, running))
    for c in running:
        want = made_by.get(c.name)
        if want and c.made_by != want:
            assert c.name in got
    for name in got:
        assert name in made_by
        assert any(c.name == name and c.made_by != made_by[name] for c in running)
    assert foreign({}, running) == ()  # a record without labels: no false drift
    exact = tuple(
        ServiceState(c.name, c.state, "", "img", c.exit_code, c.container_id, made_by[c.name])
        for c in running
        if c.name in made_by
    )
    assert foreign(made_by, exact) == ()


REVISIONS = st.sampled_from(("r1", "r2", "r10"))
DEPLOYS = st.sampled_from(("", "d1", "d-2"))


@given(REVISIONS, DEPLOYS, REVISIONS, DEPLOYS)
def test_same_apply_exact_match_never_drift_other_revision_or_deploy_always(
    want_rev: str, want_dep: str, rev: str, dep: str
) -> None:
    want, made = f"{want_rev}/{want_dep}", f"{rev}/{dep}"
    assert same_apply(want, want)  # an exact match is never drift
    if want_dep:  # a record naming the deploy: any other revision or deploy is drift
        assert same_apply(want, made) == (rev == want_rev and dep == want_dep)
    else:  # an older record without the deploy-id: the revision only, never a false drift
        assert same_apply(want, made) == (rev == want_rev)
    assert not same_apply(want, "")  # a container without monky-deployd labels
    running = (ServiceState("web", "running", "", "img", None, "c1", made),)
    assert (foreign({"web": want}, running) == ()) == same_apply(want, made)


def applied(made: dict[str, str]) -> AppliedFacts:
    return AppliedFacts("r1", "shop", ("web",), (), made, ("web",))


@given(MADE, st.booleans(), st.booleans())
def test_the_plan_restores_what_another_apply_made_never_noop(
    made: str, oneoff: bool, orphan: bool
) -> None:
    running = [ServiceState("web", "running", "", "img", None, "c1", made, oneoff)]
    if orphan:
        running.append(ServiceState("worker", "exited", "", "img", 1, "c2", "r2/d3"))
    plan = decide(Facts(304, None, applied({"web": "r1/d1"}), tuple(running)))
    drift = (made != "r1/d1" and not oneoff) or orphan
    if drift:
        assert isinstance(plan, Restore)
        assert plan.foreign == (("web",) if made != "r1/d1" and not oneoff else ())
        assert plan.orphans == (("worker",) if orphan else ())
        assert orphans(("web",), running) == plan.orphans
    else:
        assert isinstance(plan, Noop)
