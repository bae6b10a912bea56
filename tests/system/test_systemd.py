"""The real .deb under real systemd: systemd 252 as PID 1 in a Debian 12 container, the hardened
unit driving the host's Docker engine, against the loopback tenancy/OpenBao fakes on the host
network (``transport: plain``) and a real registry.

In order, in one container (about 4 minutes: the cadence is the real 60 s):

1. the sandbox is in force (proved before anything else: a copy of the installed unit with only
   ``ExecStart=`` swapped for a probe cannot write a directory it owns in /etc, has a private
   /tmp and no /proc/sys, and runs with the supplementary groups ``docker`` and ``ziti``; without
   the capabilities all three fail, and ``systemd-analyze security`` still says 1.3);
   ``MemoryMax=`` applies;
2. a Ziti fault (``transport: ziti``, the controller refusing connections; one start by hand): the
   real SDK in the package complains on stderr, yet the agent's line is the first error in the
   journal and carries the SDK's words;
3. the timer, enabled on a box up for more than 60 s, ticks at once: the hardened service applies
   revision r1 (a real container runs);
4. a ``systemctl daemon-reload`` right after that tick starts no extra tick (systemd 252 re-armed
   ``OnActiveSec=`` on every reload);
5. the next tick fails (tenancy answers 500): the unit is failed, ``journalctl -u monky-deployd
   -p err`` shows the agent's sentence naming the fault first (each entry at its priority, the
   code and the other side's words in ``MONKY_CODE`` and ``MONKY_DETAIL``);
6. an upgrade (a second build of the .deb, dpkg -i over the first; its postinst reloads systemd):
   the timer keeps firing after the failure, the next tick runs the new code (its User-Agent) and
   no-ops on the applied revision (no pull); every tick started >= 60 s after the previous ended;
7. a tick that skips its apply on purpose (suspended while a new revision is desired) exits 6
   and the unit is not failed (``SuccessExitStatus=6``: a held box must not fail it every minute);
8. purge removes the units, state, config and the timer's stamp, and leaves the deployed
   application running (docs/packaging.md).

Ticks are counted from the journal: systemd's own "Starting"/"Finished"/"Failed to start" entries
(by catalogue id) and the agent's ``tick.summary`` entries (``MONKY_EVENT``; tests/system/
test_journald.py checks the entries themselves).
"""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab
from tests.integration.net.test_identity import identity_json
from tests.system.debian import VERSION, SystemdBox

pytestmark = pytest.mark.docker

UNIT = "monky-deployd.service"
TIMER = "monky-deployd.timer"
STAMP = "/var/lib/systemd/timers/stamp-monky-deployd.timer"
CADENCE_S = 60.0  # OnUnitInactiveSec=
SPREAD_S = 20.0  # RandomizedDelaySec=
TICK_WAIT_S = CADENCE_S + SPREAD_S + 60  # the next tick, with room for a slow tick
# systemd's catalogue ids for a unit's job: starting, started/finished, failed.
STARTING = "7d4958e842da4a758f6c1cdc7b36dcc5"
ENDED = {"39f53479d3a045ac8e11786248231fbf", "be02cf6855d2428ba40df7e9d022f03d"}

PROBE = """#!/bin/sh
r=/var/lib/monky-deployd/probe
: >$r
touch /etc/monky-probe/x 2>/dev/null && echo etc-writable >>$r
echo x >/tmp/monky-probe && echo tmp-written >>$r
ls /proc/sys >/dev/null 2>&1 && echo proc-sys >>$r
echo groups: $(id -nG) >>$r
docker version --format 'engine={{.Server.Version}}' >>$r 2>&1
"""


@dataclass(frozen=True)
class Tick:
    start_us: int  # systemd's "Starting ..." (monotonic, µs)
    end_us: int | None  # its "Finished"/"Failed to start", None while running


def _us(entry: dict[str, Any]) -> int:
    return int(entry["__MONOTONIC_TIMESTAMP"])


