"""The fault catalogue: one identity per fault, outcome and exit status from the table."""

from __future__ import annotations

import pytest

from monky_deployd.core.errors import CATALOGUE, Code
from monky_deployd.core.faults import DeployError


def test_a_code_is_its_name_on_the_wire_and_in_the_journal() -> None:
    for code in Code:
        assert code == code.name and f"{code}" == code.name and str(code) == code.name


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (Code.CONFIG_INVALID, 3),
        (Code.CONFIG_MISSING, 3),
        (Code.LOCK_BUSY, 4),
        (Code.ENV_INCOMPLETE, 5),
        (Code.DISK_INSUFFICIENT, 5),
        (Code.GRANT_SUPERSEDED, 5),
        (Code.PULL_FAILED, 1),
        (Code.TENANCY_UNREACHABLE, 1),
        (Code.INTERNAL, 1),
    ],
)
def test_exit_status_comes_from_the_code(code: Code, status: int) -> None:
    assert code.exit_status == status


def test_every_refused_code_exits_5_and_every_failed_one_1_but_config_lock_hold_wait() -> None:
    for code in Code:
        if code.family == "config":
            assert code.exit_status == 3
        elif code is Code.LOCK_BUSY:
            assert code.exit_status == 4
        elif code.family == "hold":
            assert code.exit_status == 6
        elif code.family == "wait":
            assert code.exit_status == 7
        else:
            assert code.exit_status == {"refused": 5, "failed": 1}[code.outcome]


def test_an_error_takes_its_outcome_from_the_catalogue() -> None:
    assert DeployError("x", code=Code.SECRET_MISSING).outcome == "refused"
    assert DeployError("x", code=Code.UP_FAILED).outcome == "failed"
    assert DeployError("x", code=Code.DOCKER_UNAVAILABLE, outcome="refused").outcome == "refused"


def test_a_fault_names_its_code() -> None:
    with pytest.raises(TypeError):
        DeployError("no code")  # type: ignore[call-arg]


def test_both_services_unreachable_are_transport_faults() -> None:
    for code in (Code.TENANCY_UNREACHABLE, Code.OPENBAO_UNREACHABLE, Code.TENANCY_TIMEOUT):
        assert code.family == "transport" and code.outcome == "failed"


def test_the_first_line_is_code_sentence_and_what_to_check() -> None:
    err = DeployError("the disk is full", code=Code.DISK_FULL, hint="free space")
    assert str(err) == "DISK_FULL: the disk is full. Check: free space"


def test_the_catalogue_covers_every_code_once() -> None:
    assert list(CATALOGUE) == list(dict.fromkeys(CATALOGUE))
    assert set(CATALOGUE) == set(Code)
