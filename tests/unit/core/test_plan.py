from __future__ import annotations

from monky_deployd.core.plan import Action, Facts, decide, down_services, needs_container_check
from monky_deployd.core.services import Service


def svc(name: str, state: str = "running") -> Service:
    return Service(name=name, state=state, health="", image="img")


def facts(**kw: object) -> Facts:
    base: dict[str, object] = {
        "checkin_status": 200,
        "desired_revision": "r2",
        "applied_revision": "r1",
        "applied_services": ("db", "web"),
        "running": None,
    }
    base.update(kw)
    return Facts(**base)  # type: ignore[arg-type]


def test_no_desired_state_is_idle() -> None:
    assert decide(facts(checkin_status=204, desired_revision=None)).action is Action.IDLE


def test_new_revision_is_applied() -> None:
    plan = decide(facts())
    assert plan.action is Action.APPLY
    assert "r2" in plan.reason and "r1" in plan.reason


def test_first_apply_names_none() -> None:
    plan = decide(facts(applied_revision=None, applied_services=()))
    assert plan.action is Action.APPLY and "(none)" in plan.reason


def test_not_modified_with_all_running_is_noop() -> None:
    f = facts(
        checkin_status=304,
        desired_revision=None,
        running=(svc("db"), svc("web")),
        applied_revision="r2",
    )
    assert decide(f).action is Action.NOOP


def test_same_revision_with_a_dead_container_restores_only_the_missing() -> None:
    f = facts(
        desired_revision="r2", applied_revision="r2", running=(svc("db"), svc("web", "exited"))
    )
    plan = decide(f)
    assert plan.action is Action.RESTORE
    assert plan.missing == ("web",)


def test_removed_container_restores() -> None:
    f = facts(checkin_status=304, applied_revision="r2", running=(svc("db"),))
    assert decide(f).missing == ("web",)


def test_unknown_container_state_applies() -> None:
    f = facts(desired_revision="r2", applied_revision="r2", running=None)
    assert decide(f).action is Action.APPLY


def test_container_check_only_when_desired_equals_applied() -> None:
    assert needs_container_check(304, None, "r1")
    assert not needs_container_check(304, None, None)
    assert needs_container_check(200, "r1", "r1")
    assert not needs_container_check(200, "r2", "r1")
    assert not needs_container_check(204, None, "r1")


def test_down_services_keeps_declared_order() -> None:
    assert down_services(("a", "b", "c"), (svc("b"),)) == ("a", "c")