def ticks(box: SystemdBox, since_us: int = 0) -> list[Tick]:
    """The service's runs since ``since_us``, from systemd's own journal entries about the unit."""
    out: list[Tick] = []
    start: int | None = None
    for e in box.journal(UNIT):
        if e.get("_PID") != "1" or _us(e) < since_us:
            continue
        if e.get("MESSAGE_ID") == STARTING:
            start = _us(e)
        elif e.get("MESSAGE_ID") in ENDED and start is not None:
            out.append(Tick(start, _us(e)))
            start = None
    if start is not None:
        out.append(Tick(start, None))
    return out


LEVELS = {2: "CRITICAL", 3: "ERROR", 4: "WARNING", 6: "INFO", 7: "DEBUG"}


def agent_line(e: dict[str, Any]) -> dict[str, Any]:
    """A journal entry of the agent as its fields (``MONKY_CODE`` -> ``code``), ``message``,
    ``level`` and the priority journald stored it at."""
    line: dict[str, Any] = {k[6:].lower(): v for k, v in e.items() if k.startswith("MONKY_")}
    prio = int(e["PRIORITY"])
    return {**line, "message": e.get("MESSAGE"), "level": LEVELS.get(prio), "_priority": prio}


def agent_lines(box: SystemdBox, since_us: int = 0) -> list[dict[str, Any]]:
    """The agent's entries since ``since_us`` (journald's native fields, agent/journald.py)."""
    return [
        agent_line(e)
        for e in box.journal(UNIT)
        if e.get("SYSLOG_IDENTIFIER") == "monky-deployd"
        and "MONKY_EVENT" in e
        and _us(e) >= since_us
    ]


def summaries(box: SystemdBox, since_us: int = 0) -> list[dict[str, Any]]:
    return [ln for ln in agent_lines(box, since_us) if ln["event"] == "tick.summary"]


def err_lines(box: SystemdBox, since_us: int) -> list[dict[str, Any]]:
    """What ``journalctl -u monky-deployd -p err`` shows from ``since_us`` on, in order (the
    entries: MESSAGE, and the agent's MONKY_* fields)."""
    return [e for e in box.journal(UNIT, "-p", "err") if _us(e) >= since_us]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for {what}"
        time.sleep(2)


def wait_ticks(box: SystemdBox, n: int, since_us: int) -> list[dict[str, Any]]:
    """Wait until the agent has summarised ``n`` ticks since ``since_us`` and systemd has ended
    the n-th run."""
    wait_for(
        f"tick {n}",
        lambda: (
            len(summaries(box, since_us)) >= n and all(t.end_us for t in ticks(box, since_us)[:n])
        ),
        TICK_WAIT_S,
    )
    return summaries(box, since_us)


def now_us(box: SystemdBox) -> int:
    """CLOCK_MONOTONIC in the container (the journal's __MONOTONIC_TIMESTAMP clock), µs."""
    return int(float(box.check("cut -d' ' -f1 /proc/uptime")) * 1_000_000)


def assert_cadence(box: SystemdBox, since_us: int) -> list[Tick]:
    """Every run started at least 60 s after the previous one ended: no extra ticks."""
    runs = ticks(box, since_us)
    for before, after in itertools.pairwise(runs):
        assert before.end_us is not None
        gap_s = (after.start_us - before.end_us) / 1e6
        assert gap_s >= CADENCE_S - 1, f"a tick started {gap_s:.1f} s after the previous ended"
    return runs


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory, registry: Registry, busybox_image: str
) -> Iterator[Lab]:
    image = registry.push(busybox_image, "env-e2e-01/web", "1.0")
    with Lab(tmp_path_factory.mktemp("systemd"), registry, image, db_password="s3cr3t-pa55") as lab:
        yield lab


