"""``monky-deployd doctor`` against the loopback fakes, the real Docker engine and the real
registry with authentication: each fault class of the field record is named by the FIRST line
that is not OK, the exit status is 0/1/2, and doctor changes nothing (no lease, no report, the
state dir byte for byte the same).

systemd cannot run here (no PID 1), so where a test wants the timer answered, a ``systemctl``
on PATH answers ``enabled`` as the real one does for an enabled unit; the real one here says
the unit is not installed, which the timer check's own test holds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd import cli
from monky_deployd import config as config_mod
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.agent.commands import doctor
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.core.commands import checks
from monky_deployd.core.commands.checks import Check
from monky_deployd_testkit import readable
from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.fakes.estate import Estate
from tests.integration.box.test_preflight import small_dockerd  # noqa: F401 (a fixture)
from tests.integration.net.test_identity import (  # noqa: F401 (users, identity_dir: fixtures)
    AGENT,
    OWNER,
    SRC,
    _install_like_the_tunneler,
    _sh,
    identity_dir,
    identity_json,
    users,
    write,
)

pytestmark = pytest.mark.docker

ENV = "env-doc-01"
APP = f"envs/{ENV}/app"
REG = f"envs/{ENV}/registry"
ORDER = [name for name, _, _ in doctor.CHECKS]
IN_POD = 8000 + 81  # the tenancy pod's in-pod listener: never the intercept


def bundle(registry: Registry, **changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "project": "shop",
        "compose": f"services:\n  web:\n    image: {registry.host}/web:1\n",
        "env_template": "DB_PASSWORD=${DB_PASSWORD}\n",
        "manifest": [
            {"name": "DB_PASSWORD", "path": APP, "key": "db_password"},
            {"name": "registry", "path": REG, "key": "robot", "use": "registry-auth"},
        ],
        "registry_host": registry.host,
    }
    body.update(changes)
    return body


@pytest.fixture
def estate(request: pytest.FixtureRequest, registry: Registry) -> Iterator[Estate[Any]]:
    """The fakes; with ``@BOTH`` also the session's real OpenBao server."""
    est: Estate[Any]
    if getattr(request, "param", "fake") == "real":
        est = Estate(env=ENV, real=request.getfixturevalue("real_bao"))
    else:
        est = Estate(env=ENV)
    with est:
        est.bao.set_secret(APP, {"db_password": "s3cret-db-value"})
        est.bao.set_secret(REG, {"robot": f"{registry.username}:{registry.password}"})
        est.tenancy.set_desired("r1", bundle(registry))
        yield est


