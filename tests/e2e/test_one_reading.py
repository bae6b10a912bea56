"""End to end (issue 45, one reading): what compose reads back from the file it runs is what was
judged, through the real CLI, engine and compose (on both engines: scripts/test.sh runs this file
again on the second). The issue's three attacks, as written:

- ``$``: revision 1 plants a link ``p$`` to /etc in an allowed root; revision 2 binds
  ``<root>/p$$/x`` (the judge would read ``p$$``, nothing there; ``up`` reads ``p$``, the link):
  refused (POLICY_HOST_STRING), /etc never mounted (a revision between them runs without the
  writer, so the string alone decides);
- U+0085: revision 1 plants ``p q``; revision 2 binds ``<root>/p<NEL>q`` (compose's YAML reader
  folds the line break into a space): refused the same way;
- a changed volume: revision 1 makes its volume a bind of ``<root>/a``, which then becomes a link
  to /etc; revision 2 asks ``<root>/b`` (compose would keep the engine's volume as it is, so the
  engine would mount /etc): refused (POLICY_RESOURCE_DRIFT), the volume not adopted."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-reading-1") as lab:
        yield lab


def sees_etc(lab: Lab, path: str) -> bool:
    """The running web container finds the host's /etc/passwd at ``path``."""
    web = lab.containers()["web"]
    test = ("docker", "exec", web, "test", "-e", f"{path}/passwd")
    return subprocess.run(test, capture_output=True, check=False).returncode == 0


def planted(lab: Lab, name: str) -> None:
    """Revision 1: its web writes the allowed root and plants ``name`` there, a link to /etc;
    then revision 1b runs without that writer."""
    plant = f"ln -s /etc '/area/{name}' && sleep 3600"
    r1 = lab.bundle(web={"volumes": [f"{lab.binds}:/area"], "command": ["sh", "-c", plant]})
    lab.estate.tenancy.set_desired("r1", r1)
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    link = lab.binds / name.replace("$$", "$")
    for _ in range(100):  # the container's first command: a moment after it started
        if link.is_symlink():
            break
        time.sleep(0.1)
    assert os.readlink(link) == "/etc"
    # then a revision without the writer (nothing left that could swap a link: what refuses r2
    # is the string alone)
    lab.estate.tenancy.set_desired("r1b", lab.bundle())
    plain = lab.tick()
    assert plain.rc == 0, plain.stdout + plain.stderr
    assert not any(m["Destination"] == "/area" for m in lab.mounts())


def refused_for_the_string(lab: Lab, source: str, shown: str) -> None:
    before = lab.containers()
    lab.estate.tenancy.set_desired("r2", lab.bundle(web={"volumes": [f"{source}:/x:ro"]}))
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "POLICY_HOST_STRING", run.summary
    detail = run.errors[0]["detail"]
    assert detail.splitlines() == [
        f"services.web.volumes.source holds {shown}, which compose, YAML and the host do not "
        "read alike (a host-side string is printable ASCII without $) (no allowance permits it)"
    ]
    assert lab.containers() == before
    assert all(not m["Source"].startswith("/etc") for m in lab.mounts())
    assert not any(m["Destination"] == "/x" for m in lab.mounts())
    assert not (lab.state_dir / "revisions" / "r2").exists()


def test_a_dollar_path_judged_as_double_and_mounted_as_single_is_refused(lab: Lab) -> None:
    planted(lab, "p$$")  # compose's escape in the bundle: the link is p$
    refused_for_the_string(lab, f"{lab.binds}/p$$", "'$' (U+0024)")


def test_a_next_line_path_folded_into_a_space_is_refused(lab: Lab) -> None:
    planted(lab, "p q")
    refused_for_the_string(lab, f"{lab.binds}/p\x85q", "'\\x85' (U+0085)")


def test_a_changed_volume_definition_is_refused_not_adopted(lab: Lab) -> None:
    a, b = lab.binds / "a", lab.binds / "b"
    a.mkdir()
    b.mkdir()

    def with_device(device: Path) -> dict[str, Any]:
        top = {
            "volumes": {
                "data": {"driver_opts": {"type": "none", "o": "bind", "device": str(device)}}
            }
        }
        return lab.bundle(web={"volumes": ["data:/data:ro"]}, top=top)

    lab.estate.tenancy.set_desired("r1", with_device(a))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    volume = f"{lab.project}_data"
    before = lab.containers()
    # the engine's volume still binds <root>/a, which now leads to /etc
    a.rmdir()
    a.symlink_to("/etc")
    lab.estate.tenancy.set_desired("r2", with_device(b))
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["code"] == "POLICY_RESOURCE_DRIFT", run.summary
    detail = run.errors[0]["detail"]
    assert f"the engine's volume {volume}, this project's" in detail, detail
    assert f"'device': '{a}'" in detail and f"'device': '{b}'" in detail, detail
    assert lab.containers() == before  # the running revision keeps running, nothing recreated
    assert not sees_etc(lab, "/data")
    inspect = ("docker", "volume", "inspect", "--format", "{{json .Options}}", volume)
    got = subprocess.run(inspect, capture_output=True, text=True, check=True).stdout
    assert json.loads(got)["device"] == str(a)