def configure(box: SystemdBox, lab: Lab, **overrides: Any) -> None:
    """config.yaml and the grant, as install.sh leaves them (the grant travels on stdin)."""
    cfg = lab.estate.config(
        state_dir=Path("/var/lib/monky-deployd"), grant_file=Path("/etc/monky-deployd/grant.jwt")
    )
    cfg["disk"] = {"headroom_bytes": 64 * 1024 * 1024}
    cfg.update(overrides)
    box.sh(
        "install -o root -g monky-deployd -m 0640 /dev/stdin /etc/monky-deployd/config.yaml",
        input=yaml.safe_dump(cfg).encode(),
    )
    box.sh(
        "install -o monky-deployd -g monky-deployd -m 0600 /dev/stdin /etc/monky-deployd/grant.jwt",
        input=(lab.estate.grant + "\n").encode(),
    )


def prove_the_sandbox(box: SystemdBox) -> None:
    """The installed unit with only ExecStart= swapped: the namespaces really apply."""
    box.sh("install -m 0755 /dev/stdin /usr/local/sbin/monky-probe", input=PROBE.encode())
    # A directory in /etc the service's user owns: only ProtectSystem= keeps it from writing
    # there (plain /etc is root's anyway, so "cannot write /etc" alone would prove nothing).
    box.check("install -d -o monky-deployd -m 0700 /etc/monky-probe")
    box.check(
        "sed 's|^ExecStart=.*|ExecStart=/usr/local/sbin/monky-probe|' "
        f"/lib/systemd/system/{UNIT} > /run/systemd/system/monky-probe.service\n"
        "systemctl daemon-reload\n"
        "systemctl start monky-probe.service"
    )
    changed = box.sh(
        f"diff /lib/systemd/system/{UNIT} /run/systemd/system/monky-probe.service", check=False
    ).stdout
    assert [ln[:13] for ln in changed.splitlines() if ln[:1] in "<>"] == [
        "< ExecStart=/",
        "> ExecStart=/",
    ]
    probe = box.check("cat /var/lib/monky-deployd/probe").splitlines()
    assert "etc-writable" not in probe  # ProtectSystem=strict: / is read-only
    assert "tmp-written" in probe  # it wrote its /tmp...
    assert box.sh("test -e /tmp/monky-probe", check=False).returncode != 0  # ...a private one
    assert "proc-sys" not in probe  # ProcSubset=pid / ProtectKernelTunables=
    groups = next(ln for ln in probe if ln.startswith("groups:")).split()[1:]
    assert {"docker", "ziti"} <= set(groups)  # what `systemd-analyze security` does not see
    assert any(ln.startswith("engine=") for ln in probe), probe  # the socket, from the sandbox
    box.check(
        "rm -r /run/systemd/system/monky-probe.service /var/lib/monky-deployd/probe "
        "/usr/local/sbin/monky-probe /etc/monky-probe"
    )
    box.check("systemctl daemon-reload")


