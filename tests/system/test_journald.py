"""The agent's lines read back from a real journald (systemd 252 as PID 1 in a Debian 12
container, the real .deb): journald's own conventions (issue 27).

1. A probe under a copy of the installed unit (its whole sandbox; only ``ExecStart=`` swapped)
   logs through the package's ``logs.setup("auto")``: stdout is the journal, so each record is
   one native entry: MESSAGE the sentence on one line (several lines joined, ``=``, non-ASCII), the
   priority from the level, the ``MONKY_*`` fields (a newline inside a value kept, a secret
   masked in the fields as in the message), an entry too large for a datagram whole (a memfd,
   through ``SystemCallFilter=``); nothing fell back to the stream.
2. The real unit, a steady tick (tenancy has no desired state): every line is the unit's
   (``_SYSTEMD_UNIT``), the summary too (sent just before the process exits), at priority 6.
3. OpenBao and tenancy both down: the unit fails; ``journalctl -u monky-deployd -p err`` shows
   the agent's sentence first, code first, naming both services, then systemd's own lines; and
   ``journalctl -u monky-deployd MONKY_CODE=OPENBAO_UNREACHABLE`` lists the fault and the summary;
4. the names systemd gives exit statuses 1-7 (``status=5/NOTINSTALLED``: LSB's words) are the
   ones OPERATIONS.md's table explains.
About 30 s with the .deb built (the session builds it once for the system tier).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.fakes.estate import Estate
from tests.system.debian import REPO, SystemdBox, until

pytestmark = pytest.mark.docker

UNIT = "monky-deployd.service"
PROBE_UNIT = "monky-jprobe.service"
SECRET = "s3cr3t-Pa55word-0123"
DETAIL = f"the registry said:\nuser=ops password={SECRET}\nnon-ASCII: é 😀"
BIG = 300_000  # bytes of one field: more than a datagram carries

PROBE = f"""
import logging
from monky_deployd.agent import logs
from monky_deployd.core.render.mask import Masker

logs.setup("auto", logging.DEBUG)
logs.set_tick("00112233445566ff")
logs.set_masker(Masker([{SECRET!r}]))
log = logging.getLogger("monky_deployd.probe")
with logs.phase("bake"):
    log.error(
        "BAKE_FAILED: web restarted 3 times inside the bake (a=b).\\nCheck: web's logs",
        extra={{"event": "tick.error", "code": "BAKE_FAILED", "revision": "r7",
               "service": "web", "detail": {DETAIL!r}, "count": 3}},
    )
