"""core.commands.unit: systemctl show's blocks, doctor's timer and last-tick lines, status's
sentence."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.commands import unit

SHOWN = """Id=monky-deployd.timer
LoadState=loaded
ActiveState={timer_active}
SubState=waiting
UnitFileState={file_state}
Result=success
ExecMainStatus=
ExecMainExitTimestamp=

Id=monky-deployd.service
LoadState=loaded
ActiveState={svc_active}
SubState={svc_active}
UnitFileState=static
Result={result}
ExecMainStatus={status}
ExecMainExitTimestamp=@1796362580
"""


def units(
    timer_active: str = "active",
    file_state: str = "enabled",
    svc_active: str = "inactive",
    result: str = "success",
    status: int = 0,
) -> unit.Units:
    return unit.parse(SHOWN.format(**locals()))


def test_parse_reads_both_units() -> None:
    got = units(svc_active="failed", result="exit-code", status=5)
    assert got.timer.active == "active" and got.timer.file_state == "enabled"
    assert got.service.exit_status == 5 and got.service.exited_at == 1796362580.0
    assert unit.parse("") == unit.Units(unit.UnitFacts(), unit.UnitFacts())


def test_an_enabled_waiting_timer_is_ok_and_a_stopped_one_fails() -> None:
    assert unit.timer_check("timer", units()).status == "OK"
    stopped = unit.timer_check("timer", units(timer_active="inactive"))
    assert stopped.status == "FAIL"
    assert stopped.fact.startswith("monky-deployd.timer is enabled but inactive")
    assert "`systemctl start monky-deployd.timer`" in stopped.hint
    off = unit.timer_check("timer", units(timer_active="inactive", file_state="disabled"))
    assert off.status == "FAIL" and "`systemctl enable --now monky-deployd.timer`" in off.hint
    gone = unit.timer_check("timer", unit.parse("Id=monky-deployd.timer\nLoadState=not-found\n"))
    assert gone.status == "FAIL" and "not installed" in gone.fact


def test_a_failed_last_tick_fails_doctor_and_names_its_exit() -> None:
    failed = units(svc_active="failed", result="exit-code", status=5)
    assert unit.last_tick_failed(failed)
    check = unit.service_check("last-tick", failed, "2026-12-04T05:36:20Z")
    assert check.status == "FAIL"
    assert check.fact == (
        "the unit's last tick failed: monky-deployd.service exited 5 (exit-code) at "
        "2026-12-04T05:36:20Z"
    )
    assert "journalctl -u monky-deployd.service -p err" in check.hint
    assert unit.service_check("last-tick", units(), "t").status == "OK"


@given(
    st.sampled_from(["active", "inactive", "failed", "activating", ""]),
    st.sampled_from(["enabled", "disabled", "static", "masked", ""]),
    st.sampled_from(["active", "inactive", "failed", "activating"]),
    st.sampled_from(["success", "exit-code", "signal", "timeout", ""]),
)
def test_ok_only_when_the_timer_waits_and_the_last_tick_did_not_fail(
    timer_active: str, file_state: str, svc_active: str, result: str
) -> None:
    got = units(timer_active, file_state, svc_active, result, 1)
    timer_ok = unit.timer_check("timer", got).status == "OK"
    assert timer_ok == (timer_active == "active" and file_state in unit.ENABLED)
    tick_ok = unit.service_check("last-tick", got, "").status == "OK"
    assert tick_ok == (svc_active != "failed" and result in ("success", ""))


def test_no_bus_names_the_missing_bus_and_the_command_that_starts_one() -> None:
    words = "Failed to connect to bus: No such file or directory"
    absent = unit.NoBus(words, installed=False)
    check = absent.check("timer", "monky-deployd", unit.TIMER)
    assert check.status == "WARN"
    assert check.fact.startswith(
        "systemd runs here, but monky-deployd cannot ask it about monky-deployd.timer: the "
        "system bus (D-Bus) is not installed (package dbus)"
    )
    assert words in check.fact
    assert check.hint == "`apt-get install dbus && systemctl start dbus.service`"
    stopped = unit.NoBus(words, installed=True)
    assert "is not running" in stopped.fact("u", unit.SERVICE)
    assert stopped.fix == "`systemctl start dbus.service`"