def a_ziti_fault_names_itself_first(box: SystemdBox, lab: Lab) -> int:
    """transport: ziti, the identity's controller refusing connections: the real 0.6 SDK in the
    package's venv complains on stderr, yet the agent's line is the first error in the journal
    and carries the SDK's words. One manual start, before the timer is enabled; its end (µs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        controller = f"https://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    identity = "/opt/openziti/etc/identities/env-e2e-01.json"
    box.sh(
        "install -d -m 0750 -g ziti /opt/openziti/etc/identities && "
        f"install -g ziti -m 0640 /dev/stdin {identity}",
        input=json.dumps(identity_json(controller)).encode(),
    )
    configure(box, lab, transport="ziti", identity=identity)
    since = now_us(box)
    assert box.sh(f"systemctl start {UNIT}", check=False).returncode != 0
    wait_for(  # the unit has ended; on a loaded box its last entries may still be on their way
        "the failed run's journal (the agent's error, systemd's end of the run)",
        lambda: (
            any("MONKY_CODE" in e for e in err_lines(box, since))
            and any(t.end_us for t in ticks(box, since))
        ),
        30,
    )
    errs = err_lines(box, since)
    first = agent_line(errs[0])  # the agent's sentence, not the SDK's "ERROR ziti-sdk:..."
    assert first.get("code") == "ZITI_CONTROLLER_UNREACHABLE", errs
    assert first["message"].startswith("ZITI_CONTROLLER_UNREACHABLE: ")
    assert "ziti-sdk" in first["detail"] and "CONTROLLER_UNAVAILABLE" in first["detail"]
    every = [str(e.get("MESSAGE")) for e in box.journal(UNIT) if _us(e) >= since]
    assert not any("ziti-sdk" in m for m in every[: every.index(first["message"])])
    box.check(f"rm {identity}; systemctl reset-failed {UNIT}")
    configure(box, lab)
    end = ticks(box, since)[0].end_us
    assert end is not None
    return end


def second_build(box: SystemdBox, deb: Path) -> str:
    """``deb`` rebuilt as a newer version whose code says so (its __version__)."""
    new = f"{VERSION}+systemd1"
    box.check(
        f"set -e; dpkg-deb -R /dist/{deb.name} /tmp/up\n"
        f"sed -i 's/^Version: .*/Version: {new}/' /tmp/up/DEBIAN/control\n"
        "init=$(echo /tmp/up/opt/monky-deployd/lib/python3.11/site-packages/monky_deployd/"
        "__init__.py)\n"
        f'sed -i \'s/^__version__ = .*/__version__ = "{new}"/\' "$init"\n'
        'rm -rf "$(dirname "$init")/__pycache__/__init__"*\n'
        "dpkg-deb --root-owner-group -Zgzip -b /tmp/up /tmp/up.deb >/dev/null"
    )
    return new


def test_the_package_under_real_systemd(pkg_image: str, built_deb: Path, lab: Lab) -> None:
    with SystemdBox(pkg_image) as box:
        box.check(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /dist/{built_deb.name}")
        # 1. Nothing counts until the sandbox is shown to be real.
        prove_the_sandbox(box)
        assert box.check(f"systemctl show -p MemoryMax --value {UNIT}").strip() == str(512 << 20)

        # 2. A Ziti fault, by hand: the agent's line is first, the SDK's words in it.
        a_ziti_fault_names_itself_first(box, lab)

        # 3. Configure, wait until the box has been up 60 s (OnBootSec= is then past), enable:
        # the first tick comes at once (OnBootSec=, not the OnUnitInactiveSec= of the manual run).
        configure(box, lab)
        lab.estate.tenancy.set_desired("r1", lab.bundle())
        booted_us = int(box.check("systemctl show -p UserspaceTimestampMonotonic --value"))
        wait_for("60 s of uptime", lambda: now_us(box) - booted_us > 61e6, 90)
        enabled_us = now_us(box)
        box.check(f"systemctl enable --now {TIMER} 2>/dev/null")
        first = wait_ticks(box, 1, enabled_us)
        assert first[0]["outcome"] == "applied" and first[0]["revision"] == "r1", first
        first_start_us = ticks(box, enabled_us)[0].start_us
        # at once: within the randomized delay of enabling. (Whether OnUnitInactiveSec= of the
        # manual run would have come later cannot be told apart here: the manual run ended about
        # 40 s before the enable, and 40 s + a 20 s spread overlaps its 60 s.)
        assert (first_start_us - enabled_us) / 1e6 <= SPREAD_S + 5
        assert set(lab.containers()) == {"web"}  # the hardened unit drove the host's engine
        pulls = lab.pulls()
        # `status` under real systemd, as root (this image has no D-Bus, which systemctl needs
        # for another user): the timer's next start, the box at r1 (exit 0)
        shown = box.sh("monky-deployd status --json", check=False)
        body = json.loads(shown.stdout)
        assert shown.returncode == 0 and body["state"] == "ok", shown.stdout + shown.stderr
        assert body["timer"]["next_run_at"] is not None and body["revisions"]["applied"] == "r1"

        # 4. A daemon-reload right after a tick: no extra tick 10-20 s later (the next is >= 60 s).
        box.check("systemctl daemon-reload")
        # 5. The next tick fails.
        failing_us = now_us(box)
        lab.estate.tenancy.set_raw_checkin(
            500, b'{"error":{"code":"INTERNAL","message":"deploy database unavailable"}}'
        )
        second = wait_ticks(box, 2, enabled_us)
        assert second[1]["outcome"] == "failed"
        assert box.sh(f"systemctl is-failed {UNIT}", check=False).stdout.strip() == "failed"
        errs = err_lines(box, failing_us)
        fault = agent_line(errs[0])  # the agent's line, before systemd's "Failed to start"
        assert fault["event"] == "tick.error" and fault["code"] == second[1]["code"]
        assert fault["code"] == "TENANCY_UNAVAILABLE" and "HTTP 500" in fault["message"]
        assert fault["message"].startswith("TENANCY_UNAVAILABLE: ")  # prose, code first
        assert fault["detail"] == "deploy database unavailable"  # tenancy's own words
        assert any("Failed to start" in str(e.get("MESSAGE")) for e in errs[1:])
        prios = {(ln["level"], ln["_priority"]) for ln in agent_lines(box, enabled_us)}
        assert prios <= {("INFO", 6), ("WARNING", 4), ("ERROR", 3), ("DEBUG", 7)}
        assert ("ERROR", 3) in prios and ("INFO", 6) in prios

        # 6. Upgrade while the timer runs; the timer keeps firing after the failure, and the
        # applied revision is left as it is: a noop (no pull).
        lab.estate.tenancy.clear_raw_checkin()
        new_version = second_build(box, built_deb)
        box.check("dpkg -i /tmp/up.deb >/dev/null")
        third = wait_ticks(box, 3, enabled_us)
        assert third[2]["outcome"] == "noop" and third[2]["revision"] == "r1"
        assert lab.pulls() == pulls
        assert lab.estate.tenancy.user_agents[-1] == f"monky-deployd/{new_version}"
        assert box.sh(f"systemctl is-failed {UNIT}", check=False).stdout.strip() == "inactive"
        runs = assert_cadence(box, enabled_us)
        assert len(runs) == 3 and len(summaries(box, enabled_us)) == 3  # reloads added no tick

        # 7. A tick that skips its apply on purpose (suspended, with a new revision desired)
        # exits 6, and SuccessExitStatus=6 keeps the unit from failing for it.
        box.check(
            "runuser -u monky-deployd -- /usr/bin/monky-deployd suspend --reason systemd-test"
        )
        lab.estate.tenancy.set_desired("r2", lab.bundle(env_template="LOG_LEVEL=debug\n"))
        skipped_us = now_us(box)
        assert box.sh(f"systemctl start {UNIT}", check=False).returncode == 0
        assert box.check(f"systemctl show -p ExecMainStatus --value {UNIT}").strip() == "6"
        assert box.sh(f"systemctl is-failed {UNIT}", check=False).stdout.strip() == "inactive"
        wait_for("the skipped tick's summary", lambda: bool(summaries(box, skipped_us)), 30)
        skipped = summaries(box, skipped_us)
        assert skipped and skipped[-1]["outcome"] == "held", skipped
        assert skipped[-1]["code"] == "SUSPENDED"

        # 8. Purge: the agent goes, the application stays.
        box.check(f"touch {STAMP}")  # what releases up to 0.1.0 (Persistent=true) left behind
        box.check("dpkg --purge monky-deployd >/dev/null")
        gone = box.sh(
            f"ls -d {STAMP} /var/lib/monky-deployd /etc/monky-deployd "
            f"/lib/systemd/system/{UNIT} /lib/systemd/system/{TIMER} 2>&1",
            check=False,
        ).stdout
        assert gone.count("No such file or directory") == 5, gone
        assert TIMER not in box.check("systemctl list-timers --all --no-legend")
        assert set(lab.containers()) == {"web"}  # still running: removing the agent is not
        # removing the box's application (docs/packaging.md, OPERATIONS.md)
