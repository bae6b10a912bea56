"""Every Ziti fault an operator meets, made for real on the one-box OpenZiti network
(monky_deployd_testkit.zitinet) and named first as what it is: the real CLI's first error line
(what ``journalctl -u monky-deployd -p err`` shows first), with the one thing to check.

The network is the worker's (the session fixture ``ziti_net``); each test makes its fault with
the controller's own means (its CLI, its processes, its PKI) and puts back what it changed, so
the next test meets a healthy network. Tenancy is the loopback fake hosted behind the network,
OpenBao the real server behind it; the agent's config names only the intercept addresses.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.lab import CLI, Run, cli_env, parse_lines
from monky_deployd_testkit.realbao import RealBao
from monky_deployd_testkit.ziticonf import OPENBAO, SERVICES, TENANCY, agent_config
from monky_deployd_testkit.zitinet import ZitiNet

pytestmark = [pytest.mark.ziti]

ENV = "env-zf-01"
IN_POD_PORT = 8081  # the tenancy pod's in-pod listener: never an intercept (R8, R14)


class Box:
    """A box's config.yaml against the worker's network and a fresh estate (fake tenancy on the
    port the network hosts, the real OpenBao); ``tick()`` runs the real CLI."""

    def __init__(self, tmp: Path, estate: Estate[Any], net: ZitiNet) -> None:
        self.tmp, self.estate, self.net = tmp, estate, net
        self.name = f"zf-{tmp.name[-10:]}".replace("_", "-")
        self.grant = estate.write_grant(tmp / "grant.jwt")

    def config(self, identity: Path, **overrides: Any) -> Path:
        cfg = self.estate.config(state_dir=self.tmp / "state", grant_file=self.grant)
        cfg = agent_config(cfg, identity)
        for key, value in overrides.items():
            cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
        path = self.tmp / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    def doctor(self, config: Path) -> dict[str, dict[str, Any]]:
        """``doctor --json``: check -> its line."""
        proc = self._cli("doctor", "--json", config=config)
        return {c["check"]: c for c in json.loads(proc.stdout)}

    def run(self, *args: str, config: Path) -> Run:
        proc = self._cli(*args, config=config)
        return Run(proc.returncode, parse_lines(proc.stdout), proc.stdout, proc.stderr)

    def _cli(self, *args: str, config: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            (*CLI, *args, "--config", str(config)),
            capture_output=True,
            text=True,
            env=cli_env(self.tmp / "home"),
            timeout=300,
            check=False,
        )

    def first_error(self, identity: Path, **overrides: Any) -> dict[str, Any]:
        """One tick's first error record (its ``message`` is the journal's first -p err line)."""
        run = self.run("apply", "--once", config=self.config(identity, **overrides))
        assert run.rc == 1, run.stdout + run.stderr  # a transport fault: failed, not refused
        assert run.errors, run.stdout + run.stderr
        first = run.errors[0]
        assert first["event"] == "tick.error", first
        return first


@pytest.fixture
def box(tmp_path: Path, real_bao: RealBao, ziti_net: ZitiNet) -> Iterator[Box]:
    with Estate(env=ENV, real=real_bao, tenancy_port=ziti_net.upstreams["tenancy"]) as estate:
        (tmp_path / "probe").mkdir()
        dials(Box(tmp_path / "probe", estate, ziti_net))
        yield Box(tmp_path, estate, ziti_net)
    healthy(ziti_net)


_PROBES: dict[int, Path] = {}  # the worker's network -> an identity of both roles, enrolled once


def dials(probe: Box, timeout_s: float = 120.0) -> None:
    """Wait until both intercepts carry a dial end to end (doctor's intercept lines OK, with an
    identity of both roles): a router or controller restarted by an earlier test can be online,
    its old terminators listed, before it carries a circuit again (the SDK's -19 then)."""
    net = probe.net
    if id(net) not in _PROBES:
        _PROBES[id(net)] = net.enroll(f"zf-probe-{len(_PROBES)}-{net.api_port}")
    config = probe.config(_PROBES[id(net)])
    end = time.monotonic() + timeout_s
    while True:
        lines = probe.doctor(config)
        checks = ("tenancy-intercept", "openbao-intercept")
        if all(lines.get(c, {}).get("status") == "OK" for c in checks):
            return
        if time.monotonic() > end:
            raise AssertionError(f"the network carries no dial: {[lines.get(c) for c in checks]}")
        time.sleep(1)


def healthy(net: ZitiNet, timeout_s: float = 120.0) -> None:
    """Wait until the router is online and hosts both services again (after a restart)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with_router = net.mgmt("GET", f"edge-routers/{net.router_id}").get("isOnline")
        if with_router and all(net.terminators(s) for s in SERVICES):
            return
        time.sleep(0.5)
    raise AssertionError("the network did not come back: router offline or no terminator")


def pem(value: str) -> str:
    return value.removeprefix("pem:")


def line(first: dict[str, Any]) -> str:
    return str(first["message"])


# -- the controller ------------------------------------------------------------------------


def test_the_controller_down_then_under_another_name(box: Box) -> None:
    net = box.net
    assert net.dir is not None
    identity = net.enroll(box.name)
    ctrl = net.dir / "ctrl.yaml"
    good = ctrl.read_text()
    net.stop_process("controller")
    try:
        first = box.first_error(identity)
        assert first["code"] == "ZITI_CONTROLLER_UNREACHABLE"
        assert line(first).startswith(
            "ZITI_CONTROLLER_UNREACHABLE: cannot reach the Ziti controller named by the identity "
        )
        assert f"https://localhost:{net.api_port}" in line(first)
        assert "Connection refused" in line(first) and "the controller is up" in first["hint"]

        # The controller back, its server certificate for another name (the identity was
        # enrolled for localhost): the SDK's words were those of a deleted identity.
        net.ziti(
            "pki", "create", "server", "--pki-root", str(net.dir / "pki"), "--ca-name", "int",
            "--server-file", "elsewhere", "--key-file", "ctrl-server", "--server-name",
            "elsewhere", "--dns", "elsewhere.example", "--ip", "127.0.0.1",
        )  # fmt: skip
        other = good.replace("ctrl-server.chain.pem", "elsewhere.chain.pem")
        other = other.replace("tls:localhost:", "tls:elsewhere.example:")
        other = other.replace("address: localhost:", "address: elsewhere.example:")
        assert other.count("elsewhere") >= 4, other
        ctrl.write_text(other)
        net.start_process("controller")
        first = box.first_error(identity)
        assert first["code"] == "ZITI_CONTROLLER_CERT", line(first)
        assert line(first).startswith(
            f"ZITI_CONTROLLER_CERT: the Ziti controller at localhost:{net.api_port} presents a "
            "certificate for elsewhere.example, 127.0.0.1, not for localhost, the name in the "
            "identity's ztAPI"
        ), line(first)
        assert "software caused connection abort" in first["detail"]  # the SDK's own words
    finally:
        net.stop_process("controller")
        ctrl.write_text(good)
        net.start_process("controller")


# -- the identity on the controller ----------------------------------------------------------


def test_an_identity_deleted_on_the_controller(box: Box) -> None:
    identity = box.net.enroll(box.name)
    ident_id = box.net.identity_id(box.name)
    box.net.ziti("edge", "delete", "identity", box.name)
    first = box.first_error(identity)
    assert first["code"] == "ZITI_IDENTITY_UNKNOWN", line(first)
    assert line(first).startswith(
        f"ZITI_IDENTITY_UNKNOWN: the Ziti controller https://localhost:{box.net.api_port}"
    )
    assert "HTTP 401 INVALID_AUTH: the identity was deleted on the controller" in line(first)
    assert f"`ziti edge list identities 'id=\"{ident_id}\"'`" in first["hint"]
    # what the hint asks answers: none listed, so deleted
    listed = box.net.ziti("edge", "list", "identities", f'id="{ident_id}"').stdout
    assert "results: none" in listed
    assert "INVALID_AUTH" in first["detail"]  # the SDK's own line rides in the detail


def test_an_identity_re_enrolled_elsewhere(box: Box, tmp_path: Path) -> None:
    old = box.net.enroll(box.name)
    ident_id = box.net.identity_id(box.name)
    # as an operator re-enrols it for another box: its certificate authenticator goes, a new
    # one-time token is enrolled elsewhere; this box keeps the old certificate
    box.net.ziti("edge", "delete", "authenticators", "where", f'identity="{ident_id}"')
    jwt, new = tmp_path / "again.jwt", tmp_path / "elsewhere.json"
    box.net.ziti("edge", "create", "enrollment", "ott", box.name, "-o", str(jwt))
    box.net.ziti("edge", "enroll", str(jwt), "-o", str(new))
    first = box.first_error(old)
    assert first["code"] == "ZITI_IDENTITY_UNKNOWN", line(first)
    assert "re-enrolled elsewhere (this box holds its old certificate)" in line(first)
    assert f"`ziti edge create enrollment ott {ident_id}`" in first["hint"]
    # what the hint asks answers: listed, and no authenticator holds this box's certificate
    listed = box.net.ziti("edge", "list", "identities", f'id="{ident_id}"').stdout
    assert box.name in listed
    doc = json.loads(old.read_text())
    leaf = x509.load_pem_x509_certificate(pem(doc["id"]["cert"]).encode())
    mine = leaf.fingerprint(hashes.SHA1()).hex()
    assert f"this box's fingerprint {mine}" in first["hint"]
    held = box.net.ziti("edge", "list", "authenticators", f'identity="{ident_id}"').stdout
    assert "cert" in held and mine not in held


def test_an_expired_certificate(box: Box) -> None:
    """The enrolled identity's certificate, re-issued by the network's enrolment signer with
    its own key and subject, past its notAfter: named before anything is dialled."""
    net = box.net
    assert net.dir is not None
    identity = net.enroll(box.name)
    doc = json.loads(identity.read_text())
    leaf = x509.load_pem_x509_certificate(pem(doc["id"]["cert"]).encode())
    key = serialization.load_pem_private_key(pem(doc["id"]["key"]).encode(), None)
    int_dir = net.dir / "pki" / "int"
    ca = x509.load_pem_x509_certificate((int_dir / "certs" / "int.cert").read_bytes())
    ca_key = serialization.load_pem_private_key((int_dir / "keys" / "int.key").read_bytes(), None)
    now = dt.datetime.now(dt.UTC)
    expired = (
        x509.CertificateBuilder()
        .subject_name(leaf.subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=2))
        .not_valid_after(now - dt.timedelta(days=1))
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    doc["id"]["cert"] = "pem:" + expired.public_bytes(serialization.Encoding.PEM).decode()
    old = box.tmp / "expired.json"
    old.write_text(json.dumps(doc))
    old.chmod(0o600)
    run = box.run("apply", "--once", config=box.config(old))
    assert run.rc == 5, run.stdout  # refused: nothing was dialled
    first = run.errors[0]
    assert first["code"] == "IDENTITY_CERT_EXPIRED"
    assert line(first).startswith(
        f"IDENTITY_CERT_EXPIRED: the certificate of the Ziti identity {old} "
        f"({leaf.subject.rfc4514_string()}) expired at "
    )


# -- role attributes and policies -------------------------------------------------------------


def test_no_role_attribute_at_all(box: Box) -> None:
    """The 0.6 SDK never finishes loading an identity that may dial nothing: the agent asks the
    controller instead of waiting out the hang blaming it."""
    identity = box.net.enroll(box.name, roles=())
    first = box.first_error(identity)
    assert first["code"] == "ZITI_ROLE_MISSING", line(first)
    assert line(first).startswith(
        f"ZITI_ROLE_MISSING: the Ziti identity {box.name} may dial no service: it has no role "
        "attribute at all and lacks #monky-deploy-agent, #openbao-client"
    ), line(first)
    assert first["hint"] == (
        f"on the controller: `ziti edge update identity {box.name} --role-attributes "
        "monky-deploy-agent,openbao-client`"
    )


def test_tenancy_not_allowed_while_openbao_is(box: Box) -> None:
    identity = box.net.enroll(box.name, roles=(OPENBAO.role,))
    logins = box.estate.bao.logins  # the fixture's probe of the network logged in too
    first = box.first_error(identity)
    assert first["code"] == "ZITI_ROLE_MISSING", line(first)
    assert line(first).startswith(
        f"ZITI_ROLE_MISSING: the Ziti identity {box.name} may not dial tenancy's deploy API "
        f"(Ziti service {TENANCY.name}): it lacks the role attribute #monky-deploy-agent (it has "
        f"#openbao-client and may dial {OPENBAO.name}"
    ), line(first)
    assert first["hint"] == (
        f"on the controller: `ziti edge update identity {box.name} --role-attributes "
        "openbao-client,monky-deploy-agent`"
    )
    assert box.estate.bao.logins == logins + 1  # OpenBao was reached through the network first


def test_the_intercept_port_wrong(box: Box) -> None:
    identity = box.net.enroll(box.name)
    first = box.first_error(identity, tenancy={"port": IN_POD_PORT})
    assert first["code"] == "ZITI_NO_SERVICE", line(first)
    assert line(first).startswith(
        f"ZITI_NO_SERVICE: tenancy.port in config.yaml is {IN_POD_PORT} but no Ziti service "
        f"intercepts {TENANCY.host}:{IN_POD_PORT}: {TENANCY.name} ({TENANCY.host}:443)"
    ), line(first)
    assert "8081 is the tenancy pod's in-pod listener" in first["hint"]


# -- the edge router ---------------------------------------------------------------------------


def test_the_edge_router_stopped(box: Box) -> None:
    identity = box.net.enroll(box.name)
    box.net.stop_process("router")
    try:
        first = box.first_error(identity)
        lines = box.doctor(box.config(identity))
    finally:
        box.net.start_process("router")
    # doctor: the controller line shows the router offline; each intercept names it, undialled
    assert lines["controller"]["status"] == "OK", lines["controller"]
    assert "via monky-router (OFFLINE)" in lines["controller"]["fact"]
    for check in ("tenancy-intercept", "openbao-intercept"):
        assert lines[check]["code"] == "ZITI_ROUTER_OFFLINE", lines[check]
    assert first["code"] == "ZITI_ROUTER_OFFLINE", line(first)
    assert line(first).startswith(
        f"ZITI_ROUTER_OFFLINE: the edge router monky-router of {OPENBAO.name} "
        f"({OPENBAO.host}:{OPENBAO.port}) is offline"
    ), line(first)
    assert "monky-router runs and reaches the controller" in first["hint"]
    assert "error -19" in first["detail"]  # the SDK's own timeout, kept


# -- doctor ------------------------------------------------------------------------------------


def test_doctor_shows_the_identity_as_the_controller_sees_it(box: Box) -> None:
    identity = box.net.enroll(box.name, roles=(TENANCY.role,))
    lines = box.doctor(box.config(identity))
    ctrl = lines["controller"]
    assert ctrl["status"] == "OK", ctrl
    assert (
        f"it knows this identity as {box.name} (id {box.net.identity_id(box.name)}), role "
        f"attributes #monky-deploy-agent; it may dial {TENANCY.name} ({TENANCY.host}:443) via "
        "monky-router (online)"
    ) in ctrl["fact"]
    assert lines["tenancy-intercept"]["status"] == "OK"
    bao = lines["openbao-intercept"]
    assert (bao["status"], bao["code"]) == ("FAIL", "ZITI_ROLE_MISSING"), bao
    assert bao["hint"] == (
        f"on the controller: `ziti edge update identity {box.name} --role-attributes "
        "monky-deploy-agent,openbao-client`"
    )
    # the one command, run, is the fix
    box.net.ziti(
        "edge", "update", "identity", box.name, "--role-attributes",
        "monky-deploy-agent,openbao-client",
    )  # fmt: skip
    again = box.doctor(box.config(identity))
    assert again["openbao-intercept"]["status"] == "OK", again["openbao-intercept"]
