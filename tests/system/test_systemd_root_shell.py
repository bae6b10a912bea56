"""A root shell on a box with the .deb under real systemd 252 (issue 27): what the operator's
hands do after the install, and what ``status`` and ``doctor`` (run as root) say about the unit.

In one container (about 30 s; no tick waits for the timer's cadence):

1. the timer enabled but not started: doctor FAILs it (not "OK ... is enabled"), status says no
   tick comes instead of "no systemd timer here";
2. ``monky-deployd apply --once`` typed as root ticks as monky-deployd: every entry of the state
   dir belongs to monky-deployd afterwards;
3. the unit's own tick fails (config.yaml made unreadable to monky-deployd): root's status says
   failed, naming the unit's exit, although the ledger's last tick (root's) was fine; root's
   doctor FAILs the last tick;
4. the timer started: doctor OK, status reads its next elapse.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.fakes.estate import Estate
from tests.system.debian import SystemdBox

pytestmark = pytest.mark.docker

STATE = "/var/lib/monky-deployd"
UNIT = "monky-deployd.service"
TIMER = "monky-deployd.timer"


@pytest.fixture
def estate() -> Iterator[Estate[Any]]:
    found: Estate[Any] = Estate(env="env-root-02").start()
    try:
        yield found
    finally:
        found.stop()


def doctor_line(box: SystemdBox, check: str) -> str:
    out = box.sh("monky-deployd doctor", check=False).stdout
    return next(ln for ln in out.splitlines() if ln.split(" ")[1] == f"{check}:")


def status(box: SystemdBox) -> tuple[int, dict[str, Any], str]:
    shown = box.sh("monky-deployd status --json", check=False)
    table = box.sh("monky-deployd status", check=False).stdout
    return shown.returncode, json.loads(shown.stdout), table


def test_root_shell_under_real_systemd(
    pkg_image: str, built_deb: Path, estate: Estate[Any]
) -> None:
    with SystemdBox(pkg_image) as box:
        box.check(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /dist/{built_deb.name}")
        cfg = estate.config(state_dir=Path(STATE), grant_file=Path("/etc/monky-deployd/grant.jwt"))
        box.sh(
            "install -o root -g monky-deployd -m 0640 /dev/stdin /etc/monky-deployd/config.yaml",
            input=yaml.safe_dump(cfg).encode(),
        )
        box.sh(
            "install -o monky-deployd -g monky-deployd -m 0600 /dev/stdin "
            "/etc/monky-deployd/grant.jwt",
            input=(estate.grant + "\n").encode(),
        )
        # 1. enabled, not started
        box.check(f"systemctl enable {TIMER} 2>/dev/null")
        line = doctor_line(box, "timer")
        assert line.startswith(f"FAIL timer: {TIMER} is enabled but inactive"), line
        assert f"`systemctl start {TIMER}`" in line
        _, body, table = status(box)
        assert body["timer"]["next_run_at"] is None and body["timer"]["stopped"], body["timer"]
        shown = next(ln for ln in table.splitlines() if ln.startswith("next tick "))
        assert shown.endswith(
            f" none: {TIMER} is enabled but inactive: nothing starts the agent's ticks; "
            f"`systemctl start {TIMER}`"
        ), table

        # 2. root's apply ticks as monky-deployd
        tick = box.sh("monky-deployd apply --once", check=False)
        assert tick.returncode == 0, tick.stdout + tick.stderr
        assert "running as monky-deployd" in tick.stdout
        foreign = box.check(f"find {STATE} ! -user monky-deployd -printf '%P %u\\n'")
        assert foreign == "", foreign
        assert "ledger.json" in box.check(f"ls {STATE}")
        assert status(box)[1]["state"] == "stale"  # the timer is still stopped

        # 3. the unit's tick fails before it can record anything
        box.check("chmod 0600 /etc/monky-deployd/config.yaml")
        box.sh(f"systemctl start {UNIT}", check=False)
        assert box.check(f"systemctl is-failed {UNIT} || true").strip() == "failed"
        box.check("chmod 0640 /etc/monky-deployd/config.yaml")
        code, body, table = status(box)
        assert (body["state"], code) == ("failed", 1), body
        assert body["reason"].startswith(
            f"the unit's last tick failed: {UNIT} exited 3 (exit-code) at "
        ), body["reason"]
        assert "last tick failed" in table
        line = doctor_line(box, "last-tick")
        assert line.startswith(f"FAIL last-tick: the unit's last tick failed: {UNIT} exited 3")

        # 4. the timer started: it waits, and status reads when it fires next
        box.check(f"systemctl reset-failed {UNIT}; systemctl start {TIMER}")
        assert doctor_line(box, "timer").startswith(f"OK timer: {TIMER} is enabled and waiting")
        _, body, _ = status(box)
        assert body["timer"]["next_run_at"] is not None, body["timer"]
        assert body["timer"]["stopped"] is None
