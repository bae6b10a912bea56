"""core.lifecycle.boxsteps: the box steps of an apply, a restore and a rollback, in order, and each
step's phase."""

from __future__ import annotations

import hashlib

from monky_deployd.core.lifecycle.boxsteps import (
    Commit,
    Down,
    Pull,
    Ready,
    Rollback,
    Stage,
    Up,
    Verify,
    apply_steps,
    restore_steps,
    rollback_steps,
)
from monky_deployd.core.lifecycle.decide import decide
from monky_deployd.core.lifecycle.facts import Facts
from monky_deployd.core.lifecycle.plans import Apply, Restore
from monky_deployd.core.render.registry_cred import Credential
from tests.unit.core.lifecycle.test_decide import BUNDLE, applied, facts, svc


def ready(project: str = "shop", cred: Credential | None = None) -> Ready:
    return Ready("r2", project, "services: {}\n", "A=1\n", ("web",), "reg:5000", cred)


def test_apply_steps_in_order_without_a_down_when_the_project_stays() -> None:
    plan = decide(facts())
    assert isinstance(plan, Apply)
    cred = Credential("u", "p")
    assert apply_steps(plan, ready(cred=cred)) == (
        Stage("r2", "services: {}\n", "A=1\n", "reg:5000", cred),
        Pull("shop", "r2", "reg:5000"),
        Up("shop", "r2", every=("web",)),
        Verify("shop", "r2", ("web",)),
        Commit(
            "r2",
            "shop",
            ("web",),
            hashlib.sha256(b"services: {}\n").hexdigest(),
            hashlib.sha256(b"A=1\n").hexdigest(),
            "r1",
        ),
    )


def test_a_renamed_project_takes_the_previous_one_down_before_up() -> None:
    plan = decide(facts(was=applied("r1", "oldshop")))
    assert isinstance(plan, Apply)
    kinds = [type(s) for s in apply_steps(plan, ready("shop"))]
    assert kinds == [Stage, Pull, Down, Up, Verify, Commit]
    assert apply_steps(plan, ready("shop"))[2] == Down("oldshop", "r1")


def test_a_first_apply_takes_nothing_down() -> None:
    plan = decide(Facts(200, "r1", None, None, BUNDLE))
    assert isinstance(plan, Apply)
    assert not any(isinstance(s, Down) for s in apply_steps(plan, ready()))


def test_restore_only_brings_the_applied_project_up() -> None:
    plan = decide(facts(304, None, applied("r2", "shop"), (svc("db"),), None))
    assert isinstance(plan, Restore)
    # only the service that is down comes up (--no-deps): a finished job is not run again
    assert restore_steps(plan) == (
        Up("shop", "r2", services=("web",), every=("db", "web")),
        Verify("shop", "r2", ("db", "web")),
    )
    # a whole project's up names every service: a job done for its config is left out
    assert restore_steps(plan, only_missing=False)[0] == Up("shop", "r2", every=("db", "web"))


def test_every_box_step_names_its_phase() -> None:
    assert [s.phase for s in (Stage, Pull, Down, Up, Verify, Rollback, Commit)] == [
        "stage",
        "pull",
        "down",
        "up",
        "verify",
        "rollback",
        "commit",
    ]


def test_step_reprs_hold_no_file_contents() -> None:
    step = Stage("r2", "compose-SECRET", "env-SECRET", None, Credential("u", "pw-SECRET"))
    assert "SECRET" not in repr(step)


def test_rollback_steps_bring_the_lkg_back_then_verify_it() -> None:
    lkg = applied("r1", "oldshop", ("web",))
    assert rollback_steps(ready("shop"), lkg) == (
        Rollback("shop", "r2", "oldshop", "r1"),
        Verify("oldshop", "r1", ("web",)),
    )


def test_restore_can_pin_the_release_images() -> None:
    plan = decide(facts(304, None, applied("r2", "shop"), (svc("db"),), None))
    assert isinstance(plan, Restore)
    assert restore_steps(plan, pinned=True)[0] == Up("shop", "r2", True, ("web",), ("db", "web"))
    assert isinstance(restore_steps(plan, pinned=True)[1], Verify)
