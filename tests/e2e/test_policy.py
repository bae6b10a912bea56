"""End to end: the local policy (issue 28) judged on the real ``docker compose config`` of the
rendered release, through the real CLI, engine and registry: a refused revision changes nothing
(no pull, no up, the running revision keeps running, no revision directory), its report is
``refused`` with one line per violation; an allowance lets it through; a policy tightened under
a running revision leaves it running and ``plan`` names what it would refuse."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-policy-1") as lab:
        yield lab


def inspect(lab: Lab, container: str) -> dict[str, Any]:
    out = subprocess.run(
        ("docker", "inspect", container), capture_output=True, text=True, check=True
    ).stdout
    found: dict[str, Any] = json.loads(out)[0]
    return found


def test_a_refused_revision_changes_nothing_and_names_each_violation(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle())
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    before, pulls = lab.containers(), lab.pulls()
    revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
    docker_cfg = (lab.state_dir / "docker" / "config.json").read_bytes()

    # a link inside an allowed root that leads to /etc: judged by where it leads
    os.symlink("/etc", lab.binds / "etc-link")
    lab.estate.tenancy.set_desired(
        "r2",
        lab.bundle(
            web={
                "cap_add": ["SYS_ADMIN"],
                "pid": "host",
                "security_opt": ["apparmor:unconfined"],
                "volumes": [
                    "/var/run/docker.sock:/docker.sock",
                    {"type": "bind", "source": f"{lab.binds}/etc-link/", "target": "/e"},
                ],
            }
        ),
    )
    refused = lab.tick()
    assert refused.rc == 5, refused.stdout + refused.stderr
    assert refused.summary["outcome"] == "refused"
    assert refused.summary["code"] == "POLICY_PROTECTED_PATH"
    report = lab.estate.tenancy.reports[-1]
    assert report["outcome"] == "refused" and report["revision"] == "r2"
    assert report["code"] == "POLICY_PROTECTED_PATH"
    error = refused.errors[0]
    assert error["phase"] == "policy"
    assert "docker.sock" in error["message"] or "etc-link" in error["message"]
    lines = error["detail"].splitlines()
    assert len(lines) == 5, error["detail"]
    assert any(ln.endswith("(allow with policy.services.web.cap_add: [SYS_ADMIN])") for ln in lines)
    assert any("policy.services.web.host_namespaces: [pid]" in ln for ln in lines)
    assert any("policy.services.web.security_opt: [apparmor=unconfined]" in ln for ln in lines)
    assert sum("no allowance permits it" in ln for ln in lines) == 2
    # nothing changed: same containers, no pull, no r2 directory, the registry config as it was
    assert lab.containers() == before
    assert lab.pulls() == pulls
    assert sorted(p.name for p in (lab.state_dir / "revisions").iterdir()) == revisions
    assert (lab.state_dir / "docker" / "config.json").read_bytes() == docker_cfg
    assert "pw-policy-1" not in refused.stdout and "pw-policy-1" not in str(report)

    # plan names the refusal as its error, and changes nothing
    planned = lab.cli("plan", "--json")
    assert planned.returncode == 2, planned.stdout + planned.stderr
    body = json.loads(planned.stdout)
    assert body["error"]["code"] == "POLICY_PROTECTED_PATH"
    assert body["error"]["detail"].splitlines() == lines
    assert lab.containers() == before and lab.pulls() == pulls


def test_an_allowance_lets_a_revision_through_and_a_tighter_policy_keeps_it_running(
    lab: Lab,
) -> None:
    lab.write_config(policy={"services": {"web": {"cap_add": ["NET_ADMIN"]}}})
    lab.estate.tenancy.set_desired("r1", lab.bundle(web=dict(cap_add=["NET_ADMIN"])))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    assert first.summary["outcome"] == "applied"
    assert inspect(lab, lab.containers()["web"])["HostConfig"]["CapAdd"] == ["CAP_NET_ADMIN"]
    ids = lab.containers()

    # the allowance withdrawn: the running revision is not taken down, plan says what it breaks
    lab.write_config()
    again = lab.tick()
    assert again.rc == 0 and again.summary["outcome"] == "noop", again.stdout
    assert lab.containers() == ids
    planned = lab.cli("plan", "--json")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    notes = json.loads(planned.stdout)["notes"]
    assert any("running revision r1 breaks this box's policy" in n for n in notes), notes
    assert any("policy.services.web.cap_add: [NET_ADMIN]" in n for n in notes), notes