log.warning("a long detail", extra={{"event": "probe.long", "detail": "x" * {BIG} + "\\nend"}})
log.info("a plain line", extra={{"event": "probe.info"}})
log.debug("a debug line", extra={{"event": "probe.debug"}})
"""


def fields(entry: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k.startswith("MONKY_")}


def ours(box: SystemdBox, unit: str, *args: str) -> list[dict[str, Any]]:
    """The process's own entries (not systemd's about the unit)."""
    return [e for e in box.journal(unit, "--all", *args) if e.get("_PID") != "1"]


def now_us(box: SystemdBox) -> int:
    """CLOCK_MONOTONIC in the container (the journal's __MONOTONIC_TIMESTAMP clock), µs."""
    return int(float(box.check("cut -d' ' -f1 /proc/uptime")) * 1_000_000)


def after(since_us: int, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in entries if int(e["__MONOTONIC_TIMESTAMP"]) >= since_us]


Entries = list[dict[str, Any]]


def events(entries: Entries) -> list[Any]:
    return [e.get("MONKY_EVENT") for e in entries]


@pytest.fixture
def estate() -> Iterator[Estate]:
    with Estate(env="env-journal-01") as est:
        yield est


def configure(box: SystemdBox, estate: Estate) -> None:
    cfg = estate.config(
        state_dir=Path("/var/lib/monky-deployd"), grant_file=Path("/etc/monky-deployd/grant.jwt")
    )
    box.sh(
        "install -o root -g monky-deployd -m 0640 /dev/stdin /etc/monky-deployd/config.yaml",
        input=yaml.safe_dump(cfg).encode(),
    )
    box.sh(
        "install -o monky-deployd -g monky-deployd -m 0600 /dev/stdin /etc/monky-deployd/grant.jwt",
        input=(estate.grant + "\n").encode(),
    )


def probe_entries(box: SystemdBox) -> list[dict[str, Any]]:
    """The probe run under the installed unit's sandbox; its journal entries."""
    box.sh("install -m 0644 /dev/stdin /usr/local/lib/monky-jprobe.py", input=PROBE.encode())
    python = box.check("head -1 /opt/monky-deployd/bin/monky-deployd").strip().removeprefix("#!")
    box.check(
        f"sed 's|^ExecStart=.*|ExecStart={python} /usr/local/lib/monky-jprobe.py|' "
        f"/lib/systemd/system/{UNIT} > /run/systemd/system/{PROBE_UNIT}\n"
        f"systemctl daemon-reload\nsystemctl start {PROBE_UNIT}"
    )
    return until(lambda: ours(box, PROBE_UNIT), lambda got: "probe.debug" in events(got))


def test_the_journal_holds_sentences_and_fields(
    pkg_image: str, built_deb: Path, estate: Estate
) -> None:
    with SystemdBox(pkg_image) as box:
        box.check(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /dist/{built_deb.name}")

        # 1. The probe: every record one native entry, byte for byte.
        entries = probe_entries(box)
        assert [e.get("MONKY_EVENT") for e in entries] == [
            "tick.error",
            "probe.long",
            "probe.info",
            "probe.debug",
        ], entries  # nothing fell back to the stream (a line there has no MONKY_EVENT)
        fault, long, info, debug = entries
        assert fault["MESSAGE"] == (  # one line: its lines joined (issue 36)
            "BAKE_FAILED: web restarted 3 times inside the bake (a=b). Check: web's logs"
        )
        assert [e["PRIORITY"] for e in entries] == ["3", "4", "6", "7"]
        assert fields(fault) == {
            "MONKY_EVENT": "tick.error",
            "MONKY_CODE": "BAKE_FAILED",
            "MONKY_REVISION": "r7",
            "MONKY_SERVICE": "web",
            "MONKY_DETAIL": DETAIL.replace(SECRET, "***"),
            "MONKY_COUNT": "3",
            "MONKY_TICK": "00112233445566ff",
            "MONKY_PHASE": "bake",
        }
        assert fault["SYSLOG_IDENTIFIER"] == "monky-deployd"
        assert {e["_SYSTEMD_UNIT"] for e in entries} == {PROBE_UNIT}
        assert long["MONKY_DETAIL"] == "x" * BIG + "\nend"  # through a memfd, in the sandbox
        assert SECRET not in json.dumps(entries)
        assert info["MESSAGE"] == "a plain line" and debug["MESSAGE"] == "a debug line"
        # a field filters
        found = ours(box, PROBE_UNIT, "MONKY_CODE=BAKE_FAILED")
        assert [e["MONKY_EVENT"] for e in found] == ["tick.error"]

        # 2. A steady tick of the real unit: every line the unit's, at priority 6.
        configure(box, estate)
        box.check(f"systemctl start {UNIT}")
        steady = until(lambda: ours(box, UNIT), lambda got: "tick.summary" in events(got))
        assert steady and all(e.get("_SYSTEMD_UNIT") == UNIT for e in steady), steady
        assert all("MONKY_EVENT" in e and e["PRIORITY"] == "6" for e in steady), steady
        summary = steady[-1]
        assert (summary["MONKY_EVENT"], summary["MONKY_OUTCOME"]) == ("tick.summary", "idle")
        assert summary["MONKY_PHASE"] == "summary" and len(summary["MONKY_TICK"]) == 16
        assert not summary["MESSAGE"].startswith("{")  # the sentence, not a JSON object

        # 3. Both services down: -p err reads as prose, the fault first, both named.
        bao = f"{estate.bao.host}:{estate.bao.port}"
        tenancy = f"{estate.tenancy.host}:{estate.tenancy.port}"
        estate.bao.stop()
        estate.tenancy.stop()
        since = now_us(box)  # (a cursor of the system journal would skip entries of the agent's
        # own user journal, user-<uid>.journal: journald splits by uid)
        assert box.sh(f"systemctl start {UNIT}", check=False).returncode != 0
        errs = until(  # through systemd's own "Failed with result", after the agent's summary
            lambda: after(since, box.journal(UNIT, "-p", "err")),
            lambda got: (
                "tick.summary" in events(got)
                and any(e.get("_PID") == "1" for e in got[events(got).index("tick.summary") :])
            ),
        )
        first = errs[0]
        assert first["MONKY_EVENT"] == "tick.error" and first["PRIORITY"] == "3", errs
        assert first["MESSAGE"].startswith(f"OPENBAO_UNREACHABLE: cannot reach OpenBao at {bao}")
        assert "tenancy is down too: TENANCY_UNREACHABLE" in first["MESSAGE"]
        assert tenancy in first["MESSAGE"]
        assert first["MONKY_CODE"] == "OPENBAO_UNREACHABLE" and first["MONKY_PHASE"] == "token"
        assert errs[1]["MONKY_EVENT"] == "tick.summary"
        assert any(e.get("_PID") == "1" for e in errs[2:])  # systemd's "Failed with result"
        found = after(since, box.journal(UNIT, "MONKY_CODE=OPENBAO_UNREACHABLE"))
        assert [e["MONKY_EVENT"] for e in found] == ["tick.error", "tick.summary"]
        shown = box.check(f"journalctl -u {UNIT} -p err --no-pager -n {len(errs)}")
        print(shown)  # what an operator reads at 02:00 (the report quotes it)
        assert '{"ts"' not in shown and "OPENBAO_UNREACHABLE: cannot reach OpenBao" in shown
        exited = box.check(f"journalctl -u {UNIT} -o cat --no-pager | grep 'Main process exited'")
        assert exited.splitlines()[-1].endswith("status=1/FAILURE")

        # 4. The names systemd gives exit statuses 1-7 are the ones OPERATIONS.md explains.
        assert systemd_names(box) == documented_names()


def documented_names() -> dict[int, str]:
    """OPERATIONS.md's table: exit -> what systemd shows."""
    text = (REPO / "OPERATIONS.md").read_text()
    rows = re.findall(r"^\| (\d) \| `(\d)/([A-Z]+)` \|", text, re.MULTILINE)
    assert rows, "OPERATIONS.md has no table of systemd's names"
    assert all(a == b for a, b, _ in rows)
    return {int(n): name for n, _, name in rows}


def systemd_names(box: SystemdBox) -> dict[int, str]:
    """What systemd 252 logs for a service that exits 1..7."""
    codes = range(1, 8)
    box.check(
        "".join(
            f"printf '[Service]\\nType=oneshot\\nExecStart=/bin/sh -c \"exit {n}\"\\n' "
            f"> /run/systemd/system/monky-exit-{n}.service\n"
            for n in codes
        )
        + "systemctl daemon-reload"
    )
    found = {}
    for n in codes:
        box.sh(f"systemctl start monky-exit-{n}.service", check=False)
        exited = (
            f"journalctl --sync; journalctl -u monky-exit-{n} -o cat | grep 'Main process exited'"
        )
        line = until(lambda: box.sh(exited, check=False).stdout, bool)
        status = re.search(r"status=(\d+)/(\S+)", line)
        assert status is not None, line
        found[int(status[1])] = status[2]
    return found
