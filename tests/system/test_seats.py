"""What the operator reads is true from every seat (issue 36): the .deb under real systemd 252 in
the package's own test image (systemd installed ``--no-install-recommends``: no D-Bus), ``status``
and ``doctor`` run as the service user and as root, the unit's own tick and its first ``err``
journal line. Every printed hint of a code whose fix is one command is OPERATIONS.md's fix for
that code (``tests/repo/test_fixes.documented_fix``).

One container for the module (about two minutes with the .deb built), each test setting the
state it needs:

1. a state dir root owns (``chown -R root``): ``unreadable`` (exit 15) from both seats, doctor's
   ``state-dir`` before ``compose``, root's ``apply`` refused naming what root's doctor names;
   the unit's tick succeeds (``StateDirectory=`` re-owns the tree); a root-owned ``docker/``
   inside fails it (``STATE_UNWRITABLE``), and the printed ``chown`` mends it;
2. an identity the service user (already in ``ziti``) cannot read: the hint is the package's
   helper, which makes it readable and keeps its owner, group and a tunneler-style rewrite;
3. ``transport: plain`` with install.sh's run-host drop-in and a tenancy name that does not
   resolve: doctor FAILs both, each with a command;
4. no D-Bus: the service user's doctor and status say that the bus is missing, root's see the
   timer;
5. ``CONFIG_INVALID`` is one journal line;
6. an operator in the adm group: status and doctor send it to root's seat (the files are as
   the package sets them), the journal is readable to it;
7. ``install.sh --transport plain`` removes the run-host drop-in an earlier ziti run left;
8. purge: nothing of the agent's stays in ``systemctl --failed``; what it keeps is what
   OPERATIONS.md lists.

Run with ``-s`` to see each seat's output as printed.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd.core.commands import fixes
from monky_deployd.core.errors import Code
from monky_deployd_testkit.fakes.estate import Estate
from tests.integration.net.test_identity import identity_json
from tests.repo.test_fixes import documented_fix
from tests.system.debian import REPO, SystemdBox, until

pytestmark = pytest.mark.docker

STATE = "/var/lib/monky-deployd"
CONFIG = "/etc/monky-deployd/config.yaml"
UNIT = "monky-deployd.service"
AS_AGENT = "cd / && runuser -u monky-deployd -- "
IDS = "/opt/openziti/etc/identities"


def show(title: str, text: str) -> None:
    """What a seat printed, for the reader of ``pytest -s`` (the issue's closing note)."""
    print(f"\n=== {title}\n{text.rstrip()}")


@pytest.fixture(scope="module")
def estate() -> Iterator[Estate[Any]]:
    found: Estate[Any] = Estate(env="env-seat-01").start()
    try:
        yield found
    finally:
        found.stop()


@pytest.fixture(scope="module")
def box(pkg_image: str, built_deb: Path, estate: Estate[Any]) -> Iterator[SystemdBox]:
    with SystemdBox(pkg_image) as found:
        found.check(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /dist/{built_deb.name}")
        found.sh(
            "install -o monky-deployd -g monky-deployd -m 0600 /dev/stdin "
            "/etc/monky-deployd/grant.jwt",
            input=(estate.grant + "\n").encode(),
        )
        yield found


def configure(box: SystemdBox, estate: Estate[Any], **overrides: Any) -> None:
    """config.yaml as the role writes it (plain transport to the fakes unless overridden);
    the state dir the service user's, no drop-in, no failed unit."""
    cfg = estate.config(
        state_dir=Path(STATE), grant_file=Path("/etc/monky-deployd/grant.jwt"), **overrides
    )
    box.sh(
        f"install -o root -g monky-deployd -m 0640 /dev/stdin {CONFIG}",
        input=yaml.safe_dump(cfg).encode(),
    )
    box.check(
        f"chown -R monky-deployd:monky-deployd {STATE}\n"
        f"rm -f {fixes.RUN_HOST_DROPIN}\n"
        f"systemctl reset-failed {UNIT} 2>/dev/null || true"
    )


def run(box: SystemdBox, command: str, *, agent: bool) -> subprocess.CompletedProcess[str]:
    return box.sh((AS_AGENT if agent else "cd / && ") + command, check=False)


def seat(agent: bool) -> str:
    return "monky-deployd" if agent else "root"


def status(box: SystemdBox, *, agent: bool) -> tuple[int, dict[str, Any]]:
    table = run(box, "monky-deployd status", agent=agent)
    show(f"status as {seat(agent)} (exit {table.returncode})", table.stdout + table.stderr)
    shown = run(box, "monky-deployd status --json", agent=agent)
    assert shown.returncode == table.returncode, shown.stderr
    return shown.returncode, json.loads(shown.stdout)


def doctor(box: SystemdBox, *, agent: bool) -> dict[str, str]:
    """doctor's lines by check, in order; printed."""
    out = run(box, "monky-deployd doctor", agent=agent)
    show(f"doctor as {seat(agent)} (exit {out.returncode})", out.stdout + out.stderr)
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    return {ln.split(" ")[1].rstrip(":"): ln for ln in lines}


def first_not_ok(lines: dict[str, str]) -> str:
    return next(ln for ln in lines.values() if not ln.startswith("OK "))


def hint_of(line: str) -> str:
    """A doctor line's hint: after ``Check: ``, without the sentence's full stop."""
    return line.split(" Check: ", 1)[1].removesuffix(".")


def cursor(box: SystemdBox) -> str:
    last = box.check("journalctl -n 1 -o json --no-pager").strip().splitlines()[-1]
    return str(json.loads(last)["__CURSOR"])


def tick(box: SystemdBox) -> tuple[int, dict[str, Any] | None]:
    """The unit's own tick (``systemctl start``): its exit, and its first ``err`` entry from
    the agent (printed)."""
    since = cursor(box)
    started = box.sh(f"systemctl start {UNIT}", check=False)
    entries = until(  # read until the agent's last line, tick.summary, is there
        lambda: box.journal(UNIT, "--all", shlex.quote(f"--after-cursor={since}")),
        lambda got: any(e.get("MONKY_EVENT") == "tick.summary" for e in got),
    )
    for e in entries:
        print("  journal:", e.get("PRIORITY"), e.get("MONKY_EVENT"), str(e.get("MESSAGE"))[:90])
    errs = [
        e
        for e in entries
        if e.get("MONKY_EVENT") and e.get("PRIORITY") == "3"  # the agent's, not systemd's
    ]
    first = errs[0] if errs else None
    show(
        f"the unit's tick (systemctl start: {started.returncode}), first err line",
        first["MESSAGE"] if first else "(none)",
    )
    return started.returncode, first


def foreign(box: SystemdBox) -> str:
    return box.check(f"find {STATE} ! -user monky-deployd -printf '%P %u\\n'")


# -- 1. a state dir root owns ---------------------------------------------------------------


def test_a_root_owned_state_dir_is_named_alike_from_every_seat(
    box: SystemdBox, estate: Estate[Any]
) -> None:
    configure(box, estate)
    assert tick(box)[0] == 0  # a good tick: the state dir holds its records
    box.check(f"chown -R root:root {STATE}")
    chown = documented_fix(Code.STATE_UNWRITABLE)

    code, body = status(box, agent=True)
    assert (code, body["state"], body["error"]["code"]) == (15, "unreadable", "STATE_UNWRITABLE")
    assert body["error"]["message"].startswith(f"{STATE} holds at least 1 entry owned by root")
    assert f"monky-deployd cannot list {STATE} (Permission denied)" in body["error"]["message"]
    assert body["error"]["hint"] == chown  # OPERATIONS.md's fix, as printed

    code, body = status(box, agent=False)
    assert (code, body["state"], body["error"]["hint"]) == (15, "unreadable", chown)
    named = re.match(rf"{STATE} holds (\d+) entries owned by root", body["error"]["message"])
    assert named and int(named.group(1)) > 3, body["error"]["message"]
    assert "the state dir itself (root), docker/ (root)" in body["error"]["message"]
    assert "ledger.json (root)" in body["error"]["message"]
    total = named.group(0)

    lines = doctor(box, agent=True)
    assert first_not_ok(lines).startswith("FAIL state-dir: "), lines  # the cause first
    assert hint_of(lines["state-dir"]) == chown
    assert lines["compose"] == "SKIP compose: needs state-dir (FAIL above)."
    root_lines = doctor(box, agent=False)
    assert first_not_ok(root_lines).startswith(f"FAIL state-dir: {total}")

    applied = run(box, "monky-deployd apply --once --log-format json", agent=False)
    show(f"root's apply --once (exit {applied.returncode})", applied.stdout + applied.stderr)
    first = next(json.loads(ln) for ln in applied.stdout.splitlines() if '"ERROR"' in ln)
    assert applied.returncode == 1 and first["code"] == "STATE_UNWRITABLE"
    assert first["message"].startswith(f"STATE_UNWRITABLE: {total}"), first  # as doctor's
    assert "ledger.json root" in foreign(box), "root's apply changed nothing"

    # the timer's tick: systemd re-owns a state dir another account owns (StateDirectory=)
    code, first_err = tick(box)
    assert (code, first_err) == (0, None)
    assert foreign(box) == ""

    # ... but not the entries inside one it owns
    box.check(f"chown root:root {STATE}/docker")
    code, first_err = tick(box)
    assert code != 0 and first_err is not None
    assert first_err["MESSAGE"].startswith(
        f"STATE_UNWRITABLE: {STATE} holds at least 1 entry owned by root, not monky-deployd "
        "(the unit's user), which cannot replace them: docker/ (root)"
    ), first_err["MESSAGE"]
    assert first_err["MONKY_HINT"] == chown
    assert status(box, agent=True)[0] == 15
    lines = doctor(box, agent=True)
    assert first_not_ok(lines).startswith("FAIL state-dir: ")
    box.check(chown.strip("`"))  # the fix as printed
    assert tick(box) == (0, None)
    assert status(box, agent=True)[0] != 15


# -- 2. an identity the service user cannot read ------------------------------------------------


def test_the_identity_hint_is_the_documented_fix_and_keeps_the_tunnelers_ownership(
    box: SystemdBox, estate: Estate[Any]
) -> None:
    path = f"{IDS}/{estate.env}.json"
    configure(box, estate, transport="ziti", identity=path)
    box.sh(
        f"install -d -m 0755 {IDS} && install -o root -g root -m 0600 /dev/stdin {path}",
        input=json.dumps(identity_json()).encode(),
    )
    assert "ziti" in box.check("id -nG monky-deployd").split()  # usermod -aG would do nothing
    helper = documented_fix(Code.IDENTITY_UNREADABLE)
    for agent in (True, False):
        line = doctor(box, agent=agent)["identity"]
        assert line.startswith("FAIL identity: "), line
        assert hint_of(line) == helper, line
    code, first_err = tick(box)
    assert code != 0 and first_err is not None
    assert first_err["MESSAGE"].startswith(f"IDENTITY_UNREADABLE: the Ziti identity file {path}")
    assert first_err["MONKY_HINT"] == helper
    status(box, agent=True)
    status(box, agent=False)

    owner = box.check(f"stat -c '%U:%G' {path}")
    box.check(helper.strip("`"))  # the fix as printed
    assert box.check(f"stat -c '%U:%G' {path}") == owner  # the tunneler's owner and group
    box.check(f"runuser -u monky-deployd -- cat {path} >/dev/null")
    for agent in (True, False):
        line = doctor(box, agent=agent)["identity"]
        assert line.startswith("OK identity: "), line
    # a tunneler's rewrite (a new file, then rename) inherits the access
    box.check(f"cp {path} {path}.tmp && chmod 0640 {path}.tmp && mv {path}.tmp {path}")
    box.check(f"runuser -u monky-deployd -- cat {path} >/dev/null")

    # transport ziti without the run-host drop-in: the command puts the package's copy in place
    line = doctor(box, agent=True)["run-host-dropin"]
    assert line.startswith("WARN run-host-dropin: ") and hint_of(line) == (
        fixes.install_run_host_dropin()
    ), line
    box.sh(hint_of(line).strip("`"), check=False)  # no tunneler here: its restart alone fails
    assert doctor(box, agent=True)["run-host-dropin"].startswith("OK run-host-dropin: ")
    box.check(f"rm -rf {IDS} {fixes.RUN_HOST_DROPIN}")


# -- 3. transport plain: a run-host drop-in, a name that does not resolve -----------------------


def test_plain_transport_with_the_run_host_dropin_and_an_unresolved_name(
    box: SystemdBox, estate: Estate[Any]
) -> None:
    host = "tenancy.monky.invalid"
    configure(box, estate, tenancy={"host": host, "port": 443})
    box.check(
        f"install -d {Path(fixes.RUN_HOST_DROPIN).parent} && "
        f"printf '[Service]\\nExecStartPre=\\n' > {fixes.RUN_HOST_DROPIN}"
    )
    for agent in (True, False):
        lines = doctor(box, agent=agent)
        first = first_not_ok(lines)
        assert first.startswith(f"FAIL run-host-dropin: {fixes.RUN_HOST_DROPIN} is present"), first
        assert hint_of(first) == fixes.remove_run_host_dropin()
        resolve = lines["tenancy-intercept"]
        assert resolve.startswith(f"FAIL tenancy-intercept: tenancy's name {host} does not "), (
            resolve
        )
        assert hint_of(resolve) == fixes.remove_run_host_dropin()  # its cause, first
    code, first_err = tick(box)
    assert code != 0 and first_err is not None
    assert first_err["MESSAGE"].startswith(
        f"TENANCY_UNREACHABLE: cannot reach tenancy at {host}:443: its name {host} does not "
        "resolve on this box"
    ), first_err["MESSAGE"]
    assert first_err["MONKY_HINT"] == fixes.remove_run_host_dropin()  # as doctor's
    status(box, agent=True)

    box.check(f"rm {fixes.RUN_HOST_DROPIN}")
    lines = doctor(box, agent=True)
    assert lines["run-host-dropin"].startswith("OK run-host-dropin: transport plain: no ")
    # no tunneler in this image: the command installs it
    assert hint_of(lines["tenancy-intercept"]) == fixes.start_tunneler(installed=False)


# -- 4. no D-Bus --------------------------------------------------------------------------------


def test_without_dbus_the_service_user_is_told_the_bus_is_missing(
    box: SystemdBox, estate: Estate[Any]
) -> None:
    configure(box, estate)
    box.check("test ! -e /lib/systemd/system/dbus.service")  # the image's systemd has no bus
    assert tick(box)[0] == 0
    box.check("systemctl stop monky-deployd.timer")

    lines = doctor(box, agent=True)
    timer = lines["timer"]
    assert timer.startswith(
        "WARN timer: systemd runs here, but monky-deployd cannot ask it about "
        "monky-deployd.timer: the system bus (D-Bus) is not installed (package dbus)"
    ), timer
    assert hint_of(timer) == "`apt-get install dbus && systemctl start dbus.service`"
    assert lines["last-tick"].startswith("WARN last-tick: systemd runs here, but ")
    code, body = status(box, agent=True)
    assert "the system bus (D-Bus) is not installed" in body["reason"], body["reason"]
    assert body["timer"]["unasked"] and body["timer"]["next_run_at"] is None

    root_lines = doctor(box, agent=False)  # root's systemctl reaches systemd without the bus
    assert root_lines["timer"].startswith("FAIL timer: monky-deployd.timer is "), root_lines
    code, body = status(box, agent=False)
    assert (code, body["state"]) == (10, "stale") and body["timer"]["unasked"] is None


# -- 5. CONFIG_INVALID in the journal -----------------------------------------------------------


def test_an_invalid_config_is_one_journal_line(box: SystemdBox, estate: Estate[Any]) -> None:
    configure(box, estate, bogus=1, tenancy={"host": "127.0.0.1", "port": "x"})
    code, first_err = tick(box)
    assert code != 0 and first_err is not None
    message = first_err["MESSAGE"]
    assert message.startswith(f"CONFIG_INVALID: {CONFIG} is invalid: at 'tenancy.port': ")
    assert "\n" not in message and "at 'bogus': unknown key" in message
    status(box, agent=True)
    configure(box, estate)


# -- 6. an operator in the adm group -------------------------------------------------------------


def test_an_operator_in_adm_is_sent_to_roots_seat_not_to_the_files_ownership(
    box: SystemdBox, estate: Estate[Any]
) -> None:
    configure(box, estate)
    ops = f"ops{uuid.uuid4().hex[:8]}"
    box.check(f"useradd --no-create-home --groups adm {ops}")
    try:
        as_ops = f"cd / && runuser -u {ops} -- "
        shown = box.sh(as_ops + "monky-deployd status", check=False)
        show(f"status as {ops} (adm; exit {shown.returncode})", shown.stdout + shown.stderr)
        assert shown.returncode == 3
        assert shown.stdout.startswith(
            "state  config_error (exit 3): CONFIG_UNREADABLE: cannot read "
            f"{CONFIG}: Permission denied (/etc/monky-deployd is root:monky-deployd mode 0750 "
            f"as the package sets it (root's and the agent's alone), and {ops} is neither root "
            "nor in group monky-deployd). Check: `sudo monky-deployd status`"
        ), shown.stdout
        out = box.sh(as_ops + "monky-deployd doctor", check=False).stdout
        show(f"doctor as {ops} (adm)", out)
        assert out.splitlines()[0].endswith("Check: `sudo monky-deployd doctor`.")
        # the file is as the package sets it: root's seat reads it
        assert box.check(f"stat -c '%U:%G %a' {CONFIG}").strip() == "root:monky-deployd 640"
        assert status(box, agent=False)[0] != 3
        # adm reads the unit's journal: its first err line is the agent's
        box.check(f"chmod 0600 {CONFIG}")
        assert tick(box)[0] != 0
        box.check(f"chmod 0640 {CONFIG}")
        first = box.sh(
            as_ops + f"journalctl -u {UNIT} -p err -o cat --no-pager | tail -n 3 | head -n 1",
            check=False,
        ).stdout
        show(f"journalctl -p err as {ops} (adm)", first)
        assert first.startswith("CONFIG_UNREADABLE: "), first
    finally:
        box.sh(f"userdel {ops}", check=False)


# -- 7. install.sh --transport plain on a box that had ziti ------------------------------------


def test_install_sh_plain_removes_the_run_host_dropin(
    box: SystemdBox, estate: Estate[Any], built_deb: Path
) -> None:
    configure(box, estate)
    box.check(
        f"install -d {Path(fixes.RUN_HOST_DROPIN).parent} && "
        f"printf '[Service]\\nExecStartPre=\\n' > {fixes.RUN_HOST_DROPIN}"
    )
    box.sh("install -m 0600 /dev/stdin /root/grant.jwt", input=estate.grant.encode())
    # the .deb from /dist, no tunneler to be had (the OpenZiti repository unreachable: an item
    # left, exit 3), the kit's own config kept (the same env)
    nowhere = {
        "MONKY_DEPLOYD_ZITI_KEY_URL": "http://127.0.0.1:1/key",
        "MONKY_DEPLOYD_ZITI_APT_URL": "http://127.0.0.1:1/apt",
    }
    argv = (
        f"bash /dist/install.sh --env {estate.env} --deb /dist/{built_deb.name} "
        "--bootstrap-file /root/grant.jwt --transport plain --insecure-http"
    )
    done = box.sh(argv, env=nowhere, check=False)
    show(f"install.sh --transport plain (exit {done.returncode})", done.stdout + done.stderr)
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"--transport plain: removed the run-host drop-in {fixes.RUN_HOST_DROPIN}" in done.stdout
    box.check(f"test ! -e {fixes.RUN_HOST_DROPIN}")
    box.check("systemctl disable --now monky-deployd.timer 2>/dev/null")
    line = doctor(box, agent=True)["run-host-dropin"]
    assert line.startswith("OK run-host-dropin: "), line


# -- 8. purge -----------------------------------------------------------------------------------


def test_purge_leaves_nothing_failed_and_keeps_what_the_docs_list(
    box: SystemdBox, estate: Estate[Any]
) -> None:
    configure(box, estate)
    box.check(
        f"install -d {Path(fixes.RUN_HOST_DROPIN).parent} && "
        f"printf '[Service]\\nExecStartPre=\\n' > {fixes.RUN_HOST_DROPIN} && install -d {IDS}"
    )
    box.check(f"chmod 0600 {CONFIG}")  # the unit's tick fails (exit 3)
    assert tick(box)[0] != 0
    assert box.check(f"systemctl is-failed {UNIT} || true").strip() == "failed"
    box.check("DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq monky-deployd >/dev/null")
    failed = box.check("systemctl --failed --no-legend --plain")
    show("systemctl --failed after the purge", failed or "(none)")
    assert "monky-deployd" not in failed
    assert box.check("systemctl is-system-running || true").strip() == "running"
    box.check(f"test ! -e {STATE} && test ! -e /etc/monky-deployd")
    kept = {
        "monky-deployd": "getent passwd monky-deployd",
        fixes.RUN_HOST_DROPIN: f"test -f {fixes.RUN_HOST_DROPIN}",
        IDS: f"test -d {IDS}",
    }
    docs = (REPO / "OPERATIONS.md").read_text()
    listed = docs[docs.index("**Purge keeps**") :].split("\n\n", 1)[0]
    for name, probe in kept.items():
        box.check(probe)
        assert name in listed, f"OPERATIONS.md's purge paragraph does not list {name}"
