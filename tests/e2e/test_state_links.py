"""Issue 26 end to end: a symbolic link (or a FIFO) planted where the agent reads in its state
dir never stops a tick from bringing a dead service back. The real CLI, the loopback estate, a
real registry and the real Docker engine.

On main before this change a link at ``docker/config.json`` or inside the applied revision
(``revisions/r1/.env``) refused every tick with STATE_LINK (the service stayed dead), and a FIFO
at ``docker/config.json`` was handed to the docker CLI; a link at ``held.json`` was already set
aside (kept here so it stays so)."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab

pytestmark = pytest.mark.docker

PRECIOUS = "root:$6$precious-hash:19000:0:99999:7:::\n"


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="s3cr3t-links") as lab:
        yield lab


@pytest.mark.parametrize(
    ("entry", "kind"),
    [
        ("held.json", "link"),
        ("docker/config.json", "link"),
        ("docker/config.json", "fifo"),
        ("revisions/r1/.env", "link"),
    ],
)
def test_a_link_where_the_agent_reads_never_stops_a_dead_service_coming_back(
    entry: str, kind: str, lab: Lab, tmp_path: Path
) -> None:
    lab.estate.tenancy.set_desired("r1", lab.bundle(services=("web", "worker")))
    assert lab.tick().rc == 0
    subprocess.run(
        ("docker", "rm", "-f", lab.containers()["worker"]), check=True, capture_output=True
    )
    victim = tmp_path / "shadow"  # what an attacker would point at: /etc/shadow
    victim.write_text(PRECIOUS)
    victim.chmod(0o640)
    before = victim.stat()
    path = lab.state_dir / entry
    if os.path.lexists(path):
        path.unlink()
    if kind == "link":
        path.symlink_to(victim)
    else:
        os.mkfifo(path)

    status = lab.cli("status", "--json")
    assert f'"name": "{entry if "revisions" not in entry else "revisions/r1"}"' in status.stdout

    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    assert set(lab.containers()) == {"web", "worker"}, "the dead service is back"
    aside = [ln for ln in run.lines if ln.get("event") == "state.aside"]
    assert len(aside) == 1 and entry.split("/")[0] in aside[0]["message"], run.stdout
    assert not os.path.islink(path) and not (path.exists() and not path.is_file())
    assert victim.read_text() == PRECIOUS and victim.stat().st_mode == before.st_mode
    assert victim.stat().st_mtime_ns == before.st_mtime_ns
    assert "precious" not in run.stdout + run.stderr
    kept = [p.name for p in (lab.state_dir / "aside").rglob("*") if stat.S_ISREG(p.lstat().st_mode)]
    assert ".env" not in kept, "a revision set aside keeps no secret at rest (a planted link stays)"
    assert lab.tick().summary["outcome"] == "noop", "converged: the next tick has nothing to do"