BOTH = pytest.mark.parametrize("estate", ["fake", "real"], indirect=True)


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``systemctl`` that answers ``is-enabled`` as for an enabled unit."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "systemctl"
    tool.write_text('#!/bin/sh\n[ "$1" = is-enabled ] && echo enabled && exit 0\nexit 1\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    return bindir


def box(est: Estate[Any], tmp_path: Path, **overrides: Any) -> Path:
    raw = est.config(
        state_dir=tmp_path / "state",
        grant_file=est.write_grant(tmp_path / "grant.jwt"),
        **overrides,
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def run(est: Estate[Any], path: Path) -> tuple[dict[str, Check], Check | None, int]:
    """doctor's checks; whatever the fault, no lease was asked for and no report posted."""
    before = (est.tenancy.lease_requests, est.tenancy.report_count)
    results = doctor.run_checks(path, clock=est.clock.now)
    assert (est.tenancy.lease_requests, est.tenancy.report_count) == before
    assert [c.check for c in results] == ORDER
    by_name = {c.check: c for c in results}
    return by_name, checks.first_not_ok(results), checks.exit_status(results)


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every entry under ``root``: its mode and, for a file, its bytes."""
    out: dict[str, tuple[int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(st.st_mode) else b""
        out[str(path.relative_to(root))] = (st.st_mode, data)
    return out


# -- a good box ------------------------------------------------------------------------------


def test_a_good_box_is_all_ok_and_doctor_changes_nothing(
    estate: Estate[Any], tmp_path: Path, systemd: Path, registry: Registry
) -> None:
    path = box(estate, tmp_path)
    estate.tenancy.clear_desired()
    cfg = config_mod.load(path)
    assert run_tick(cfg, clock=estate.clock.now).outcome == "idle"  # leases a token, no apply
    estate.tenancy.set_desired("r1", bundle(registry))
    before = snapshot(tmp_path / "state")
    assert "token.json" in before
    leases, reports = estate.tenancy.lease_requests, estate.tenancy.report_count
    logins = estate.bao.logins

    by_name, first, status = run(estate, path)

    assert first is None, checks.line(first)
    assert status == 0
    assert "the stored lease token" in by_name["token"].fact
    assert "accepts user monky-robot (Basic)" in by_name["registry"].fact
    assert "all 2 manifest entries of revision r1 are readable" in by_name["secrets"].fact
    # nothing changed: no lease, no report, no login (the stored lease was valid), state dir
    assert (estate.tenancy.lease_requests, estate.tenancy.report_count) == (leases, reports)
    assert estate.bao.logins == logins
    assert snapshot(tmp_path / "state") == before


def test_a_fresh_box_logs_in_without_a_lease_and_revokes_that_token(
    estate: Estate[Any], tmp_path: Path, systemd: Path
) -> None:
    path = box(estate, tmp_path)
    by_name, first, status = run(estate, path)
    assert (first, status) == (None, 0)
    assert "no token is stored (a fresh box)" in by_name["token"].fact
    assert (estate.bao.logins, estate.bao.revocations) == (1, 1)
    assert (estate.tenancy.lease_requests, estate.tenancy.report_count) == (0, 0)
    assert not (tmp_path / "state").exists(), "doctor creates no state dir"


def test_the_real_systemctl_here_says_the_timer_is_not_installed(
    estate: Estate[Any], tmp_path: Path
) -> None:
    by_name, first, status = run(estate, box(estate, tmp_path))
    assert first is not None and first.check == "timer" and status == 2
    assert by_name["timer"].status == "FAIL"
    assert "monky-deployd.timer is not installed" in by_name["timer"].fact


# -- each fault class: the first line that is not OK names it ----------------------------------


def test_grant_expired(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    estate.grant = estate.issuer.mint(ENV, exp_in_s=-3600)
    by_name, first, status = run(estate, box(estate, tmp_path))
    assert first is not None and (first.check, first.status) == ("grant", "WARN")
    assert "expired 1 h 0 m ago" in first.fact
    assert (by_name["token"].status, by_name["token"].code) == ("FAIL", "GRANT_EXPIRED")
    assert by_name["checkin"].status == "SKIP" and status == 2


def test_wrong_identity(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    ident = write(tmp_path / "id.json", "{not json")
    by_name, first, status = run(
        estate, box(estate, tmp_path, transport="ziti", identity=str(ident))
    )
    assert first is not None and (first.check, first.code) == ("identity", "IDENTITY_NOT_JSON")
    assert str(ident) in first.fact and status == 2
    assert by_name["tenancy"].fact == "needs identity (FAIL above)"
    assert by_name["disk"].status == "OK", "the box's own checks still run"


def test_unreachable_controller(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    ident = write(tmp_path / "id.json", identity_json("https://127.0.0.1:1"))
    by_name, first, status = run(
        estate, box(estate, tmp_path, transport="ziti", identity=str(ident))
    )
    assert by_name["identity"].status == "OK"
    assert first is not None
    assert (first.check, first.code) == ("controller", "ZITI_CONTROLLER_UNREACHABLE")
    assert "https://127.0.0.1:1" in first.fact and status == 2


def test_tenancy_port_that_is_not_the_intercept(
    estate: Estate[Any], tmp_path: Path, systemd: Path
) -> None:
    _, first, _ = run(
        estate, box(estate, tmp_path, tenancy={"host": "tenancy.monky.ziti", "port": IN_POD})
    )
    assert first is not None and first.check == "tenancy-intercept"
    assert "intercept is 443" in first.fact


def test_tenancy_down(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    estate.tenancy.stop()
    by_name, first, status = run(estate, box(estate, tmp_path))
    assert first is not None and (first.check, first.code) == ("tenancy", "TENANCY_UNREACHABLE")
    assert f"127.0.0.1:{estate.tenancy.port}" in first.fact and status == 2
    assert by_name["token"].status == "OK", "OpenBao is asked all the same"
    assert [by_name[n].status for n in ("checkin", "secrets", "registry", "clock")] == ["SKIP"] * 4


def test_a_superseded_grant_is_named_by_the_checkin(
    estate: Estate[Any], tmp_path: Path, systemd: Path
) -> None:
    """A superseded grant still logs in (the JWT mount keeps no replay state): only tenancy's
    answer to the first bearer call names it (DD-0527)."""
    estate.tenancy.supersede(estate.issuer.minted_jtis[-1])
    by_name, first, status = run(estate, box(estate, tmp_path))
    assert by_name["token"].status == "OK"
    assert first is not None and (first.check, first.code) == ("checkin", "GRANT_SUPERSEDED")
    assert status == 2 and estate.tenancy.lease_requests == 0


def test_a_rate_limited_lease_budget_is_a_warning(
    estate: Estate[Any], tmp_path: Path, systemd: Path, registry: Registry
) -> None:
    """The env-qa-02 pilot: a box that burnt the budget waits; doctor says until when."""
    path = box(estate, tmp_path)
    estate.tenancy.clear_desired()
    assert run_tick(config_mod.load(path), clock=estate.clock.now).outcome == "idle"
    estate.tenancy.set_desired("r1", bundle(registry))
    state = StateDir(tmp_path / "state")
    record = state.read_token()
    assert record is not None and record.token is not None
    state.write_token(dataclasses.replace(record, lease_not_before=estate.clock.now() + 900))
    _, first, status = run(estate, path)
    assert first is not None and (first.check, first.status) == ("token", "WARN")
    assert "tenancy rate-limited leases" in first.fact and status >= 1


@BOTH
def test_openbao_sealed(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    estate.bao.sealed = True
    by_name, first, status = run(estate, box(estate, tmp_path))
    assert first is not None and (first.check, first.code) == ("openbao", "OPENBAO_SEALED")
    assert "is sealed" in first.fact and status == 2
    assert by_name["tenancy"].status == "OK"


@BOTH
@pytest.mark.parametrize(
    ("manifest_path", "code"),
    [(f"envs/{ENV}/gone", "SECRET_MISSING"), ("envs/env-other/app", "SECRET_FORBIDDEN")],
)
def test_a_secret_path_missing_or_forbidden(
    estate: Estate[Any],
    tmp_path: Path,
    systemd: Path,
    registry: Registry,
    manifest_path: str,
    code: str,
) -> None:
    manifest = [
        {"name": "DB_PASSWORD", "path": manifest_path, "key": "db_password"},
        {"name": "registry", "path": REG, "key": "robot", "use": "registry-auth"},
    ]
    estate.tenancy.set_desired("r2", bundle(registry, manifest=manifest))
    by_name, first, status = run(estate, box(estate, tmp_path))
    assert first is not None and (first.check, first.code) == ("secrets", code)
    assert manifest_path in first.fact and status == 2
    assert by_name["registry"].status == "SKIP"


def test_registry_credential_wrong(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    estate.bao.set_secret(REG, {"robot": "monky-robot:not-the-password"})
    _, first, status = run(estate, box(estate, tmp_path))
    assert first is not None and (first.check, first.code) == ("registry", "REGISTRY_AUTH")
    assert "refused the credential of user monky-robot" in first.fact and status == 2
    assert "not-the-password" not in first.fact + first.hint


def test_registry_credential_that_does_not_parse(
    estate: Estate[Any], tmp_path: Path, systemd: Path
) -> None:
    estate.bao.set_secret(REG, {"robot": "no-colon-here"})
    _, first, _ = run(estate, box(estate, tmp_path))
    assert first is not None and first.check == "registry"
    assert first.code == "REGISTRY_CREDENTIAL_MALFORMED"


def test_disk_short(
    estate: Estate[Any],
    tmp_path: Path,
    systemd: Path,
    small_dockerd: str,  # noqa: F811
) -> None:
    by_name, first, status = run(estate, box(estate, tmp_path, docker={"host": small_dockerd}))
    assert by_name["docker-socket"].status == "OK"
    assert first is not None and (first.check, first.code) == ("disk", "DISK_INSUFFICIENT")
    assert "(tmpfs)" in first.fact and status == 2


def test_docker_socket_missing(estate: Estate[Any], tmp_path: Path, systemd: Path) -> None:
    sock = tmp_path / "no-such.sock"
    by_name, first, status = run(estate, box(estate, tmp_path, docker={"host": f"unix://{sock}"}))
    assert first is not None
    assert (first.check, first.code) == ("docker-socket", "DOCKER_UNAVAILABLE")
    assert str(sock) in first.fact and status == 2
    assert by_name["disk"].fact == "needs docker-socket (FAIL above)"


def test_a_broken_config_skips_the_rest_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("env: env-doc-01\nbogus: 1\n")
    results = doctor.run_checks(path)
    assert results[0].status == "FAIL" and results[0].code == "CONFIG_INVALID"
    assert "is invalid: at 'bogus'" in results[0].fact, "one line, no dangling colon"
    assert {c.status for c in results[1:] if c.check not in ("timer", "last-tick")} == {"SKIP"}
    assert next(c for c in results if c.check == "timer").status != "SKIP"  # needs no config
    assert checks.exit_status(results) == 2


# -- the command line ------------------------------------------------------------------------


def test_cli_json_shape_and_exit_status(
    estate: Estate[Any],
    tmp_path: Path,
    systemd: Path,
    capsys: pytest.CaptureFixture[str],
    restore_root: None,
) -> None:
    estate.bao.sealed = True
    code = cli.main(["doctor", "--config", str(box(estate, tmp_path)), "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == 2
    assert isinstance(body, list) and [c["check"] for c in body] == ORDER
    for item in body:
        assert set(item) == {"check", "status", "fact", "hint", "code", "detail"}
        assert isinstance(item["detail"], str)
        assert item["status"] in checks.STATUSES
        assert isinstance(item["fact"], str) and item["fact"]
        assert isinstance(item["hint"], str)
        assert item["code"] is None or isinstance(item["code"], str)
        assert item["hint"] == "" or item["status"] in ("WARN", "FAIL")
    sealed = next(c for c in body if c["check"] == "openbao")
    assert (sealed["status"], sealed["code"]) == ("FAIL", "OPENBAO_SEALED")


def test_cli_lines_never_show_a_secret(
    estate: Estate[Any],
    tmp_path: Path,
    systemd: Path,
    capsys: pytest.CaptureFixture[str],
    restore_root: None,
) -> None:
    assert cli.main(["doctor", "--config", str(box(estate, tmp_path))]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert len(lines) == len(ORDER) and all(ln.startswith("OK ") for ln in lines)
    text = out.out + out.err
    for secret in ("s3cret-db-value", estate.grant, "Check:"):
        assert secret not in text


# -- the env-dev-08 identity fault: readable today only through an ACL the tunneler drops ------


def _doctor_as_agent(config: Path) -> dict[str, Any]:
    """doctor's identity check run as the unprivileged agent user (its own groups)."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from monky_deployd.agent.commands import doctor\n"
        "out = {c.check: c.as_json() for c in doctor.run_checks(Path(sys.argv[1]))}\n"
        "print(json.dumps(out['identity']))\n"
    )
    python = str(readable.SYSTEM_PYTHON)  # the agent user may not enter the clone's .venv
    argv = ["setpriv", f"--reuid={AGENT}", f"--regid={AGENT}", "--init-groups", python]
    proc = subprocess.run(
        [*argv, "-B", "-c", script, str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": readable.pythonpath()},
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_an_identity_readable_only_through_a_file_acl_is_a_warning(
    identity_dir: Path,  # noqa: F811
) -> None:
    path = identity_dir / "env-dev-08.json"
    _install_like_the_tunneler(path, identity_json())
    config = identity_dir.parent / "config.yaml"
    config.write_text(yaml.safe_dump({"env": "env-dev-08", "identity": str(path)}))
    config.chmod(0o644)

    _sh("setfacl", "-m", f"u:{AGENT}:r", str(path))  # the field's first fix
    acl = _doctor_as_agent(config)
    assert (acl["status"], acl["code"]) == ("WARN", "IDENTITY_UNREADABLE")
    assert f"{AGENT} reads it only through a per-file ACL" in acl["fact"]
    assert f"usermod -aG {OWNER} {AGENT}" in acl["hint"]

    _install_like_the_tunneler(path, identity_json())  # the rewrite drops the ACL
    gone = _doctor_as_agent(config)
    assert (gone["status"], gone["code"]) == ("FAIL", "IDENTITY_UNREADABLE")

    _sh("setfacl", "-d", "-m", f"u:{AGENT}:r", str(identity_dir))  # a default ACL renews it
    _install_like_the_tunneler(path, identity_json())
    renewed = _doctor_as_agent(config)
    assert renewed["status"] == "OK" and "the directory's default ACL renews" in renewed["fact"]
    _sh("setfacl", "-b", "-k", str(identity_dir))
    _install_like_the_tunneler(path, identity_json())

    _sh("gpasswd", "-a", AGENT, OWNER)  # the durable fix
    assert _doctor_as_agent(config)["status"] == "OK"


def test_a_clock_ten_minutes_ahead_of_tenancy(
    estate: Estate[Any], tmp_path: Path, systemd: Path
) -> None:
    path = box(estate, tmp_path)
    results = doctor.run_checks(path, clock=lambda: time.time() + 600)
    first = checks.first_not_ok(results)
    assert first is not None and (first.check, first.status) == ("clock", "FAIL")
    assert "10 m" in first.fact and "ahead of tenancy" in first.fact


def test_a_new_kit_grant_is_used_as_the_tick_would(
    estate: Estate[Any], tmp_path: Path, systemd: Path
) -> None:
    """The stored lease descends from the old grant; the new kit's grant logs in (no lease)."""
    path = box(estate, tmp_path)
    estate.tenancy.clear_desired()
    assert run_tick(config_mod.load(path), clock=estate.clock.now).outcome == "idle"
    old = estate.issuer.minted_jtis[-1]
    estate.tenancy.supersede(old)
    estate.grant = estate.issuer.mint(ENV)
    estate.write_grant(tmp_path / "grant.jwt")
    by_name, first, status = run(estate, path)
    assert (first, status) == (None, 0)
    assert by_name["token"].status == "OK"
    assert f"descends from grant {old}" in by_name["token"].fact
    assert by_name["checkin"].status == "OK" and estate.bao.logins == 2


def test_a_controller_that_answers_but_is_none(tmp_path: Path) -> None:
    """The SDK (the real 0.6 wheel, in a child process as the identity tests run it) refuses
    an identity whose controller accepts TCP but speaks no Ziti: ZITI_LOAD_FAILED naming the
    controller that answers; the intercepts wait for it."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]

        def hang_up() -> None:  # accepts TCP, speaks no TLS: hangs up on every connection
            with suppress(OSError):
                while True:
                    srv.accept()[0].close()

        threading.Thread(target=hang_up, daemon=True).start()
        ident = write(tmp_path / "id.json", identity_json(f"https://127.0.0.1:{port}"))
        config = tmp_path / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {"env": ENV, "identity": str(ident), "tenancy": {"timeout_s": 2}}
                | {"grant_file": str(tmp_path / "g"), "state_dir": str(tmp_path / "s")}
            )
        )
        script = (
            "import json, sys\n"
            "from pathlib import Path\n"
            "from monky_deployd.agent.commands import doctor\n"
            "print(json.dumps([c.as_json() for c in doctor.run_checks(Path(sys.argv[1]))]))\n"
        )
        proc = subprocess.run(
            [sys.executable, "-B", "-c", script, str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(SRC)},
        )
    assert proc.returncode == 0, proc.stderr
    by_name = {c["check"]: c for c in json.loads(proc.stdout.strip().splitlines()[-1])}
    ctl = by_name["controller"]
    assert (ctl["status"], ctl["code"]) == ("FAIL", "ZITI_LOAD_FAILED")
    assert f"although the controller https://127.0.0.1:{port} answers" in ctl["fact"]
    assert by_name["tenancy-intercept"]["fact"] == "needs controller (FAIL above)"


def test_root_running_doctor_speaks_for_the_units_user(
    estate: Estate[Any],
    tmp_path: Path,
    systemd: Path,
    users: None,  # noqa: F811
) -> None:
    """Root reads every file; the unit's user (config.yaml's ``service_user``) does not. A
    grant.jwt left root:root 0600 (the kit copied as root) is the grant's FAIL although root
    could read it."""
    path = box(estate, tmp_path, service_user=AGENT)  # the unit's user on this box
    grant = tmp_path / "grant.jwt"
    assert grant.stat().st_uid == 0 and grant.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    by_name, first, status = run(estate, path)
    assert first is not None and (first.check, first.code) == ("grant", "GRANT_UNREADABLE")
    assert f"root reads it, but {AGENT} (the unit's user) cannot" in first.fact
    assert by_name["config"].status == "OK" and status == 2
    sock = by_name["docker-socket"]  # root reaches the engine; the unit's user is not in docker
    assert (sock.status, sock.code) == ("FAIL", "DOCKER_UNAVAILABLE")
    assert f"but {AGENT} cannot use it" in sock.fact and "usermod -aG" in sock.hint
    os.chown(grant, pwd.getpwnam(AGENT).pw_uid, -1)  # the kit's owner: the agent reads it
    assert run(estate, path)[0]["grant"].status == "OK"
