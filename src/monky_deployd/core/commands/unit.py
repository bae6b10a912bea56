"""What systemd says about the agent's units, and what doctor and status make of it. PURE.

``parse(text)`` reads ``systemctl show monky-deployd.timer monky-deployd.service -p ...
--timestamp=unix`` (blocks of ``Key=value`` lines, one per unit, blank-line separated) into a
``Units``; ``timer_check`` is doctor's timer line, ``service_check`` its last-tick line and
``failed_reason`` the sentence status shows when the unit's last tick failed. Whoever runs
doctor or status (root, the service user), these are the unit's own facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from monky_deployd.core.commands.checks import Check, one_line

TIMER = "monky-deployd.timer"
SERVICE = "monky-deployd.service"
# where an installed unit file lies (the admin's, then the packages' on Debian and merged /usr)
UNIT_DIRS = ("/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")
PROPERTIES = (
    "Id,LoadState,ActiveState,SubState,UnitFileState,Result,ExecMainStatus,ExecMainExitTimestamp"
)
ENABLED = ("enabled", "enabled-runtime", "static", "alias", "linked", "linked-runtime")


@dataclass(frozen=True)
class UnitFacts:
    load: str = ""  # loaded | not-found | masked ...
    active: str = ""  # active | inactive | failed | activating ...
    sub: str = ""
    file_state: str = ""  # enabled | disabled | static | "" ...
    result: str = ""  # success | exit-code | signal | timeout ...
    exit_status: int | None = None
    exited_at: float | None = None  # ExecMainExitTimestamp, seconds since the epoch


@dataclass(frozen=True)
class Units:
    timer: UnitFacts
    service: UnitFacts


def _stamp(value: str) -> float | None:
    value = value.strip()
    if value.startswith("@") and value[1:].isdigit():
        return float(value[1:]) or None
    return None


def _facts(props: dict[str, str]) -> UnitFacts:
    status = props.get("ExecMainStatus", "")
    return UnitFacts(
        load=props.get("LoadState", ""),
        active=props.get("ActiveState", ""),
        sub=props.get("SubState", ""),
        file_state=props.get("UnitFileState", ""),
        result=props.get("Result", ""),
        exit_status=int(status) if status.isdigit() else None,
        exited_at=_stamp(props.get("ExecMainExitTimestamp", "")),
    )


def parse(text: str) -> Units:
    """``systemctl show``'s blocks by their ``Id=`` (a unit missing from the text: no facts)."""
    found: dict[str, UnitFacts] = {}
    for block in text.split("\n\n"):
        props: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                props[key.strip()] = value.strip()
        if "Id" in props:
            found[props["Id"]] = _facts(props)
    return Units(found.get(TIMER, UnitFacts()), found.get(SERVICE, UnitFacts()))


@dataclass(frozen=True)
class NoBus:
    """systemd runs here (PID 1), but this user's ``systemctl`` cannot reach it: without the
    system bus (D-Bus, package ``dbus``) only root's systemctl does (systemd's private socket
    is root's). ``words``: systemctl's own; ``installed``: the bus's unit is installed, not
    running (installing the package does not start it)."""

    words: str
    installed: bool

    def fact(self, user: str, about: str) -> str:
        bus = "is not running" if self.installed else "is not installed (package dbus)"
        return (
            f"systemd runs here, but {user} cannot ask it about {about}: the system bus "
            f"(D-Bus) {bus}, and only root's systemctl reaches systemd without it "
            f"({one_line(self.words)})"
        )

    @property
    def fix(self) -> str:
        start = "systemctl start dbus.service"
        return f"`{start}`" if self.installed else f"`apt-get install dbus && {start}`"

    def check(self, name: str, user: str, about: str) -> Check:
        return Check(name, "WARN", self.fact(user, about), self.fix)


def last_tick_failed(units: Units) -> bool:
    return units.service.active == "failed" or units.service.result not in ("", "success")


def failed_reason(units: Units, when: str) -> str:
    """The sentence of a failed last tick: its exit status, its result, when it ended."""
    svc = units.service
    how = (
        f"exited {svc.exit_status}" if svc.exit_status else f"ended with {svc.result or 'failure'}"
    )
    at = f" at {when}" if when else ""
    return (
        f"the unit's last tick failed: {SERVICE} {how} ({svc.result or svc.active}){at}; "
        f"`journalctl -u {SERVICE} -p err -n 5` names the fault"
    )


def timer_check(name: str, units: Units) -> Check:
    """The timer is installed, enabled and waiting (active): else nothing starts a tick."""
    timer = units.timer
    fix = f"`systemctl enable --now {TIMER}`"
    if timer.load in ("", "not-found"):
        return Check(
            name,
            "FAIL",
            f"{TIMER} is not installed: nothing starts the agent's ticks",
            f"that the monky-deployd package is installed (it ships {TIMER}), then {fix}",
        )
    if timer.load == "masked":
        return Check(
            name,
            "FAIL",
            f"{TIMER} is masked: nothing starts the agent's ticks",
            f"`systemctl unmask {TIMER}`, then {fix}",
        )
    enabled = timer.file_state in ENABLED
    if enabled and timer.active == "active":
        return Check(name, "OK", f"{TIMER} is {timer.file_state} and {timer.sub or 'active'}")
    if not enabled:
        now = "but active until the next boot" if timer.active == "active" else "and inactive"
        return Check(
            name,
            "FAIL" if timer.active != "active" else "WARN",
            f"{TIMER} is {timer.file_state or 'not enabled'} {now}: "
            + ("nothing starts the agent's ticks" if timer.active != "active" else "no tick after"),
            fix,
        )
    return Check(
        name,
        "FAIL",
        f"{TIMER} is {timer.file_state} but {timer.active or 'not active'}"
        f"{f' ({timer.result})' if timer.result not in ('', 'success') else ''}: "
        "nothing starts the agent's ticks",
        f"`systemctl start {TIMER}`",
    )


def service_check(name: str, units: Units, when: str) -> Check:
    """The unit's last tick: a failed one is a FAIL whoever runs doctor."""
    if not last_tick_failed(units):
        svc = units.service
        ended = f" at {when}" if when else ""
        fact = (
            f"{SERVICE} is not failed (its last run ended{ended})"
            if svc.exited_at
            else f"{SERVICE} has not run a tick since boot"
        )
        return Check(name, "OK", fact)
    return Check(
        name,
        "FAIL",
        failed_reason(units, when).split("; ")[0],
        f"`journalctl -u {SERVICE} -p err -n 5` names the fault; once fixed, the next tick "
        f"clears it (or `systemctl reset-failed {SERVICE}`)",
    )
