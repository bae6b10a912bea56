"""End to end over a real OpenZiti network: the real CLI with ``transport: ziti`` and an identity
enrolled as an operator does, the 0.6.0 SDK (libziti 0.29.3) dialling the intercepts through a
real controller and edge router (monky_deployd_testkit.zitinet), tenancy (the loopback fake) and
the real OpenBao hosted behind it, a real registry and the real engine. Nothing stands in for
the SDK's dial: the agent's config names only the intercept addresses, never a loopback port."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, cli_env
from monky_deployd_testkit.realbao import RealBao
from monky_deployd_testkit.ziticonf import OPENBAO, TENANCY, agent_config
from monky_deployd_testkit.zitinet import ZitiNet

pytestmark = [pytest.mark.docker, pytest.mark.ziti]

SECRET = "z1t1-s3cr3t"
OVER_ZITI = (
    "identity",
    "controller",
    "tenancy-intercept",
    "openbao-intercept",
    "tenancy",
    "openbao",
    "token",
    "checkin",
    "secrets",
    "clock",
)


def _scalars(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for value in node.values():
            yield from _scalars(value)
    elif isinstance(node, list):
        for value in node:
            yield from _scalars(value)
    else:
        yield node


@pytest.fixture
def lab(
    tmp_path: Path, registry: Registry, web_image: str, real_bao: RealBao, ziti_net: ZitiNet
) -> Iterator[Lab]:
    """The lab with the real OpenBao, its fake tenancy on the port the network hosts, and a
    config.yaml with ``transport: ziti`` and a freshly enrolled identity."""
    port = ziti_net.upstreams["tenancy"]
    with Lab(
        tmp_path, registry, web_image, real=real_bao, db_password=SECRET, tenancy_port=port
    ) as lab:
        identity = ziti_net.enroll(lab.project)
        cfg = agent_config(yaml.safe_load(lab.config_path.read_text()), identity)
        lab.config_path.write_text(yaml.safe_dump(cfg))
        yield lab


def test_a_tick_over_the_real_network(lab: Lab, real_bao: RealBao, ziti_net: ZitiNet) -> None:
    cfg = yaml.safe_load(lab.config_path.read_text())
    assert cfg["transport"] == "ziti"
    assert (cfg["tenancy"]["host"], cfg["tenancy"]["port"]) == (TENANCY.host, 443)
    assert (cfg["openbao"]["host"], cfg["openbao"]["port"]) == (OPENBAO.host, 8200)
    plain = {lab.estate.tenancy.port, real_bao.port}
    assert not plain & set(_scalars(cfg)), "a loopback port in the agent's config"
    assert "127.0.0.1" not in lab.config_path.read_text()

    lab.estate.tenancy.set_desired("r1", lab.bundle())
    real_bao.mark()
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    assert first.summary["outcome"] == "applied" and first.summary["revision"] == "r1"
    assert lab.container_env()["DB_PASSWORD"] == SECRET
    # check-in, lease and report reached the fake tenancy; login and reads the real OpenBao
    tenancy = lab.estate.tenancy
    assert len(tenancy.checkins) == 1 and len(tenancy.leases) == 1
    assert [r["outcome"] for r in tenancy.reports] == ["applied"]
    assert real_bao.logins == 1 and real_bao.kv_reads == 2
    # ... through the network: the controller issued this identity a dial session per service
    assert ziti_net.dialled(lab.project) == {TENANCY.name, OPENBAO.name}

    second = lab.tick()
    assert second.rc == 0, second.stdout + second.stderr
    assert second.summary["outcome"] == "noop"
    assert len(tenancy.checkins) == 2 and len(tenancy.reports) == 1

    status = lab.cli("status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert json.loads(status.stdout)["revisions"]["applied"] == "r1"

    doctor = lab.cli("doctor", "--json")
    lines = {c["check"]: c for c in json.loads(doctor.stdout)}
    # every line about the network and what is reached through it (the box's own: timer,
    # run-host drop-in, depend on systemd, which this machine does not run)
    for name in OVER_ZITI:
        assert lines[name]["status"] == "OK", (name, lines[name])
    assert "monky.tenancy.deploy" in str(lines["tenancy-intercept"]["fact"])


# A dial right after a close, with the real SDK in a process of its own: libziti 0.29.3 learns of
# a close on its own loop and refused the next dial that got the same fd number back (EALREADY,
# "socket N already connecting/connected"): doctor's OpenBao line failed right after its tenancy
# line. sdk_dial tries again on a fresh number.
REDIAL = """
import sys, openziti
from monky_deployd.adapters.net import ziti
dial = ziti.sdk_dial(openziti.load(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    dial(("openbao.monky.ziti", 8200)).close()
print("dialled", sys.argv[2])
"""


def test_a_dial_right_after_a_close(tmp_path: Path, ziti_net: ZitiNet) -> None:
    identity = ziti_net.enroll(f"redial-{tmp_path.name[-12:]}")
    proc = subprocess.run(
        (sys.executable, "-c", REDIAL, str(identity), "20"),
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(tmp_path),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["dialled", "20"]
