"""systemd's own facts about the agent's units (``core.unit`` reads them): one ``systemctl
show`` of the timer and the service. None where systemctl is missing or systemd does not run
(a container, a box without it): then there is no unit to speak for."""

from __future__ import annotations

from monky_deployd.adapters.box import runner
from monky_deployd.core import unit
from monky_deployd.core.errors import DeployError


def read(timeout: float = 10) -> unit.Units | None:
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
        return None  # not booted with systemd, or no bus
    return unit.parse(result.stdout)
