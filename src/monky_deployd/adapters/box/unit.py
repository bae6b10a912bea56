"""systemd's own facts about the agent's units (``core.commands.unit`` reads them): one ``systemctl
show`` of the timer and the service. None where systemctl is missing or systemd does not run
(a container, a box without it): then there is no unit to speak for. ``NoBus`` where systemd
runs but this user's systemctl cannot reach it (no system bus: only root's reaches systemd
without D-Bus)."""

from __future__ import annotations

from pathlib import Path

from monky_deployd.adapters.box import runner
from monky_deployd.core.commands import unit
from monky_deployd.core.faults import DeployError

BOOTED = Path("/run/systemd/system")  # systemd is PID 1 (sd_booted)
# the system bus's unit (Debian's package dbus ships it; dbus-daemon alone does not)
DBUS_UNITS = tuple(Path(d, "dbus.service") for d in unit.UNIT_DIRS)


def read(timeout: float = 10) -> unit.Units | unit.NoBus | None:
    argv = (
        "systemctl",
        "show",
        unit.TIMER,
        unit.SERVICE,
        "-p",
        unit.PROPERTIES,
        "--timestamp=unix",
    )
    try:
        result = runner.run(argv, env=runner.base_env(), timeout=timeout, check=False)
    except DeployError:
        return None  # no systemctl here
    if result.returncode != 0:
        words = (result.stderr or result.stdout).strip()
        if BOOTED.is_dir() and "failed to connect to bus" in words.lower():
            # systemd runs; this user cannot reach it without the system bus (issue 36)
            return unit.NoBus(words, any(u.exists() for u in DBUS_UNITS))
        return None  # not booted with systemd
    return unit.parse(result.stdout)
